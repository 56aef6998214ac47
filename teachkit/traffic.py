"""Bytes moved by softmax variants: a model, an instrumented memory that checks it, and timings.

A GPU kernel reads its inputs from global memory (HBM) and writes its outputs back; whatever it
computes in between stays on chip. So a softmax written as a sequence of *passes* (kernels) costs
the sum, over passes, of the bytes each pass loads and stores. The variants, for an ``M x N``
input ``x`` (row-wise softmax):

``naive``
    three torch ops, ``e = exp(x)``, ``s = e.sum(-1)``, ``y = e / s`` (no max: overflows).
``eager safe``
    the safe softmax op by op, as eager PyTorch runs it: ``amax``, ``x - m``, ``exp``, ``sum``,
    ``/``. Five kernels; the source texts' "naive" table row (5MN + 2M reads).
``safe 3-pass``
    three passes over ``x``: the maximum, the denominator, the normalisation; the statistics
    ``m`` and ``d`` are stored in float32.
``online 2-pass``
    one pass computes ``(m, d)`` together with notebook 03's running update, folding the row in
    blocks of :data:`ONLINE_BLOCK` columns; a second normalises.
``fused``
    ``torch.softmax``: every row read once and written once.

Every variant is written below as a list of pass functions that talk to a :class:`Memory`:
``mem.load(name)`` and ``mem.store(name, tensor)`` are the only way to global memory, and the
memory tallies the elements and bytes that cross it, so :func:`traffic_model` can be checked by
counting. In eager PyTorch a pass made of several torch ops also writes its temporaries to
memory; the model counts what one kernel per pass must move, which is what a Triton kernel
(notebook 06) achieves.

Run ``python -m teachkit.traffic --json teachkit/benchmarks/traffic_nvidia_h100.json`` on a GPU
to time every variant at a few shapes and to sweep the working-set size across the L2 cache (the
recorded one is read with ``teachkit.bench.load_record("traffic_nvidia_h100")``).

Examples
--------
>>> traffic_model("fused", 4, 1000, 4)
{'reads': 16000, 'writes': 16000}
>>> x = torch.randn(3, 7)
>>> y, mem = run_variant("online 2-pass", x)
>>> (mem.reads, mem.writes) == tuple(traffic_model("online 2-pass", 3, 7, 4).values())
True
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch

from .device import DEVICE, ON_GPU, device_name, fits_or_skip, skip_if_out_of_memory

__all__ = [
    "VARIANTS",
    "Memory",
    "run_variant",
    "traffic_model",
    "traffic_formula",
    "softmax_flops",
    "measure_variants",
    "variants_bytes",
    "warm_time_ms",
    "working_set_sweep",
    "main",
]

STAT_DTYPE = torch.float32
"""dtype of the row statistics ``m`` and ``d`` that the safe 3-pass and online variants store."""
ONLINE_BLOCK = 1024
"""Columns the online 2-pass variant folds into its running ``(m, d)`` at a time: each block is
one update of notebook 03's rule, ``m' = max(m, max(block))``, ``d' = d e^{m - m'} +
sum(e^{block - m'})``, so the statistics come out of one read of the row."""


class Memory:
    """Global memory that counts traffic: every load and store of a whole tensor is tallied.

    Attributes
    ----------
    data : dict[str, torch.Tensor]
        The tensors in memory, by name.
    reads, writes : int
        Bytes loaded and stored so far.
    read_elems, write_elems : int
        The same in elements.
    log : list[tuple[str, str, int]]
        ``("load" | "store", name, elements)`` for every access, in order.
    """

    def __init__(self, **tensors: torch.Tensor) -> None:
        self.data: dict[str, torch.Tensor] = dict(tensors)
        self.reads = self.writes = self.read_elems = self.write_elems = 0
        self.log: list[tuple[str, str, int]] = []

    def load(self, name: str) -> torch.Tensor:
        """Read the whole tensor ``name`` (every row once) and tally it."""
        t = self.data[name]
        self.reads += t.numel() * t.element_size()
        self.read_elems += t.numel()
        self.log.append(("load", name, t.numel()))
        return t

    def store(self, name: str, t: torch.Tensor) -> None:
        """Write ``t`` as ``name`` and tally it."""
        self.writes += t.numel() * t.element_size()
        self.write_elems += t.numel()
        self.log.append(("store", name, t.numel()))
        self.data[name] = t


# --- the variants, pass by pass ------------------------------------------------------------------

def _naive(mem: Memory) -> None:
    mem.store("e", torch.exp(mem.load("x")))                      # kernel 1: exp
    mem.store("s", mem.load("e").sum(-1, keepdim=True))           # kernel 2: row sums
    mem.store("y", mem.load("e") / mem.load("s"))                 # kernel 3: divide


def _eager_safe(mem: Memory) -> None:
    mem.store("m", mem.load("x").amax(-1, keepdim=True))          # kernel 1: row max
    mem.store("z", mem.load("x") - mem.load("m"))                 # kernel 2: subtract
    mem.store("e", torch.exp(mem.load("z")))                      # kernel 3: exp
    mem.store("s", mem.load("e").sum(-1, keepdim=True))           # kernel 4: row sums
    mem.store("y", mem.load("e") / mem.load("s"))                 # kernel 5: divide


def _safe_3pass(mem: Memory) -> None:
    x = mem.load("x")                                             # pass 1: the maximum
    mem.store("m", x.amax(-1, keepdim=True).to(STAT_DTYPE))
    x, m = mem.load("x"), mem.load("m")                           # pass 2: the denominator
    mem.store("d", torch.exp(x.to(STAT_DTYPE) - m).sum(-1, keepdim=True))
    x, m, d = mem.load("x"), mem.load("m"), mem.load("d")         # pass 3: normalise
    mem.store("y", (torch.exp(x.to(STAT_DTYPE) - m) / d).to(x.dtype))


def _online_2pass(mem: Memory) -> None:
    x = mem.load("x").to(STAT_DTYPE)                              # pass 1: (m, d) together
    m = torch.full_like(x[..., :1], float("-inf"))
    d = torch.zeros_like(m)
    for block in x.split(ONLINE_BLOCK, dim=-1):  # notebook 03's update, one block at a time
        m_new = torch.maximum(m, block.amax(-1, keepdim=True))
        safe = torch.where(m_new == float("-inf"), 0.0, m_new)  # a row of -inf so far: no NaN
        d = d * torch.exp(m - safe) + torch.exp(block - safe).sum(-1, keepdim=True)
        m = m_new
    mem.store("m", m)
    mem.store("d", d)
    x, m, d = mem.load("x"), mem.load("m"), mem.load("d")         # pass 2: normalise
    mem.store("y", (torch.exp(x.to(STAT_DTYPE) - m) / d).to(x.dtype))


def _fused(mem: Memory) -> None:
    mem.store("y", torch.softmax(mem.load("x"), dim=-1))          # one kernel: read, write


VARIANTS: dict[str, Callable[[Memory], None]] = {
    "naive": _naive,
    "eager safe": _eager_safe,
    "safe 3-pass": _safe_3pass,
    "online 2-pass": _online_2pass,
    "fused": _fused,
}
"""Each variant's torch formulation: a function running its passes on a :class:`Memory`."""


def run_variant(variant: str, x: torch.Tensor, mem: Memory | None = None
                ) -> tuple[torch.Tensor, Memory]:
    """Run ``variant`` on the rows of ``x`` (softmax over the last axis); return ``(y, memory)``.

    Parameters
    ----------
    variant : str
        A key of :data:`VARIANTS`.
    x : torch.Tensor
        The input, ``(M, N)`` (any leading axes work).
    mem : Memory, optional
        Where to put ``x``; a fresh counting :class:`Memory` by default.
    """
    mem = mem if mem is not None else Memory()
    mem.data["x"] = x
    VARIANTS[variant](mem)
    return mem.data["y"], mem


def traffic_formula(variant: str) -> tuple[str, str]:
    """The model of :func:`traffic_model` as text, ``(reads, writes)`` in elements.

    ``M`` counts one value per row in the input's dtype, ``M'`` one float32 value per row.
    """
    return {
        "naive": ("3MN + M", "2MN + M"),
        "eager safe": ("5MN + 2M", "3MN + 2M"),
        "safe 3-pass": ("3MN + 3M'", "MN + 2M'"),
        "online 2-pass": ("2MN + 2M'", "MN + 2M'"),
        "fused": ("MN", "MN"),
    }[variant]


def traffic_model(variant: str, M: int, N: int, itemsize: int) -> dict[str, int]:
    """Bytes read and written by ``variant`` on an ``M x N`` input of ``itemsize``-byte elements.

    One value per row (a maximum, a sum) costs ``itemsize`` bytes in the op-by-op variants, whose
    torch ops keep the input's dtype, and 4 bytes (float32) in the safe 3-pass and online
    variants, whose statistics are kept in float32.

    Parameters
    ----------
    variant : str
        A key of :data:`VARIANTS`.
    M, N : int
        Rows and columns; the softmax runs along each row.
    itemsize : int
        Bytes per element of the input (4 for float32, 2 for bfloat16).

    Returns
    -------
    dict
        ``{"reads": bytes, "writes": bytes}``.

    Examples
    --------
    >>> traffic_model("eager safe", 2, 10, 4)  # (5*20 + 2*2) * 4 and (3*20 + 2*2) * 4
    {'reads': 416, 'writes': 256}
    """
    mn, s = M * N * itemsize, M * itemsize
    f = M * STAT_DTYPE.itemsize
    table = {
        "naive": (3 * mn + s, 2 * mn + s),
        "eager safe": (5 * mn + 2 * s, 3 * mn + 2 * s),
        "safe 3-pass": (3 * mn + 3 * f, mn + 2 * f),
        "online 2-pass": (2 * mn + 2 * f, mn + 2 * f),
        "fused": (mn, mn),
    }
    if variant not in table:
        raise ValueError(f"variant must be one of {list(table)}, got {variant!r}")
    reads, writes = table[variant]
    return {"reads": reads, "writes": writes}


def softmax_flops(M: int, N: int) -> int:
    """Floating-point operations of a safe softmax, counted as 5 per element.

    Per element: one comparison for the maximum, one subtraction, one exponential (counted as one
    operation, though it costs several instructions), one addition for the sum, one division.
    """
    return 5 * M * N


# --- measuring -----------------------------------------------------------------------------------

def variants_bytes(M: int, N: int, dtype: torch.dtype = torch.float32) -> int:
    """GPU memory :func:`measure_variants` takes at its peak on an ``M x N`` input: the input,
    its float64 reference, the op-by-op variant's three full-size temporaries (in the input's
    dtype) and two float32 ones, plus what the timer takes.

    Examples
    --------
    >>> from teachkit.bench.core import TIMING_BYTES
    >>> variants_bytes(1000, 1000, torch.bfloat16) - TIMING_BYTES  # (2 + 8 + 3 x 2 + 2 x 4) B
    24000000
    """
    from .bench.core import TIMING_BYTES

    size = dtype.itemsize
    return M * N * (4 * size + 8 + 2 * 4) + TIMING_BYTES


def measure_variants(M: int, N: int, dtype: torch.dtype = torch.float32,
                     include_copy: bool = True, progress: bool = True) -> list:
    """Time every variant's torch formulation on a random ``M x N`` input of ``dtype``.

    Outputs are checked against a float64 softmax first. Each variant gives two
    :class:`teachkit.bench.Measurement`: ``unit="GB/s effective"`` (model bytes / time) and
    ``unit="GB/s useful"`` (2 x tensor bytes / time: what one read and one write would need),
    with ``params`` ``rows``, ``cols`` and ``dtype``.
    ``include_copy`` adds ``y.copy_(x)`` (2 x tensor bytes) as the reference. A problem larger
    than the GPU's free memory (:func:`variants_bytes`) is skipped with a printed note (the list
    comes back empty), and so is a variant that runs out of it. ``progress`` draws a progress
    bar naming the current variant.
    """
    from .bench.core import DTYPES
    from .progress import each_job, progress_bar

    dt = next(k for k, v in DTYPES.items() if v == dtype) if dtype in DTYPES.values() \
        else str(dtype).removeprefix("torch.")
    problem = f"{M}x{N}"
    results: list = []
    if not fits_or_skip(variants_bytes(M, N, dtype), f"{problem} {dt}"):
        return results
    jobs = [*VARIANTS, "copy"] if include_copy else list(VARIANTS)
    with skip_if_out_of_memory(f"{problem} {dt}"), \
            progress_bar(len(jobs), progress) as bar:
        x = torch.randn(M, N, device=DEVICE, dtype=dtype)
        ref = torch.softmax(x.double(), dim=-1)
        for name in each_job(bar, jobs, lambda n: f"{problem} {dt} {n}"):
            with skip_if_out_of_memory(f"{problem} {dt} {name}"):
                results += _time_variant(name, x, ref, dt)
    return results


def _time_variant(name: str, x: torch.Tensor, ref: torch.Tensor, dt: str) -> list:
    """Check one variant (or ``"copy"``) on ``x`` against ``ref`` and time it: two
    Measurements, GB/s effective and GB/s useful."""
    from .bench.core import Measurement, dtype_name, time_ms
    from .compare import relative_error

    M, N = x.shape
    problem = f"{M}x{N}"
    params = {"rows": M, "cols": N, "dtype": dtype_name(x.dtype)}
    useful = 2 * x.numel() * x.element_size()
    if name == "copy":
        out = torch.empty_like(x)
        ms = time_ms(lambda: out.copy_(x))
        return [Measurement(problem, dt, "copy", ms, useful / ms / 1e6, "GB/s effective",
                            params),
                Measurement(problem, dt, "copy", ms, useful / ms / 1e6, "GB/s useful", params)]
    y, _ = run_variant(name, x)
    err = relative_error(y, ref)
    tol = 1e-5 if x.dtype in (torch.float32, torch.float64) else 2e-2
    if not err < tol:
        raise AssertionError(f"{name} is wrong on {problem} {dt}: relative error {err:.3g}")
    del y
    ms = time_ms(lambda: run_variant(name, x))
    model = sum(traffic_model(name, M, N, x.element_size()).values())
    return [Measurement(problem, dt, name, ms, model / ms / 1e6, "GB/s effective", params),
            Measurement(problem, dt, name, ms, useful / ms / 1e6, "GB/s useful", params)]


def warm_time_ms(fn: Callable[[], object], rep: int = 20) -> float:
    """Median time of one ``fn()`` with the caches left warm between calls, in milliseconds.

    :func:`teachkit.bench.time_ms` with ``graph=True, warm_l2=True``: back-to-back calls
    captured in a CUDA graph (``triton.testing.do_bench_cudagraph``: no launch overhead, and no
    flush of the L2 cache between calls), its replays timed; a working set that fits in L2 is
    then served from L2. Other timings (plain launches, and graph replays without ``warm_l2``)
    clear the L2 cache before every call, so their data always comes from HBM. ``rep`` is
    milliseconds of calls per replay on a GPU, and calls on a CPU (a wall-clock median of
    back-to-back calls).
    """
    from .bench.core import time_ms

    return time_ms(fn, rep=rep, graph=True, warm_l2=True)


def l2_bytes() -> int | None:
    """The GPU's L2 cache size in bytes, when the device reports it (``None`` on a CPU)."""
    if not ON_GPU:
        return None
    return getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None)


def working_set_sweep(sizes_mib: list[float], cols: int = 4096,
                      progress: bool = True) -> list[dict]:
    """Bandwidth of a copy and of ``torch.softmax`` against the working set, cold and warm.

    For each working set ``W`` (input + output bytes, float32), an input of ``W / 8`` elements
    (rows of ``cols``) is copied and softmaxed. *cold*: :func:`teachkit.bench.time_ms` (L2
    flushed before each call); *warm*: :func:`warm_time_ms` (back to back, CUDA-graph
    replays). GB/s = W / time.
    Returns one dict per size with ``working_set_bytes`` and ``copy_cold``, ``copy_warm``,
    ``softmax_cold``, ``softmax_warm`` in GB/s. A size that does not fit in the GPU's free
    memory (``2.5 W`` at the peak, measured on an H100: the input, the copy's output, and
    softmax outputs on two streams and in the CUDA graph's pool), or runs out of it, is
    skipped with a printed note and has no dict. ``progress`` draws a progress bar.
    """
    from .bench.core import TIMING_BYTES
    from .progress import each_job, progress_bar

    rows_out = []
    with progress_bar(len(sizes_mib), progress) as bar:
        for mib in each_job(bar, sizes_mib, lambda m: f"working set {m:g} MiB"):
            n = int(mib * 2**20) // 8
            rows = max(1, n // cols)
            ws = 2 * rows * cols * 4
            what = f"working set {mib:g} MiB"
            if not fits_or_skip(ws * 5 // 2 + TIMING_BYTES, what):
                continue
            with skip_if_out_of_memory(what):
                rows_out.append(_working_set_row(rows, cols))
    return rows_out


def _working_set_row(rows: int, cols: int) -> dict:
    """Cold and warm GB/s of a copy and of a softmax of a ``rows x cols`` float32 input."""
    from .bench.core import time_ms

    x = torch.randn(rows, cols, device=DEVICE)
    y = torch.empty_like(x)
    ws = 2 * x.numel() * x.element_size()
    row = {"working_set_bytes": ws}
    for name, fn in [("copy", lambda: y.copy_(x)), ("softmax", lambda: torch.softmax(x, dim=-1))]:
        row[f"{name}_cold"] = ws / time_ms(fn) / 1e6
        row[f"{name}_warm"] = ws / warm_time_ms(fn) / 1e6
    return row


def format_variants(results: list) -> str:
    """A Markdown table: one row per (problem, dtype, variant) with time and both bandwidths."""
    lines = ["| problem | dtype | variant | ms | GB/s effective | GB/s useful |",
             "|---|---|---|---|---|---|"]
    seen = {}
    for r in results:
        seen.setdefault((r.problem, r.dtype, r.provider), {})[r.unit] = r
    for (problem, dt, name), units in seen.items():
        eff, use = units["GB/s effective"], units["GB/s useful"]
        lines.append(f"| {problem} | {dt} | {name} | {eff.ms:.3f} | {eff.value:.0f} | "
                     f"{use.value:.0f} |")
    return "\n".join(lines)


SHAPES = [(8192, 8192), (32768, 1024)]
SWEEP_MIB = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256, 512, 1024, 4096]


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m teachkit.traffic [--json PATH] [--allow-cpu]``."""
    from .bench.core import copy_bandwidth, save_results, timing_description, writable_path

    parser = argparse.ArgumentParser(prog="python -m teachkit.traffic", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default=None, type=writable_path,
                        help="save the results as JSON to this path (the course keeps its "
                             "records in teachkit/benchmarks/<name>.json)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU at tiny sizes")
    args = parser.parse_args(argv)
    if not ON_GPU and not args.allow_cpu:
        print("No CUDA GPU; pass --allow-cpu to run tiny sizes on the CPU.", file=sys.stderr)
        return 2
    shapes = SHAPES if ON_GPU else [(64, 1000)]
    sweep = SWEEP_MIB if ON_GPU else [1, 4, 16]
    copy = copy_bandwidth()
    print(f"device: {device_name()}; copy bandwidth {copy:.0f} GB/s; L2 {l2_bytes()} bytes")
    results = []
    for M, N in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            results += measure_variants(M, N, dtype)
    print(format_variants(results))
    rows = working_set_sweep(sweep)
    for r in rows:
        print(f"{r['working_set_bytes'] / 2**20:8.0f} MiB  " + "  ".join(
            f"{k} {v:6.0f}" for k, v in r.items() if k != "working_set_bytes"))
    if args.json:
        timing = (f"{timing_description()} for variants and 'cold' (L2 flushed); "
                  f"{timing_description(graph=True, warm_l2=True)} for 'warm'"
                  if ON_GPU else timing_description())
        path = save_results(args.json, results, {"l2_bytes": l2_bytes(), "working_set": rows},
                            timing=timing, copy_gbps=copy)
        print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
