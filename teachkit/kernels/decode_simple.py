r"""The first split-KV decoding kernel of notebook 09: the idea alone, before the full one.

Decoding attends one new token of every sequence to a cache of ``S`` keys and values.
FlashAttention's grid, one program per (batch, head), holds ``B * H`` programs: 32 for one
sequence of a 32-head model, on a GPU with 132 SMs, each walking all ``S`` keys alone.

Split-KV gives every (batch, head) ``num_splits`` programs instead, each over one range of the
keys, in two phases:

1. :func:`decode_simple_split_kernel`: program ``(split, b * H + h)`` folds its keys into the
   online ``(m, l, acc)`` of notebook 07 and writes a *partial* result, the output normalised
   over its own keys and their log-sum-exp;
2. :func:`decode_simple_merge_kernel`: program ``b * H + h`` merges the partials of its row with
   the rule of notebook 04 (:func:`teachkit.attention.merge_partials`, for any number of parts)::

       lse = log(sum_s exp(lse_s)),      out = sum_s exp(lse_s - lse) * out_s.

This kernel keeps only that. Its cache is contiguous, ``(B, H, S, D)``; every sequence has one
query (``Lq = 1``), one query head per cache head, and all ``S`` keys. With one query row a
program's scores are a matrix-vector product, written as a product and a sum over ``D``.

:func:`teachkit.kernels.decode.decode_attention`, the full kernel, adds what serving needs:

* ``cache_seqlens``: sequences of different lengths in one batch; a split past its sequence's
  end writes ``lse = -inf`` and weighs nothing;
* several new tokens per sequence (``Lq > 1``, speculative decoding) under the causal mask
  aligned to the cache's end, with ``tl.dot`` on tiles of query rows;
* grouped-query attention (``H = G * H_kv``): one program serves the ``G`` query heads of a
  cache head, so every key is read once per cache head;
* a paged cache, ``block_table`` into pools of pages, as vLLM keeps it;
* speed: ``exp2`` with the scale folded in, key blocks that need no mask loaded without one,
  per-GPU block sizes and pipeline depths, and a number of splits chosen from the SM count.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device import INTERPRETED
from ..validation import (
    require_attention_inputs,
    require_kernel_tensor,
    require_positive_int,
    resolve_scale,
)
from .decode import MAX_SPLITS
from .flash import HEAD_DIMS

__all__ = ["decode_attention_simple", "decode_simple_merge_kernel", "decode_simple_split_kernel"]

@triton.jit
def decode_simple_split_kernel(
    Q, K, V, O_PART, LSE_PART,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    H, S, keys_per_split, scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Phase 1, program ``(split, b * H + h)``: the one query of ``(b, h)`` against keys
    ``split * keys_per_split`` up to the next split's first key (or ``S``).

    Shapes: ``Q`` ``(B, H, 1, HEAD_DIM)``; ``K`` and ``V`` ``(B, H, S, HEAD_DIM)``; ``O_PART``
    ``(num_splits, B * H, HEAD_DIM)`` and ``LSE_PART`` ``(num_splits, B * H)``, float32 and
    contiguous. The program holds ``q`` and ``acc`` ``(HEAD_DIM,)``, the scalars ``m`` and
    ``l``, and one ``(BLOCK_N, HEAD_DIM)`` block of keys and of values at a time."""
    split = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d * stride_qd).to(tl.float32)

    # This split's keys: [start, end); a split past the last key has none.
    start = split * keys_per_split
    end = tl.minimum(start + keys_per_split, S)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh

    m_i = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)  # running max, a scalar
    l_i = tl.sum(tl.zeros([BLOCK_N], tl.float32), 0)  # running sum of exp(s - m_i)
    acc = tl.zeros([HEAD_DIM], tl.float32)  # running sum of exp(s - m_i) * v
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + offs_n
        in_split = cols < end
        # (BLOCK_N, HEAD_DIM) keys and values; rows past the split's end read as 0
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=in_split[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=in_split[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], 1) * scale  # (BLOCK_N,) scores: q . k_j
        s = tl.where(in_split, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # all scores -inf so far: no NaN
        alpha = tl.exp(m_i - shift)  # rescales what was folded under the old maximum
        p = tl.exp(s - shift)  # (BLOCK_N,)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new

    # The partial: out normalised over this split's keys, and their lse (-inf if it has none).
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe  # acc is 0 where l is
    lse = tl.where(empty, float("-inf"), m_i + tl.log(l_safe))
    row = split.to(tl.int64) * tl.num_programs(1) + bh
    tl.store(O_PART + row * HEAD_DIM + offs_d, out)
    tl.store(LSE_PART + row, lse)


@triton.jit
def decode_simple_merge_kernel(
    O_PART, LSE_PART, O, LSE,
    num_splits,
    HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr,
):
    """Phase 2, program ``b * H + h``: merge the ``num_splits`` partials of one row by their lse.

    Shapes: ``O_PART`` ``(num_splits, B * H, HEAD_DIM)`` and ``LSE_PART``
    ``(num_splits, B * H)``, float32; ``O`` ``(B * H, HEAD_DIM)`` and ``LSE`` ``(B * H,)``,
    contiguous. The program loads ``(SPLITS, HEAD_DIM)`` partials (``SPLITS`` a power of two
    at least ``num_splits``; the rows past ``num_splits`` weigh 0)."""
    bh = tl.program_id(0).to(tl.int64)
    rows = tl.num_programs(0)
    offs_s = tl.arange(0, SPLITS)
    offs_d = tl.arange(0, HEAD_DIM)
    used = offs_s < num_splits
    lse = tl.load(LSE_PART + offs_s * rows + bh, mask=used, other=float("-inf"))  # (SPLITS,)
    part = tl.load(O_PART + (offs_s[:, None] * rows + bh) * HEAD_DIM + offs_d[None, :],
                   mask=used[:, None], other=0.0)  # (SPLITS, HEAD_DIM)
    m = tl.max(lse, 0)  # -inf only when every score of the row is -inf
    shift = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - shift)  # exp(lse_s - m): at most 1, 0 for an empty split
    total = tl.sum(w, 0)
    t_safe = tl.where(total == 0.0, 1.0, total)  # no key seen: out 0 and lse -inf, as SDPA
    out = tl.sum(w[:, None] * part, 0) / t_safe
    tl.store(O + bh * HEAD_DIM + offs_d, out.to(O.dtype.element_ty))
    tl.store(LSE + bh, tl.where(total == 0.0, float("-inf"), shift + tl.log(t_safe)))


def _validate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a ``TypeError`` or ``ValueError`` naming the argument for inputs the kernels do not
    take."""
    require_attention_inputs(q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, length, D), got shape {tuple(t.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):  # dtype, device, grad, a world that runs
        require_kernel_tensor(t, name, "decode_attention_simple",
                              "the torch reference teachkit.attention.naive_attention")
    if q.shape[2] != 1:
        raise ValueError(f"q must hold one query per sequence, shape (B, H, 1, D), got "
                         f"{tuple(q.shape)}; teachkit.kernels.decode_attention takes several")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"the head dim (q's last axis) must be one of {HEAD_DIMS}, got "
                         f"{q.shape[-1]}")
    if k.shape[2] == 0:
        raise ValueError("k and v must hold at least one key (S >= 1), got S = 0")


def decode_attention_simple(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_splits: int = 4,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention of one new token per sequence to a contiguous cache, by split-KV: ``(out, lse)``.

    Parameters
    ----------
    q : torch.Tensor
        ``(B, H, 1, D)``: one query per sequence and head; float16, bfloat16 or float32, ``D``
        one of :data:`teachkit.kernels.flash.HEAD_DIMS`.
    k, v : torch.Tensor
        ``(B, H, S, D)``, ``S >= 1``: the cache, every key visible to the query; q's dtype and
        device, any strides.
    num_splits : int
        Programs per (batch, head), each over ``ceil(S / num_splits)`` keys; at most
        :data:`teachkit.kernels.decode.MAX_SPLITS` (splits past the last key are empty).
    scale : float, optional
        Multiplies the scores; defaults to ``1/sqrt(D)``.

    Returns
    -------
    out : torch.Tensor
        ``(B, H, 1, D)`` in q's dtype: ``softmax(q k^T * scale) v``.
    lse : torch.Tensor
        ``(B, H, 1)`` float32: the natural log-sum-exp of each row's scores.

    Examples
    --------
    >>> import torch, teachkit
    >>> q = torch.randn(2, 3, 1, 16, device=teachkit.DEVICE)
    >>> k, v = (torch.randn(2, 3, 50, 16, device=teachkit.DEVICE) for _ in range(2))
    >>> out, lse = decode_attention_simple(q, k, v, num_splits=3)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    >>> teachkit.relative_error(out, ref) < 1e-5
    True
    """
    _validate(q, k, v)
    require_positive_int(num_splits, "num_splits")
    if num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits must be at most {MAX_SPLITS}, got {num_splits}")
    B, H, _, D = q.shape
    S = k.shape[2]
    scale = resolve_scale(scale, D)
    block_n = 16 if INTERPRETED else 64
    keys_per_split = triton.cdiv(S, num_splits)
    out = torch.empty((B, H, 1, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, 1), dtype=torch.float32, device=q.device)
    if B * H == 0:
        return out, lse

    # Phase 1: every (split, batch * head) writes its partial.
    o_part = torch.empty((num_splits, B * H, D), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((num_splits, B * H), dtype=torch.float32, device=q.device)
    decode_simple_split_kernel[(num_splits, B * H)](
        q, k, v, o_part, lse_part,
        q.stride(0), q.stride(1), q.stride(3),
        *k.stride(), *v.stride(),
        H, S, keys_per_split, scale,
        HEAD_DIM=D, BLOCK_N=block_n, num_warps=4, num_stages=2,
    )
    # Phase 2: every batch * head merges its partials.
    decode_simple_merge_kernel[(B * H,)](
        o_part, lse_part, out, lse, num_splits,
        HEAD_DIM=D, SPLITS=triton.next_power_of_2(num_splits), num_warps=4, num_stages=1,
    )
    return out, lse
