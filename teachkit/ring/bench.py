"""Ring attention on several GPUs against one GPU running the same kernel on the whole sequence.

:func:`bench_ring` starts ``W`` ranks (NCCL, one GPU each) once. For each sequence length ``N``
(growing) and each mask, rank 0 first runs :func:`teachkit.kernels.flash_attention` on the whole
sequence alone (the one-GPU baseline), then all ranks run
:func:`~teachkit.ring.attention.ring_attention` on their ``N / W`` tokens (causal runs twice:
contiguous tokens, then striped, to measure the imbalance). It records the time (median of
``repeats``, slowest rank), the rate in TFLOP/s, the peak of allocated memory per GPU, and the
time ranks spent waiting for blocks.

With ``memory_cap_gib`` every process may allocate only that much
(``torch.cuda.set_per_process_memory_fraction``): a smaller GPU, emulated, so that the length where
one GPU runs out of memory, and the longer one the ring still runs, are reached in seconds rather
than hours. Lengths stop growing once the ring no longer fits.

On a CPU (``allow_cpu=True``) the same code runs with gloo and Triton's interpreter on tiny sizes,
which checks the code path and says nothing about speed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..bench import core
from ..bench.core import DTYPES, Measurement, device_slug, dtype_name, save_results
from ..validation import require_positive_int
from .attention import ring_attention
from .launch import RingContext, run_ring
from .layout import local_length
from .memory import longest_sequence, ring_memory

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "RingBench",
    "bench_ring",
    "ring_benchmark_worker",
    "ring_flops",
    "ring_record_name",
    "ring_record_path",
    "save_ring_bench",
]


def ring_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool) -> float:
    """Floating-point operations of attention's two matrix products (half of them if causal).

    Examples
    --------
    >>> ring_flops(1, 32, 1024, 128, causal=False) / 1e9
    17.179869184
    """
    flops = 4.0 * batch * heads * seq_len * seq_len * head_dim
    return flops / 2 if causal else flops


@dataclass
class RingBench:
    """What :func:`bench_ring` measured.

    Attributes
    ----------
    results : list of Measurement
        Per (mask, length), with ``params`` ``N``, ``causal`` and ``dtype`` and
        ``provider_params`` ``world_size`` (and ``layout`` for the ring):
        ``unit="TFLOP/s"`` rows for providers ``"1 GPU"``,
        ``"ring, W GPUs, contiguous"`` and, causal only, ``"ring, W GPUs, striped"``
        (``"1 process"``, ``"ring, W processes, ..."`` on a CPU; ``ms`` is the time);
        ``unit="GiB peak"`` rows, the peak allocated memory of the one GPU and of the fullest
        ring GPU (``value``, ``ms`` repeats the time);
        ``unit="% waiting"`` rows for the ring, the share of the run the slowest-waiting rank spent
        waiting for blocks (``ms`` is that wait). A provider that ran out of memory has no row.
    context : dict
        Numbers describing the run: ``world_size``, ``batch``, ``heads``, ``head_dim``,
        ``memory_cap_gib`` (0: none), ``gpu_memory_gib``, the longest lengths measured
        (``longest_one_gpu``, ``longest_ring``) and those computed for the whole memory of the GPU
        (``computed_longest_one_gpu``, ``computed_longest_ring``).
    """

    results: list[Measurement] = field(default_factory=list)
    context: dict[str, float] = field(default_factory=dict)


def ring_record_name(world_size: int, device: str | None = None) -> str:
    """The name of a ring benchmark's record of ``world_size`` ranks on ``device`` (default:
    this one), for :func:`teachkit.bench.core.load_record`.

    Examples
    --------
    >>> ring_record_name(4, "NVIDIA H200")
    'ring_nvidia_h200_x4'
    """
    from ..device import device_name

    return f"ring_{device_slug(device or device_name())}_x{world_size}"


def ring_record_path(world_size: int, folder: str | Path | None = None) -> Path | Traversable:
    """Where a ring benchmark of ``world_size`` ranks on this device is recorded:
    :func:`ring_record_name` ``.json`` (e.g. ``ring_nvidia_h200_x4.json``) in ``folder``, by
    default the package's records (:func:`teachkit.bench.core.record_path`), where notebook 10
    finds it.
    """
    name = ring_record_name(world_size)
    if folder is None:
        return core.record_path(name, exists=False)
    return Path(folder) / f"{name}{core.RECORD_SUFFIX}"


def _oom_errors() -> tuple[type[BaseException], ...]:
    return (torch.cuda.OutOfMemoryError, MemoryError)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def _median_seconds(fn: Any, device: torch.device, repeats: int, before: Any = None) -> float:
    """Median wall time of ``fn()`` after one warm-up; ``before()`` runs untimed before each.

    Not :func:`teachkit.bench.core.time_ms`: every rank must run ``fn`` (a ring of collective
    sends and receives) the same number of times, in step, behind ``before`` (a barrier), and
    the time is the whole step's, communication included; ``time_ms`` picks its number of calls
    from each process's own estimate and flushes the L2 cache between them. The one-GPU
    baseline is timed the same way, so that both sides of the comparison are.
    """
    times = []
    for i in range(repeats + 1):
        if before is not None:
            before()
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        if i:  # the first run compiles the kernel variants
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _one_device(ctx: RingContext, shape: tuple[int, ...], dtype: torch.dtype, causal: bool,
                repeats: int) -> dict[str, float] | None:
    """Rank 0 alone: FlashAttention over the whole sequence; ``None`` if it does not fit."""
    from ..kernels import flash_attention

    _free(ctx.device)
    try:
        q, k, v = (torch.randn(shape, dtype=dtype, device=ctx.device) for _ in range(3))
        seconds = _median_seconds(lambda: flash_attention(q, k, v, causal=causal), ctx.device,
                                  repeats)
        result = {"seconds": seconds, "peak": float(_peak(ctx.device))}
    except _oom_errors():
        result = None
    q = k = v = None  # noqa: F841  (free before the ring runs)
    _free(ctx.device)
    return result


def _ring(ctx: RingContext, shape: tuple[int, ...], dtype: torch.dtype, causal: bool,
          layout: str, repeats: int, need_bytes: int) -> dict[str, float] | None:
    """All ranks: the ring on their shards; ``None`` (on every rank) if one rank cannot fit it."""
    import torch.distributed as dist

    _free(ctx.device)
    ok = torch.ones(1, device=ctx.comm_device)
    q = k = v = None
    try:
        if ctx.device.type == "cuda":  # reserve the worker's computed peak, with a margin
            reserve = torch.empty(int(need_bytes * 1.1), dtype=torch.uint8, device=ctx.device)
            del reserve
        q, k, v = (torch.randn(shape, dtype=dtype, device=ctx.device) for _ in range(3))
    except _oom_errors():
        ok.zero_()
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # every rank agrees to run, or none does
    if not ok.item():
        q = k = v = None
        _free(ctx.device)
        return None
    last: list[Any] = []

    def run() -> None:
        # k and v are donated: later repeats attend to rotated blocks, which times the same
        last[:] = [ring_attention(q, k, v, causal=causal, layout=layout,
                                  comm_device=ctx.comm_device, donate_kv=True)]

    seconds = _median_seconds(run, ctx.device, repeats, before=dist.barrier)
    wait_ms = sum(step["wait_ms"] for step in last[0].timeline)
    stats = torch.tensor([seconds, wait_ms, float(_peak(ctx.device))], dtype=torch.float64,
                         device=ctx.comm_device)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    q = k = v = None
    last.clear()
    _free(ctx.device)
    return {"seconds": stats[0].item(), "wait_ms": stats[1].item(), "peak": stats[2].item()}


def ring_benchmark_worker(ctx: RingContext, lengths: list[int], batch: int, heads: int,
                          head_dim: int, dtype: str, causals: list[bool],
                          memory_cap_gib: float | None, repeats: int) -> list[dict[str, Any]]:
    """Target of :func:`bench_ring`: every rank runs this; rank 0 also runs the baseline."""
    import torch.distributed as dist

    torch_dtype = DTYPES[dtype]
    total = 0
    if ctx.device.type == "cuda":
        total = torch.cuda.get_device_properties(ctx.device).total_memory
        if memory_cap_gib:
            torch.cuda.set_per_process_memory_fraction(
                min(1.0, memory_cap_gib * 2**30 / total), ctx.device)
    torch.manual_seed(ctx.rank)
    rows = []
    one_fits = True
    for N in lengths:
        n = local_length(N, ctx.world_size)
        need = ring_memory(batch, heads, N, head_dim, ctx.world_size, torch_dtype).worker_total
        ring_ran = False
        for causal in causals:
            one = None
            if ctx.rank == 0 and one_fits:
                one = _one_device(ctx, (batch, heads, N, head_dim), torch_dtype, causal, repeats)
            dist.barrier()
            rings = {}
            for layout in ("contiguous", "striped") if causal else ("contiguous",):
                rings[layout] = _ring(ctx, (batch, heads, n, head_dim), torch_dtype, causal,
                                      layout, repeats, need)
                ring_ran = ring_ran or rings[layout] is not None
            rows.append({"N": N, "causal": causal, "one": one, "ring": rings,
                         "gpu_memory": total})
        if ctx.rank == 0:
            one_fits = one_fits and any(r["one"] for r in rows if r["N"] == N)
        if not ring_ran:
            break
    return rows


def bench_ring(
    world_size: int, lengths: list[int] | None = None, heads: int = 32, head_dim: int = 128,
    batch: int = 1, dtype: str = "fp16", causal: tuple[bool, ...] = (False, True),
    memory_cap_gib: float | None = None, repeats: int = 3, timeout_s: float = 300.0,
    wall_s: float | None = None, allow_cpu: bool = False,
) -> RingBench:
    """Time ring attention on ``world_size`` GPUs against one GPU, for growing lengths.

    Parameters
    ----------
    world_size : int
        GPUs of the ring (NCCL, one per rank); the machine needs that many.
    lengths : list of int, optional
        Sequence lengths in increasing order (multiples of ``world_size``); default from 16k
        tokens up, doubling, to 4M. The run stops after the first length the ring cannot hold.
    heads, head_dim, batch : int
        The problem ``(batch, heads, N, head_dim)``.
    dtype : str
        ``"fp16"``, ``"bf16"`` or ``"fp32"``.
    causal : tuple of bool
        Masks to run at each length (causal runs both layouts).
    memory_cap_gib : float, optional
        Memory each process may allocate (an emulated smaller GPU); ``None``: the whole GPU.
    repeats : int
        Timed runs per measurement (after one warm-up); the median is kept.
    timeout_s, wall_s : float
        As in :func:`~teachkit.ring.launch.run_ring`; default ``wall_s`` is 10 minutes.
    allow_cpu : bool
        Run without GPUs (gloo, Triton's interpreter; give tiny sizes): checks the code only.

    Returns
    -------
    RingBench
    """
    from ..device import ON_GPU

    require_positive_int(world_size, "world_size")
    if not ON_GPU and not allow_cpu:
        raise RuntimeError("bench_ring measures GPUs; this machine has none. Pass "
                           "allow_cpu=True (with tiny sizes) to check the code path only")
    if ON_GPU and torch.cuda.device_count() < world_size:
        raise ValueError(f"bench_ring needs {world_size} GPUs, this machine has "
                         f"{torch.cuda.device_count()}; pass a smaller world_size")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    lengths = lengths or [2**p for p in range(14, 23)]
    for N in lengths:
        local_length(N, world_size)
    rows_per_rank = run_ring(
        ring_benchmark_worker, world_size,
        {"lengths": list(lengths), "batch": batch, "heads": heads, "head_dim": head_dim,
         "dtype": dtype, "causals": list(causal), "memory_cap_gib": memory_cap_gib,
         "repeats": repeats},
        backend="nccl" if ON_GPU else "gloo", timeout_s=timeout_s,
        wall_s=wall_s if wall_s is not None else 600.0)
    rows = rows_per_rank[0]
    one_name, ring_name = ("1 GPU", f"ring, {world_size} GPUs") if ON_GPU else (
        "1 process", f"ring, {world_size} processes")
    results: list[Measurement] = []
    for row in rows:
        problem = f"{'causal' if row['causal'] else 'full'} N={row['N']}"
        params = {"N": row["N"], "causal": row["causal"], "dtype": dtype_name(DTYPES[dtype])}
        flops = ring_flops(batch, heads, row["N"], head_dim, row["causal"])
        runs = [(one_name, {"world_size": 1}, row["one"])]
        runs += [(f"{ring_name}, {layout}", {"world_size": world_size, "layout": layout}, got)
                 for layout, got in row["ring"].items()]
        for provider, swept, got in runs:
            if got is None:
                continue
            ms = got["seconds"] * 1e3
            keys = {"params": params, "provider_params": swept}
            results.append(Measurement(problem, dtype, provider, ms, flops / got["seconds"] / 1e12,
                                       "TFLOP/s", **keys))
            if got["peak"]:
                results.append(Measurement(problem, dtype, provider, ms, got["peak"] / 2**30,
                                           "GiB peak", **keys))
            if provider != one_name:
                results.append(Measurement(problem, dtype, provider, got["wait_ms"],
                                           100 * got["wait_ms"] / ms, "% waiting", **keys))
    gpu_memory = float(rows[0]["gpu_memory"]) if rows else 0.0
    memory = min(gpu_memory, memory_cap_gib * 2**30) if memory_cap_gib else gpu_memory
    one_max, ring_max = longest_sequence(gpu_memory, batch, heads, head_dim, world_size,
                                         DTYPES[dtype]) if gpu_memory else (0, 0)
    context = {
        "world_size": float(world_size), "batch": float(batch), "heads": float(heads),
        "head_dim": float(head_dim), "memory_cap_gib": float(memory_cap_gib or 0),
        "gpu_memory_gib": gpu_memory / 2**30, "memory_per_process_gib": memory / 2**30,
        "longest_one_gpu": float(max((r["N"] for r in rows if r["one"]), default=0)),
        "longest_ring": float(max((r["N"] for r in rows if any(r["ring"].values())),
                                  default=0)),
        "computed_longest_one_gpu": float(one_max), "computed_longest_ring": float(ring_max),
    }
    return RingBench(results, context)


def save_ring_bench(bench: RingBench, path: str | Path) -> Path:
    """Write a :class:`RingBench` with :func:`teachkit.bench.core.save_results`: the
    measurements as ``results``, the context numbers as the record's ``ceilings``."""
    return save_results(path, bench.results, **bench.context)
