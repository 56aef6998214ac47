"""Solutions of the exercises of notebook 06, kept apart from their checkers in
:mod:`teachkit.exercises.ex06`."""

from __future__ import annotations

import math

import torch
import triton

from ...kernels import teaching
from ..ex06 import MIN_CHUNK, PROGRAMS_PER_SM

__all__ = ["solution_row_softmax", "solution_combine", "solution_n_splits"]



def solution_row_softmax(x: torch.Tensor) -> torch.Tensor:
    """Launch :func:`teachkit.kernels.teaching.row_softmax_kernel`: one program per row.

    The block is the next power of two of the row length; lanes past the end are loaded as
    ``-inf`` (``mask=cols < n_cols, other=float("-inf")``), which neither raises the maximum nor
    adds to the sum, and the store is masked the same way.

    Parameters
    ----------
    x : torch.Tensor
        ``(rows, n_cols)`` on :data:`teachkit.DEVICE`, unit column stride, any row stride.

    Returns
    -------
    torch.Tensor
        The softmax of every row, ``x``'s dtype.
    """
    rows, n_cols = x.shape
    y = torch.empty((rows, n_cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(n_cols)
    teaching.row_softmax_kernel[(rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block)
    return y


solution_combine = teaching.merge_combine_natural
"""The solution of exercise 2: :func:`teachkit.kernels.teaching.merge_combine_natural`."""


def solution_n_splits(n_rows: int, n_cols: int, n_sms: int) -> int:
    """Chunks per row for the split kernels: the fewest that give every SM
    :data:`PROGRAMS_PER_SM` programs, but no chunk shorter than :data:`MIN_CHUNK` columns.

    Parameters
    ----------
    n_rows, n_cols : int
        The shape of the rows to normalise.
    n_sms : int
        Streaming multiprocessors of the GPU (132 on an H100 SXM, 108 on an A100).

    Returns
    -------
    int
        ``k >= 1``; the launch has ``n_rows * k`` programs of ``ceil(n_cols / k)`` columns.
    """
    wanted = math.ceil(PROGRAMS_PER_SM * n_sms / n_rows)
    longest_allowed = max(1, n_cols // MIN_CHUNK)
    return max(1, min(wanted, longest_allowed))
