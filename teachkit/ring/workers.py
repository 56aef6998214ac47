"""Ring attention across processes: what each spawned rank runs, and the parent's side of it.

The functions taking a :class:`~teachkit.ring.launch.RingContext` first are *targets* for
:func:`~teachkit.ring.launch.run_ring`: they run inside the spawned ranks.
:func:`attention_cases` computes ring attention on each rank's shards;
:func:`describe_rank`, :func:`fail_on_rank` and :func:`stall_on_rank` are small ones that show
the launcher at work (and how a failing or stuck rank is reported instead of hanging the run).

:func:`run_ring_attention` is the parent's side: it hands whole sequences to ``W`` ranks, each
takes its shard, and it puts the ranks' outputs back in order.

Examples
--------
Starting processes takes seconds, so the doctests skip the run (``tests/test_ring.py`` makes it):

>>> import torch
>>> from teachkit.attention import naive_attention
>>> q, k, v = (torch.randn(1, 2, 12, 16, dtype=torch.float64) for _ in range(3))
>>> run = run_ring_attention(q, k, v, world_size=2, causal=True, layout="striped",
...                          block_attention="torch")  # doctest: +SKIP
>>> torch.allclose(run.out, naive_attention(q, k, v, causal=True))  # doctest: +SKIP
True
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from ..validation import require_positive_int
from .attention import BlockFn, _block_fn, _require_blocks, ring_attention
from .launch import RingContext, _require_seconds, choose_backend, run_ring
from .layout import local_length, require_layout, shard, unshard

__all__ = [
    "RingCase",
    "RingRun",
    "attention_cases",
    "describe_rank",
    "fail_on_rank",
    "stall_on_rank",
    "run_ring_attention",
    "run_ring_attention_cases",
]


@dataclass
class RingCase:
    """One ring-attention problem for :func:`run_ring_attention_cases`: whole sequences and
    the options of :func:`~teachkit.ring.attention.ring_attention`."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    causal: bool = False
    layout: str = "contiguous"
    scale: float | None = None
    block_attention: str | BlockFn = "flash"
    overlap: bool = True
    repeats: int = 1


@dataclass
class RingRun:
    """The assembled result of one :class:`RingCase` run on ``world_size`` ranks.

    Attributes
    ----------
    out, lse : torch.Tensor
        ``(B, H, N, Dv)`` and ``(B, H, N)`` for the whole sequence, in token order (CPU).
    timelines : list of list of dict
        ``timelines[r]``: rank ``r``'s steps of the last repeat (see
        :class:`~teachkit.ring.attention.RankResult`).
    held_bytes : list of dict
        Per rank, the bytes of the buffers it held.
    peak_bytes : list of int or None
        Per rank, ``torch.cuda.max_memory_allocated`` during the run (GPU only).
    seconds : list of float
        Per repeat, the wall time of the slowest rank.
    backend : str
        ``"gloo"`` or ``"nccl"``.
    """

    out: torch.Tensor
    lse: torch.Tensor
    timelines: list[list[dict]] = field(default_factory=list)
    held_bytes: list[dict[str, int]] = field(default_factory=list)
    peak_bytes: list[int | None] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    backend: str = "gloo"

    @property
    def world_size(self) -> int:
        """Number of ranks that ran it."""
        return len(self.timelines)


def describe_rank(ctx: RingContext) -> dict[str, Any]:
    """Target: report who and where this rank is (and check a collective works).

    Every rank adds its rank number in an ``all_reduce``; each returns the sum, ``W (W-1) / 2``.
    """
    import torch.distributed as dist

    total = torch.tensor([float(ctx.rank)], device=ctx.comm_device)
    dist.all_reduce(total)
    return {"rank": ctx.rank, "world_size": ctx.world_size, "backend": ctx.backend,
            "device": str(ctx.device), "rank_sum": int(total.item())}


def fail_on_rank(ctx: RingContext, rank: int = 1, message: str = "something went wrong") -> None:
    """Target: rank ``rank`` raises ``ValueError(message)`` while the others wait to receive
    from their neighbour; the run must end with that rank's error, not hang."""
    if ctx.rank == rank:
        raise ValueError(f"{message} (raised on purpose by rank {rank})")
    _pass_to_neighbour(ctx)


def stall_on_rank(ctx: RingContext, rank: int = 1, seconds: float = 30.0) -> None:
    """Target: rank ``rank`` sleeps for ``seconds`` before its first exchange; the others wait
    for it until the group's timeout and fail with a timeout error."""
    if ctx.rank == rank:
        time.sleep(seconds)
    _pass_to_neighbour(ctx)


def _pass_to_neighbour(ctx: RingContext) -> None:
    from .attention import _exchange

    send = torch.full((4,), float(ctx.rank), device=ctx.comm_device)
    for request in _exchange([send], [torch.empty_like(send)], ctx.rank, ctx.world_size):
        request.wait()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def attention_cases(ctx: RingContext, cases: Sequence[RingCase]) -> list[dict[str, Any]]:
    """Target: ring attention for each case on this rank's shards (taken with the case's layout).

    Returns, per case, this rank's ``out`` and ``lse`` (on the CPU), the timeline and held bytes
    of its last repeat (earlier ones are warm-ups), the peak of allocated GPU memory during that
    last repeat (``None`` on a CPU), and the wall time of each repeat. The last repeat donates
    the rank's key/value shards to the ring (they are its own copies).
    """
    import torch.distributed as dist

    results = []
    for case in cases:
        q, k, v = (shard(t, ctx.rank, ctx.world_size, case.layout).to(ctx.device)
                   for t in (case.q, case.k, case.v))
        seconds, res = [], None
        for repeat in range(case.repeats):
            last = repeat == case.repeats - 1
            res = None
            if last and ctx.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(ctx.device)
            dist.barrier()
            _synchronize(ctx.device)
            start = time.perf_counter()
            # the shards are ours: the last run may use k and v as a ring buffer
            res = ring_attention(q, k, v, causal=case.causal, layout=case.layout,
                                 scale=case.scale, block_attention=case.block_attention,
                                 overlap=case.overlap, comm_device=ctx.comm_device,
                                 donate_kv=last)
            _synchronize(ctx.device)
            seconds.append(time.perf_counter() - start)
        peak = torch.cuda.max_memory_allocated(ctx.device) if ctx.device.type == "cuda" else None
        results.append({"out": res.out.cpu(), "lse": res.lse.cpu(), "timeline": res.timeline,
                        "held_bytes": res.held_bytes, "peak_bytes": peak, "seconds": seconds})
    return results


def _require_case(case: RingCase, world_size: int) -> None:
    """Check a case here, in the parent, rather than fail in every rank after start-up."""
    for name in ("q", "k", "v"):
        got = getattr(case, name)
        if not isinstance(got, torch.Tensor):
            raise TypeError(f"{name} must be a (batch, heads, length, head_dim) tensor, got "
                            f"{type(got).__name__}")
        if got.dim() != 4:
            raise ValueError(f"{name} must be a (batch, heads, length, head_dim) tensor, got "
                             f"shape {tuple(got.shape)}")
    _require_blocks(case.q, case.k, case.v, case.scale)
    if case.k.shape != case.v.shape:
        raise ValueError(f"k and v travel around the ring in buffers of one shape, got "
                         f"k{tuple(case.k.shape)} and v{tuple(case.v.shape)}")
    require_layout(case.layout)
    local_length(case.q.shape[-2], world_size)
    for name in ("causal", "overlap"):
        if not isinstance(getattr(case, name), bool):
            raise TypeError(f"{name} must be True or False, got {getattr(case, name)!r}")
    if case.scale is not None and (isinstance(case.scale, bool)
                                   or not isinstance(case.scale, numbers.Real)
                                   or not math.isfinite(case.scale)):
        raise ValueError(f"scale must be a finite number or None (1/sqrt(head_dim)), got "
                         f"{case.scale!r}")
    _block_fn(case.block_attention)
    fn = case.block_attention
    if callable(fn) and (getattr(fn, "__module__", None) in (None, "__main__")
                         or "<" in getattr(fn, "__qualname__", "<")):
        raise TypeError(
            f"block_attention must be 'flash', 'torch' or a function defined at the top level "
            f"of an importable module (the ranks import it by name), not "
            f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', fn)} (notebook "
            "code, a lambda or a nested function)")
    require_positive_int(case.repeats, "repeats")


def run_ring_attention_cases(
    cases: Sequence[RingCase], world_size: int, backend: str | None = None,
    timeout_s: float = 60.0, wall_s: float | None = None,
) -> list[RingRun]:
    """Run several ring-attention problems in one start of ``world_size`` processes.

    Starting the processes costs seconds (each imports torch), so checks are grouped: the ranks
    run the cases one after another (:func:`attention_cases`) and the parent assembles each.

    Parameters
    ----------
    cases : sequence of RingCase
        Whole sequences ``(B, H, N, D)`` (any device; they are sent from the CPU) and options.
        ``world_size`` must divide every ``N``. Every case is checked here, before any process
        starts (``TypeError``/``ValueError`` naming the field).
    world_size, backend, timeout_s, wall_s
        As in :func:`~teachkit.ring.launch.run_ring`.

    Returns
    -------
    list of RingRun
        One per case, in order.
    """
    if isinstance(cases, RingCase) or not isinstance(cases, Iterable):
        raise TypeError(f"cases must be a list of RingCase objects, got {type(cases).__name__}; "
                        "pass e.g. [RingCase(q, k, v)]")
    cases = list(cases)
    require_positive_int(world_size, "world_size")
    sent = []
    for i, case in enumerate(cases):
        if not isinstance(case, RingCase):
            raise TypeError(f"cases must hold RingCase objects, got {type(case).__name__} at "
                            f"cases[{i}]")
        _require_case(case, world_size)
        values = {f.name: getattr(case, f.name) for f in fields(case)}
        values.update({name: getattr(case, name).detach().cpu() for name in ("q", "k", "v")})
        sent.append(RingCase(**values))
    if not sent:  # nothing to run: check the other arguments, start no process
        choose_backend(world_size, backend)
        _require_seconds(timeout_s, "timeout_s")
        if wall_s is not None:
            _require_seconds(wall_s, "wall_s")
        return []
    per_rank = run_ring(attention_cases, world_size, {"cases": sent}, backend=backend,
                        timeout_s=timeout_s, wall_s=wall_s)
    chosen = choose_backend(world_size, backend)
    runs = []
    for i, case in enumerate(sent):
        ranks = [per_rank[r][i] for r in range(world_size)]
        runs.append(RingRun(
            out=unshard([r["out"] for r in ranks], case.layout),
            lse=unshard([r["lse"] for r in ranks], case.layout, dim=-1),
            timelines=[r["timeline"] for r in ranks],
            held_bytes=[r["held_bytes"] for r in ranks],
            peak_bytes=[r["peak_bytes"] for r in ranks],
            seconds=[max(times) for times in zip(*(r["seconds"] for r in ranks), strict=True)],
            backend=chosen,
        ))
    return runs


def run_ring_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world_size: int, causal: bool = False,
    layout: str = "contiguous", scale: float | None = None,
    block_attention: str | BlockFn = "flash", overlap: bool = True, backend: str | None = None,
    timeout_s: float = 60.0, wall_s: float | None = None,
) -> RingRun:
    """Ring attention of whole sequences in ``world_size`` new processes, assembled here.

    Each rank takes its shard of ``q``, ``k``, ``v`` (``layout``), runs
    :func:`~teachkit.ring.attention.ring_attention` with gloo (CPU) or NCCL (a GPU per rank), and
    the outputs come back in token order.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(B, H, N, D)`` whole sequences; ``world_size`` must divide ``N``.
    world_size : int
        Number of processes ``W``.
    causal, layout, scale, block_attention, overlap
        As in :func:`~teachkit.ring.attention.ring_attention`. ``block_attention="torch"``
        takes float64 (an exact check); the default ``"flash"`` is the course's kernel.
    backend, timeout_s, wall_s
        As in :func:`~teachkit.ring.launch.run_ring`.

    Returns
    -------
    RingRun
    """
    case = RingCase(q, k, v, causal, layout, scale, block_attention, overlap)
    return run_ring_attention_cases([case], world_size, backend, timeout_s, wall_s)[0]
