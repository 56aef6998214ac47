"""Solutions of the exercises of notebook 07, kept apart from their checkers in
:mod:`teachkit.exercises.ex07`."""

from __future__ import annotations

import torch

from ...attention import attention_block_update, attention_scores
from ...tiling import FULL, MASKED, SKIP, tile_schedule

__all__ = ["solution_tile_kind", "solution_recompute_probs", "solution_tiled_attention"]

NEG_INF = float("-inf")


def solution_tile_kind(
    i: int, j: int, L: int, S: int, block_m: int, block_n: int, causal: bool
) -> int:
    """Classify tile ``(i, j)``: query block ``i`` against key block ``j``.

    The tile holds queries ``r0 .. r1 - 1`` and keys ``c0 .. c1 - 1``, the last tile of each axis
    cut at ``L`` or ``S``. Query ``q`` sees key ``k`` iff ``k <= q`` (top-left causal).
    The tile is skipped when its *last* query cannot see its *first* key, full when its *first*
    query sees its *last* key, and masked inside otherwise.

    Returns
    -------
    int
        :data:`~teachkit.tiling.SKIP` (0), :data:`~teachkit.tiling.FULL` (1) or
        :data:`~teachkit.tiling.MASKED` (2).
    """
    if not causal:
        return FULL
    r0, r1 = i * block_m, min((i + 1) * block_m, L)
    c0, c1 = j * block_n, min((j + 1) * block_n, S)
    if c0 > r1 - 1:  # the last query is before the first key: all masked
        return SKIP
    if c1 - 1 <= r0:  # the first query already sees the last key: nothing masked
        return FULL
    return MASKED


def solution_recompute_probs(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, scale: float
) -> torch.Tensor:
    r"""Recompute one tile of attention probabilities from the rows' log-sum-exp.

    The forward pass kept one number per query row, :math:`lse_i = \log \sum_j e^{s_{ij}}` over
    *all* keys. For any block of keys, the probabilities are then

    .. math::  P_{ij} = e^{s_{ij} - lse_i}, \qquad s_{ij} = scale\; q_i \cdot k_j,

    without revisiting the other keys: the normalisation is inside :math:`lse`.

    Parameters
    ----------
    q : torch.Tensor
        ``(..., Lb, D)``: a block of queries.
    k : torch.Tensor
        ``(..., Sb, D)``: a block of keys.
    lse : torch.Tensor
        ``(..., Lb)``: the log-sum-exp of each query's full row of scores (float32 or float64).
    scale : float
        The factor the forward pass multiplied the scores by.

    Returns
    -------
    torch.Tensor
        ``(..., Lb, Sb)`` probabilities in ``lse``'s dtype.
    """
    s = (q.to(lse.dtype) @ k.to(lse.dtype).transpose(-2, -1)) * scale
    return torch.exp(s - lse.unsqueeze(-1))


def solution_tiled_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_m: int, block_n: int, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention by tiles: for every query block, walk the key blocks the schedule keeps.

    Each query block starts from ``(m, l, acc) = (-inf, 0, 0)``, folds in each non-skipped key
    block with :func:`~teachkit.attention.attention_block_update` (diagonal tiles get their
    ``-inf`` mask first), and divides ``acc`` by ``l`` once at the end; its lse is
    ``m + log(l)``. The scale is ``1/sqrt(D)``.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(..., L, D)``, ``(..., S, D)``, ``(..., S, Dv)``.
    block_m, block_n : int
        Queries and keys per tile.
    causal : bool
        Top-left causal mask (query ``i`` sees keys ``0..i``).

    Returns
    -------
    out : torch.Tensor
        ``(..., L, Dv)`` in q's dtype.
    lse : torch.Tensor
        ``(..., L)`` in float32 (float64 for float64 input).
    """
    L, S = q.shape[-2], k.shape[-2]
    schedule = tile_schedule(L, S, block_m, block_n, causal)
    outs, lses = [], []
    for i, r0 in enumerate(range(0, L, block_m)):
        qb = q[..., r0:r0 + block_m, :]
        s0 = attention_scores(qb, k[..., :0, :])  # empty: only for the dtype
        m = torch.full(qb.shape[:-1], NEG_INF, dtype=s0.dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros((*qb.shape[:-1], v.shape[-1]), dtype=s0.dtype, device=q.device)
        for j, c0 in enumerate(range(0, S, block_n)):
            kind = int(schedule[i, j])
            if kind == SKIP:
                continue
            s = attention_scores(qb, k[..., c0:c0 + block_n, :])
            if kind == MASKED:
                rows = torch.arange(r0, r0 + s.shape[-2], device=q.device).unsqueeze(-1)
                cols = torch.arange(c0, c0 + s.shape[-1], device=q.device)
                s = s.masked_fill(cols > rows, NEG_INF)
            m, l, acc = attention_block_update(m, l, acc, s, v[..., c0:c0 + block_n, :])
        outs.append((acc / l.unsqueeze(-1)).to(q.dtype))  # the one division per row
        lses.append(m + torch.log(l))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
