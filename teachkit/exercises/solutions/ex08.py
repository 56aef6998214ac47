"""Solutions of the exercises of notebook 08, kept apart from their checkers in
:mod:`teachkit.exercises.ex08`."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["solution_key_range", "solution_exp2_update", "solution_causal_flops",
           "solution_flash_kernel"]

LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")


def solution_key_range(start_m: int, S: int, block_m: int, block_n: int,
                       causal: bool) -> tuple[int, int]:
    """The key loop bounds of the program that owns queries ``start_m .. start_m + block_m - 1``.

    Keys ``[0, full_end)`` come in whole blocks that every query of the block sees: no mask.
    Keys ``[full_end, end)`` are loaded and masked: the last block, cut at ``S``, and with
    ``causal`` the blocks the diagonal crosses. Keys from ``end`` on are never loaded. The rule
    is the one of :func:`teachkit.kernels.flash.flash_fwd_kernel`; ``block_m`` is a multiple
    of ``block_n`` and ``start_m`` a multiple of ``block_m``, so every bound is a block edge
    (or ``S``).

    Parameters
    ----------
    start_m : int
        The program's first query row.
    S : int
        Number of keys (at least 1).
    block_m, block_n : int
        Query rows per program and keys per step.
    causal : bool
        Query ``i`` sees keys ``j <= i`` (top-left aligned).

    Returns
    -------
    (full_end, end) : tuple of int
    """
    s_full = (S // block_n) * block_n  # the keys of whole blocks
    if causal:
        # The block's first query, start_m, sees every key below it; its last query,
        # start_m + block_m - 1, sees nothing from start_m + block_m on.
        return min(start_m, s_full), min(start_m + block_m, S)
    return s_full, S


def solution_exp2_update(
    m2: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, s_raw: torch.Tensor,
    v: torch.Tensor, scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Fold one key block into ``(m2, l, acc)`` with base-2 statistics, as the kernel does.

    Since :math:`e^x = 2^{x \log_2 e}`, scores multiplied by :math:`c = scale \cdot \log_2 e`
    give the same softmax through ``exp2``; ``m2`` is the running maximum *in those units*
    (the natural maximum times :math:`\log_2 e`), while ``l`` and ``acc`` are exactly those of
    the natural-log update. A row with no visible key yet (``m2 = -inf``) shifts by 0, so it
    stays at ``l = 0``, ``acc = 0`` instead of turning NaN.

    Parameters
    ----------
    m2 : torch.Tensor
        ``(..., M)`` running maximum of the scaled scores in log2 units; ``-inf`` at the start.
    l : torch.Tensor
        ``(..., M)`` running sum of ``2^(s c - m2)``.
    acc : torch.Tensor
        ``(..., M, Dv)`` unnormalised output.
    s_raw : torch.Tensor
        ``(..., M, N)`` raw scores ``q @ k^T`` of the block (``-inf`` where masked).
    v : torch.Tensor
        ``(..., N, Dv)`` the block's values.
    scale : float
        The softmax scale (``1/sqrt(D)`` by default); positive.

    Returns
    -------
    (m2, l, acc) : tuple of torch.Tensor
        The state after the block, in the input's dtype.
    """
    s2 = s_raw * (scale * LOG2E)                      # scaled scores in log2 units
    m_new = torch.maximum(m2, s2.amax(dim=-1))
    shift = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
    p = torch.exp2(s2 - shift.unsqueeze(-1))
    alpha = torch.exp2(m2 - shift)
    l_new = alpha * l + p.sum(dim=-1)
    acc_new = alpha.unsqueeze(-1) * acc + p.to(v.dtype) @ v
    return m_new, l_new, acc_new


def solution_causal_flops(L: int, S: int, D: int, block_m: int, block_n: int) -> int:
    """The flops the causal kernel spends on one head: every computed tile, counted whole.

    Each program (``block_m`` query rows starting at ``start_m``) folds in the key blocks up
    to ``end = min(start_m + block_m, S)``: ``ceil(end / block_n)`` tiles. A tile costs two
    matrix products, ``q @ k^T`` and ``p @ v``, of ``2 * block_m * block_n * D`` flops each,
    whether it is full, masked on the diagonal, or a short tail (padding rows and keys are
    computed too).

    Parameters
    ----------
    L, S : int
        Queries and keys (at least 1).
    D : int
        Head dim.
    block_m, block_n : int
        The kernel's tile (``block_m`` a multiple of ``block_n``).

    Returns
    -------
    int
    """
    tiles = 0
    for start_m in range(0, L, block_m):
        end = min(start_m + block_m, S)
        tiles += -(-end // block_n)  # ceil(end / block_n) key blocks
    return tiles * 4 * block_m * block_n * D


@triton.jit
def solution_flash_kernel(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                          CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr):
    """Program ``i``: rows ``i * BLOCK_M .. i * BLOCK_M + BLOCK_M - 1`` of one head's attention
    ``O = softmax(Q K^T * scale) V`` and their natural log-sum-exp ``LSE``.

    ``Q`` and ``O`` are ``(L, HEAD_DIM)``, ``K`` and ``V`` ``(S, HEAD_DIM)``, rows ``stride_*``
    elements apart; ``LSE`` is ``(L,)`` float32. With ``CAUSAL`` query ``i`` sees keys
    ``j <= i`` (top-left). The key loop runs in two parts, with exercise 2's bounds: keys
    ``[0, full_end)`` in whole blocks that every row of the program sees, loaded and used without
    a mask; keys ``[full_end, end)`` masked (the block cut at ``S``, the blocks the diagonal
    crosses); keys from ``end`` on are never loaded. The state ``(m, l, acc)`` is float32 and
    ``acc`` is divided by ``l`` once, after the loop."""
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)                    # (BLOCK_M,) query rows
    offs_n = tl.arange(0, BLOCK_N)                              # (BLOCK_N,)
    offs_d = tl.arange(0, HEAD_DIM)                             # (HEAD_DIM,)
    q = tl.load(Q + offs_m[:, None] * stride_q + offs_d[None, :], mask=offs_m[:, None] < L,
                other=0.0)                                      # (BLOCK_M, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)         # running maximum per row
    l_i = tl.zeros([BLOCK_M], tl.float32)                       # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)             # unnormalised output

    s_full = (S // BLOCK_N) * BLOCK_N                           # keys of whole blocks
    if CAUSAL:
        full_end = tl.minimum(start_m, s_full)   # below the diagonal for every row
        end = tl.minimum(start_m + BLOCK_M, S)   # the last row sees no key from here on
    else:
        full_end = s_full
        end = S
    for start_n in range(0, full_end, BLOCK_N):                 # whole blocks: no mask
        cols = start_n + offs_n
        k = tl.load(K + cols[:, None] * stride_k + offs_d[None, :])   # (BLOCK_N, HEAD_DIM)
        v = tl.load(V + cols[:, None] * stride_v + offs_d[None, :])
        s = tl.dot(q, tl.trans(k)) * scale                      # (BLOCK_M, BLOCK_N) scores
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)                             # rescales the old l and acc
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    for start_n in range(full_end, end, BLOCK_N):               # the diagonal, the cut block
        cols = start_n + offs_n
        k = tl.load(K + cols[:, None] * stride_k + offs_d[None, :], mask=cols[:, None] < S,
                    other=0.0)
        v = tl.load(V + cols[:, None] * stride_v + offs_d[None, :], mask=cols[:, None] < S,
                    other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])    # query i sees keys j <= i
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)    # a row with no key yet: no NaN
        alpha = tl.exp(m_i - shift)
        p = tl.exp(s - shift[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]            # once, at the end
    lse = m_i + tl.log(l_i)                                     # natural log
    rows_ok = offs_m < L
    tl.store(O + offs_m[:, None] * stride_o + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=rows_ok[:, None])
    tl.store(LSE + offs_m, lse, mask=rows_ok)
