r"""Notebook 08's ladder: from the simple FlashAttention kernel to the fast one, one change a step.

:mod:`teachkit.kernels.flash_simple` and :mod:`teachkit.kernels.flash` compute the same numbers;
the fast kernel differs by several changes at once. This kernel makes each change a switch (a
``tl.constexpr``, so every combination compiles to its own code with nothing of the others), and
:data:`LADDER` turns them on one at a time, so a benchmark can measure what each one buys:

0. ``simple``: every key block is loaded and masked, natural ``exp`` of the scaled scores, each
   block's product added to the rescaled accumulator, programs in query-block order;
1. ``exp2``: scores times ``scale * log2(e)`` and ``exp2``, which is the GPU's native exponential
   (``exp`` costs a multiply more);
2. ``block kinds``: key blocks below the causal diagonal (and inside ``S``) loaded and used
   without a mask, blocks that cross it masked, blocks above it never loaded;
3. ``acc in dot``: the rescaled accumulator handed to ``tl.dot`` as its accumulator, so the
   tensor cores add the product into it (no separate addition);
4. ``heavy first``: with a causal mask, the query blocks that see the most keys start first, so
   the last wave of programs is short.

:data:`QK_AHEAD` is not a step but an experiment on the last one: the next key block's scores
computed before this block's softmax, the order in which FlashAttention-3 overlaps the two
inside a warpgroup. Notebook 08 compiles it for Hopper to see what Triton makes of it.

The remaining steps of the ladder are launches of :func:`teachkit.kernels.flash.flash_attention`
itself: the tile configuration measured for the GPU, and on Hopper the TMA loads of its table.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..device import INTERPRETED
from ..validation import require_bool, require_no_grad, resolve_scale
from .attention_inputs import check_inputs
from .flash import FlashConfig

__all__ = ["LADDER", "QK_AHEAD", "SIMPLE_TILES", "LadderStep", "flash_attention_ladder",
           "ladder_fold", "ladder_key_block", "ladder_kernel", "ladder_load", "ladder_scores",
           "ladder_unmasked_qk_ahead"]

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


class LadderStep(NamedTuple):
    """Which changes are on: each step of :data:`LADDER` turns on one more of the first four;
    ``qk_ahead`` is :data:`QK_AHEAD`'s experiment, off in every step."""

    exp2: bool
    block_kinds: bool
    acc_in_dot: bool
    heavy_first: bool
    qk_ahead: bool = False


SIMPLE_TILES = FlashConfig(64, 64, 4, 2)
"""The simple kernel's tiles, warps and stages: the ladder's default (only the switches change)."""

LADDER: dict[str, LadderStep] = {
    "simple": LadderStep(False, False, False, False),
    "exp2": LadderStep(True, False, False, False),
    "block kinds": LadderStep(True, True, False, False),
    "acc in dot": LadderStep(True, True, True, False),
    "heavy first": LadderStep(True, True, True, True),
}
"""The kernel's steps, in order; each adds one change to the step before."""

QK_AHEAD = LADDER["heavy first"]._replace(qk_ahead=True)
"""The last step with the unmasked key blocks' scores computed one block ahead
(:func:`ladder_unmasked_qk_ahead`): FlashAttention-3's order inside a warpgroup, written in the
source. Not a step of :data:`LADDER`: notebook 08 compiles it to see whether Triton overlaps the
softmax with the next product (it does not), and its tests check that it computes the same
numbers."""


@triton.jit
def ladder_scores(q, k, start_n, offs_m, offs_n, S, qk_scale,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """The scaled scores ``s`` ``(BLOCK_M, BLOCK_N)`` of the key block ``k`` ``(BLOCK_N, D)``
    at ``start_n``; in a ``MASKED`` block, ``-inf`` past ``S`` and (``CAUSAL``) above the
    diagonal."""
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
    if MASKED:
        cols = start_n + offs_n
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
    return s


@triton.jit
def ladder_fold(acc, l_i, m_i, s, v, v_dtype: tl.constexpr, EXP2: tl.constexpr,
                ACC_IN_DOT: tl.constexpr, PRECISION: tl.constexpr):
    """Fold the scores ``s`` of one key block and its values ``v`` ``(BLOCK_N, D)`` into
    ``(acc, l, m)``: the online softmax's update and the product with ``v``. ``p`` is rounded
    to ``v_dtype``, the inputs' dtype (``v`` itself is float32 under ``DOT_FP32``)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: no NaN
    if EXP2:
        p = tl.exp2(s - shift[:, None])
        alpha = tl.exp2(m_i - shift)
    else:
        p = tl.exp(s - shift[:, None])
        alpha = tl.exp(m_i - shift)
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(v_dtype).to(v.dtype)  # rounded to the inputs' dtype, as the tensor cores take it
    if ACC_IN_DOT:
        acc = tl.dot(p, v, acc * alpha[:, None], input_precision=PRECISION)
    else:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
    return acc, l_i, m_new


@triton.jit
def ladder_load(ptrs, start_n, offs_n, S, stride_n, MASKED: tl.constexpr,
                DOT_FP32: tl.constexpr):
    """The ``(BLOCK_N, D)`` block of keys or values at ``start_n``; rows past ``S`` are zeros
    in a ``MASKED`` block (the others lie wholly inside ``S``)."""
    if MASKED:
        block = tl.load(ptrs + start_n * stride_n, mask=(start_n + offs_n)[:, None] < S,
                        other=0.0)
    else:
        block = tl.load(ptrs + start_n * stride_n)
    if DOT_FP32:  # the interpreter multiplies bfloat16 tiles wrongly: multiply in float32
        block = block.to(tl.float32)
    return block


@triton.jit
def ladder_key_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, S,
                     stride_kn, stride_vn, qk_scale,
                     MASKED: tl.constexpr, CAUSAL: tl.constexpr, EXP2: tl.constexpr,
                     ACC_IN_DOT: tl.constexpr, PRECISION: tl.constexpr,
                     DOT_FP32: tl.constexpr):
    """Fold the key block at ``start_n`` into ``(acc, l, m)``. ``q``, ``acc`` ``(BLOCK_M, D)``,
    ``l``, ``m`` ``(BLOCK_M,)``; ``k_ptrs``, ``v_ptrs`` ``(BLOCK_N, D)`` pointers to key 0;
    scores ``s`` and weights ``p`` ``(BLOCK_M, BLOCK_N)``. With ``EXP2``, ``m`` and ``s`` are in
    log2 units (``qk_scale`` holds ``log2(e)``)."""
    k = ladder_load(k_ptrs, start_n, offs_n, S, stride_kn, MASKED, DOT_FP32)
    v = ladder_load(v_ptrs, start_n, offs_n, S, stride_vn, MASKED, DOT_FP32)
    s = ladder_scores(q, k, start_n, offs_m, offs_n, S, qk_scale, MASKED, CAUSAL, PRECISION)
    return ladder_fold(acc, l_i, m_i, s, v, v_ptrs.dtype.element_ty, EXP2, ACC_IN_DOT,
                       PRECISION)


@triton.jit
def ladder_unmasked_qk_ahead(acc, l_i, m_i, q, k_ptrs, v_ptrs, full_end, offs_m, offs_n, S,
                             stride_kn, stride_vn, qk_scale, EXP2: tl.constexpr,
                             ACC_IN_DOT: tl.constexpr, PRECISION: tl.constexpr,
                             DOT_FP32: tl.constexpr, BLOCK_N: tl.constexpr):
    """The unmasked key blocks ``[0, full_end)`` with the scores of the next block computed
    before the softmax of this one (FlashAttention-3's order inside a warpgroup): ``s`` is
    block ``j``'s scores when block ``j + 1``'s product is issued, so the exponentials of block
    ``j`` could run while the tensor cores compute it, if the compiler lets that product stay
    in flight (notebook 08 reads what it does)."""
    v_dtype = v_ptrs.dtype.element_ty
    if full_end > 0:
        k = ladder_load(k_ptrs, 0, offs_n, S, stride_kn, False, DOT_FP32)
        s = ladder_scores(q, k, 0, offs_m, offs_n, S, qk_scale, False, False, PRECISION)
        for start_n in range(0, full_end - BLOCK_N, BLOCK_N):
            k = ladder_load(k_ptrs, start_n + BLOCK_N, offs_n, S, stride_kn, False, DOT_FP32)
            s_next = ladder_scores(q, k, start_n + BLOCK_N, offs_m, offs_n, S, qk_scale, False,
                                   False, PRECISION)
            v = ladder_load(v_ptrs, start_n, offs_n, S, stride_vn, False, DOT_FP32)
            acc, l_i, m_i = ladder_fold(acc, l_i, m_i, s, v, v_dtype, EXP2, ACC_IN_DOT,
                                        PRECISION)
            s = s_next
        v = ladder_load(v_ptrs, full_end - BLOCK_N, offs_n, S, stride_vn, False, DOT_FP32)
        acc, l_i, m_i = ladder_fold(acc, l_i, m_i, s, v, v_dtype, EXP2, ACC_IN_DOT, PRECISION)
    return acc, l_i, m_i


@triton.jit
def ladder_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    H, L, S, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, DOT_FP32: tl.constexpr,
    EXP2: tl.constexpr, BLOCK_KINDS: tl.constexpr, ACC_IN_DOT: tl.constexpr,
    HEAVY_FIRST: tl.constexpr, QK_AHEAD: tl.constexpr = False,
):
    """Program ``(query block, b * H + h)``, as :func:`teachkit.kernels.flash.flash_fwd_kernel`,
    with each of the fast kernel's changes behind its switch. ``Q``, ``O`` ``(B, H, L, D)``,
    ``K``, ``V`` ``(B, H, S, D)``, ``LSE`` ``(B, H, L)`` float32 (natural log)."""
    if HEAVY_FIRST and CAUSAL:  # the last query blocks see the most keys: start them first
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :] * stride_qd, mask=offs_m[:, None] < L, other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
    k_ptrs = (K + b * stride_kb + h * stride_kh
              + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)
    v_ptrs = (V + b * stride_vb + h * stride_vh
              + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if EXP2:
        qk_scale = scale * LOG2E
    else:
        qk_scale = scale

    if BLOCK_KINDS:  # [0, full_end) unmasked, [full_end, end) masked, [end, S) never loaded
        s_full = (S // BLOCK_N) * BLOCK_N
        if CAUSAL:
            full_end = tl.minimum(start_m, s_full)
            end = tl.minimum(start_m + BLOCK_M, S)
        else:
            full_end = s_full
            end = S
        if QK_AHEAD:
            acc, l_i, m_i = ladder_unmasked_qk_ahead(acc, l_i, m_i, q, k_ptrs, v_ptrs, full_end,
                                                     offs_m, offs_n, S, stride_kn, stride_vn,
                                                     qk_scale, EXP2, ACC_IN_DOT, PRECISION,
                                                     DOT_FP32, BLOCK_N)
        else:
            for start_n in range(0, full_end, BLOCK_N):
                acc, l_i, m_i = ladder_key_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n,
                                                 offs_m, offs_n, S, stride_kn, stride_vn,
                                                 qk_scale, False, CAUSAL, EXP2, ACC_IN_DOT,
                                                 PRECISION, DOT_FP32)
        for start_n in range(full_end, end, BLOCK_N):
            acc, l_i, m_i = ladder_key_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m,
                                             offs_n, S, stride_kn, stride_vn, qk_scale, True,
                                             CAUSAL, EXP2, ACC_IN_DOT, PRECISION, DOT_FP32)
    else:  # every key block loaded and masked
        for start_n in range(0, S, BLOCK_N):
            acc, l_i, m_i = ladder_key_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m,
                                             offs_n, S, stride_kn, stride_vn, qk_scale, True,
                                             CAUSAL, EXP2, ACC_IN_DOT, PRECISION, DOT_FP32)

    acc = acc * tl.where(l_i > 0, 1.0 / l_i, 0.0)[:, None]  # one division at the end
    if EXP2:
        lse = (m_i + tl.log2(l_i)) * LN2
    else:
        lse = m_i + tl.log(l_i)
    row_ok = offs_m < L
    tl.store(LSE + bh.to(tl.int64) * L + offs_m, lse, mask=row_ok)
    tl.store(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om
             + offs_d[None, :] * stride_od, acc.to(O.dtype.element_ty), mask=row_ok[:, None])


def flash_attention_ladder(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    scale: float | None = None, step: str | LadderStep = "heavy first",
    config: FlashConfig = SIMPLE_TILES,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention by the ladder kernel at ``step``: ``(out, lse)``.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(B, H, L, D)`` and ``(B, H, S, D)``: as :func:`teachkit.kernels.flash.flash_attention`
        takes them, without grouped-query heads, and ``S >= 1``.
    causal : bool
        Query ``i`` sees keys ``j <= i`` (top-left aligned).
    scale : float, optional
        Defaults to ``1/sqrt(D)``; non-negative.
    step : str or LadderStep
        A key of :data:`LADDER` (the changes up to and including it are on), or the switches
        themselves, such as :data:`QK_AHEAD` (``qk_ahead`` needs ``block_kinds``).
    config : FlashConfig
        Tiles, warps and stages (``tma`` is not taken); the simple kernel's 64 x 64, 4 warps,
        2 stages by default. Under the interpreter the tiles are 16 x 16.

    Examples
    --------
    >>> import torch, teachkit
    >>> q, k, v = (torch.randn(1, 2, 40, 16, device=teachkit.DEVICE) for _ in range(3))
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> all(teachkit.relative_error(flash_attention_ladder(q, k, v, True, step=s)[0], ref) < 1e-5
    ...     for s in [*LADDER, QK_AHEAD])
    True
    """
    require_no_grad(("q", q), ("k", k), ("v", v), kernel="flash_attention_ladder",
                    reference="teachkit.kernels.flash_attention")
    check_inputs(q, k, v)
    causal = require_bool(causal, "causal")
    if isinstance(step, LadderStep):
        switches = step
        if switches.qk_ahead and not switches.block_kinds:
            raise ValueError("a LadderStep with qk_ahead needs block_kinds: the scores run one "
                             "block ahead over the unmasked blocks only, e.g. QK_AHEAD")
    elif isinstance(step, str) and step in LADDER:
        switches = LADDER[step]
    else:
        raise ValueError(f"step must be one of {list(LADDER)} or a LadderStep, got {step!r}")
    if not isinstance(config, FlashConfig) or config.tma:
        raise TypeError("config must be a FlashConfig without tma (the ladder kernel loads with "
                        "tl.load), e.g. FlashConfig(64, 64, 4, 2)")
    if k.shape[1] != q.shape[1] or k.shape[2] == 0:
        raise ValueError("flash_attention_ladder needs k and v with q's heads and at least one "
                         "key; teachkit.kernels.flash_attention takes the others")
    scale = resolve_scale(scale, q.shape[-1])
    if scale < 0:
        raise ValueError(f"scale must be >= 0 here, got {scale}; flash_attention takes any sign")
    B, H, L, D = q.shape
    block_m, block_n = (16, 16) if INTERPRETED else (config.block_m, config.block_n)
    if block_m % block_n:
        raise ValueError(f"config.block_m ({block_m}) must be a multiple of config.block_n "
                         f"({block_n})")
    out = torch.empty_like(q)
    lse = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    if out.numel():
        ladder_kernel[(triton.cdiv(L, block_m), B * H)](
            q, k, v, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            H, L, k.shape[2], scale,
            CAUSAL=causal, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n,
            PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
            DOT_FP32=INTERPRETED and q.dtype == torch.bfloat16,
            EXP2=switches.exp2, BLOCK_KINDS=switches.block_kinds,
            ACC_IN_DOT=switches.acc_in_dot, HEAVY_FIRST=switches.heavy_first,
            QK_AHEAD=switches.qk_ahead, num_warps=config.num_warps, num_stages=config.num_stages,
        )
    return out, lse
