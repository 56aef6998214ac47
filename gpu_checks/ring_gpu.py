"""GPU check of ring attention (notebook 10): run from the repository root with 2+ GPUs.

    python gpu_checks/ring_gpu.py                 # W = 4 if there are 4 GPUs, else 2
    python gpu_checks/ring_gpu.py --world-size 2 --memory-cap-gib 6
    python gpu_checks/ring_gpu.py --memory-cap-gib 2 --lengths 16384 32768 65536 131072

1. Correctness over NCCL, one GPU per rank: fp16/bf16/fp32 through the course's kernel and
   float64 through the torch blocks, causal contiguous/striped and unmasked, odd block lengths,
   against a float64 reference; masks per step, bytes held, allocator peaks reported.
2. gloo on GPUs (blocks travel through the CPU, attention on the GPU), W = 2.
3. A failing rank over NCCL ends the run with that rank's error, quickly.
4. bench_ring: growing N, fp16, H = 32, D = 128, causal (contiguous and striped) and unmasked,
   under a per-process memory cap; saves teachkit/benchmarks/ring_<device>_x<W>.json.

Prints a compact report; exits 1 if any check fails. ``--cpu-smoke`` runs the same steps with
gloo and tiny sizes on a machine without GPUs (checks the script, measures nothing).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's teachkit

import torch  # noqa: E402

import teachkit  # noqa: E402
from teachkit.bench import format_table  # noqa: E402
from teachkit.compare import relative_error  # noqa: E402
from teachkit.ring import (  # noqa: E402
    RingCase,
    RingError,
    bench_ring,
    ring_memory,
    ring_record_path,
    ring_schedule,
    run_ring,
    run_ring_attention_cases,
    save_ring_bench,
    workers,
)

RTOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-6, torch.float64: 1e-12}
FAILURES: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        FAILURES.append(name)


def reference(q, k, v, causal):
    N = q.shape[-2]
    s = (q.double() @ k.double().transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double(), torch.logsumexp(s, dim=-1)


SMOKE = False  # --cpu-smoke: tiny sizes, gloo, Triton's interpreter


def correctness(world_size: int, backend: str | None, every_case: bool = True) -> None:
    n = 21 if SMOKE else 389  # odd: no block size divides it
    N = world_size * n
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(1, 2 if SMOKE else 4, N, 16 if SMOKE else 64, generator=gen,
                        dtype=torch.float64) for _ in range(3)]
    specs = [(torch.float16, True, "striped", "flash"),
             (torch.bfloat16, True, "contiguous", "flash"),
             (torch.float32, False, "contiguous", "flash"),
             (torch.float64, True, "striped", "torch")]
    if not every_case:
        specs = specs[:1]
    cases = [RingCase(*(t.to(dt) for t in base), causal=c, layout=lay, block_attention=ba)
             for dt, c, lay, ba in specs]
    start = time.monotonic()
    runs = run_ring_attention_cases(cases, world_size, backend=backend, timeout_s=120,
                                    wall_s=240)
    label = f"W={world_size} {runs[0].backend}"
    check(f"{label}: ran", True, f"{time.monotonic() - start:.1f} s with start-up")
    for case, run in zip(cases, runs, strict=True):
        ref_out, ref_lse = reference(case.q, case.k, case.v, case.causal)
        err, err_lse = relative_error(run.out, ref_out), relative_error(run.lse, ref_lse)
        name = (f"{label} {str(case.q.dtype)[6:]} {'causal' if case.causal else 'full'} "
                f"{case.layout} {case.block_attention}")
        check(name, err < RTOL[case.q.dtype] and err_lse < max(RTOL[case.q.dtype], 1e-5),
              f"out {err:.1e}, lse {err_lse:.1e}")
        sched = ring_schedule(world_size, case.causal, case.layout)
        masks_ok = all([s["mask"] for s in tl] == sched[r] for r, tl in enumerate(run.timelines))
        B, H, _, D = case.q.shape
        expected = {k: v for k, v in ring_memory(B, H, N, D, world_size,
                                                 case.q.dtype).per_worker.items()
                    if not k.startswith("partial")}
        # gloo on GPUs also holds the caller's k, v on the GPU: compare the ring's own buffers
        held_ok = all(all(h.get(k) == v for k, v in expected.items()) for h in run.held_bytes)
        peaks = [p for p in run.peak_bytes if p]
        waits = [sum(s["wait_ms"] for s in tl) for tl in run.timelines]
        computes = [sum(s["compute_ms"] for s in tl) for tl in run.timelines]
        peaks_ok = len(peaks) == world_size or SMOKE
        check(f"{name}: masks, bytes held", masks_ok and held_ok and peaks_ok,
              f"peak MiB {[round(p / 2**20) for p in peaks]}, compute ms "
              f"{[round(c, 2) for c in computes]}, wait ms {[round(w, 2) for w in waits]}")


def failure(world_size: int) -> None:
    start = time.monotonic()
    try:
        run_ring(workers.fail_on_rank, world_size, {"rank": 1}, timeout_s=60, wall_s=120)
        check("failing rank", False, "no error raised")
    except RingError as err:
        took = time.monotonic() - start
        check("failing rank reported", err.rank == 1 and "rank 1" in str(err) and took < 90,
              f"{took:.1f} s: {str(err).splitlines()[0]}")


def bench(world_size: int, cap: float, lengths: list[int]) -> None:
    start = time.monotonic()
    if SMOKE:
        result = bench_ring(world_size, lengths=[32, 64], heads=2, head_dim=16, repeats=1,
                            allow_cpu=True)
        path = save_ring_bench(result, ring_record_path(world_size, folder=tempfile.gettempdir()))
    else:
        result = bench_ring(world_size, lengths=lengths, memory_cap_gib=cap, repeats=3,
                            timeout_s=300, wall_s=420)
        path = save_ring_bench(result, ring_record_path(world_size))  # the package's records
    ctx = result.context
    speed = [r for r in result.results if r.unit == "TFLOP/s"]
    print(format_table(speed, baseline=speed[0].provider if speed else "1 GPU"))
    print(format_table([r for r in result.results if r.unit == "GiB peak"]))
    print("waiting: " + ", ".join(f"{r.problem} {r.provider_params['layout']} {r.value:.1f}%"
                                  for r in result.results if r.unit == "% waiting"))
    print(f"longest N: one GPU {int(ctx['longest_one_gpu'])}, ring {int(ctx['longest_ring'])} "
          f"(cap {cap} GiB); computed for {ctx['gpu_memory_gib']:.0f} GiB: "
          f"{int(ctx['computed_longest_one_gpu'])} / {int(ctx['computed_longest_ring'])}")
    check(f"bench_ring W={world_size} saved {path}", bool(speed) and ctx["longest_ring"] > 0,
          f"{time.monotonic() - start:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--memory-cap-gib", type=float, default=6.0)
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="the bench's sequence lengths, increasing (default 16k to 768k)")
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args()
    global SMOKE
    SMOKE = args.cpu_smoke
    gpus = torch.cuda.device_count() if teachkit.ON_GPU else 0
    print(teachkit.describe(), f"| {gpus} GPU(s)", flush=True)
    if SMOKE:
        gpus = 4
    if gpus < 2:
        print("FAIL this check needs at least 2 CUDA GPUs")
        return 1
    world_size = args.world_size or (4 if gpus >= 4 else 2)
    lengths = args.lengths or [2**14, 2**15, 2**16, 2**17, 3 * 2**16, 2**18, 3 * 2**17, 2**19,
                               3 * 2**18]
    steps = [("correctness over NCCL", lambda: correctness(world_size, "gloo" if SMOKE else None)),
             ("gloo on GPUs", lambda: correctness(2, "gloo", every_case=False)),
             ("failure", lambda: failure(world_size))]
    if not args.skip_bench:
        steps.append(("bench", lambda: bench(world_size, args.memory_cap_gib, lengths)))
    t0 = time.monotonic()
    for name, step in steps:
        try:
            step()
        except Exception:
            check(name, False, traceback.format_exc(limit=3).strip().splitlines()[-1])
            traceback.print_exc()
    print(f"{'FAILED: ' + ', '.join(FAILURES) if FAILURES else 'all checks passed'} "
          f"({time.monotonic() - t0:.0f} s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
