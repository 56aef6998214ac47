"""Solutions of the exercises of notebook 12, kept apart from their checkers in
:mod:`teachkit.exercises.ex12`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["solution_softmax_backward", "solution_delta_kernel"]


def solution_softmax_backward(p: torch.Tensor, dp: torch.Tensor) -> torch.Tensor:
    """The gradient of the scores from the probabilities ``p`` of a row-wise softmax and the
    gradient ``dp`` with respect to them: ``dS = P * (dP - delta)``, ``delta`` one number per row.

    Parameters
    ----------
    p, dp : torch.Tensor
        ``(..., N)``: each row of ``p`` sums to 1.

    Returns
    -------
    torch.Tensor
        ``(..., N)`` in ``p``'s dtype.
    """
    delta = (p * dp).sum(dim=-1, keepdim=True)  # sum_j P_ij dP_ij, one per row
    return p * (dp - delta)


@triton.jit
def solution_delta_kernel(O, DO, DELTA, n_rows, stride_o, stride_do,
                          HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Program ``pid``: ``DELTA[r] = sum_d O[r, d] * DO[r, d]`` for rows
    ``r = pid * BLOCK_M .. pid * BLOCK_M + BLOCK_M - 1`` of the ``(n_rows, HEAD_DIM)`` matrices
    ``O`` and ``DO`` (rows ``stride_o`` and ``stride_do`` elements apart), in float32."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)   # (BLOCK_M,)
    cols = tl.arange(0, HEAD_DIM)                               # (HEAD_DIM,)
    inside = rows < n_rows                                      # the last block is cut short
    o = tl.load(O + rows[:, None] * stride_o + cols[None, :], mask=inside[:, None], other=0.0)
    do = tl.load(DO + rows[:, None] * stride_do + cols[None, :], mask=inside[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)  # (BLOCK_M,), in float32
    tl.store(DELTA + rows, delta, mask=inside)
