"""GPU check of FlashAttention's backward pass (notebook 12): run from the repository root on a
CUDA machine with `python gpu_checks/backward_gpu.py`.

1. gradients of `flash_attention` against float64 autograd at GPU sizes: fp16, bf16 and fp32,
   causal and not, lengths no tile divides, grouped-query heads, a loss that uses the lse;
2. determinism (under `torch.use_deterministic_algorithms(True)` two backward passes agree bit for
   bit; the default, whose fused dQ on sm_90 sums in any order, agrees to rounding) and memory:
   the peak of a forward plus backward beyond the inputs grows linearly in L;
3. with `--sweep`, the backward tiles: each kernel's candidates (tiles, warps, stages) timed with
   the other kernel's fixed at the table's entry, on one problem per head dim (fp16, causal and
   not), fastest first, to set the table of `teachkit.kernels.flash_backward`;
4. with `--record`, the records notebooks 08 and 12 read: `attention_backward_<device>.json`
   (`python -m teachkit.bench attention --backward` at L = 1k, 4k, 16k beside SDPA's flash and
   cuDNN backends, with the one-loop atomic-dQ variant), `attention_gqa_<device>.json`
   (`--kv-heads 32 8 4`, the forward with grouped-query heads) and
   `attention_steps_<device>.json` (`--steps`, the ladder).
Exits 1 on any failed check, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def check_gradients() -> bool:
    import torch

    from teachkit.compare import attention_reference, relative_error
    from teachkit.kernels import flash_attention

    ok = True
    tolerance = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 4e-2}
    cases = [(2, 8, 8, 1000, 1000, 64), (1, 8, 2, 1531, 2049, 128), (1, 4, 4, 777, 300, 64),
             (1, 4, 1, 64, 4096, 128)]
    for B, H, H_kv, L, S, D in cases:
        for dtype in tolerance:
            for causal in (False, True):
                q = torch.randn(B, H, L, D, device="cuda", dtype=dtype, requires_grad=True)
                k, v = (torch.randn(B, H_kv, S, D, device="cuda", dtype=dtype,
                                    requires_grad=True) for _ in range(2))
                do = torch.randn(B, H, L, D, device="cuda", dtype=dtype)
                out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
                grads = torch.autograd.grad((out.float() * do.float()).sum() + lse.sum(),
                                            (q, k, v))
                leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
                ref_out, ref_lse = attention_reference(*leaves, causal)
                want = torch.autograd.grad((ref_out * do.double()).sum() + ref_lse.sum(), leaves)
                errs = [relative_error(g, w) for g, w in zip(grads, want, strict=True)]
                del q, k, v, do, out, lse, grads, leaves, ref_out, ref_lse, want
                good = max(errs) < tolerance[dtype]
                ok &= good
                print(f"{'ok  ' if good else 'FAIL'} B={B} H={H}/{H_kv} L={L} S={S} D={D} "
                      f"{str(dtype)[6:]:8} causal={causal!s:5} dq {errs[0]:.1e} dk {errs[1]:.1e} "
                      f"dv {errs[2]:.1e}")
    return ok


def check_determinism_and_memory() -> bool:
    import torch

    from teachkit.compare import relative_error
    from teachkit.kernels import flash_attention

    q, k, v = (torch.randn(2, 8, 2048, 64, device="cuda", dtype=torch.float16,
                           requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)
    fast = torch.autograd.grad(flash_attention(q, k, v, causal=True), (q, k, v), do)
    torch.use_deterministic_algorithms(True)
    try:
        first = torch.autograd.grad(flash_attention(q, k, v, causal=True), (q, k, v), do)
        second = torch.autograd.grad(flash_attention(q, k, v, causal=True), (q, k, v), do)
    finally:
        torch.use_deterministic_algorithms(False)
    same = all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    print(f"{'ok  ' if same else 'FAIL'} with torch.use_deterministic_algorithms(True), two "
          "backward passes agree bit for bit")
    # the default (on sm_90, dQ added by TMA in any order) agrees with it to rounding
    gap = max(relative_error(a, b) for a, b in zip(fast, first, strict=True))
    close = gap < 1e-3
    print(f"{'ok  ' if close else 'FAIL'} the default backward against the deterministic one: "
          f"{gap:.1e}")
    same = same and close
    peaks = []
    for L in (2048, 4096, 8192):
        q, k, v = (torch.randn(1, 8, L, 64, device="cuda", dtype=torch.float16,
                               requires_grad=True) for _ in range(3))
        do = torch.randn_like(q)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        torch.autograd.grad(flash_attention(q, k, v), (q, k, v), do)
        torch.cuda.synchronize()
        peaks.append((torch.cuda.max_memory_allocated() - base) / 2**20)
    linear = all(abs(b / a - 2) < 0.2 for a, b in zip(peaks, peaks[1:], strict=False))
    print(f"{'ok  ' if linear else 'FAIL'} forward + backward peak beyond the inputs at L = 2k, "
          f"4k, 8k: " + ", ".join(f"{p:.1f} MiB" for p in peaks) + " (doubles with L)")
    return same and linear


KV_TILES = [(m, n, w, s) for m, n in ((32, 64), (32, 128), (64, 64), (64, 128))
            for w in (4, 8) for s in (2, 3, 4)]
"""The dK/dV kernel's candidates for --sweep: (kv_block_m, kv_block_n, warps, stages)."""
Q_TILES = [(m, n, w, s) for m, n in ((64, 32), (64, 64), (128, 32), (128, 64))
           for w in (4, 8) for s in (2, 3, 4)]
"""The dQ kernel's candidates for --sweep: (q_block_m, q_block_n, warps, stages)."""


def sweep_backward_tiles(head_dims: tuple[int, ...] = (64, 128)) -> None:
    """Each kernel's candidates timed with the other kernel's tiles fixed at the table's entry:
    the differences between rows are the swept kernel's own."""
    import torch
    import triton.testing

    from teachkit.kernels.flash import flash_attention
    from teachkit.kernels.flash_backward import backward_config, flash_backward

    for D in head_dims:
        table = backward_config(D, torch.float16, torch.cuda.get_device_capability())
        for causal in (False, True):
            q, k, v, do = (torch.randn(4, 32, 4096, D, device="cuda", dtype=torch.float16)
                           for _ in range(4))
            out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
            flops = 2.5 * 4 * 4 * 32 * 4096 * 4096 * D * (0.5 if causal else 1.0)
            for kernel, tiles, fields in (
                    ("dK/dV", KV_TILES, ("kv_block_m", "kv_block_n", "kv_warps", "kv_stages")),
                    ("dQ", Q_TILES, ("q_block_m", "q_block_n", "q_warps", "q_stages"))):
                timed = []
                for tile in tiles:
                    cfg = table._replace(**dict(zip(fields, tile, strict=True)))
                    call = functools.partial(flash_backward, do, q, k, v, out, lse,
                                             causal, D ** -0.5, config=cfg)
                    try:
                        ms = triton.testing.do_bench(call, warmup=5, rep=20)
                    except Exception:  # noqa: BLE001 - out of resources: not a candidate
                        continue
                    timed.append((flops / ms / 1e9, tile))
                timed.sort(key=lambda t: -t[0])
                print(f"D={D} causal={causal} {kernel} (block_m, block_n, warps, stages): "
                      + "; ".join(f"{t:.0f} {c}" for t, c in timed[:4]), flush=True)


def record() -> int:
    from teachkit.bench.attention_backward import DETERMINISTIC, backward_providers
    from teachkit.bench.attention_problems import TRITON_ONLY
    from teachkit.bench.core import device_slug
    from teachkit.device import device_name

    slug = device_slug(device_name())
    # on a Hopper GPU also the backward without fused dQ and the Triton kernels alone, where
    # flash_attention runs the Gluon kernel
    hopper = [DETERMINISTIC, TRITON_ONLY] if TRITON_ONLY in backward_providers() else []
    commands = [
        # the problems of the README's table (B = 16 / 4 / 1), against SDPA's flash and cuDNN:
        # about 5 minutes on an H100, where every length and backend takes twice that
        # (and the course's kernels with FlashAttention-2's one loop and atomic dQ)
        ["attention", "--backward", "--lengths", "1024", "4096", "16384",
         "--providers", "teachkit flash", *hopper, "teachkit flash, atomic dQ", "sdpa flash",
         "sdpa cudnn", "--json", f"teachkit/benchmarks/attention_backward_{slug}.json",
         "--plot", f"12_attention_backward_{slug}"],
        # grouped-query heads beside multi-head, the forward at L = 4096 (notebook 12)
        ["attention", "--lengths", "4096", "--kv-heads", "32", "8", "4", "--providers",
         "teachkit flash", "sdpa flash", "sdpa cudnn", "--json",
         f"teachkit/benchmarks/attention_gqa_{slug}.json"],
        ["attention", "--steps", "--json", f"teachkit/benchmarks/attention_steps_{slug}.json"],
    ]
    for args in commands:
        print("python -m teachkit.bench " + " ".join(args), flush=True)
        done = subprocess.run([sys.executable, "-m", "teachkit.bench", *args], cwd=ROOT)
        if done.returncode:
            return done.returncode
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="time the backward tiles")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128], metavar="D",
                        help="the head dims --sweep times (default 64 128)")
    parser.add_argument("--skip-checks", action="store_true",
                        help="go straight to --sweep / --record (the checks ran already)")
    parser.add_argument("--record", action="store_true", help="write the benchmark records")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: this script checks the backward pass on a GPU")
        return 2
    import teachkit

    print(teachkit.describe())
    start = time.perf_counter()
    ok = args.skip_checks or (check_gradients() & check_determinism_and_memory())
    if args.sweep:
        sweep_backward_tiles(tuple(args.head_dims))
    status = 0 if ok else 1
    if args.record and ok:
        status = record()
    print(f"{time.perf_counter() - start:.0f} s")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
