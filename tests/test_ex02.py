"""Notebook 02's checkers explain wrong answers (test_exercises.py: solutions and stubs)."""

from __future__ import annotations

import pytest
import torch

from teachkit.exercises import ex02
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex02 as solutions
from teachkit.softmax import naive_softmax

INF = float("inf")


# --- exercise 1: safe softmax along any dim -----------------------------------------------------

def no_max(x, dim):
    e = torch.exp(x)
    return e / e.sum(dim, keepdim=True)


def global_max(x, dim):
    e = torch.exp(x - x.max())
    return e / e.sum(dim, keepdim=True)


def last_axis_only(x, dim):
    return solutions.solution_safe_softmax(x, -1)


def float32_out(x, dim):
    return solutions.solution_safe_softmax(x.float(), dim)


def no_keepdim(x, dim):
    e = torch.exp(x - x.amax(dim))
    return e / e.sum(dim)


def in_place(x, dim):
    x -= x.amax(dim, keepdim=True)
    return solutions.solution_safe_softmax(x, dim)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (no_max, "subtract the maximum before exp"),
        (global_max, "each row's own maximum"),
        (last_axis_only, "Wrong along dim=0"),
        (float32_out, "expected torch.float16"),
        (no_keepdim, "keepdim=True"),
        (in_place, "in place"),
    ],
    ids=["no_max", "global_max", "last_axis_only", "float32_out", "no_keepdim", "in_place"],
)
def test_safe_softmax_checker_explains_mistakes(wrong, message, unwatched):
    with pytest.raises(ExerciseFailed, match=message):
        ex02.check_safe_softmax(wrong)


def test_safe_softmax_checker_names_the_case():
    with pytest.raises(ExerciseFailed, match=r"On a row of 41 random values times 1000"):
        ex02.check_safe_softmax(no_max)
    with pytest.raises(ExerciseFailed, match=r"very different heights.*NaN"):
        ex02.check_safe_softmax(global_max)


def test_safe_softmax_checker_refuses_torch_and_float16_compute():
    def all_in_input_dtype(x, dim):
        e = torch.exp(x - x.amax(dim, keepdim=True))
        return e / e.sum(dim, keepdim=True)

    with pytest.raises(ExerciseFailed, match="handed the checker torch.softmax"):
        ex02.check_safe_softmax(torch.softmax)
    with pytest.raises(ExerciseFailed, match="calls torch.Tensor.softmax"):
        ex02.check_safe_softmax(lambda x, dim: x.float().softmax(dim).to(x.dtype))
    with pytest.raises(ExerciseFailed, match="past 65504.*Compute in float32 inside"):
        ex02.check_safe_softmax(all_in_input_dtype)


# --- exercise 2: the mean shift ----------------------------------------------------------------

@pytest.mark.parametrize(
    ("row", "message"),
    [
        (lambda: torch.tensor([100.0, 0.0]), r"largest x - mean is 50, not above .* 88\.72"),
        (lambda: torch.full((5,), 1000.0), r"largest x - mean is 0"),
        (lambda: torch.zeros(100, dtype=torch.float64), "float32"),
        (lambda: torch.tensor([INF, 0.0]), "finite"),
        (lambda: torch.tensor([3e38, 3e38, 0.0]), "mean of your row is inf"),
        (lambda: [100.0] + [0.0] * 99, "torch.Tensor"),
        (lambda: torch.zeros(2, 50), "1-D"),
    ],
    ids=["too_small", "all_equal", "float64", "inf", "mean_overflows", "list", "2d"],
)
def test_mean_breaker_checker_explains_mistakes(row, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex02.check_mean_breaker(row)


def test_solution_mean_breaker_really_breaks_the_mean_shift():
    x = solutions.solution_mean_breaker()
    assert x.dtype == torch.float32
    assert torch.isinf(torch.exp(x - x.mean())).any()
    assert torch.isnan(naive_softmax(x - x.mean())).any()
    assert torch.isfinite(solutions.solution_safe_softmax(x)).all()


# --- exercise 3: the statistics (m, d) ---------------------------------------------------------

def unshifted(x):
    return x.amax(-1), torch.exp(x).sum(-1)


def keepdim_stats(x):
    m = x.amax(-1, keepdim=True)
    return m, torch.exp(x - m).sum(-1, keepdim=True)


def no_mask_guard(x):
    m = x.amax(-1)
    return m, torch.exp(x - m.unsqueeze(-1)).sum(-1)


def global_max_stats(x):
    return x.amax(-1), torch.exp(x - x.max()).sum(-1)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (unshifted, r"sum\(exp\(x\)\), not shifted"),
        (keepdim_stats, "no keepdim"),
        (no_mask_guard, r"only -inf .* m = -inf and d = 0"),
        (global_max_stats, "maximum of the whole tensor"),
        (lambda x: torch.zeros(3), "pair"),
    ],
    ids=["unshifted", "keepdim", "no_mask_guard", "global_max", "not_a_pair"],
)
def test_stats_checker_explains_mistakes(wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex02.check_softmax_stats(wrong)


def test_solution_stats_by_hand():
    m, d = solutions.solution_softmax_stats(torch.tensor([1.0, 3.0, 2.0, 5.0]))
    assert m.item() == 5.0 and abs(d.item() - 1.2034) < 1e-4
    m, d = solutions.solution_softmax_stats(torch.full((2, 3), -INF))
    assert torch.all(m == -INF) and torch.all(d == 0)
