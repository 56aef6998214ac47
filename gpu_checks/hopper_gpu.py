"""GPU check of the Gluon FlashAttention forward for Hopper (`teachkit.kernels.flash_hopper`): run
from the repository root on an sm_90 GPU with `python gpu_checks/hopper_gpu.py`.

1. `flash_attention_hopper` against float64 attention: float16 and bfloat16, causal and not,
   head dims 64 and 128, grouped-query heads, L != S, a negative scale, the lse; and bit for bit
   the same output with and without the overlap;
2. a timing table on the forward record's problems (H = 32; B = 16 / 4 / 1 at L = S = 1k / 4k /
   16k; fp16), measured as `python -m teachkit.bench attention` measures (1 s of untimed calls,
   then the median of `do_bench`, the L2 cache cleared before every call), side by side in one
   run with the course's Triton kernel, SDPA's cuDNN and flash backends: TFLOP/s and the ratio
   to cuDNN. `--lengths` and `--head-dims` choose the problems.
Exits 1 on any failed check, 2 without an sm_90 GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def check_correctness() -> bool:
    import torch

    from teachkit.compare import relative_error
    from teachkit.kernels.flash_hopper import flash_attention_hopper

    ok = True
    cases = [(2, 4, 4, 256, 256, 64), (1, 8, 2, 384, 640, 128), (1, 4, 4, 512, 256, 128),
             (2, 4, 1, 128, 1024, 64)]
    for B, H, H_kv, L, S, D in cases:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                for scale in (None, -0.3):
                    q = torch.randn(B, H, L, D, device="cuda", dtype=dtype)
                    k, v = (torch.randn(B, H_kv, S, D, device="cuda", dtype=dtype)
                            for _ in range(2))
                    out, lse = flash_attention_hopper(q, k, v, causal, scale, return_lse=True)
                    plain = flash_attention_hopper(q, k, v, causal, scale, overlap=False)
                    group = H // H_kv
                    q64 = q.double()
                    k64, v64 = (t.double().repeat_interleave(group, 1) for t in (k, v))
                    s = q64 @ k64.transpose(-2, -1) * (D ** -0.5 if scale is None else scale)
                    if causal:
                        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool,
                                                      device="cuda").tril(), float("-inf"))
                    want = torch.softmax(s, -1) @ v64
                    err = relative_error(out, want)
                    lse_err = (lse.double() - torch.logsumexp(s, -1)).abs().max().item()
                    same = torch.equal(out, plain)
                    good = err < (1e-2 if dtype == torch.bfloat16 else 2e-3) and lse_err < 1e-3
                    good &= same
                    ok &= good
                    print(f"{'ok  ' if good else 'FAIL'} B={B} H={H}/{H_kv} L={L} S={S} D={D} "
                          f"{str(dtype)[6:]:8} causal={causal!s:5} scale={scale} out {err:.1e} "
                          f"lse {lse_err:.1e} overlap off same bits: {same}", flush=True)
    return ok


def time_table(lengths: list[int], head_dims: list[int]) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from teachkit.bench import SETTLE_MS, time_ms
    from teachkit.bench.attention import attention_flops, batch_for
    from teachkit.device import device_name
    from teachkit.kernels import flash_attention
    from teachkit.kernels.flash_hopper import flash_attention_hopper

    def sdpa(backend: SDPBackend):
        def run(q, k, v, c):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=c)
        return run

    providers = {
        "teachkit flash": lambda q, k, v, c: flash_attention(q, k, v, causal=c),
        "hopper (Gluon)": lambda q, k, v, c: flash_attention_hopper(q, k, v, c),
        "hopper, no overlap": lambda q, k, v, c: flash_attention_hopper(q, k, v, c,
                                                                        overlap=False),
        "sdpa cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }
    print(f"{device_name()}, torch {torch.__version__}; TFLOP/s (ratio to SDPA cuDNN)")
    print("problem            | " + " | ".join(providers))
    for D in head_dims:
        for causal in (False, True):
            for L in lengths:
                B = batch_for(L)
                q, k, v = (torch.randn(B, 32, L, D, device="cuda", dtype=torch.float16)
                           for _ in range(3))
                flops = attention_flops(B, 32, L, L, D, causal)
                tflops = {}
                for name, fn in providers.items():
                    ms = time_ms(lambda fn=fn, a=(q, k, v, causal): fn(*a), settle_ms=SETTLE_MS)
                    tflops[name] = flops / ms / 1e9
                base = tflops["sdpa cudnn"]
                print(f"D={D:3} L={L:5} {'causal' if causal else 'full  '} | "
                      + " | ".join(f"{t:4.0f} ({t / base:.2f})" for t in tflops.values()),
                      flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--no-table", action="store_true", help="the checks only")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("needs an sm_90 (Hopper) GPU")
        return 2
    ok = check_correctness()
    if ok and not args.no_table:
        time_table(args.lengths, args.head_dims)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
