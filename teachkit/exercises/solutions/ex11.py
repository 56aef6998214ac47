"""Solutions of the exercises of notebook 11, kept apart from their checkers in
:mod:`teachkit.exercises.ex11`."""

from __future__ import annotations

import torch

from ...softmax import exp_shift

__all__ = ["solution_thread_elements", "solution_fold_vector", "solution_block_merge"]

Stats = tuple[torch.Tensor, torch.Tensor]


def solution_thread_elements(t: int, n_cols: int, threads: int, vec: int) -> list[int]:
    """The elements thread ``t`` loads, in load order.

    Thread ``t`` loads vectors ``j = t, t + threads, t + 2 * threads, ...``; vector ``j`` holds
    elements ``j * vec .. j * vec + vec - 1``. Stop at the row's end: a vector that starts past
    ``n_cols`` is not loaded, and elements past ``n_cols`` are not part of the row.

    Parameters
    ----------
    t : int
        The thread, ``0 <= t < threads``.
    n_cols : int
        Row length.
    threads, vec : int
        Threads per CTA and elements per vector load.

    Returns
    -------
    list of int
        Increasing element indices (empty for a thread past the row's end).
    """
    out = []
    for j in range(t, -(-n_cols // vec), threads):  # vectors t, t + threads, ...
        out.extend(range(j * vec, min((j + 1) * vec, n_cols)))
    return out


def solution_fold_vector(m: torch.Tensor, d: torch.Tensor, v: torch.Tensor) -> Stats:
    r"""Fold a loaded vector ``v`` into a thread's running ``(m, d)``: the kernel's inner step.

    .. math::  m' = \max(m, \max_k v_k), \qquad
               d' = d\, e^{m - m'} + \textstyle\sum_k e^{v_k - m'} .

    One rescale of the old ``d`` per vector, not one per element: the vector is a chunk whose
    statistics are merged with the running pair. An all ``-inf`` history (``m = -inf``) adds 0.

    Parameters
    ----------
    m, d : torch.Tensor
        ``(...)``: the running pair of each thread.
    v : torch.Tensor
        ``(..., vec)``: the vector each thread just loaded.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        The new pair, ``(...)``.
    """
    m_new = torch.maximum(m, v.amax(dim=-1))
    d_new = d * exp_shift(m, m_new) + exp_shift(v, m_new.unsqueeze(-1)).sum(dim=-1)
    return m_new, d_new


def solution_block_merge(warp_m: torch.Tensor, warp_d: torch.Tensor) -> Stats:
    """Merge the warps' pairs, as read from shared memory, into the row's ``(m, d)``.

    Any order and grouping give the same result (the merge is associative and commutative); the
    kernel merges neighbours as a tree. An idle warp, whose threads all lay past the row's end,
    wrote the identity ``(-inf, 0)`` and must change nothing.

    Each level of the tree merges neighbours ``2i`` and ``2i + 1`` (an odd pair out is merged
    with the identity ``(-inf, 0)``), halving the number of pairs, as the kernel's warps do; a
    factor ``exp(m_w - m)`` is 0 where ``m_w = -inf`` (:func:`~teachkit.softmax.exp_shift`), so
    idle warps and all-masked rows give no NaN.

    Parameters
    ----------
    warp_m, warp_d : torch.Tensor
        ``(..., warps)``: one pair per warp.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``(...)``: the row's pair.
    """
    m, d = warp_m, warp_d
    while m.shape[-1] > 1:  # one level of the tree
        if m.shape[-1] % 2:  # an odd pair out: merge it with the identity (-inf, 0)
            m = torch.cat([m, torch.full_like(m[..., :1], float("-inf"))], dim=-1)
            d = torch.cat([d, torch.zeros_like(d[..., :1])], dim=-1)
        m_a, m_b, d_a, d_b = m[..., 0::2], m[..., 1::2], d[..., 0::2], d[..., 1::2]
        m = torch.maximum(m_a, m_b)
        d = d_a * exp_shift(m_a, m) + d_b * exp_shift(m_b, m)
    return m[..., 0], d[..., 0]
