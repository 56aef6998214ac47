"""Checkers of notebook 06: they accept the solutions, hint on stubs, and explain wrong answers.

The kernels run on teachkit.DEVICE (Triton's interpreter on a CPU).
"""

from __future__ import annotations  # noqa: I001  (teachkit first: it sets TRITON_INTERPRET)

import teachkit  # noqa: F401
import math

import pytest
import torch
import triton
import triton.language as tl

from teachkit.exercises import ex06
from teachkit.exercises.solutions import ex06 as solutions
from teachkit.exercises.checking import ExerciseFailed


def _stub(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- exercise 1: one-row kernel


@triton.jit
def _zero_padding_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty),
             mask=cols < n_cols)


@triton.jit
def _unshifted_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x.to(tl.float32))
    tl.store(Y + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty),
             mask=cols < n_cols)


def _launcher(kernel, use_n_cols_as_stride=False):
    def run(x):
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        stride = x.shape[1] if use_n_cols_as_stride else x.stride(0)
        kernel[(x.shape[0],)](x, y, x.shape[1], stride, y.stride(0),
                              BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
    return run


def test_row_softmax_accepts_solution(capsys):
    assert ex06.check_row_softmax(solutions.solution_row_softmax) is None
    assert "[correct]" in capsys.readouterr().out


def test_row_softmax_hints_on_stub(capsys):
    assert ex06.check_row_softmax(_stub) is None
    out = capsys.readouterr().out
    assert "[not attempted]" in out and "past the row's end" in out


def test_row_softmax_zero_padding():
    with pytest.raises(ExerciseFailed, match=r"(?s)loaded as 0.*other=float\('-inf'\)"):
        ex06.check_row_softmax(_launcher(_zero_padding_kernel))


def test_row_softmax_without_max():
    with pytest.raises(ExerciseFailed, match="subtract the row maximum"):
        ex06.check_row_softmax(_launcher(_unshifted_kernel))


def test_row_softmax_wrong_stride(unwatched):
    from teachkit.kernels.teaching import row_softmax_kernel

    with pytest.raises(ExerciseFailed, match="row stride"):
        ex06.check_row_softmax(_launcher(row_softmax_kernel, use_n_cols_as_stride=True))


def test_row_softmax_wrong_dtype(unwatched):
    with pytest.raises(ExerciseFailed, match="Cast before the store"):
        ex06.check_row_softmax(lambda x: solutions.solution_row_softmax(x.float()))


# ---------------------------------------------------------------- exercise 2: combine


@triton.jit
def _stub_combine(m_a, d_a, m_b, d_b):
    raise NotImplementedError


@triton.jit
def _unguarded_combine(m_a, d_a, m_b, d_b):
    m = tl.maximum(m_a, m_b)
    return m, d_a * tl.exp(m_a - m) + d_b * tl.exp(m_b - m)


@triton.jit
def _unscaled_combine(m_a, d_a, m_b, d_b):
    return tl.maximum(m_a, m_b), d_a + d_b


@triton.jit
def _inverted_combine(m_a, d_a, m_b, d_b):
    m = tl.maximum(m_a, m_b)
    safe = tl.where(m == float("-inf"), 0.0, m)
    return m, d_a * tl.exp(safe - m_a) + d_b * tl.exp(safe - m_b)


def test_combine_accepts_solution(capsys):
    assert ex06.check_combine(solutions.solution_combine) is None
    assert "[correct]" in capsys.readouterr().out


def test_combine_hints_on_stub(capsys):
    assert ex06.check_combine(_stub_combine) is None
    out = capsys.readouterr().out
    assert "[not attempted]" in out and "both sides are empty" in out


def test_combine_nan_without_guard():
    with pytest.raises(ExerciseFailed, match=r"(?s)empty.*NaN.*tl.where"):
        ex06.check_combine(_unguarded_combine)


def test_combine_without_rescale():
    with pytest.raises(ExerciseFailed, match="too large"):
        ex06.check_combine(_unscaled_combine)


def test_combine_inverted_factor():
    with pytest.raises(ExerciseFailed):
        ex06.check_combine(_inverted_combine)


def test_combine_needs_triton_jit():
    def plain(m_a, d_a, m_b, d_b):
        return m_a, d_a

    with pytest.raises(ExerciseFailed, match="@triton.jit"):
        ex06.check_combine(plain)


# ---------------------------------------------------------------- exercise 3: splits


def test_n_splits_accepts_solution(capsys):
    assert ex06.check_n_splits(solutions.solution_n_splits) is None
    assert "[correct]" in capsys.readouterr().out


def test_n_splits_hints_on_stub(capsys):
    assert ex06.check_n_splits(_stub) is None
    assert "chunks long enough" in capsys.readouterr().out


def test_n_splits_uncapped():
    with pytest.raises(ExerciseFailed, match="shorter than 2048"):
        ex06.check_n_splits(lambda r, c, s: math.ceil(4 * s / r))


def test_n_splits_one_per_sm():
    with pytest.raises(ExerciseFailed, match="programs for"):
        ex06.check_n_splits(lambda r, c, s: max(1, min(math.ceil(s / r), c // 2048)))


def test_n_splits_too_many():
    with pytest.raises(ExerciseFailed, match="more than needed"):
        ex06.check_n_splits(lambda r, c, s: max(1, c // 2048))


def test_n_splits_float():
    with pytest.raises(ExerciseFailed, match="whole number"):
        ex06.check_n_splits(lambda r, c, s: 4 * s / r)


def test_n_splits_known_values():
    assert solutions.solution_n_splits(4, 16_777_216, 132) == 132
    assert solutions.solution_n_splits(64, 1_048_576, 132) == 9
    assert solutions.solution_n_splits(1024, 65_536, 132) == 1
    assert solutions.solution_n_splits(2, 10_000, 132) == 4
