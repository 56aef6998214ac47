"""Notebook 05's checkers explain wrong answers (test_exercises.py: solutions and stubs)."""

from __future__ import annotations

import pytest

from teachkit.exercises import ex05
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex05 as solutions

# --- exercise 1 ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("wrong", "words"),
    [
        (lambda M, N, s: {"reads": 3 * M * N * s, "writes": M * N * s}, "statistics"),
        (lambda M, N, s: {"reads": 3 * M * N * s + 3 * M * s, "writes": M * N * s + 2 * M * s},
         "float32"),
        (lambda M, N, s: {"reads": 3 * M * N + 3 * M, "writes": M * N + 2 * M}, "expected reads"),
        (lambda M, N, s: dict(zip(("writes", "reads"),
                                  solutions.solution_safe_traffic(M, N, s).values(), strict=True)),
         "swapped"),
    ],
    ids=["no_stats", "stats_at_itemsize", "elements", "swapped"],
)
def test_safe_traffic_explains(wrong, words, unwatched):
    with pytest.raises(ExerciseFailed, match=words):
        ex05.check_safe_traffic(wrong)


def test_safe_traffic_rejects_non_dict():
    with pytest.raises(ExerciseFailed, match="dict"):
        ex05.check_safe_traffic(lambda M, N, s: (1, 2))


# --- exercise 2 ----------------------------------------------------------------------------------

def test_classify_bytes_per_flop():
    with pytest.raises(ExerciseFailed, match="bytes per FLOP"):
        ex05.check_classify(lambda f, b, t, g: (b / f, "memory"))


def test_classify_wrong_units():
    def wrong(f, b, t, g):  # ridge with tera and giga mixed up: always "compute"
        ai = f / b
        return ai, "memory" if ai < t / g else "compute"

    with pytest.raises(ExerciseFailed, match="powers of ten"):
        ex05.check_classify(wrong)


def test_classify_raising_learner_code():
    with pytest.raises(ExerciseFailed, match="ZeroDivisionError"):
        ex05.check_classify(lambda f, b, t, g: 1 / 0)


# --- exercise 3 ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("wrong", "words"),
    [
        (lambda M, N, s, g: M * N * s / (g * 1e9) * 1e3, "written too"),
        (lambda M, N, s, g: 2 * M * N * s / (g * 1e9), "seconds"),
        (lambda M, N, s, g: 2 * M * N * s / (g * 2**30) * 1e3, "2\\*\\*30"),
    ],
    ids=["read_only", "seconds", "gibibytes"],
)
def test_time_floor_explains(wrong, words):
    with pytest.raises(ExerciseFailed, match=words):
        ex05.check_time_floor(wrong)
