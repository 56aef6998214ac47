"""Benchmarks of the course's kernels beside PyTorch and the device's own ceilings.

Run from a shell::

    python -m teachkit.bench softmax               # the shapes of the course's softmax table
    python -m teachkit.bench softmax --dtypes bf16 --shapes 4x16777216 64x1048576
    python -m teachkit.bench ceilings              # copy bandwidth and bf16 matmul rate only
    python -m teachkit.bench traffic               # notebook 05: bytes moved per formulation, L2

Each run measures the ceilings first (a large device-to-device copy for bandwidth, a large bf16
matmul for compute), then every provider on every shape, side by side in one process, and prints
a table; ``--plot NAME`` saves a figure to ``figures/NAME.png``. Times are medians of CUDA-event
timings (``triton.testing.do_bench``). On a CPU the kernels run in Triton's interpreter, so times
say nothing about a GPU; the CLI refuses to run there unless given ``--allow-cpu``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from .device import DEVICE, ON_GPU, device_name

__all__ = [
    "Measurement",
    "time_ms",
    "copy_bandwidth",
    "matmul_tflops",
    "bench_softmax",
    "format_table",
    "save_results",
    "load_results",
    "SOFTMAX_SHAPES",
]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SOFTMAX_SHAPES = [(16384, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (256, 262144),
                  (64, 1048576), (4, 16777216)]
"""Rows x columns of the softmax benchmark: the same bytes, from many short rows to few long."""


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


def time_ms(fn: Callable[[], object], warmup: int = 25, rep: int = 100) -> float:
    """Median time of ``fn()`` in milliseconds: CUDA events on a GPU, a wall clock on a CPU.

    ``warmup`` and ``rep`` are milliseconds of warm-up and measurement on a GPU (as
    ``triton.testing.do_bench`` takes them) and call counts on a CPU. With
    :data:`GRAPH_TIMING`, calls are captured in a CUDA graph and its replays are timed.
    """
    if ON_GPU:
        import triton.testing

        if GRAPH_TIMING:
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

    ``nbytes`` defaults to 1 GiB on a GPU (far beyond any L2) and 64 MiB on a CPU.
    """
    nbytes = nbytes or (1 << 30 if ON_GPU else 1 << 26)
    src = torch.randn(nbytes // 4, device=DEVICE)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * nbytes / ms / 1e6


def matmul_tflops(n: int | None = None) -> float:
    """Rate of an ``n x n x n`` bf16 matmul (float32 on a CPU) on random data, in TFLOP/s."""
    n = n or (8192 if ON_GPU else 1024)
    dtype = torch.bfloat16 if ON_GPU else torch.float32
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    ms = time_ms(lambda: a @ b)
    return 2 * n**3 / ms / 1e9


def _progress(done: int, total: int, label: str) -> None:
    width = 28
    filled = width * done // total
    bar = "#" * filled + "." * (width - filled)
    end = "\n" if done == total else ""
    print(f"\r[{bar}] {done}/{total} {label:<40}", end=end, file=sys.stderr, flush=True)


def softmax_providers() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The softmax implementations the benchmark compares, by name."""
    from .kernels import softmax_kernels as ks

    return {
        "torch": lambda x: torch.softmax(x, dim=-1),
        "blog kernel": ks.softmax_blog,
        "online (tl.reduce)": ks.softmax_online,
        "fused": ks.softmax_fused,
        "split rows": ks.softmax_split,
        "teachkit.kernels.softmax": ks.softmax,
    }


def bench_softmax(
    shapes: Iterable[tuple[int, int]] = SOFTMAX_SHAPES,
    dtypes: Iterable[str] = ("fp32", "bf16"),
    providers: Iterable[str] | None = None,
    progress: bool = True,
) -> list[Measurement]:
    """Time every softmax provider on every shape and dtype; GB/s = 2 x tensor bytes / time.

    A provider that cannot take a shape (the fused kernel on rows longer than it holds) is
    skipped. Outputs are checked against ``torch.softmax`` before timing.
    """
    from .compare import relative_error
    from .kernels.softmax_kernels import FUSED_MAX_COLS

    table = softmax_providers()
    names = list(providers) if providers is not None else list(table)
    shapes, dtypes = list(shapes), list(dtypes)
    jobs = [(s, d, p) for s in shapes for d in dtypes for p in names]
    results = []
    for i, ((rows, cols), dt, name) in enumerate(jobs):
        if progress:
            _progress(i, len(jobs), f"{rows}x{cols} {dt} {name}")
        if name == "fused" and cols > FUSED_MAX_COLS:
            continue
        x = torch.randn(rows, cols, device=DEVICE, dtype=DTYPES[dt])
        fn = table[name]
        err = relative_error(fn(x), torch.softmax(x.float(), dim=-1))
        if not err < 2e-2:
            raise AssertionError(f"{name} is wrong on {rows}x{cols} {dt}: relative error {err}")
        ms = time_ms(lambda fn=fn, x=x: fn(x))
        gbps = 2 * x.numel() * x.element_size() / ms / 1e6
        results.append(Measurement(f"{rows}x{cols}", dt, name, ms, gbps, "GB/s"))
        del x
    if progress:
        _progress(len(jobs), len(jobs), "done")
    return results


def format_table(results: list[Measurement], ceiling: float | None = None,
                 baseline: str = "torch", device: str | None = None) -> str:
    """A Markdown table: one row per (problem, dtype), one column per provider, then the last
    provider's ratio to ``baseline`` and to ``ceiling``. ``device`` names where the results were
    measured (default: this machine)."""
    providers = list(dict.fromkeys(r.provider for r in results))
    keys = list(dict.fromkeys((r.problem, r.dtype) for r in results))
    unit = results[0].unit if results else ""
    head = ["problem", "dtype", *providers]
    last = providers[-1] if providers else ""
    if baseline in providers and last != baseline:
        head.append(f"{last} / {baseline}")
    if ceiling:
        head.append(f"{last} / ceiling")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for problem, dtype in keys:
        got = {r.provider: r.value for r in results if (r.problem, r.dtype) == (problem, dtype)}
        cells = [problem, dtype] + [f"{got[p]:.0f}" if p in got else "-" for p in providers]
        if baseline in providers and last != baseline:
            cells.append(f"{got[last] / got[baseline]:.2f}x" if last in got else "-")
        if ceiling:
            cells.append(f"{got[last] / ceiling:.0%}" if last in got else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return f"({unit}, {device or device_name()})\n" + "\n".join(lines)


def save_results(path: str | Path, results: list[Measurement], **ceilings: float) -> Path:
    """Write results, the device's name and measured ceilings (e.g. ``copy_gbps=2998``) as JSON,
    so a notebook on a machine without that GPU can show the figures measured on it."""
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
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load_results(path: str | Path) -> tuple[list[Measurement], dict]:
    """Read what :func:`save_results` wrote: the measurements and the rest of the record."""
    record = json.loads(Path(path).read_text())
    return [Measurement(**r) for r in record.pop("results")], record


def _parse_shape(text: str) -> tuple[int, int]:
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m teachkit.bench softmax|ceilings|traffic``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["traffic"]:
        from .traffic import main as traffic_main

        return traffic_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m teachkit.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["softmax", "ceilings"])
    parser.add_argument("--shapes", nargs="+", type=_parse_shape, default=None,
                        help="rows x cols, e.g. 4096x16384")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["fp32", "bf16"])
    parser.add_argument("--providers", nargs="+", default=None)
    parser.add_argument("--plot", default=None, help="save a figure as figures/PLOT.png")
    parser.add_argument("--json", default=None, help="save the results as JSON to this path")
    parser.add_argument("--graph", action="store_true",
                        help="time CUDA-graph replays (GPU time without launch overhead)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on a CPU (interpreter: tiny shapes, meaningless times)")
    args = parser.parse_args(argv)
    global GRAPH_TIMING
    GRAPH_TIMING = args.graph and ON_GPU
    if not ON_GPU and not args.allow_cpu:
        print("No CUDA GPU: the kernels would run in Triton's interpreter. Pass --allow-cpu "
              "to run anyway (with small --shapes).", file=sys.stderr)
        return 2
    copy = copy_bandwidth()
    print(f"device: {device_name()}")
    print(f"copy bandwidth: {copy:.0f} GB/s (read + write)")
    if args.what == "ceilings":
        flops = matmul_tflops()
        print(f"bf16 matmul: {flops:.0f} TFLOP/s")
        if args.json:
            print(f"results: {save_results(args.json, [], copy_gbps=copy, matmul_tflops=flops)}")
        return 0
    shapes = args.shapes or (SOFTMAX_SHAPES if ON_GPU else [(64, 1000), (4, 20000)])
    results = bench_softmax(shapes, args.dtypes, args.providers)
    print(format_table(results, ceiling=copy))
    if args.json:
        print(f"results: {save_results(args.json, results, copy_gbps=copy)}")
    if args.plot:
        from .plots.bench import plot_bandwidth
        from .plots.figures import save_figure

        path = save_figure(plot_bandwidth(results, copy), args.plot)
        print(f"figure: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
