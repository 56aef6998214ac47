r"""The first FlashAttention kernel of notebook 08: correct before fast.

Everything the fast kernel (:mod:`teachkit.kernels.flash`) does, written the plainest way: every
key block is loaded and masked (keys past ``S`` and, if causal, above the diagonal), the
exponentials are natural ``exp`` of scores multiplied by the scale, and each block's product is
added to the rescaled accumulator. It computes the same numbers; notebook 08 measures what each
of the fast kernel's changes buys.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..device import INTERPRETED
from ..validation import require_no_grad
from .attention_inputs import check_inputs

__all__ = ["flash_attention_simple", "flash_simple_kernel"]


@triton.jit
def flash_simple_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    H, L, S, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, DOT_FP32: tl.constexpr,
):
    """Program ``(query block, b * H + h)``: ``BLOCK_M`` rows of the output of one (batch, head).
    ``Q`` and ``O`` are ``(B, H, L, HEAD_DIM)``, ``K`` and ``V`` ``(B, H, S, HEAD_DIM)``, ``LSE``
    ``(B, H, L)`` float32 (natural log); every ``(BLOCK_N, HEAD_DIM)`` key block is loaded, masked
    and folded into the running ``m``, ``l`` ``(BLOCK_M,)`` and ``acc`` ``(BLOCK_M, HEAD_DIM)``."""
    # This program: query rows [start_m, start_m + BLOCK_M) of one (batch, head).
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh
                + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < L, other=0.0)
    if DOT_FP32:  # the interpreter multiplies bfloat16 tiles wrongly: multiply in float32
        q = q.to(tl.float32)

    # The running statistics of notebook 07, one per query row, and the unnormalised output.
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    for start_n in range(0, S, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + b * stride_kb + h * stride_kh
                    + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=cols[:, None] < S, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh
                    + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=cols[:, None] < S, other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (BLOCK_M, BLOCK_N)
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with no key yet: no NaN
        p = tl.exp(s - shift[:, None])
        alpha = tl.exp(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    row_ok = offs_m < L
    tl.store(LSE + bh.to(tl.int64) * L + offs_m, m_i + tl.log(l_i), mask=row_ok)
    tl.store(O + b * stride_ob + h * stride_oh
             + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             out.to(O.dtype.element_ty), mask=row_ok[:, None])


def flash_attention_simple(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    scale: float | None = None, block_m: int = 64, block_n: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention by the plain first kernel: ``(out, lse)``, as
    ``teachkit.kernels.flash_attention(..., return_lse=True)`` returns them.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(B, H, L, D)`` and ``(B, H, S, D)``, float16, bfloat16 or float32, one head dim from
        :data:`teachkit.kernels.flash.HEAD_DIMS`; at least one key (``S >= 1``).
    causal : bool
        Query ``i`` sees keys ``j <= i`` (top-left aligned).
    scale : float, optional
        Defaults to ``1/sqrt(D)``.
    block_m, block_n : int
        Query rows per program and keys per step (powers of two, at least 16). Under the
        interpreter both are 16.

    Examples
    --------
    >>> import torch, teachkit
    >>> q, k, v = (torch.randn(1, 2, 20, 16, device=teachkit.DEVICE) for _ in range(3))
    >>> out, lse = flash_attention_simple(q, k, v, causal=True)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> teachkit.relative_error(out, ref) < 1e-2
    True
    """
    require_no_grad(("q", q), ("k", k), ("v", v), kernel="flash_attention_simple",
                    reference="teachkit.attention.blockwise_attention")
    check_inputs(q, k, v)
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"flash_attention_simple needs k and v with the {q.shape[1]} heads of "
                         "q; teachkit.kernels.flash_attention takes grouped-query attention")
    B, H, L, D = q.shape
    S = k.shape[2]
    if S == 0:
        raise ValueError("flash_attention_simple needs at least one key; "
                         "teachkit.kernels.flash_attention handles S = 0")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if INTERPRETED:
        block_m = block_n = 16
    out = torch.empty_like(q)
    lse = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    if out.numel():
        grid = (triton.cdiv(L, block_m), B * H)
        flash_simple_kernel[grid](
            q, k, v, out, lse,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            H, L, S, scale,
            CAUSAL=bool(causal), HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n,
            PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
            DOT_FP32=INTERPRETED and q.dtype == torch.bfloat16, num_warps=4, num_stages=2,
        )
    return out, lse

