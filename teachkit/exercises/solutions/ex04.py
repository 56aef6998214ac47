"""Solutions of the exercises of notebook 04, kept apart from their checkers in
:mod:`teachkit.exercises.ex04`."""

from __future__ import annotations

import torch

from ...softmax import exp_shift, merge_lse

__all__ = ["solution_rescale_chunk", "solution_merge_out_lse", "solution_block_update"]


def solution_rescale_chunk(
    p_local: torch.Tensor, m_local: torch.Tensor, d_local: torch.Tensor,
    m: torch.Tensor, d: torch.Tensor,
) -> torch.Tensor:
    r"""Turn one chunk's own softmax into its slice of the softmax of the whole row.

    A worker that saw only its chunk computed :math:`p_{local} = e^{x - m_{local}} / d_{local}`.
    Once the row's statistics ``(m, d)`` are known,

    .. math::  e^{x - m} / d = p_{local} \cdot d_{local}\, e^{m_{local} - m} / d,

    and :math:`m_{local} \le m`, so the exponential never overflows. A fully masked chunk
    (``p_local = 0``, ``m_local = -inf``, ``d_local = 0``) stays 0.

    Parameters
    ----------
    p_local : torch.Tensor
        ``(..., n)``: the chunk's softmax computed as if it were the whole row.
    m_local, d_local : torch.Tensor
        ``(...)``: the chunk's maximum and denominator.
    m, d : torch.Tensor
        ``(...)``: the whole row's maximum and denominator (at least one entry of the row is
        finite, so ``m`` is finite).

    Returns
    -------
    torch.Tensor
        ``(..., n)`` in ``p_local``'s dtype.
    """
    weight = d_local * exp_shift(m_local, m) / d  # the chunk's share of the row's mass
    return (p_local.to(weight.dtype) * weight.unsqueeze(-1)).to(p_local.dtype)


def solution_merge_out_lse(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Merge two attention results over disjoint sets of keys into the result over both.

    .. math::
        lse = \log(e^{lse_a} + e^{lse_b}), \qquad
        out = e^{lse_a - lse}\, out_a + e^{lse_b - lse}\, out_b.

    ``lse`` is computed as ``max + log(sum of exp(lse_i - max))`` so nothing overflows, and
    :func:`~teachkit.softmax.exp_shift` gives a part with ``lse = -inf`` (no visible key) the
    weight 0, also when neither part saw a key (then ``out = 0`` and ``lse = -inf``).

    Parameters
    ----------
    out_a, out_b : torch.Tensor
        ``(..., L, Dv)``: each part's attention output, normalised over its own keys.
    lse_a, lse_b : torch.Tensor
        ``(..., L)``: each part's log-sum-exp of scores (float32 or float64).

    Returns
    -------
    out : torch.Tensor
        ``(..., L, Dv)`` in ``out_a``'s dtype.
    lse : torch.Tensor
        ``(..., L)`` in the lse dtype.
    """
    lse = merge_lse(lse_a, lse_b)
    w_a = exp_shift(lse_a, lse).unsqueeze(-1)
    w_b = exp_shift(lse_b, lse).unsqueeze(-1)
    out = w_a * out_a.to(lse.dtype) + w_b * out_b.to(lse.dtype)
    return out.to(out_a.dtype), lse


def solution_block_update(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Fold one block of scores ``s`` and values ``v`` into the running ``(m, l, acc)``.

    .. math::
        m' = \max(m, \max_j s_j), \quad \alpha = e^{m - m'}, \quad p_j = e^{s_j - m'}, \quad
        l' = \alpha l + \sum_j p_j, \quad acc' = \alpha\, acc + p\, v.

    ``acc`` stays unnormalised (the output is ``acc / l`` after the last block), and
    :func:`~teachkit.softmax.exp_shift` keeps rows that have seen only ``-inf`` so far at
    ``(m, l, acc) = (-inf, 0, 0)`` instead of NaN.

    Parameters
    ----------
    m, l : torch.Tensor
        ``(..., L)``: running maximum and denominator (start: ``-inf`` and 0).
    acc : torch.Tensor
        ``(..., L, Dv)``: running unnormalised output (start: 0).
    s : torch.Tensor
        ``(..., L, Sb)``: this block's scaled scores, ``-inf`` where masked.
    v : torch.Tensor
        ``(..., Sb, Dv)``: this block's values (any floating dtype).

    Returns
    -------
    (torch.Tensor, torch.Tensor, torch.Tensor)
        The new ``(m, l, acc)``, in the dtype of ``s``.
    """
    m_new = torch.maximum(m, s.amax(dim=-1))
    alpha = exp_shift(m, m_new)  # rescales what was accumulated against the old maximum
    p = exp_shift(s, m_new.unsqueeze(-1))
    l_new = alpha * l + p.sum(dim=-1)
    acc_new = alpha.unsqueeze(-1) * acc + p @ v.to(p.dtype)
    return m_new, l_new, acc_new
