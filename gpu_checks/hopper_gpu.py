"""GPU check of the Gluon FlashAttention forward for Hopper (`teachkit.kernels.flash_hopper`): run
from the repository root on an sm_90 GPU with `python gpu_checks/hopper_gpu.py`.

1. `flash_attention_hopper` against float64 attention: float16 and bfloat16, causal and not,
   head dims 64 and 128, grouped-query heads, L != S, a negative scale, the lse; and bit for bit
   the same output with and without the overlap;
2. `flash_attention` at D = 128: the Gluon kernel's output bit for bit where `hopper_preferred`
   sends the inputs to it, and its gradients against float64 autograd (grouped heads, L != S).

Its speed is timed by `python -m teachkit.bench attention`, where the providers `teachkit triton`,
`teachkit hopper` and `teachkit hopper, no overlap` appear on an sm_90 GPU.
Exits 1 on any failed check, 2 without an sm_90 GPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def check_correctness() -> bool:
    import torch

    from teachkit.compare import attention_reference, relative_error
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
                    want, want_lse = attention_reference(q, k, v, causal, scale)
                    err = relative_error(out, want)
                    lse_err = (lse.double() - want_lse).abs().max().item()
                    same = torch.equal(out, plain)
                    good = err < (1e-2 if dtype == torch.bfloat16 else 2e-3) and lse_err < 1e-3
                    good &= same
                    ok &= good
                    print(f"{'ok  ' if good else 'FAIL'} B={B} H={H}/{H_kv} L={L} S={S} D={D} "
                          f"{str(dtype)[6:]:8} causal={causal!s:5} scale={scale} out {err:.1e} "
                          f"lse {lse_err:.1e} overlap off same bits: {same}", flush=True)
    return ok


def check_dispatch() -> bool:
    """``flash_attention`` at D = 128: the Gluon kernel's output bit for bit where
    ``hopper_preferred`` says so, and gradients (the Triton backward from the Gluon kernel's lse)
    against float64 autograd."""
    import torch

    from teachkit.compare import attention_reference, relative_error
    from teachkit.kernels import flash_attention
    from teachkit.kernels.flash_hopper import flash_attention_hopper, hopper_preferred

    ok = True
    for B, H, H_kv, L, S in [(2, 8, 8, 1024, 1024), (1, 8, 2, 384, 640), (1, 4, 4, 2048, 512)]:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                q = torch.randn(B, H, L, 128, device="cuda", dtype=dtype)
                k, v = (torch.randn(B, H_kv, S, 128, device="cuda", dtype=dtype)
                        for _ in range(2))
                preferred = hopper_preferred(q, k, v)
                same = torch.equal(flash_attention(q, k, v, causal=causal),
                                   flash_attention_hopper(q, k, v, causal))
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                wants = [t.double().requires_grad_() for t in (q, k, v)]
                dout = torch.randn_like(q)
                flash_attention(*leaves, causal=causal).backward(dout)
                attention_reference(*wants, causal)[0].backward(dout.double())
                errs = [relative_error(g.grad, w.grad) for g, w in zip(leaves, wants, strict=True)]
                good = preferred and same and max(errs) < (2e-2 if dtype == torch.bfloat16
                                                           else 5e-3)
                ok &= good
                print(f"{'ok  ' if good else 'FAIL'} flash_attention B={B} H={H}/{H_kv} L={L} "
                      f"S={S} D=128 {str(dtype)[6:]:8} causal={causal!s:5} Gluon forward: "
                      f"{preferred and same}; dq, dk, dv errors "
                      + ", ".join(f"{e:.1e}" for e in errs), flush=True)
    return ok


def main() -> int:
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("needs an sm_90 (Hopper) GPU")
        return 2
    ok = check_correctness()
    ok &= check_dispatch()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
