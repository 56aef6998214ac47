"""Exercises of notebook 12: the checkers accept the solutions, print a hint for the stubs and
explain the usual mistakes, and the Triton checker accepts only a kernel."""

from __future__ import annotations  # noqa: I001  (teachkit first: it sets TRITON_INTERPRET)
import teachkit  # noqa: F401
import pytest
import triton
import triton.language as tl

from teachkit.exercises import ex12
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex12 as solutions


def test_solutions_pass():
    assert ex12.check_softmax_backward(solutions.solution_softmax_backward) is None
    assert ex12.check_delta_kernel(solutions.solution_delta_kernel) is None


def test_stubs_get_hints(capsys):
    def stub(p, dp):
        raise NotImplementedError

    @triton.jit
    def kernel_stub(O, DO, DELTA, n_rows, stride_o, stride_do, HEAD_DIM: tl.constexpr,
                    BLOCK_M: tl.constexpr):
        raise NotImplementedError  # delete this line when your kernel is written

    assert ex12.check_softmax_backward(stub) is None
    assert ex12.check_delta_kernel(kernel_stub) is None
    out = capsys.readouterr().out
    assert out.count("[not attempted]") == 2 and "chain rule" in out and "masked store" in out


@pytest.mark.parametrize(("wrong", "says"), [
    (lambda p, dp: p * dp, "share of the denominator"),
    (lambda p, dp: p * (dp - dp.sum(-1, keepdim=True)), "weight it by P"),
    (lambda p, dp: dp - (p * dp).sum(-1, keepdim=True), "not multiplied by P"),
    (lambda p, dp: p * (dp - (p * dp).sum(-1)), "keepdim=True"),
    (lambda p, dp: p * (dp + (p * dp).sum(-1, keepdim=True)), "wrong sign"),
    (lambda p, dp: solutions.solution_softmax_backward(p, dp).float(), "p's dtype"),
])
def test_softmax_backward_mistakes_are_named(wrong, says, unwatched):
    with pytest.raises(ExerciseFailed, match=says):
        ex12.check_softmax_backward(wrong)


@triton.jit
def unmasked_store(O, DO, DELTA, n_rows, stride_o, stride_do, HEAD_DIM: tl.constexpr,
                   BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    o = tl.load(O + rows[:, None] * stride_o + cols[None, :], mask=(rows < n_rows)[:, None],
                other=0.0)
    do = tl.load(DO + rows[:, None] * stride_do + cols[None, :],
                 mask=(rows < n_rows)[:, None], other=0.0)
    tl.store(DELTA + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1))


@triton.jit
def half_precision_sum(O, DO, DELTA, n_rows, stride_o, stride_do, HEAD_DIM: tl.constexpr,
                       BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    inside = rows < n_rows
    o = tl.load(O + rows[:, None] * stride_o + cols[None, :], mask=inside[:, None], other=0.0)
    do = tl.load(DO + rows[:, None] * stride_do + cols[None, :], mask=inside[:, None],
                 other=0.0)
    tl.store(DELTA + rows, tl.sum(o * do, axis=1), mask=inside)


@triton.jit
def head_dim_as_row_stride(O, DO, DELTA, n_rows, stride_o, stride_do, HEAD_DIM: tl.constexpr,
                           BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    inside = rows < n_rows
    o = tl.load(O + rows[:, None] * HEAD_DIM + cols[None, :], mask=inside[:, None], other=0.0)
    do = tl.load(DO + rows[:, None] * HEAD_DIM + cols[None, :], mask=inside[:, None], other=0.0)
    tl.store(DELTA + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1), mask=inside)


@pytest.mark.parametrize(("kernel", "says"), [
    (unmasked_store, "wrote past row"),
    (half_precision_sum, "rounded to torch.float16"),
    (head_dim_as_row_stride, "stride_o is not HEAD_DIM"),
    (lambda o, do: (o * do).sum(-1), "not a Triton kernel"),
])
def test_delta_kernel_mistakes_are_named(kernel, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex12.check_delta_kernel(kernel)
