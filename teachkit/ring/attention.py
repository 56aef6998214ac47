r"""The ring loop: every rank keeps its queries while key/value blocks travel around the ring.

Rank ``r`` of ``W`` holds one block of queries, keys and values of a sequence split along its
length (:mod:`teachkit.ring.layout`). In step ``t = 0 .. W-1`` it holds the key/value block that
started on rank ``(r - t) mod W``; it attends its queries to that block, which gives a partial
result ``(out_b, lse_b)`` over those keys only, and merges it into its running ``(out, lse)`` by
the log-sum-exp rule of notebook 04 (:func:`teachkit.attention.merge_partials`):

.. math::
    lse = \log(e^{lse_a} + e^{lse_b}), \qquad
    out = \sigma(lse_a - lse_b)\, out_a + \sigma(lse_b - lse_a)\, out_b .

Meanwhile it sends the block to rank ``r + 1`` and receives the next one from rank ``r - 1``.
Posting that exchange *before* computing on the block in hand lets the transfer run while the
rank computes; it waits for the transfer only after the computation (``overlap=True``).

:func:`ring_attention` is that loop for one rank of a running ``torch.distributed`` process group;
:func:`simulate_ring` runs the same steps for all ranks in one process, without communication,
which is handy for teaching and testing, and :func:`ring_step_times` times them. All fold each
block in with :func:`ring_step`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..attention import blockwise_attention
from ..softmax import merge_lse
from ..tiling import FULL, MASKED, SKIP, STRICT, TileKind
from ..validation import (
    compute_dtype,
    require_attention_inputs,
    require_bool,
    require_no_grad,
    require_positive_int,
    resolve_scale,
)
from .layout import (
    block_mask,
    require_layout,
    shard,
    source_rank,
    unshard,
)

__all__ = [
    "BLOCK_ATTENTION",
    "RankResult",
    "attend_block",
    "merge_partials_",
    "ring_step",
    "ring_attention",
    "simulate_ring",
    "ring_step_times",
]

BlockFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

_NO_BACKWARD = ("the ring (its accumulators are updated in place; ring_attention also sends "
                "blocks between processes), which has no backward pass,")
_DIFFERENTIABLE = "teachkit.attention.blockwise_attention or naive_attention on whole sequences"

BLOCK_ATTENTION = ("flash", "torch")
"""Names of the per-block attention: ``"flash"`` is the course's Triton kernel
(:func:`teachkit.kernels.flash_attention`, compiled on a GPU, interpreted on a CPU), ``"torch"``
is :func:`teachkit.attention.blockwise_attention` (any dtype, float64 included)."""


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
           scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    from ..kernels import flash_attention  # imported on first use: Triton loads only if needed

    return flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)


def _torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
           scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    return blockwise_attention(q, k, v, causal=causal, scale=scale)


def _block_fn(block_attention: str | BlockFn) -> BlockFn:
    if callable(block_attention):
        return block_attention
    if block_attention == "flash":
        return _flash
    if block_attention == "torch":
        return _torch
    raise ValueError(
        f"block_attention must be one of {BLOCK_ATTENTION} or a function "
        f"(q, k, v, causal, scale) -> (out, lse), got {block_attention!r}"
    )


def _call_shape(mask: TileKind) -> tuple[slice, slice, bool]:
    """Query rows, keys, and the top-left causal flag of the attention call a mask needs."""
    if mask == FULL:
        return slice(None), slice(None), False
    if mask == MASKED:
        return slice(None), slice(None), True
    if mask == STRICT:  # b < a: queries 1.. against keys ..n-2, causal; query 0 sees nothing
        return slice(1, None), slice(None, -1), True
    raise ValueError(f"mask must be FULL, MASKED or STRICT to be computed, got {mask!r}")


def attend_block(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: TileKind | str,
    scale: float | None = None,
    block_attention: str | BlockFn = "flash",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of a block of queries to one block of keys/values under a ring block mask.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(B, H, n, D)`` blocks (``"flash"`` needs a head dim of the kernel's and a float16,
        bfloat16 or float32 dtype; ``"torch"`` takes any float dtype and any rank >= 2).
    mask : TileKind or str
        A :class:`~teachkit.tiling.TileKind` or its name: ``"full"``, ``"masked"`` (local key
        ``b <= `` local query ``a``), ``"strict"`` (``b < a``, computed as causal attention of
        ``q[1:]`` against ``k[:-1]``), or ``"skip"`` (nothing seen: zeros and ``lse = -inf``,
        without calling the kernel).
    scale : float, optional
        Multiplies the scores; defaults to ``1/sqrt(D)``.
    block_attention : str or callable
        ``"flash"`` or ``"torch"`` (see :data:`BLOCK_ATTENTION`), or a function
        ``(q, k, v, causal, scale) -> (out, lse)``.

    Returns
    -------
    out : torch.Tensor
        ``(..., n, Dv)`` in q's dtype; zeros in rows that see no key.
    lse : torch.Tensor
        ``(..., n)``, float32 (float64 for float64); ``-inf`` in rows that see no key.

    Examples
    --------
    >>> from teachkit.attention import naive_attention
    >>> q, k, v = (torch.randn(1, 1, 5, 8, dtype=torch.float64) for _ in range(3))
    >>> out, lse = attend_block(q, k, v, "strict", block_attention="torch")
    >>> lse[0, 0, 0].item(), out[0, 0, 0].abs().sum().item()      # query 0 sees nothing
    (-inf, 0.0)
    >>> ref = naive_attention(q[..., 1:, :], k[..., :-1, :], v[..., :-1, :], causal=True)
    >>> torch.allclose(out[..., 1:, :], ref)
    True
    """
    fn = _block_fn(block_attention)
    mask = TileKind.parse(mask, "mask")
    require_attention_inputs(q, k, v)
    resolve_scale(scale, q.shape[-1])
    lse_dtype = compute_dtype(q.dtype)
    out = q.new_zeros(q.shape[:-1] + v.shape[-1:])
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=lse_dtype, device=q.device)
    if mask == SKIP:
        return out, lse
    rows, keys, causal = _call_shape(mask)
    out_b, lse_b = fn(q[..., rows, :], k[..., keys, :], v[..., keys, :], causal, scale)
    out[..., rows, :] = out_b
    lse[..., rows] = lse_b.to(lse_dtype)
    return out, lse


def merge_partials_(out: torch.Tensor, lse: torch.Tensor, out_b: torch.Tensor,
                    lse_b: torch.Tensor) -> None:
    r""":func:`teachkit.attention.merge_partials`, written in place into ``(out, lse)``.

    The same formulas (weights :math:`\sigma(lse - lse_b)` and :math:`\sigma(lse_b - lse)` from the
    exact difference, 0 for a row neither part saw, :func:`~teachkit.softmax.merge_lse` for the
    new lse), without allocating a new output: a ring worker keeps one running ``out`` in float32
    and scales and adds into it, so merging costs no more memory than the partial itself.

    Parameters
    ----------
    out : torch.Tensor
        ``(..., L, Dv)`` running output in float32 or float64 (a view is fine), updated in place.
    lse : torch.Tensor
        ``(..., L)`` its log-sum-exp, float32 or float64, updated in place.
    out_b, lse_b : torch.Tensor
        The partial result to merge in (``out_b`` in any float dtype).

    Examples
    --------
    >>> from teachkit.attention import blockwise_attention, merge_partials
    >>> q, k, v = torch.randn(4, 8), torch.randn(10, 8), torch.randn(10, 8)
    >>> a, b = blockwise_attention(q, k[:6], v[:6]), blockwise_attention(q, k[6:], v[6:])
    >>> out, lse = a[0].clone(), a[1].clone()
    >>> merge_partials_(out, lse, *b)
    >>> ref_out, ref_lse = merge_partials(*a, *b)
    >>> torch.allclose(out, ref_out, atol=1e-6) and torch.allclose(lse, ref_lse)
    True
    """
    if out.dtype not in (torch.float32, torch.float64) or lse.dtype != out.dtype:
        raise TypeError(
            f"out and lse must be float32 or float64 accumulators of one dtype, got {out.dtype} "
            f"and {lse.dtype}; start from torch.zeros(..., dtype=torch.float32)"
        )
    if out_b.shape != out.shape or lse_b.shape != lse.shape or lse.shape != out.shape[:-1]:
        raise ValueError(
            f"shapes must match: out{tuple(out.shape)}, lse{tuple(lse.shape)}, "
            f"out_b{tuple(out_b.shape)}, lse_b{tuple(lse_b.shape)}"
        )
    require_no_grad(("out", out), ("lse", lse), ("out_b", out_b), ("lse_b", lse_b),
                    kernel=_NO_BACKWARD, reference=_DIFFERENTIABLE)
    lse_b = lse_b.to(lse.dtype)
    diff = lse - lse_b
    empty = (lse == float("-inf")) & (lse_b == float("-inf"))
    w_a = torch.where(empty, 0.0, torch.sigmoid(diff)).unsqueeze(-1)
    w_b = torch.where(empty, 0.0, torch.sigmoid(-diff)).unsqueeze(-1)
    lse.copy_(merge_lse(lse, lse_b))
    out.mul_(w_a).addcmul_(out_b, w_b)


def _require_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  mask: TileKind | str) -> TileKind:
    require_attention_inputs(q, k, v)
    require_no_grad(("q", q), ("k", k), ("v", v), kernel=_NO_BACKWARD, reference=_DIFFERENTIABLE)
    return TileKind.parse(mask, "mask")


def ring_step(
    out: torch.Tensor, lse: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    mask: TileKind | str, scale: float | None = None, block_attention: str | BlockFn = "flash",
) -> None:
    """One step of the ring for one rank: attend ``q`` to the block in hand, merge into ``out``.

    ``out`` (float32/float64, ``(..., n, Dv)``) and ``lse`` (``(..., n)``) start as zeros and
    ``-inf`` and are updated in place with :func:`merge_partials_`. ``mask`` is as
    :func:`attend_block` takes it. A ``SKIP`` block is not computed; a ``STRICT`` block's partial
    covers queries ``1..n-1`` and is merged into those rows only (query 0 sees none of its keys).

    Examples
    --------
    >>> from teachkit.attention import naive_attention
    >>> q, k, v = (torch.randn(1, 2, 6, 8, dtype=torch.float64) for _ in range(3))
    >>> out, lse = torch.zeros_like(q), torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    >>> for kb, vb in ((k[..., :3, :], v[..., :3, :]), (k[..., 3:, :], v[..., 3:, :])):
    ...     ring_step(out, lse, q, kb, vb, "full", block_attention="torch")
    >>> torch.allclose(out, naive_attention(q, k, v))
    True
    """
    mask = _require_step(q, k, v, mask)
    if mask == SKIP:
        return
    rows, keys, causal = _call_shape(mask)
    out_b, lse_b = _block_fn(block_attention)(q[..., rows, :], k[..., keys, :],
                                              v[..., keys, :], causal, scale)
    merge_partials_(out[..., rows, :], lse[..., rows], out_b, lse_b)


def _require_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None) -> None:
    require_attention_inputs(q, k, v)
    require_no_grad(("q", q), ("k", k), ("v", v), kernel=_NO_BACKWARD, reference=_DIFFERENTIABLE)
    resolve_scale(scale, q.shape[-1])
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"ring attention splits one sequence: q and k must have the same length (axis -2), "
            f"got {q.shape[-2]} and {k.shape[-2]}"
        )


def _accumulators(q: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = compute_dtype(q.dtype)
    out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=dtype, device=q.device)
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=dtype, device=q.device)
    return out, lse


def simulate_ring(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world_size: int, causal: bool = False,
    layout: str = "contiguous", scale: float | None = None,
    block_attention: str | BlockFn = "torch",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ring attention of whole sequences, every rank's steps run one after another in-process.

    The same steps as :func:`ring_attention` (same shards, same order of blocks, same masks, same
    merges) without processes or communication: rank ``r`` at step ``t`` reads the block of rank
    ``(r - t) mod W`` directly.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(..., N, D)`` and ``(..., N, Dv)``: whole sequences; ``world_size`` must divide ``N``.
    world_size : int
        Number of simulated ranks ``W``.
    causal : bool
        Causal attention over the whole sequence (query ``i`` sees keys ``j <= i``).
    layout : str
        ``"contiguous"`` or ``"striped"`` (:mod:`teachkit.ring.layout`).
    scale : float, optional
        Defaults to ``1/sqrt(D)``.
    block_attention : str or callable
        As in :func:`attend_block`; the default ``"torch"`` takes float64.

    Returns
    -------
    out : torch.Tensor
        ``(..., N, Dv)`` in q's dtype, in the original token order.
    lse : torch.Tensor
        ``(..., N)``, float32 (float64 for float64).

    Examples
    --------
    >>> from teachkit.attention import naive_attention
    >>> q, k, v = (torch.randn(2, 3, 12, 8, dtype=torch.float64) for _ in range(3))
    >>> out, lse = simulate_ring(q, k, v, world_size=4, causal=True, layout="striped")
    >>> torch.allclose(out, naive_attention(q, k, v, causal=True))
    True
    """
    outs, lses, _ = _ring_in_process(q, k, v, world_size, causal, layout, scale,
                                     block_attention, clock=None)
    return unshard(outs, layout), unshard(lses, layout, dim=-1)


def ring_step_times(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world_size: int, causal: bool = False,
    layout: str = "contiguous", scale: float | None = None,
    block_attention: str | BlockFn = "flash", repeats: int = 2,
) -> list[list[float]]:
    """Milliseconds of every step of every rank, measured one rank after another in-process.

    The steps of :func:`simulate_ring`, each timed (attention of the block and merge; CUDA events
    on a GPU). Ranks do not share the machine with one another here, so the times show each
    rank's own work, as if every rank had its own device.

    Parameters
    ----------
    q, k, v, world_size, causal, layout, scale, block_attention
        As in :func:`simulate_ring`; the default block attention is the course's kernel.
    repeats : int
        Runs of the whole simulated ring; each step keeps its fastest time.

    Returns
    -------
    list of list of float
        ``times[r][t]``: milliseconds of rank ``r``'s step ``t`` (about 0 for a skipped block).

    Examples
    --------
    >>> q = torch.randn(1, 1, 8, 16, dtype=torch.float64)
    >>> times = ring_step_times(q, q, q, 2, causal=True, block_attention="torch")
    >>> len(times), len(times[0]), times[0][1] < times[1][1]  # rank 0 skips its second block
    (2, 2, True)
    """
    require_positive_int(repeats, "repeats")
    runs = [_ring_in_process(q, k, v, world_size, causal, layout, scale, block_attention,
                             clock=_Clock(q.device))[2] for _ in range(repeats)]
    return [[min(run[r][t] for run in runs) for t in range(world_size)]
            for r in range(world_size)]


def _ring_in_process(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world_size: int, causal: bool,
    layout: str, scale: float | None, block_attention: str | BlockFn, clock: _Clock | None,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[list[float]]]:
    """Every rank's ring, one after another; per-rank outputs, lses and (with a clock) step ms."""
    _require_blocks(q, k, v, scale)
    require_positive_int(world_size, "world_size")
    require_bool(causal, "causal")
    require_layout(layout)
    qs, ks, vs = ([shard(x, r, world_size, layout) for r in range(world_size)] for x in (q, k, v))
    outs, lses, marks = [], [], []
    for rank in range(world_size):
        out, lse = _accumulators(qs[rank], vs[rank])
        rank_marks = []
        for step in range(world_size):
            src = source_rank(rank, step, world_size)
            mask = block_mask(rank, src, world_size, causal, layout)
            start = clock.mark() if clock else None
            ring_step(out, lse, qs[rank], ks[src], vs[src], mask, scale, block_attention)
            rank_marks.append((start, clock.mark() if clock else None))
        outs.append(out.to(q.dtype))
        lses.append(lse)
        marks.append(rank_marks)
    if clock is None:
        return outs, lses, []
    clock.finish()
    return outs, lses, [[clock.ms(a, b) for a, b in rank_marks] for rank_marks in marks]


# ---------------------------------------------------------------------------------------------
# One rank of a process group
# ---------------------------------------------------------------------------------------------
class _Clock:
    """Marks time on the host (CPU) or in the CUDA stream (events), read out at the end."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, start: Any, end: Any) -> float:
        if self.cuda:
            return float(start.elapsed_time(end))
        return (end - start) * 1e3

    def finish(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


@dataclass
class RankResult:
    """What one rank of :func:`ring_attention` ends with.

    Attributes
    ----------
    out : torch.Tensor
        ``(B, H, n, Dv)`` attention output of the rank's queries over the whole sequence.
    lse : torch.Tensor
        ``(B, H, n)`` its log-sum-exp.
    timeline : list of dict
        One entry per step: ``step``, ``source`` (rank the block came from), ``mask``,
        ``start_ms`` (since the loop began), ``compute_ms`` (attention and merge) and ``wait_ms``
        (time still spent waiting for the exchange after computing).
    held_bytes : dict
        Bytes of each buffer the rank holds through the loop: its queries, the key/value block
        in hand, the one in flight, the output accumulator and its lse, and the caller's ``k``
        and ``v`` when they were not donated to the ring.
    """

    out: torch.Tensor
    lse: torch.Tensor
    timeline: list[dict] = field(default_factory=list)
    held_bytes: dict[str, int] = field(default_factory=dict)


def _exchange(send: list[torch.Tensor], recv: list[torch.Tensor], rank: int,
              world_size: int) -> list:
    """Post the sends of ``send`` to rank ``r + 1`` and receives into ``recv`` from ``r - 1``."""
    import torch.distributed as dist

    ops = [dist.P2POp(dist.isend, t, (rank + 1) % world_size) for t in send]
    ops += [dist.P2POp(dist.irecv, t, (rank - 1) % world_size) for t in recv]
    return dist.batch_isend_irecv(ops)


def _travel_buffer(t: torch.Tensor, device: torch.device, donate: bool) -> torch.Tensor:
    """``t`` on ``device`` and contiguous, as a buffer the ring may overwrite: ``t`` itself only
    when donated (and already so), else a copy."""
    moved = t.to(device)
    if moved is t and not donate:
        return t.clone(memory_format=torch.contiguous_format)
    return moved.contiguous()


def ring_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    layout: str = "contiguous", scale: float | None = None,
    block_attention: str | BlockFn = "flash", overlap: bool = True,
    comm_device: torch.device | str | None = None, donate_kv: bool = False,
) -> RankResult:
    """Ring attention for this rank of the default ``torch.distributed`` process group.

    Every rank calls it with its own blocks (:func:`~teachkit.ring.layout.shard` of the whole
    sequence, with the same ``layout``). At each step the rank posts ``isend`` of the key/value
    block in hand to rank ``r + 1`` and ``irecv`` of the next one from rank ``r - 1``
    (``batch_isend_irecv``), computes on the block in hand (:func:`ring_step`), then waits for
    the exchange. The last step sends nothing. Two key/value buffers take turns: the block in
    hand and the block in flight.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(B, H, n, D)`` blocks of this rank, on its compute device; ``k`` and ``v`` one shape.
    causal : bool
        Causal attention over the whole sequence; which blocks are skipped or masked depends on
        ``layout`` (:func:`~teachkit.ring.layout.block_mask`).
    layout : str
        ``"contiguous"`` or ``"striped"``: how the sequence was split.
    scale : float, optional
        Defaults to ``1/sqrt(D)``.
    block_attention : str or callable
        ``"flash"`` (default, the course's Triton kernel) or ``"torch"``; see :func:`attend_block`.
    overlap : bool
        Post the exchange before computing (``True``), or only after it (``False``, to see what
        overlap saves).
    comm_device : torch.device or str, optional
        Where blocks travel: the compute device (default, e.g. NCCL on GPUs), or ``"cpu"`` for
        gloo while computing on a GPU (each block is copied over before use).
    donate_kv : bool
        Let the ring use the memory of ``k`` and ``v`` as one of its two buffers (they are
        overwritten). Without it the ring copies them first, and the rank holds one more
        key/value block (the caller's).

    Returns
    -------
    RankResult
        ``out`` (q's dtype) and ``lse`` of this rank's queries, the timeline and the bytes held.

    Examples
    --------
    With one process (a group of size 1) the ring is one step, plain attention:

    >>> import tempfile, torch.distributed as dist
    >>> from teachkit.attention import naive_attention
    >>> folder = tempfile.mkdtemp()
    >>> dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=0, world_size=1)
    >>> q, k, v = (torch.randn(1, 2, 9, 16, dtype=torch.float64) for _ in range(3))
    >>> res = ring_attention(q, k, v, causal=True, block_attention="torch")
    >>> dist.destroy_process_group()
    >>> torch.allclose(res.out, naive_attention(q, k, v, causal=True)), len(res.timeline)
    (True, 1)
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(
            "ring_attention runs inside a torch.distributed process group; start one per rank "
            "(teachkit.ring.run_ring does) or use teachkit.ring.simulate_ring in one process"
        )
    _require_blocks(q, k, v, scale)
    if k.shape != v.shape:
        raise ValueError(
            f"k and v travel around the ring in buffers of one shape, got k{tuple(k.shape)} and "
            f"v{tuple(v.shape)}"
        )
    require_layout(layout)
    for name, flag in (("causal", causal), ("overlap", overlap), ("donate_kv", donate_kv)):
        require_bool(flag, name)
    _block_fn(block_attention)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    comm_device = torch.device(comm_device) if comm_device is not None else q.device
    clock = _Clock(q.device)

    kv = [_travel_buffer(t, comm_device, donate_kv) for t in (k, v)]  # the block in hand
    kv_next = [torch.empty_like(t) for t in kv] if world_size > 1 else []  # the one in flight
    out, lse = _accumulators(q, v)
    marks = []
    begin = clock.mark()
    for step in range(world_size):
        src = source_rank(rank, step, world_size)
        mask = block_mask(rank, src, world_size, causal, layout)
        last = step == world_size - 1
        pending = _exchange(kv, kv_next, rank, world_size) if overlap and not last else []
        c0 = clock.mark()
        if mask != SKIP:
            k_here, v_here = (t.to(q.device, non_blocking=True) for t in kv)
            ring_step(out, lse, q, k_here, v_here, mask, scale, block_attention)
        c1 = clock.mark()
        if not overlap and not last:
            pending = _exchange(kv, kv_next, rank, world_size)
        for request in pending:
            request.wait()
        w1 = clock.mark()
        marks.append((step, src, mask, c0, c1, w1))
        if not last:
            kv, kv_next = kv_next, kv
    clock.finish()
    timeline = [{"step": step, "source": src, "mask": mask, "start_ms": clock.ms(begin, c0),
                 "compute_ms": clock.ms(c0, c1), "wait_ms": clock.ms(c1, w1)}
                for step, src, mask, c0, c1, w1 in marks]
    held = {"queries": q.nbytes,
            "k/v block in hand": sum(t.nbytes for t in kv),
            "k/v block in flight": sum(t.nbytes for t in kv_next),
            "output accumulator": out.nbytes, "lse": lse.nbytes}
    if not any(t.data_ptr() in (k.data_ptr(), v.data_ptr()) for t in kv + kv_next):
        held["k, v kept by the caller"] = k.nbytes + v.nbytes
    return RankResult(out.to(q.dtype), lse, timeline, held)
