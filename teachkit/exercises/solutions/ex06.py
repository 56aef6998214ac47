"""Solutions of the exercises of notebook 06, kept apart from their checkers in
:mod:`teachkit.exercises.ex06`."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from ...kernels import teaching
from ..ex06 import MIN_CHUNK, PROGRAMS_PER_SM

__all__ = ["solution_row_softmax", "solution_combine", "solution_n_splits",
           "solution_online_kernel", "solution_resident_rescale", "solution_pack_pair",
           "solution_halves", "solution_write_behind"]



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


@triton.jit
def solution_online_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """Program ``row``: the softmax of row ``row`` of ``X`` ``(n_rows, n_cols)`` into ``Y``, in
    two passes over blocks of ``BLOCK`` columns, for rows of any length.

    Pass 1 keeps ``BLOCK`` lanes of running ``(m, d)`` in float32, ``(BLOCK,)`` each: lane ``j``
    sees columns ``j``, ``j + BLOCK``, ``j + 2 BLOCK``, ... and folds each in with the online
    update (no reduction inside the loop). The lanes are then merged into the row's ``(m, d)``:
    the largest ``m``, and every lane's ``d`` rescaled to it (``tl.reduce`` with exercise 2's
    combine does the same in one tree). Pass 2 reads the row again and writes
    ``exp(x - m) / d``. Columns past ``n_cols`` read ``-inf``: they add ``exp(-inf) = 0``. Rows
    are ``stride_x`` and ``stride_y`` elements apart."""
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    m = tl.full([BLOCK], float("-inf"), tl.float32)  # (BLOCK,) running maximum per lane
    d = tl.zeros([BLOCK], tl.float32)                # (BLOCK,) sum of exp(x - m) per lane
    for start in range(0, n_cols, BLOCK):            # pass 1: the statistics
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a lane with nothing yet: no NaN
        d = d * tl.exp(m - shift) + tl.exp(x - shift)          # rescale, then add the new value
        m = m_new
    m_row = tl.max(m, 0)                                       # the row's maximum (a scalar)
    d_row = tl.sum(d * tl.exp(m - m_row), 0)                   # every lane's d at that maximum
    for start in range(0, n_cols, BLOCK):            # pass 2: normalise
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m_row) / d_row
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols)


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


def solution_resident_rescale(e: torch.Tensor, m: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The row's softmax from its chunks' kept weights and statistics, as the resident kernel
    finishes: merge the chunks' ``(m, d)`` into the row's, then rescale each chunk.

    ``e_c = exp(x - m_c)``, so ``exp(x - m_row) = e_c * exp(m_c - m_row)``; the same factor
    brings each ``d_c`` to the row's maximum before the sum. A chunk of ``-inf`` has
    ``m_c = -inf`` and a factor of 0; a row of ``-inf`` has ``m_row = -inf`` and gives NaN, as
    ``torch.softmax``.

    Parameters
    ----------
    e : torch.Tensor
        ``(rows, G, chunk)``: each chunk's ``exp(x - m_c)``.
    m, d : torch.Tensor
        ``(rows, G)``: each chunk's maximum and ``sum(e)``.

    Returns
    -------
    torch.Tensor
        ``(rows, G, chunk)``: the probabilities of every row.
    """
    m_row = m.amax(-1, keepdim=True)
    factor = torch.exp(m - m_row)  # exp(m_c - m_row): 0 for a chunk of -inf
    d_row = (d * factor).sum(-1, keepdim=True)
    return e * (factor / d_row)[..., None]


def solution_pack_pair(m: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The resident kernel's word in torch: the 32 bits of each ``m`` in the high half of an
    int64, those of ``d`` in the low half.

    ``.view(torch.int32)`` reads a float's bits without converting its value. Widened to int64,
    an int32 with its top bit set (a negative float, -0.0, a NaN with its sign set) is
    sign-extended, so the low half is masked to its 32 bits before the halves are put together;
    the high half needs no mask, since the shift pushes the extension out.

    Parameters
    ----------
    m, d : torch.Tensor
        float32, the same shape.

    Returns
    -------
    torch.Tensor
        int64, the same shape: ``(m bits << 32) | d bits``.
    """
    high = m.view(torch.int32).to(torch.int64) << 32
    low = d.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return high | low


@triton.jit
def solution_halves(words):
    """The two bfloat16 elements of each int32 word as float32: the even column's from the low
    16 bits, the odd column's from the high 16 bits.

    A bfloat16 is the top half of a float32, so its float32 is its 16 bits moved to the top
    with zeros below: ``words << 16`` for the low element; the high element is already on top
    once the low one's bits are cleared (``& -65536``, which is ``0xFFFF0000`` as an int32).
    ``bitcast=True`` reads those 32 bits as a float32 instead of converting the integer's
    value. ``softmax_kernels.halves`` does the same for float16 too, through ``tl.int16`` and
    the 16-bit type.
    """
    low = (words << 16).to(tl.float32, bitcast=True)
    high = (words & -65536).to(tl.float32, bitcast=True)
    return low, high


def solution_write_behind(items: list[int], publish: Callable[[int], None],
                          wait_row: Callable[[int], None], write: Callable[[int], None]) -> None:
    """One program's turns written behind: publish each item's pair, then wait for the row of
    the item before and write that one; the last item after the loop.

    The kept item is the chunk the kernel holds in registers besides the one it is working on
    (its weights and maximum, ``e_behind`` and ``m_behind`` in ``resident_tma_kernel``).

    Parameters
    ----------
    items : list[int]
        The program's items, in turn.
    publish, wait_row, write : Callable[[int], None]
        The three steps, each of an item.
    """
    behind = None
    for item in items:
        publish(item)
        if behind is not None:
            wait_row(behind)
            write(behind)
        behind = item
    if behind is not None:
        wait_row(behind)
        write(behind)
