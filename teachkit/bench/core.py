"""What every benchmark shares: timing, the device's ceilings, tables, JSON records, a progress bar.

Times are medians of CUDA-event timings (``triton.testing.do_bench``) on a GPU, or of CUDA-graph
replays when :data:`GRAPH_TIMING` is set; on a CPU a wall clock, which says nothing about a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..device import DEVICE, ON_GPU, device_name

__all__ = [
    "DTYPES",
    "Measurement",
    "time_ms",
    "copy_bandwidth",
    "matmul_tflops",
    "progress",
    "format_table",
    "device_slug",
    "save_results",
    "load_results",
    "refuse_cpu",
    "add_common_arguments",
    "start",
    "finish",
]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Measurement:
    """One timed provider on one problem."""

    problem: str
    dtype: str
    provider: str
    ms: float
    value: float  # GB/s or TFLOP/s, per ``unit``
    unit: str


GRAPH_TIMING = False
"""Time CUDA-graph replays (``triton.testing.do_bench_cudagraph``) instead of plain launches:
the GPU's time alone, without Python's launch overhead. Set by ``--graph``."""


def time_ms(fn: Callable[[], object], warmup: int = 25, rep: int = 100,
            graph: bool | None = None) -> float:
    """Median time of ``fn()`` in milliseconds: CUDA events on a GPU, a wall clock on a CPU.

    ``warmup`` and ``rep`` are milliseconds of warm-up and measurement on a GPU (as
    ``triton.testing.do_bench`` takes them) and call counts on a CPU. With ``graph`` (default
    :data:`GRAPH_TIMING`), calls are captured in a CUDA graph and its replays are timed.
    """
    if ON_GPU:
        import triton.testing

        if GRAPH_TIMING if graph is None else graph:
            fn()  # compile outside the capture
            return float(triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median"))
        return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
    fn()
    times = []
    for _ in range(max(3, min(rep, 10))):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def copy_bandwidth(nbytes: int | None = None) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written.

    ``nbytes`` defaults to 1 GiB on a GPU (far beyond any L2) and 64 MiB on a CPU. Always timed
    with plain launches, even under :data:`GRAPH_TIMING`: captured in a CUDA graph the copy ran
    at 2441 GB/s on an H100 against 2991 launched plainly (a graph records it as a memcpy node,
    which the driver may give to the copy engines), and a 1 GiB copy has no launch overhead to
    hide anyway.
    """
    nbytes = nbytes or (1 << 30 if ON_GPU else 1 << 26)
    src = torch.randn(nbytes // 4, device=DEVICE)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), graph=False)
    return 2 * nbytes / ms / 1e6


def matmul_tflops(n: int | None = None) -> float:
    """Rate of an ``n x n x n`` bf16 matmul (float32 on a CPU) on random data, in TFLOP/s."""
    n = n or (8192 if ON_GPU else 1024)
    dtype = torch.bfloat16 if ON_GPU else torch.float32
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    ms = time_ms(lambda: a @ b, graph=False)  # seconds of work: no overhead to hide
    return 2 * n**3 / ms / 1e9


def progress(done: int, total: int, label: str) -> None:
    """Draw a one-line progress bar on stderr: ``done`` of ``total`` jobs, the current one named."""
    width = 28
    filled = width * done // total
    bar = "#" * filled + "." * (width - filled)
    end = "\n" if done == total else ""
    print(f"\r[{bar}] {done}/{total} {label:<40}", end=end, file=sys.stderr, flush=True)


def format_table(results: list[Measurement], ceiling: float | None = None,
                 baseline: str | tuple[str, ...] = "torch", device: str | None = None) -> str:
    """A Markdown table: one row per (problem, dtype), one column per provider, then the last
    provider's ratio to each ``baseline`` provider present and to ``ceiling``. ``device`` names
    where the results were measured (default: this machine)."""
    providers = list(dict.fromkeys(r.provider for r in results))
    keys = list(dict.fromkeys((r.problem, r.dtype) for r in results))
    unit = results[0].unit if results else ""
    last = providers[-1] if providers else ""
    bases = [b for b in ((baseline,) if isinstance(baseline, str) else baseline)
             if b in providers and b != last]
    head = ["problem", "dtype", *providers, *(f"{last} / {b}" for b in bases)]
    if ceiling:
        head.append(f"{last} / ceiling")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for problem, dtype in keys:
        got = {r.provider: r.value for r in results if (r.problem, r.dtype) == (problem, dtype)}
        cells = [problem, dtype] + [f"{got[p]:.0f}" if p in got else "-" for p in providers]
        for b in bases:
            cells.append(f"{got[last] / got[b]:.2f}x" if last in got and b in got else "-")
        if ceiling:
            cells.append(f"{got[last] / ceiling:.0%}" if last in got else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return f"({unit}, {device or device_name()})\n" + "\n".join(lines)


def device_slug(name: str) -> str:
    """A file-name form of a device name, its first two words: ``'nvidia_h100'``.

    Examples
    --------
    >>> device_slug("NVIDIA H200"), device_slug("NVIDIA H100 80GB HBM3")
    ('nvidia_h200', 'nvidia_h100')
    """
    words = name.lower().replace("-", " ").split()[:2]
    return "_".join(words) if words else "unknown"


def save_results(path: str | Path, results: list[Measurement], extra: dict | None = None,
                 **ceilings: float) -> Path:
    """Write results, the device's name and measured ceilings (e.g. ``copy_gbps=2998``) as JSON,
    so a notebook on a machine without that GPU can show the figures measured on it; ``extra``
    adds top-level entries (e.g. ``{"memory": rows}``)."""
    import torch as _torch
    import triton

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "device": device_name(),
        "torch": _torch.__version__,
        "triton": triton.__version__,
        "timing": ("cuda-graph replays" if GRAPH_TIMING else "do_bench median (CUDA events)")
        if ON_GPU else "wall clock median (CPU)",
        "ceilings": ceilings,
        "results": [dataclasses.asdict(r) for r in results],
        **(extra or {}),
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load_results(path: str | Path) -> tuple[list[Measurement], dict]:
    """Read what :func:`save_results` wrote: the measurements and the rest of the record."""
    record = json.loads(Path(path).read_text())
    return [Measurement(**r) for r in record.pop("results")], record




def refuse_cpu(allow_cpu: bool) -> bool:
    """True (after saying why on stderr) when a benchmark should not run: no GPU and no
    ``--allow-cpu``. Under Triton's interpreter the times say nothing about a GPU."""
    if ON_GPU or allow_cpu:
        return False
    print("No CUDA GPU: the kernels would run in Triton's interpreter. Pass --allow-cpu "
          "to run anyway (with small sizes).", file=sys.stderr)
    return True


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options every benchmark takes: ``--plot``, ``--json``, ``--graph`` and
    ``--allow-cpu``."""
    parser.add_argument("--plot", default=None, help="save a figure as figures/PLOT.png")
    parser.add_argument("--json", default=None, help="save the results as JSON to this path")
    parser.add_argument("--graph", action="store_true",
                        help="time CUDA-graph replays (GPU time without launch overhead)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on a CPU (interpreter: tiny sizes, meaningless times)")


def finish(args: argparse.Namespace, results: list[Measurement],
           figure: Callable[[], object] | None = None, extra: dict | None = None,
           **ceilings: float) -> None:
    """Do what the common options ask once a benchmark has run: ``--json`` saves the results
    with ``extra`` and the ``ceilings`` (:func:`save_results`), ``--plot`` saves ``figure()``
    under ``figures/``; each says where."""
    if args.json:
        print(f"results: {save_results(args.json, results, extra, **ceilings)}")
    if args.plot and figure is not None:
        from ..plots.figures import save_figure

        print(f"figure: {save_figure(figure(), args.plot)}")


def start(args: argparse.Namespace) -> bool:
    """Apply the common options (``--graph`` sets :data:`GRAPH_TIMING`); False, after saying why,
    when the benchmark should not run (no GPU and no ``--allow-cpu``)."""
    global GRAPH_TIMING
    GRAPH_TIMING = args.graph and ON_GPU
    return not refuse_cpu(args.allow_cpu)
