"""Solutions of the exercises of notebook 03, kept apart from their checkers in
:mod:`teachkit.exercises.ex03`."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...softmax import exp_shift, merge_stats

__all__ = ["solution_online_step", "solution_merge", "solution_warp_allreduce"]

Stats = tuple[torch.Tensor, torch.Tensor]


def solution_online_step(m: torch.Tensor, d: torch.Tensor, x: torch.Tensor) -> Stats:
    r"""One step of the online softmax: fold the new elements ``x`` into the running ``(m, d)``.

    .. math::  m' = \max(m, x), \qquad d' = d\, e^{m - m'} + e^{x - m'}.

    Vectorised: ``m``, ``d`` and ``x`` hold one entry per row. While a row has seen only
    ``-inf`` (a masked prefix), ``m = m' = -inf`` and ``m - m'`` is NaN;
    :func:`~teachkit.softmax.exp_shift` makes that factor 0, so ``d`` stays 0 instead of NaN.

    Parameters
    ----------
    m, d : torch.Tensor
        The running maximum and denominator of each row (start from ``-inf`` and ``0``).
    x : torch.Tensor
        The next element of each row.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        The updated ``(m, d)``.
    """
    m_new = torch.maximum(m, x)
    d_new = d * exp_shift(m, m_new) + exp_shift(x, m_new)
    return m_new, d_new


def solution_merge(
    m_a: torch.Tensor, d_a: torch.Tensor, m_b: torch.Tensor, d_b: torch.Tensor
) -> Stats:
    r"""Merge the statistics of two parts of a row into those of the whole row.

    .. math::  m = \max(m_a, m_b), \qquad d = d_a e^{m_a - m} + d_b e^{m_b - m}.

    Each ``d`` is measured against its own part's maximum, so both are brought to the common
    maximum ``m`` before they are added. A part with no mass, ``(-inf, 0)``, must add nothing:
    :func:`~teachkit.softmax.exp_shift` gives 0 where ``m = -inf`` instead of NaN.

    Parameters
    ----------
    m_a, d_a, m_b, d_b : torch.Tensor
        The statistics of the two parts (shapes that broadcast).

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``(m, d)`` of the two parts together.
    """
    m = torch.maximum(m_a, m_b)
    return m, d_a * exp_shift(m_a, m) + d_b * exp_shift(m_b, m)


def solution_warp_allreduce(
    m: torch.Tensor, d: torch.Tensor, shfl_xor: Callable[[torch.Tensor, int], torch.Tensor],
    lanes: int,
) -> Stats:
    """Reduce the lanes of a warp by butterfly shuffles, so that every lane ends with the total.

    Written as the code of one lane, run by every lane at once (vectorised: entry ``i`` of
    ``m`` and ``d`` is one lane of some warp). ``shfl_xor(t, offset)`` gives each lane the
    value ``t`` holds in lane ``lane ^ offset`` (``__shfl_xor_sync`` on a GPU). At each offset
    ``lanes/2, ..., 2, 1`` every lane merges its pair with its partner's; after ``log2(lanes)``
    steps each lane has merged with every other lane exactly once, so all lanes hold the
    warp's ``(m, d)``.

    Parameters
    ----------
    m, d : torch.Tensor
        Each lane's statistics, one entry per lane.
    shfl_xor : callable
        ``shfl_xor(t, offset)``: the value of ``t`` in lane ``lane ^ offset``, for every lane.
    lanes : int
        Lanes per warp (a power of two, 32 on NVIDIA GPUs).

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        The warp's statistics, in every lane.
    """
    offset = lanes // 2
    while offset:
        m, d = merge_stats(m, d, shfl_xor(m, offset), shfl_xor(d, offset))
        offset //= 2
    return m, d
