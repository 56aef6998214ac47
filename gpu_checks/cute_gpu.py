"""GPU check of teachkit.cute (notebook 11): compile, correctness, benchmark, record.

Run from the repository root on a machine with a CUDA GPU and CuTe DSL (nvidia-cutlass-dsl)::

    python gpu_checks/cute_gpu.py [--json PATH] [--no-bench]

1. compiles every kernel configuration the checks use, timing each; a compile error is printed
   in full and ends the run (exit 1);
2. checks cute_softmax against float64 torch.softmax: float32, bfloat16, float16; lengths 1 to
   1M (odd ones too: scalar loads); 1, 3 and 37 rows; -inf / all -inf / NaN / +inf rows; a
   misaligned and a non-contiguous input; a side stream; the kernel against the simulation;
3. benchmarks it beside teachkit.kernels.softmax and torch.softmax on SOFTMAX_SHAPES, with plain
   launches and with CUDA-graph replays, saving teachkit/benchmarks/cute_softmax_<device>.json
   and ..._cudagraph.json (or --json PATH and its _cudagraph sibling), printing the tables and the
   host time per call of each provider.
Exit status: 0 all good, 1 a check or compile failed, 2 no GPU / no CuTe DSL.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import teachkit  # noqa: E402
from teachkit.compare import relative_error  # noqa: E402


def compile_all(kernel_module, dtypes, lengths) -> bool:
    from teachkit.cute.config import launch_config

    seen = set()
    for dtype in dtypes:
        for n in lengths:
            for aligned in (True, False):
                cfg = launch_config(n, dtype, aligned)
                if (dtype, cfg) in seen:
                    continue
                seen.add((dtype, cfg))
                x = torch.randn(2, n, device="cuda", dtype=dtype)
                t0 = time.perf_counter()
                try:
                    kernel_module.compiled_softmax(x, torch.empty_like(x), cfg)
                except Exception:
                    print(f"COMPILE FAILED for {dtype}, {cfg} (row length {n}):")
                    traceback.print_exc()
                    return False
                print(f"compiled {str(dtype):15} threads={cfg.threads:4} vec={cfg.vec}  "
                      f"{time.perf_counter() - t0:5.2f} s")
    return True


def extra_checks(cute_softmax) -> list[tuple[str, float, float]]:
    """(case, error, tolerance) for layouts verify_softmax does not cover."""
    from teachkit.cute import simulate_cute_softmax

    out = []
    g = torch.Generator().manual_seed(1)
    for n, rows in ((1048576, 1), (100003, 2), (65536, 37), (16384, 37)):
        x = (torch.randn(rows, n, generator=g) * 3).cuda()
        out.append((f"{rows} x {n} float32", relative_error(cute_softmax(x),
                                                           torch.softmax(x.double(), -1)), 1e-5))
    n, rows = 4096, 5
    flat = torch.randn(rows * n + 1, device="cuda")
    x = flat[1:].view(rows, n)  # 4 bytes past an aligned address: scalar loads
    assert x.data_ptr() % 16 != 0
    out.append(("misaligned 5 x 4096", relative_error(cute_softmax(x),
                                                      torch.softmax(x.double(), -1)), 1e-5))
    wide = torch.randn(300, 2 * 999, device="cuda", dtype=torch.bfloat16)
    x = wide[:, ::2]  # non-contiguous
    out.append(("non-contiguous 300 x 999 bf16",
                relative_error(cute_softmax(x), torch.softmax(x.double(), -1)), 1.6e-2))
    side = torch.cuda.Stream()
    x = torch.randn(4096, 1000, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = cute_softmax(x)
    torch.cuda.current_stream().wait_stream(side)
    out.append(("on a side stream 4096 x 1000", relative_error(y, torch.softmax(x.double(), -1)),
                1e-5))
    x = torch.randn(3, 777, device="cuda") * 5
    sim = simulate_cute_softmax(x.cpu()).out
    out.append(("kernel vs simulation 3 x 777", relative_error(cute_softmax(x), sim), 1e-5))
    return out


def launch_overhead_us(cute_softmax) -> dict[str, float]:
    """Host microseconds per call on a small input (calls queued without waiting)."""
    from teachkit.kernels import softmax as triton_softmax

    x = torch.randn(64, 1024, device="cuda")
    out = {}
    for name, fn in (("cute", cute_softmax), ("triton", triton_softmax),
                     ("torch", lambda t: torch.softmax(t, -1))):
        fn(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn(x)
        out[name] = (time.perf_counter() - t0) / 200 * 1e6
        torch.cuda.synchronize()
    return out


def graph_bench(json_path: str | None, copy: float | None = None) -> int:
    """Benchmark on CUDA-graph replays (the GPU's time alone) and save the ``_cudagraph`` record
    beside the plain one; 0 when it worked."""
    from teachkit.bench.core import (
        copy_bandwidth,
        format_table,
        record_path,
        save_results,
        timing_description,
    )
    from teachkit.bench.softmax import SOFTMAX_SHAPES
    from teachkit.cute.bench import bench_cute_softmax, cute_record_name

    print("\n== benchmark, CUDA-graph replays (the GPU's time alone, no launch overhead)")
    copy = copy or copy_bandwidth()
    if json_path:
        gpath = Path(json_path).with_name(Path(json_path).stem + "_cudagraph.json")
    else:
        gpath = record_path(cute_record_name(teachkit.device.device_name(), graph=True),
                            exists=False)
    try:
        graph = bench_cute_softmax(SOFTMAX_SHAPES, ("fp32", "bf16"), progress=False, graph=True)
        print(format_table(graph, ceiling=copy))
        timing = timing_description(graph=True)
        print(f"record: {save_results(gpath, graph, timing=timing, copy_gbps=copy)}")
        return 0
    except Exception:
        traceback.print_exc()
        print("(graph timing failed; the plain figures stand)")
        return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None,
                        help="where to save the benchmark record (default "
                             "teachkit/benchmarks/cute_softmax_<device>.json)")
    parser.add_argument("--no-bench", action="store_true", help="checks only")
    parser.add_argument("--graph-only", action="store_true",
                        help="only the CUDA-graph benchmark (no checks, no plain launches)")
    args = parser.parse_args()
    start = time.perf_counter()
    print(teachkit.describe())
    if not torch.cuda.is_available():
        print("FAIL: no CUDA GPU")
        return 2
    try:
        import cutlass

        print(f"nvidia-cutlass-dsl {getattr(cutlass, '__version__', '?')}")
        from teachkit.cute import kernel as kernel_module
    except Exception:
        traceback.print_exc()
        from teachkit.cute.entry import INSTALL_HINT

        print(f"FAIL: CuTe DSL unusable. {INSTALL_HINT}")
        return 2
    from teachkit.cute import available, cute_softmax
    from teachkit.cute.verify import format_checks, verify_softmax

    assert available()
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    lengths = (1, 7, 1000, 1024, 4097, 16384, 65536)
    print("\n== compile")
    if not compile_all(kernel_module, dtypes, lengths + (100003, 1048576, 4096, 999)):
        return 1

    failed = 0
    if args.graph_only:
        return graph_bench(args.json)
    print("\n== correctness against float64 torch.softmax")
    for rows in (1, 3, 37):
        try:
            checks = verify_softmax(cute_softmax, lengths, dtypes, rows=rows, device="cuda",
                                    special=rows == 3)
        except Exception:
            traceback.print_exc()
            print("FAIL: the kernel raised")
            return 1
        bad = [c for c in checks if not c.ok]
        failed += len(bad)
        worst = max(checks, key=lambda c: c.error / c.tolerance)
        print(f"{rows:2} row(s): {len(checks) - len(bad)} of {len(checks)} ok; worst "
              f"{worst.case} {worst.dtype}: {worst.error:.1e} (allowed {worst.tolerance:g})")
        if bad:
            print(format_checks(bad))
    try:
        extra = extra_checks(cute_softmax)
    except Exception:
        traceback.print_exc()
        print("FAIL: an extra check raised")
        return 1
    for case, err, tol in extra:
        verdict = "ok" if err <= tol else "FAIL"
        failed += verdict == "FAIL"
        print(f"{case:32} error {err:.1e} (allowed {tol:g})  {verdict}")
    torch.cuda.synchronize()

    if not args.no_bench:
        from teachkit.bench.core import copy_bandwidth, format_table, record_path, save_results
        from teachkit.bench.softmax import SOFTMAX_SHAPES
        from teachkit.cute.bench import CUTE_PROVIDER, bench_cute_softmax, cute_record_name

        print("\n== benchmark (GB/s = 2 x bytes / time, do_bench median)")
        copy = copy_bandwidth()
        results = bench_cute_softmax(SOFTMAX_SHAPES, ("fp32", "bf16"), progress=False)
        print(f"copy bandwidth {copy:.0f} GB/s")
        print(format_table(results, ceiling=copy))
        for r in results:
            if r.provider == CUTE_PROVIDER:
                tri = next(q.value for q in results if q.params == r.params
                           and q.provider == "teachkit.kernels.softmax")
                print(f"{r.problem:>11} {r.dtype}: CuTe {r.value:5.0f} GB/s = "
                      f"{r.value / copy:4.0%} of copy, {r.value / tri:4.2f}x the Triton kernel, "
                      f"{r.ms * 1e3:8.1f} us")
        name = cute_record_name(teachkit.device.device_name())
        path = save_results(args.json or record_path(name, exists=False), results,
                            copy_gbps=copy)
        print(f"record: {path}")
        graph_bench(args.json, copy)
        host_us = launch_overhead_us(cute_softmax)
        print(f"host time per call (no sync), 64 x 1024 fp32: CuTe {host_us['cute']:.0f} us, "
              f"Triton entry {host_us['triton']:.0f} us, torch {host_us['torch']:.0f} us")
    print(f"\n{'FAIL' if failed else 'OK'}: {failed} failed check(s); "
          f"{time.perf_counter() - start:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
