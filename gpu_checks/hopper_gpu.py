"""GPU check of the Gluon FlashAttention forward for Hopper (`teachkit.kernels.flash_hopper`): run
from the repository root on an sm_90 GPU with `python gpu_checks/hopper_gpu.py`.

1. `flash_attention_hopper` against float64 attention: float16 and bfloat16, causal and not,
   head dims 64 and 128, grouped-query heads, L != S, a negative scale, the lse; bit for bit
   the same output with and without the overlap, and on a persistent grid; at D = 64 the
   256-key blocks too;
2. `flash_attention` at D = 128, and at D = 64 from 1024 keys a query tile reads (S, or
   min(L, S) with the causal mask): the Gluon kernel's output bit for bit where
   `hopper_preferred` sends the inputs to it (and the Triton kernel's below that at D = 64), and
   its gradients against float64 autograd (grouped heads, L != S).

Its speed is timed by `python -m teachkit.bench attention`, where the providers `teachkit triton`
and the `teachkit hopper` ones (no overlap, wide, persistent) appear on an sm_90 GPU.
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
             (2, 4, 1, 128, 1024, 64), (4, 16, 8, 1152, 1280, 128), (4, 16, 16, 896, 1024, 64)]
    for B, H, H_kv, L, S, D in cases:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                for scale in (None, -0.3):
                    q = torch.randn(B, H, L, D, device="cuda", dtype=dtype)
                    k, v = (torch.randn(B, H_kv, S, D, device="cuda", dtype=dtype)
                            for _ in range(2))
                    out, lse = flash_attention_hopper(q, k, v, causal, scale, return_lse=True)
                    plain = flash_attention_hopper(q, k, v, causal, scale, overlap=False)
                    walked = flash_attention_hopper(q, k, v, causal, scale, persistent=True)
                    want, want_lse = attention_reference(q, k, v, causal, scale)
                    err = relative_error(out, want)
                    lse_err = (lse.double() - want_lse).abs().max().item()
                    same = torch.equal(out, plain) and torch.equal(out, walked)
                    tolerance = 1e-2 if dtype == torch.bfloat16 else 2e-3
                    good = err < tolerance and lse_err < 1e-3
                    good &= same
                    if D == 64:  # 256 keys a block, without the overlap
                        wide, wide_lse = flash_attention_hopper(
                            q, k, v, causal, scale, return_lse=True, overlap=False, block_n=256)
                        wide_err = relative_error(wide, want)
                        good &= wide_err < tolerance
                        good &= (wide_lse.double() - want_lse).abs().max().item() < 1e-3
                        same = f"{same}; 256 keys out {wide_err:.1e}"
                    ok &= good
                    print(f"{'ok  ' if good else 'FAIL'} B={B} H={H}/{H_kv} L={L} S={S} D={D} "
                          f"{str(dtype)[6:]:8} causal={causal!s:5} scale={scale} out {err:.1e} "
                          f"lse {lse_err:.1e} overlap off, persistent same bits: {same}",
                          flush=True)
    return ok


def check_dispatch() -> bool:
    """``flash_attention`` at D = 128 and 64: the Gluon kernel's output bit for bit where
    ``hopper_preferred`` says so (in the form ``hopper_form`` gives), the Triton kernel's
    where it does not (D = 64 below 1024 keys a query tile reads), and gradients (the Triton
    backward from the forward's lse) against float64 autograd."""
    import torch

    from teachkit.compare import attention_reference, relative_error
    from teachkit.kernels import flash_attention
    from teachkit.kernels.flash import table_config
    from teachkit.kernels.flash_hopper import flash_attention_hopper, hopper_form, hopper_preferred

    ok = True
    for B, H, H_kv, L, S, D in [
            (2, 8, 8, 1024, 1024, 128), (1, 8, 2, 384, 640, 128), (1, 4, 4, 2048, 512, 128),
            (1, 4, 2, 512, 4096, 64), (1, 4, 4, 4096, 4096, 64), (2, 8, 8, 1024, 1024, 64),
            (2, 8, 8, 512, 512, 64)]:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                # the Gluon kernel at D = 128; at D = 64 where a query tile reads 1024 keys
                expect = D == 128 or (min(L, S) if causal else S) >= 1024
                q = torch.randn(B, H, L, D, device="cuda", dtype=dtype)
                k, v = (torch.randn(B, H_kv, S, D, device="cuda", dtype=dtype)
                        for _ in range(2))
                preferred = hopper_preferred(q, k, v, causal)
                if expect:
                    form = hopper_form(D, L, S, causal)
                    kernel_out = flash_attention_hopper(q, k, v, causal, overlap=form.overlap,
                                                        block_n=form.block_n)
                else:
                    kernel_out = flash_attention(q, k, v, causal=causal,
                                                 config=table_config(q, causal))
                same = torch.equal(flash_attention(q, k, v, causal=causal), kernel_out)
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                wants = [t.double().requires_grad_() for t in (q, k, v)]
                dout = torch.randn_like(q)
                flash_attention(*leaves, causal=causal).backward(dout)
                attention_reference(*wants, causal)[0].backward(dout.double())
                errs = [relative_error(g.grad, w.grad) for g, w in zip(leaves, wants, strict=True)]
                good = preferred == expect and same and max(errs) < (
                    2e-2 if dtype == torch.bfloat16 else 5e-3)
                ok &= good
                print(f"{'ok  ' if good else 'FAIL'} flash_attention B={B} H={H}/{H_kv} L={L} "
                      f"S={S} D={D} {str(dtype)[6:]:8} causal={causal!s:5} "
                      f"{'Gluon' if expect else 'Triton'} forward: "
                      f"{preferred == expect and same}; dq, dk, dv errors "
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
