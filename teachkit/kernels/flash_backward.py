r"""FlashAttention's backward pass in Triton: gradients without the ``L x S`` matrices.

The forward pass computed, per (batch, head), ``S = scale * q k^T``, ``P = softmax(S)`` row by
row and ``O = P v``, keeping only ``O`` and each row's log-sum-exp ``lse``. Given ``dO`` (the
gradient of the loss with respect to ``O``), the chain rule gives

* ``dV = P^T dO``
* ``dP = dO v^T``
* ``dS = P * (dP - delta)`` with ``delta = rowsum(dO * O) = rowsum(P * dP)``, the softmax's
  Jacobian applied row by row (the ``- delta`` term is the denominator's share of every score)
* ``dQ = scale * dS k`` and ``dK = scale * dS^T q``.

``P`` is never stored: it is recomputed block by block as ``exp(S - lse)``, which needs no running
maximum because ``lse`` is already the final one. Three kernels do the work:

1. :func:`flash_bwd_delta_kernel`: ``delta = rowsum(dO * O)``, one float32 per query row.
2. :func:`flash_bwd_dkdv_kernel`: one program per block of keys of one (batch, key head) holds
   its ``dK`` and ``dV`` in registers and walks over the query blocks. Each key row's gradient
   sums over queries, so the program owns it and writes it once, with no atomics.
3. :func:`flash_bwd_dq_kernel`: one program per block of queries holds its ``dQ`` and walks over
   the key blocks (the forward's loop order; causal, the heaviest query blocks start first, as in
   the forward).

On Hopper (sm_90) the Gluon kernel of :mod:`teachkit.kernels.flash_backward_hopper` takes over
where its whole tiles fit the tensors, with FlashAttention-3's warp roles (a loader warp, two
computing warpgroups): at ``D = 64`` and ``128`` it does steps 2 and 3 in one loop, adding
``dQ`` into float32 with TMA reduce-adds (not bitwise reproducible), and under
``torch.use_deterministic_algorithms(True)`` it does step 2 alone at ``D = 128``.

FlashAttention-2's CUDA kernel computes ``dQ`` inside the key-block loop of step 2 and adds each
block's share to a float32 ``dQ`` in global memory with atomic adds. That saves recomputing
``q k^T`` and ``dO v^T`` a second time (7 matrix products instead of 5, counting the two of the
forward it redoes), but the order of the atomic adds changes from run to run, so the gradients
are not bitwise reproducible, and it needs a float32 copy of ``dQ``. Here two loops, each the
sole writer of its rows, keep the result deterministic and the kernels plain.
``BackwardConfig(..., atomic_dq=True)`` runs FlashAttention-2's way instead, for comparison: the
dK/dV kernel adds each tile's ``dS K`` into a float32 ``dQ`` with ``tl.atomic_add`` and the dQ
kernel is not launched (``python -m teachkit.bench attention --backward`` times both).

Grouped-query attention: ``k`` and ``v`` may have ``H_kv`` heads where ``H_kv`` divides the
``H`` heads of ``q``; query head ``h`` reads key head ``h // (H // H_kv)``. The ``dK``/``dV``
program of a key head walks over the query blocks of every query head of its group, so their
shares are summed in registers.

Masks, as in the forward: tiles wholly above the causal diagonal are skipped, tiles that cross
it or the end of the sequence (rows past ``L`` in the dK/dV loop, keys past ``S`` in the dQ
loop) are masked, and every other tile is computed without a mask. Rows past ``L`` are loaded as
zeros and would add ``P^T 0`` and ``dS^T 0``, but a ``-inf`` or ``inf`` in the inputs times such a
zero is NaN, so the tails are masked too; keys past ``S`` only reach ``dK``/``dV`` rows that are
never stored.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..device import INTERPRETED, compute_capability
from ..gpus import gpu_class
from .flash_backward_ws import (
    WS_TILES,
    ensure_allocator,
    flash_bwd_dkdv_ws_kernel,
    warp_specialized_dkdv,
)
from .grid_math import cdiv
from .launch_cache import cached_launch

try:  # Gluon is experimental: a Triton whose Gluon differs keeps dK/dV on the Triton kernels
    from .flash_backward_hopper import dkdv_hopper_ready, launch_dkdv_hopper
except (ImportError, AttributeError):  # pragma: no cover - Triton 3.6 to 3.9 have what it needs
    dkdv_hopper_ready = launch_dkdv_hopper = None

__all__ = [
    "BackwardConfig",
    "backward_config",
    "flash_backward",
    "flash_bwd_delta_kernel",
    "flash_bwd_dkdv_kernel",
    "flash_bwd_dq_kernel",
]

LOG2E = tl.constexpr(1.4426950408889634)


# ---------------------------------------------------------------------------------------------
# 1. delta = rowsum(dO * O)
# ---------------------------------------------------------------------------------------------
@cached_launch
@triton.jit
def flash_bwd_delta_kernel(O, DO, DLSE, DELTA,
                           stride_ob, stride_oh, stride_om, stride_od,
                           stride_dob, stride_doh, stride_dom, stride_dod,
                           H, L,
                           HAS_DLSE: tl.constexpr, HEAD_DIM: tl.constexpr,
                           BLOCK_M: tl.constexpr):
    """Program ``(query block, b * H + h)``: ``delta`` of ``BLOCK_M`` rows. ``O`` and ``DO`` are
    ``(B, H, L, HEAD_DIM)``, ``DELTA`` (and ``DLSE``, the gradient of the returned lse, if
    ``HAS_DLSE``) ``(B, H, L)`` float32. A gradient of the lse adds ``dlse_i * P_ij`` to
    ``dS_ij`` (``d lse_i / d S_ij = P_ij``), which is the same as subtracting it from delta."""
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < L
    o = tl.load(O + b * stride_ob + h * stride_oh
                + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, mask=rows, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh
                 + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=rows,
                 other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # (BLOCK_M,)
    if HAS_DLSE:
        delta -= tl.load(DLSE + bh.to(tl.int64) * L + offs_m, mask=offs_m < L, other=0.0)
    tl.store(DELTA + bh.to(tl.int64) * L + offs_m, delta, mask=offs_m < L)


# ---------------------------------------------------------------------------------------------
# 2. dK and dV: a block of keys, every query block of every query head of its group
# ---------------------------------------------------------------------------------------------
@triton.jit
def dkdv_query_block(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, q_base, do_base, stat_base, dq_base,
                     start_m, offs_n, L, stride_qm, stride_dom, stride_dqm, qk_scale,
                     MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                     DOT_FP32: tl.constexpr, ATOMIC_DQ: tl.constexpr, BLOCK_M: tl.constexpr,
                     HEAD_DIM: tl.constexpr):
    """Add the share of the query rows ``start_m .. start_m + BLOCK_M - 1`` to ``dk`` and
    ``dv``. Everything is transposed (keys along rows): ``k``, ``v``, ``dk`` and ``dv`` are
    ``(BLOCK_N, HEAD_DIM)``, the scores ``qkT``, weights ``pT`` and ``dpT``, ``dsT`` are
    ``(BLOCK_N, BLOCK_M)``. ``MASKED`` blocks cross the causal diagonal (key ``n`` is kept for
    query ``m`` where ``n <= m``) or the end of the queries (rows past ``L``). With
    ``ATOMIC_DQ`` the block's share of ``dQ``, ``dS K`` (unscaled), is also added into the
    float32 ``DQ`` with atomic adds, FlashAttention-2's single loop."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < L
    q = tl.load(Q + q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=rows[:, None],
                other=0.0)
    do = tl.load(DO + do_base + offs_m[:, None] * stride_dom + offs_d[None, :],
                 mask=rows[:, None], other=0.0)
    lse = tl.load(LSE + stat_base + offs_m, mask=rows, other=0.0) * LOG2E  # log2 units
    lse = tl.where(lse == float("-inf"), float("inf"), lse)  # a row that saw no key: P = 0
    delta = tl.load(DELTA + stat_base + offs_m, mask=rows, other=0.0)
    if DOT_FP32:  # the interpreter multiplies bfloat16 tiles wrongly: multiply in float32
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    # P^T recomputed from the forward's lse: no running maximum, the lse is the final one.
    qkT = tl.dot(k, tl.trans(q), input_precision=PRECISION)
    pT = tl.exp2(qkT * qk_scale - lse[None, :])
    if MASKED:
        keep = rows[None, :]
        if CAUSAL:
            keep = keep & (offs_n[:, None] <= offs_m[None, :])
        pT = tl.where(keep, pT, 0.0)
    dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=PRECISION)  # dV += P^T dO
    dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)  # (dO V^T)^T
    dsT = (pT * (dpT - delta[None, :])).to(q.dtype)
    dk = tl.dot(dsT, q, dk, input_precision=PRECISION)  # dK += dS^T Q (unscaled)
    if ATOMIC_DQ:  # this key block's share of dQ = dS K, added where other programs add theirs
        dq = tl.dot(tl.trans(dsT), k, input_precision=PRECISION)
        tl.atomic_add(DQ + dq_base + offs_m[:, None] * stride_dqm + offs_d[None, :], dq,
                      mask=rows[:, None], sem="relaxed")
    return dk, dv


@cached_launch
@triton.jit
def flash_bwd_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, DQ,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dkb, stride_dkh, stride_dkn,
    stride_dvb, stride_dvh, stride_dvn,
    stride_dqb, stride_dqh, stride_dqm,
    H, H_KV, L, S, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, DOT_FP32: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,
):
    """Program ``(key block, b * H_KV + key head)``: rows ``start_n .. start_n + BLOCK_N - 1`` of
    ``dK`` and ``dV``. ``Q``, ``DO`` ``(B, H, L, HEAD_DIM)``; ``K``, ``V``, ``DK``, ``DV``
    ``(B, H_KV, S, HEAD_DIM)``; ``LSE``, ``DELTA`` ``(B, H, L)`` float32. Head dims are
    contiguous (unit stride). ``BLOCK_N`` is a multiple of ``BLOCK_M``. With ``ATOMIC_DQ``,
    ``DQ`` ``(B, H, L, HEAD_DIM)`` float32, zeroed, receives the unscaled ``dS K`` of every
    block by atomic adds; otherwise it is not touched."""
    start_n = tl.program_id(0) * BLOCK_N
    bhk = tl.program_id(1)
    b = (bhk // H_KV).to(tl.int64)
    hk = (bhk % H_KV).to(tl.int64)
    group = H // H_KV
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < S
    k = tl.load(K + b * stride_kb + hk * stride_kh + offs_n[:, None] * stride_kn
                + offs_d[None, :], mask=keys, other=0.0)
    v = tl.load(V + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn
                + offs_d[None, :], mask=keys, other=0.0)
    if DOT_FP32:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    qk_scale = scale * LOG2E

    # Query blocks [0, start_n) see none of these keys when causal: skipped. Blocks in
    # [start_n, diag_end) cross the diagonal: masked. Blocks up to l_full see every key, and a
    # last block cut short at L is masked.
    l_full = (L // BLOCK_M) * BLOCK_M
    if CAUSAL:
        first = start_n
        diag_end = tl.minimum(start_n + BLOCK_N, L)
    else:
        first = 0
        diag_end = 0
    for g in range(group):
        h = hk * group + g
        q_base = b * stride_qb + h * stride_qh
        do_base = b * stride_dob + h * stride_doh
        stat_base = (b * H + h) * L
        dq_base = b * stride_dqb + h * stride_dqh
        for start_m in range(first, diag_end, BLOCK_M):
            dk, dv = dkdv_query_block(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, q_base, do_base,
                                      stat_base, dq_base, start_m, offs_n, L, stride_qm,
                                      stride_dom, stride_dqm, qk_scale, True, CAUSAL, PRECISION,
                                      DOT_FP32, ATOMIC_DQ, BLOCK_M, HEAD_DIM)
        for start_m in range(diag_end, l_full, BLOCK_M):
            dk, dv = dkdv_query_block(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, q_base, do_base,
                                      stat_base, dq_base, start_m, offs_n, L, stride_qm,
                                      stride_dom, stride_dqm, qk_scale, False, CAUSAL, PRECISION,
                                      DOT_FP32, ATOMIC_DQ, BLOCK_M, HEAD_DIM)
        for start_m in range(tl.maximum(diag_end, l_full), L, BLOCK_M):
            dk, dv = dkdv_query_block(dk, dv, k, v, Q, DO, LSE, DELTA, DQ, q_base, do_base,
                                      stat_base, dq_base, start_m, offs_n, L, stride_qm,
                                      stride_dom, stride_dqm, qk_scale, True, CAUSAL, PRECISION,
                                      DOT_FP32, ATOMIC_DQ, BLOCK_M, HEAD_DIM)

    dk *= scale  # dS was taken with respect to the scaled scores
    tl.store(DK + b * stride_dkb + hk * stride_dkh + offs_n[:, None] * stride_dkn
             + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=keys)
    tl.store(DV + b * stride_dvb + hk * stride_dvh + offs_n[:, None] * stride_dvn
             + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=keys)


# ---------------------------------------------------------------------------------------------
# 3. dQ: a block of queries, every key block it sees
# ---------------------------------------------------------------------------------------------
@triton.jit
def dq_key_block(dq, q, do, lse, delta, K, V, k_base, v_base, start_n, offs_m, S,
                 stride_kn, stride_vn, qk_scale,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                 DOT_FP32: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Add the share of keys ``start_n .. start_n + BLOCK_N - 1`` to ``dq`` ``(BLOCK_M,
    HEAD_DIM)``. The scores ``qk``, weights ``p`` and ``dp``, ``ds`` are ``(BLOCK_M, BLOCK_N)``;
    ``MASKED`` blocks cross the causal diagonal or the end of the keys."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < S
    k = tl.load(K + k_base + offs_n[:, None] * stride_kn + offs_d[None, :], mask=keys, other=0.0)
    v = tl.load(V + v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=keys, other=0.0)
    if DOT_FP32:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    p = tl.exp2(qk * qk_scale - lse[:, None])
    if MASKED:
        keep = offs_n[None, :] < S
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    return tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)  # dQ += dS K (unscaled)


@cached_launch
@triton.jit
def flash_bwd_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dqb, stride_dqh, stride_dqm,
    H, H_KV, L, S, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, DOT_FP32: tl.constexpr,
):
    """Program ``(query block, b * H + h)``: rows ``start_m .. start_m + BLOCK_M - 1`` of
    ``dQ`` ``(B, H, L, HEAD_DIM)``; the other tensors as in :func:`flash_bwd_dkdv_kernel`.
    ``BLOCK_M`` is a multiple of ``BLOCK_N``."""
    if CAUSAL:  # the last query blocks see the most keys: start them first (a shorter tail)
        start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    else:
        start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    hk = h // (H // H_KV)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < L
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :], mask=rows[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :], mask=rows[:, None], other=0.0)
    lse = tl.load(LSE + (b * H + h) * L + offs_m, mask=rows, other=0.0) * LOG2E
    lse = tl.where(lse == float("-inf"), float("inf"), lse)  # a row that saw no key: P = 0
    delta = tl.load(DELTA + (b * H + h) * L + offs_m, mask=rows, other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = scale * LOG2E
    k_base = b * stride_kb + hk * stride_kh
    v_base = b * stride_vb + hk * stride_vh

    # As in the forward: keys [0, masked_from) are whole blocks below the diagonal of every row
    # of the block; keys [masked_from, end) cross it or the end of the keys and are masked;
    # keys from `end` on are never loaded.
    s_full = (S // BLOCK_N) * BLOCK_N
    if CAUSAL:
        masked_from = tl.minimum(start_m, s_full)
        end = tl.minimum(start_m + BLOCK_M, S)
    else:
        masked_from = s_full
        end = S
    for start_n in range(0, masked_from, BLOCK_N):
        dq = dq_key_block(dq, q, do, lse, delta, K, V, k_base, v_base, start_n, offs_m, S,
                          stride_kn, stride_vn, qk_scale, False, CAUSAL, PRECISION, DOT_FP32,
                          BLOCK_N, HEAD_DIM)
    for start_n in range(masked_from, end, BLOCK_N):
        dq = dq_key_block(dq, q, do, lse, delta, K, V, k_base, v_base, start_n, offs_m, S,
                          stride_kn, stride_vn, qk_scale, True, CAUSAL, PRECISION, DOT_FP32,
                          BLOCK_N, HEAD_DIM)

    dq *= scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm
             + offs_d[None, :], dq.to(DQ.dtype.element_ty), mask=rows[:, None])


# ---------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------
class BackwardConfig(NamedTuple):
    """Tiles, warps and pipeline stages of the two backward kernels, each its own. The dK/dV
    kernel holds ``kv_block_n`` keys and steps over ``kv_block_m`` queries (``kv_block_n`` a
    multiple of ``kv_block_m``); the dQ kernel holds ``q_block_m`` queries and steps over
    ``q_block_n`` keys (``q_block_m`` a multiple of ``q_block_n``). ``atomic_dq`` computes ``dQ``
    inside the dK/dV kernel with atomic adds (FlashAttention-2's one loop, not bitwise
    reproducible) and leaves the dQ fields unused. ``kv_warp_specialize`` runs dK/dV with
    :func:`~teachkit.kernels.flash_backward_ws.flash_bwd_dkdv_ws_kernel` (warp-specialised, its
    own tiles :data:`~teachkit.kernels.flash_backward_ws.WS_TILES`) where it can: on sm_90, in
    half precision, with tensors a descriptor can read; elsewhere the ``kv_*`` fields hold.
    ``kv_hopper`` runs dK/dV with the Gluon kernel of :mod:`teachkit.kernels.flash_backward_hopper`
    where :func:`~teachkit.kernels.flash_backward_hopper.dkdv_hopper_ready` accepts the tensors,
    before either of the others. ``kv_hopper_dq`` runs that kernel with ``dQ`` fused in
    (FlashAttention-3's backward: each program adds its keys' share of ``dQ`` into float32 by
    TMA, so the sums land in any order and are not bitwise reproducible), before all the
    others, unless ``torch.use_deterministic_algorithms(True)`` asks for reproducible results
    or ``atomic_dq`` is set."""

    kv_block_m: int
    kv_block_n: int
    kv_warps: int
    kv_stages: int
    q_block_m: int
    q_block_n: int
    q_warps: int
    q_stages: int
    atomic_dq: bool = False
    kv_warp_specialize: bool = False
    kv_hopper: bool = False
    kv_hopper_dq: bool = False


_INTERPRETER_CONFIG = BackwardConfig(16, 16, 4, 1, 16, 16, 4, 1)
"""Under the interpreter: small tiles, so tests on tiny shapes stay fast."""

# The shape of Triton's fused-attention tutorial (python/tutorials/06-fused-attention.py: 32
# queries per step against 128 held keys, and the mirror for dQ), with smaller tiles where the
# head dim or float32 call for them. On an H100 (sm_90) each kernel's tiles were measured apart:
# `gpu_checks/backward_gpu.py --sweep` times the dK/dV candidates with the dQ kernel fixed and
# the other way round (fp16, 4 x 32 heads of 4096 tokens, causal and not). The dK/dV kernel keeps
# the tutorial's shape at D = 64 (32 x 128, 4 warps) and 64 x 128 with 8 warps at D = 128; the
# dQ kernel wins with 128 x 64 tiles and 8 warps at both, 10 % faster than 128 x 32 with 4 warps
# at D = 64. The sm_80 entries are the tutorial's shape, not yet measured on an A100. A T4 (sm_75)
# allows 64 KB of shared memory a block, and there tl.dot runs on the FMA units through shared
# memory: its tiles are the largest whose compiled kernels fit (python -m teachkit.kernels
# compiles every entry for every GPU class and checks the shared memory). At D = 128 on sm_90
# the backward runs in Gluon (flash_backward_hopper) where its whole tiles fit the tensors. With dQ
# fused in (kv_hopper_dq, at D = 64 and 128) the record measured 1.05-1.15x the two loops from
# L = 4096 on (0.98-1.05x at L = 1024) and 0.85-0.93x cuDNN. Under deterministic algorithms the
# two loops run, with the Gluon dK/dV loop at D = 128 (kv_hopper: 1.08-1.30x the Triton kernels
# alone; at D = 64 it gave no consistent gain). Where the Gluon kernel cannot run, without the
# causal mask, the Triton dK/dV kernel runs warp-specialised
# (flash_backward_ws): 0.76-0.80x cuDNN in the record before the Gluon kernel, where the 8-warp
# tiles beside the flag had given 0.71-0.74x; with the mask, and at D = 64, it measured slower.
_HALF_TILES: dict[tuple[int, int], BackwardConfig] = {
    (75, 64): BackwardConfig(32, 64, 4, 2, 64, 32, 4, 2),
    (75, 128): BackwardConfig(16, 32, 4, 2, 32, 16, 4, 2),
    (75, 256): BackwardConfig(16, 16, 4, 1, 16, 16, 4, 1),
    (80, 64): BackwardConfig(32, 128, 4, 3, 128, 32, 4, 3),
    (80, 128): BackwardConfig(32, 128, 8, 2, 128, 32, 8, 2),
    (80, 256): BackwardConfig(16, 64, 8, 1, 64, 16, 8, 1),
    (90, 64): BackwardConfig(32, 128, 4, 3, 128, 64, 8, 3, kv_hopper_dq=True),
    (90, 128): BackwardConfig(64, 128, 8, 3, 128, 64, 8, 3, kv_warp_specialize=True,
                              kv_hopper=True, kv_hopper_dq=True),
}
_FP32_TILES: dict[int, BackwardConfig] = {  # every GPU class
    64: BackwardConfig(16, 64, 4, 2, 64, 16, 4, 2),
    128: BackwardConfig(16, 32, 4, 2, 32, 16, 4, 2),
    256: BackwardConfig(16, 16, 2, 1, 16, 16, 2, 1),  # 2 warps: 4 need 66,560 bytes on sm_75
}


def backward_config(head_dim: int, dtype: torch.dtype,
                    capability: tuple[int, int] | None = None,
                    causal: bool = False) -> BackwardConfig:
    """The tiles :func:`flash_backward` launches with.

    Parameters
    ----------
    head_dim : int
        16, 32, 64, 128 or 256 (16 and 32 take the tiles of 64).
    dtype : torch.dtype
        float16, bfloat16 or float32.
    capability : tuple of int, optional
        The GPU's ``(major, minor)``; ``None`` means the interpreter's small tiles. sm_90 has
        its own tiles where measured ones beat sm_80's; every other class from sm_80 up takes
        sm_80's (:func:`teachkit.gpus.gpu_class` below 80 is a T4).
    causal : bool
        Whether the backward is causal: at D = 128 on sm_90 only the unmasked one runs the
        warp-specialised Triton dK/dV kernel (``kv_warp_specialize``), which measured slower
        causal; the Gluon one (``kv_hopper``) runs with either mask.

    Examples
    --------
    >>> backward_config(128, torch.float16, (9, 0)).kv_warp_specialize
    True
    >>> backward_config(128, torch.float16, (9, 0), causal=True).kv_warp_specialize
    False
    >>> backward_config(128, torch.float16, (9, 0), causal=True).kv_hopper
    True
    >>> backward_config(64, torch.float16, (9, 0)).kv_hopper_dq  # dQ fused in, sm_90 only
    True
    >>> cfg = backward_config(64, torch.float16, (9, 0))
    >>> cfg.kv_block_m, cfg.kv_block_n, cfg.kv_warps  # dK/dV: 32 queries a step, 128 keys held
    (32, 128, 4)
    >>> cfg.q_block_m, cfg.q_block_n, cfg.q_warps  # dQ: 128 queries held, 64 keys a step
    (128, 64, 8)
    """
    if capability is None:
        return _INTERPRETER_CONFIG
    d = max(head_dim, 64)
    if dtype == torch.float32:
        return _FP32_TILES[d]
    cls = gpu_class(capability)
    if cls < 80:
        return _HALF_TILES[(75, d)]
    config = _HALF_TILES.get((cls, d), _HALF_TILES[(80, d)])
    return config._replace(kv_warp_specialize=False) if causal else config


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def _unit_head_dim(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself if its head dim (last axis) is contiguous, else a contiguous copy: the
    backward kernels index the head dim with unit stride."""
    return t if t.stride(-1) == 1 else t.contiguous()


def flash_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float,
                   dlse: torch.Tensor | None = None, config: BackwardConfig | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients ``(dq, dk, dv)`` of FlashAttention from ``dO`` and the forward's ``out``, ``lse``.

    Called by ``flash_attention``'s autograd function on inputs it validated; not an entry point
    of its own (no checks here).

    Parameters
    ----------
    do : torch.Tensor
        ``(B, H, L, D)``: the gradient of the loss with respect to ``out``.
    q, k, v, out, lse : torch.Tensor
        The forward's inputs (``k``, ``v`` with ``H_kv`` heads dividing ``H``) and outputs.
    causal : bool
        The forward's mask.
    scale : float
        The forward's scale (non-negative: ``flash_attention`` flips the sign of ``q`` for a
        negative one).
    dlse : torch.Tensor, optional
        ``(B, H, L)``: the gradient with respect to the returned lse, if it was used.
    config : BackwardConfig, optional
        Tiles; defaults to :func:`backward_config` for the GPU.

    Returns
    -------
    tuple of torch.Tensor
        ``dq`` like ``q``, ``dk`` like ``k``, ``dv`` like ``v``.
    """
    B, H, L, D = q.shape
    H_kv, S = k.shape[1], k.shape[2]
    if config is None:
        config = backward_config(D, q.dtype, None if INTERPRETED else compute_capability(q.device),
                                 causal)
    q, k, v, out, do = (_unit_head_dim(t) for t in (q, k, v, out, do))
    lse = lse.contiguous()
    delta = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    hopper = (launch_dkdv_hopper is not None and not config.atomic_dq
              and (config.kv_hopper or config.kv_hopper_dq) and dkdv_hopper_ready(q, k, v, do))
    fused_dq = (hopper and config.kv_hopper_dq
                and not torch.are_deterministic_algorithms_enabled())
    # Adds into dQ (atomic or TMA) sum in float32 from zero; two loops write it once.
    dq = (torch.zeros(q.shape, dtype=torch.float32, device=q.device)
          if config.atomic_dq or fused_dq else torch.empty_like(q))
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    dot_fp32 = INTERPRETED and q.dtype == torch.bfloat16
    delta_rows = 16 if INTERPRETED else 32
    flash_bwd_delta_kernel[(cdiv(L, delta_rows), B * H)](
        out, do, dlse.contiguous() if dlse is not None else delta, delta,
        *out.stride(), *do.stride(), H, L,
        HAS_DLSE=dlse is not None, HEAD_DIM=D, BLOCK_M=delta_rows)
    common = dict(CAUSAL=causal, HEAD_DIM=D, PRECISION=precision, DOT_FP32=dot_fp32)
    if fused_dq:  # one Gluon kernel: dK, dV and (already scaled) dQ
        launch_dkdv_hopper(q, k, v, do, lse, delta, dk, dv, causal, scale, dq)
        return dq.to(q.dtype), dk, dv
    if hopper and config.kv_hopper:
        launch_dkdv_hopper(q, k, v, do, lse, delta, dk, dv, causal, scale)
    elif config.kv_warp_specialize and warp_specialized_dkdv(config, q, k, v, do, dk, dv):
        ensure_allocator()  # the kernel makes its tensor descriptors on the device
        block_m, block_n, warps, stages = WS_TILES
        flash_bwd_dkdv_ws_kernel[(cdiv(S, block_n), B * H_kv)](
            q, k, v, do, lse, delta, dk, dv,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
            *dk.stride()[:3], *dv.stride()[:3], H, H_kv, L, S, scale,
            CAUSAL=causal, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=stages,
            num_warps=warps, num_stages=stages)
    else:
        flash_bwd_dkdv_kernel[(cdiv(S, config.kv_block_n), B * H_kv)](
            q, k, v, do, lse, delta, dk, dv, dq,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
            *dk.stride()[:3], *dv.stride()[:3], *dq.stride()[:3], H, H_kv, L, S, scale,
            BLOCK_M=config.kv_block_m, BLOCK_N=config.kv_block_n, ATOMIC_DQ=config.atomic_dq,
            num_warps=config.kv_warps, num_stages=config.kv_stages, **common)
    if config.atomic_dq:
        return dq.mul_(scale).to(q.dtype), dk, dv
    flash_bwd_dq_kernel[(cdiv(L, config.q_block_m), B * H)](
        q, k, v, do, lse, delta, dq,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
        *dq.stride()[:3], H, H_kv, L, S, scale,
        BLOCK_M=config.q_block_m, BLOCK_N=config.q_block_n, num_warps=config.q_warps,
        num_stages=config.q_stages, **common)
    return dq, dk, dv
