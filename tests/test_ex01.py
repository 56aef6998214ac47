"""Checkers of notebook 01: they accept the solutions, hint on stubs, explain wrong answers."""

from __future__ import annotations

import math

import pytest
import torch

from teachkit.exercises import ex01
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex01 as solutions
from teachkit.numerics import overflow_threshold, underflow_threshold


def _stub(*args: object, **kwargs: object) -> torch.Tensor:
    raise NotImplementedError


# -- exercise 1 ----------------------------------------------------------------------------------


def test_naive_softmax_solution_matches_teachkit() -> None:
    x = torch.randn(4, 7, 9)
    for dim in (0, 1, -1):
        want = torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)
        assert torch.equal(solutions.solution_naive_softmax(x, dim), want)


def test_naive_softmax_whole_tensor_sum() -> None:
    def wrong(x, dim=-1):
        return x.exp() / x.exp().sum()

    with pytest.raises(ExerciseFailed, match="sum over the whole tensor"):
        ex01.check_naive_softmax(wrong)


def test_naive_softmax_ignores_dim() -> None:
    def wrong(x, dim=-1):
        e = x.exp()
        return e / e.sum(dim=-1, keepdim=True)

    with pytest.raises(ExerciseFailed, match="softmax along dim=1, not dim=0"):
        ex01.check_naive_softmax(wrong)


def test_naive_softmax_without_keepdim() -> None:
    def wrong(x, dim=-1):
        e = x.exp()
        return e / e.sum(dim=dim)

    with pytest.raises(ExerciseFailed, match=r"\(5, 13\).*raised RuntimeError"):
        ex01.check_naive_softmax(wrong)


def test_naive_softmax_upcasts() -> None:
    def wrong(x, dim=-1):
        e = x.double().exp()
        return e / e.sum(dim=dim, keepdim=True)

    with pytest.raises(ExerciseFailed, match="expected dtype torch.float32, got torch.float64"):
        ex01.check_naive_softmax(wrong)


def test_naive_softmax_note_for_safe_version(capsys) -> None:
    def shifted(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    assert ex01.check_naive_softmax(shifted) is None
    assert "subtracted the maximum" in capsys.readouterr().out


@pytest.mark.parametrize("library", [torch.softmax, lambda x, dim=-1: torch.softmax(x, dim),
                                     lambda x, dim=-1: x.softmax(dim),
                                     lambda x, dim=-1: torch.nn.functional.softmax(x, dim)])
def test_naive_softmax_refuses_torch_softmax(library) -> None:
    with pytest.raises(ExerciseFailed, match="softmax.*what this exercise asks you to write"):
        ex01.check_naive_softmax(library)


# -- exercise 2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_threshold_solution_is_exact(dtype) -> None:
    t = solutions.solution_overflow_threshold(dtype)
    assert t == overflow_threshold(dtype)
    v = torch.tensor(t, dtype=dtype)
    assert torch.isfinite(torch.exp(v))
    assert torch.isinf(torch.exp(torch.nextafter(v, torch.tensor(math.inf, dtype=dtype))))


def test_threshold_unrounded_log() -> None:
    with pytest.raises(ExerciseFailed, match="is not a value of torch.float16"):
        ex01.check_overflow_threshold(lambda dtype: math.log(torch.finfo(dtype).max))


def test_threshold_rounded_log_is_one_step_past() -> None:
    def wrong(dtype):
        return float(torch.tensor(math.log(torch.finfo(dtype).max), dtype=dtype))

    with pytest.raises(ExerciseFailed, match=r"float16: exp\(11.09375\).*1 representable step"):
        ex01.check_overflow_threshold(wrong)


def test_threshold_stops_early(unwatched) -> None:
    def wrong(dtype):
        v = torch.tensor(overflow_threshold(dtype), dtype=dtype)
        return float(torch.nextafter(v, torch.tensor(0.0, dtype=dtype)))

    with pytest.raises(ExerciseFailed, match="stopped 1 representable step"):
        ex01.check_overflow_threshold(wrong)


def test_threshold_float32_for_everything() -> None:
    message = r"float16: exp\(88.72283172607422\) computed in torch.float16 is inf"
    with pytest.raises(ExerciseFailed, match=message):
        ex01.check_overflow_threshold(lambda dtype: 88.72283172607422)


def test_threshold_wrong_type() -> None:
    with pytest.raises(ExerciseFailed, match="expected a number"):
        ex01.check_overflow_threshold(lambda dtype: [88.7])


# -- exercise 3 ----------------------------------------------------------------------------------


def test_nan_rows_solution_matches_reality() -> None:
    x = torch.randn(50, 33) * 40
    x[::7] = -200.0
    predicted = solutions.solution_nan_rows(x)
    assert torch.equal(predicted, torch.isnan(ex01.naive_softmax(x)).any(-1))


def test_nan_rows_forgets_underflow() -> None:
    def wrong(x):
        return (x > overflow_threshold(x.dtype)).any(dim=-1)

    with pytest.raises(ExerciseFailed, match="0 / 0"):
        ex01.check_nan_rows(wrong)


def test_nan_rows_greater_or_equal() -> None:
    def wrong(x):
        return ((x >= overflow_threshold(x.dtype)).any(-1)
                | (x < underflow_threshold(x.dtype)).all(-1))

    with pytest.raises(ExerciseFailed, match="not >="):
        ex01.check_nan_rows(wrong)


def test_nan_rows_float32_threshold_everywhere() -> None:
    def wrong(x):
        return ((x > overflow_threshold(torch.float32)).any(-1)
                | (x < underflow_threshold(torch.float32)).all(-1))

    with pytest.raises(ExerciseFailed, match=r"(?s)float16 rows of ordinary logits.*11.09"):
        ex01.check_nan_rows(wrong)


def test_nan_rows_sum_overflow_is_not_nan() -> None:
    def wrong(x):
        e = torch.exp(x)
        return torch.isinf(e.sum(-1)) | (e == 0).all(-1)

    with pytest.raises(ExerciseFailed, match="all zeros, not NaN"):
        ex01.check_nan_rows(wrong)


def test_nan_rows_wrong_shape(unwatched) -> None:
    with pytest.raises(ExerciseFailed, match="one answer per row"):
        ex01.check_nan_rows(lambda x: torch.isnan(ex01.naive_softmax(x)))
