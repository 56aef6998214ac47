"""Exercises of notebook ``01_naive_softmax``: the definition, where ``exp`` overflows, NaN rows.

Each exercise has a checker ``check_<name>(fn)`` here and a solution ``solution_<name>`` in
:mod:`teachkit.exercises.solutions.ex01`:

* :func:`check_naive_softmax` -- the textbook softmax along any ``dim``;
* :func:`check_overflow_threshold` -- the largest ``x`` whose ``exp`` is finite, by experiment;
* :func:`check_nan_rows` -- predict which rows of a batch the naive softmax turns NaN.

Examples
--------
>>> from teachkit.exercises.solutions.ex01 import solution_naive_softmax
>>> check_naive_softmax(solution_naive_softmax)
[correct] Naive softmax along any dim
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..compare import relative_error
from ..numerics import overflow_threshold
from ..softmax import naive_softmax
from .checking import (
    SOFTMAX_FUNCTIONS,
    ExerciseFailed,
    call_learner,
    exercise,
    expect,
    expect_close,
    fresh_generator,
)

__all__ = [
    "check_naive_softmax",
    "check_overflow_threshold",
    "check_nan_rows",
]

_INT_OF = {2: torch.int16, 4: torch.int32, 8: torch.int64}



def _definition(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The float64 reference: the formula itself, computed in float64."""
    e = torch.exp(x.double())
    return e / e.sum(dim=dim, keepdim=True)


# --------------------------------------------------------------------------------------------
# Exercise 1: the naive softmax along any dim
# --------------------------------------------------------------------------------------------


@exercise(
    title="Naive softmax along any dim",
    hint="Two steps: exponentiate every entry, then divide by a sum taken along dim only. How do "
         "you make that sum line up with its row?",
    forbid=(*SOFTMAX_FUNCTIONS,),
)
def check_naive_softmax(fn: Callable[..., torch.Tensor]) -> None:
    """Check ``fn(x, dim)`` against the float64 definition on 1-D to 3-D inputs and 3 dtypes.

    Prints ``[correct]`` when right and a hint when ``fn`` still raises
    ``NotImplementedError``; raises :class:`ExerciseFailed` when an answer is wrong.
    """
    g = fresh_generator()
    cases = [
        ("a row of 37 float32 values", (37,), -1, torch.float32),
        ("a (5, 13) float32 batch along dim=-1", (5, 13), -1, torch.float32),
        ("a (5, 13) float32 batch along dim=0", (5, 13), 0, torch.float32),
        ("a (3, 7, 11) float32 tensor along dim=1", (3, 7, 11), 1, torch.float32),
        ("a (9, 4) float32 batch along dim=-2", (9, 4), -2, torch.float32),
        ("a (6, 21) float64 batch along dim=-1", (6, 21), -1, torch.float64),
        ("a (4, 19) float16 batch along dim=1", (4, 19), 1, torch.float16),
    ]
    for case, shape, dim, dtype in cases:
        x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
        got = call_learner(fn, case, x, dim=dim)
        ref = _definition(x, dim)
        expect(isinstance(got, torch.Tensor) and got.shape == x.shape,
               f"On {case}: expected a tensor of shape {tuple(x.shape)}, got "
               f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}. "
               "Divide by the sums with keepdim=True so the result keeps the input's shape.")
        expect(got.dtype == x.dtype,
               f"On {case}: expected dtype {x.dtype}, got {got.dtype}. Compute in the input's "
               "own dtype (no .double() or .float()): that is what makes it overflow the way "
               "this notebook studies.")
        tol = 1e-2 if dtype == torch.float16 else 1e-5
        if relative_error(got, ref) <= tol:
            continue
        d, last = dim % x.dim(), x.dim() - 1
        other = 0 if d == last else last
        e64 = torch.exp(x.double())
        expect(relative_error(got, e64 / e64.sum()) > tol,
               f"On {case}: you divided by the sum over the whole tensor, so no slice sums to 1; "
               "sum along dim only: e.sum(dim=dim, keepdim=True).")
        expect(relative_error(got, _definition(x, other)) > tol,
               f"On {case}: your result is the softmax along dim={other}, not dim={dim}: use the "
               "dim argument in the sum (and nowhere hard-code -1).")
        sums = got.double().sum(dim=dim)
        expect(bool(((sums - 1).abs() <= tol).all()),
               f"On {case}: the probabilities along dim={dim} sum to values between "
               f"{sums.min().item():.4g} and {sums.max().item():.4g}, not 1: divide exp(x) by "
               "its sum along dim.")
        expect_close(got, ref, case, rtol=tol,
                     advice="Compare with the definition exp(x_i) / sum_j exp(x_j) along dim.")
    x = torch.randn(3, 25, generator=g) * 1000
    got = call_learner(fn, "a (3, 25) float32 batch times 1000", x, dim=-1)
    if isinstance(got, torch.Tensor) and not bool(torch.isnan(got).any()):
        print("  Note: on logits times 1000 your function gives no NaN, where the formula as "
              "written overflows; if you subtracted the maximum, you already have notebook 02's "
              "fix.")


# --------------------------------------------------------------------------------------------
# Exercise 2: the overflow threshold of a dtype, by experiment
# --------------------------------------------------------------------------------------------


def _steps(a: float, b: float, dtype: torch.dtype) -> int:
    """How many representable values of ``dtype`` lie from ``b`` up to ``a`` (both positive)."""
    ints = _INT_OF[torch.finfo(dtype).bits // 8]
    bits = [int(torch.tensor(v, dtype=dtype).view(ints)) for v in (a, b)]
    return bits[0] - bits[1]


@exercise(
    title="The overflow threshold of a dtype, found by experiment",
    hint="exp(v) is finite exactly up to some value of the dtype; a good first guess is ln of the"
         " dtype's largest number, but a guess must be checked, one representable value at a "
         "time.",
    forbid=("teachkit.numerics.overflow_threshold", "teachkit.numerics.largest_where",),
)
def check_overflow_threshold(fn: Callable[[torch.dtype], Any]) -> None:
    """Check ``fn(dtype)`` against :func:`~teachkit.numerics.overflow_threshold`, exactly.

    Checked for float16, bfloat16 and float32: the answer must be a value of the dtype whose
    ``exp`` is finite while the ``exp`` of the next representable value is ``inf``.

    Prints ``[correct]`` when right and a hint when ``fn`` still raises
    ``NotImplementedError``; raises :class:`ExerciseFailed` when an answer is wrong.
    """
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        case = f"dtype={dtype}"
        raw = call_learner(fn, case, dtype)
        try:
            got = float(raw)
        except (TypeError, ValueError, RuntimeError):
            raise ExerciseFailed(
                f"On {case}: expected a number (a float or a 0-d tensor), got "
                f"{type(raw).__name__}."
            ) from None
        expect(math.isfinite(got) and got > 0,
               f"On {case}: expected a positive finite number, got {got!r}.")
        want = overflow_threshold(dtype)
        as_dtype = float(torch.tensor(got, dtype=dtype))
        near = abs(_steps(max(as_dtype, want), min(as_dtype, want), dtype)) <= 2
        expect(as_dtype == got or not near,
               f"On {case}: {got!r} is not a value of {dtype} (the nearest one is {as_dtype!r}). "
               f"The threshold is one of the dtype's own numbers: round to it with "
               f"torch.tensor(v, dtype={dtype}), then check exp there and at the next value.")
        if as_dtype > want:
            n = _steps(as_dtype, want, dtype)
            raise ExerciseFailed(
                f"On {case}: exp({got!r}) computed in {dtype} is inf, so your value is {n} "
                f"representable step(s) past the threshold (expected {want!r}). Note that "
                "math.log(finfo.max) rounded to the dtype can land one step too high: step "
                "down with torch.nextafter until exp is finite."
            )
        if as_dtype < want:
            n = _steps(want, as_dtype, dtype)
            nxt = torch.nextafter(torch.tensor(as_dtype, dtype=dtype),
                                  torch.tensor(math.inf, dtype=dtype))
            raise ExerciseFailed(
                f"On {case}: exp of the next value after yours, {float(nxt)!r}, is still finite "
                f"({float(torch.exp(nxt)):.6g}), so you stopped {n} representable step(s) early "
                f"(expected {want!r}). Did you use the float32 threshold for a smaller dtype, or "
                "stop a bisection before lo and hi were neighbours?"
            )


# --------------------------------------------------------------------------------------------
# Exercise 3: predict which rows turn NaN
# --------------------------------------------------------------------------------------------


def _nan_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor, str]]:
    """Named batches for :func:`check_nan_rows`, each with the advice for a wrong answer."""

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    def pick_rows(n: int) -> torch.Tensor:
        return torch.randperm(n, generator=g)[: n // 2]

    def cols(rows: torch.Tensor, n: int) -> torch.Tensor:
        return torch.randint(0, n, (len(rows),), generator=g)

    cases = []
    # float32: one big logit in half of the rows, from just above the threshold to far above
    x = rand(24, 37, scale=3.0)
    r = pick_rows(24)
    x[r, cols(r, 37)] = 88.8 + 20 * torch.rand(len(r), generator=g, dtype=torch.float64)
    cases.append(("float32 rows of 37 logits, half of them with one logit above 88.8",
                  x.float(), "An entry whose exp overflows makes inf / inf = NaN: compare with "
                  "overflow_threshold(x.dtype)."))
    # float32: the exact boundary
    t32 = torch.tensor(overflow_threshold(torch.float32))
    nxt = torch.nextafter(t32, torch.tensor(math.inf))
    x = rand(10, 29, scale=3.0).float()
    x[:5, 3] = t32
    x[5:, 7] = nxt
    cases.append(("float32 rows whose largest logit is the threshold itself (rows 0-4) or the "
                  "next float32 after it (rows 5-9)", x,
                  "exp of the threshold itself is finite, exp of the next value is inf: use "
                  "x > threshold, not >=."))
    # float16: ordinary logits break; 10.5 does not. The others are kept at most 6, so a row
    # without a big logit never sums past 65504 (exp(10.5) + 40 exp(6) < 52500): a logit near
    # 10.3 beside the 10.5 (once in 15000 draws) makes that row all zeros, the sum-overflow
    # case below, and an answer that calls such a row NaN got this case's advice, not its own
    x = rand(24, 41, scale=2.0).clamp(max=6.0)
    x[:, 0] = 10.5
    r = pick_rows(24)
    x[r, cols(r, 41)] = 11.2 + 4 * torch.rand(len(r), generator=g, dtype=torch.float64)
    cases.append(("float16 rows of ordinary logits, every row holding a 10.5, half of them one "
                  "logit between 11.2 and 15.2", x.half(),
                  "In float16 exp overflows above 11.09, not 88.72: take the threshold of "
                  "x.dtype, not of float32."))
    # float16: sum overflows, but no single exp does -> zeros, not NaN
    x = rand(12, 9, scale=1.0)
    x[6:] = 10.0 + torch.rand(6, 9, generator=g, dtype=torch.float64)  # each exp < 65504
    cases.append(("float16 rows; in rows 6-11 every logit is between 10 and 11, so each exp is "
                  "finite but their sum overflows", x.half(),
                  "When only the sum overflows, every entry is finite / inf = 0: the row comes "
                  "out all zeros, not NaN. Only an entry whose own exp is inf gives NaN."))
    # bfloat16: threshold 88.5, next value 89.0
    x = rand(10, 15, scale=3.0)
    x[:5, 2] = 88.5
    x[5:, 4] = 89.0
    cases.append(("bfloat16 rows whose largest logit is 88.5 (rows 0-4) or 89.0 (rows 5-9)",
                  x.bfloat16(), "Take the threshold of x.dtype: for bfloat16 it is 88.5."))
    # float32: rows that underflow completely -> 0 / 0
    x = -110 + rand(12, 23, scale=2.0).clamp(-3, 3)
    r = pick_rows(12)
    x[r, cols(r, 23)] = -100.0
    cases.append(("float32 rows of very negative logits (near -110), half of them holding one "
                  "-100", x.float(),
                  "If every exp underflows to 0 the row is 0 / 0 = NaN: compare with "
                  "underflow_threshold(x.dtype) too."))
    # masks: -inf entries, one row fully masked
    x = rand(8, 17, scale=2.0)
    x[:, 10:] = -math.inf
    x[3] = -math.inf
    cases.append(("float32 rows masked with -inf from column 10 on, row 3 masked entirely",
                  x.float(), "exp(-inf) = 0: a partly masked row is fine, a fully masked row is "
                  "0 / 0 = NaN."))
    # N-D, float64: every row holds a 705, half of the rows also a 712
    x = 600 + rand(6, 17, scale=30.0).clamp(-90, 90)
    x[:, 0] = 705.0
    r = pick_rows(6)
    x[r, cols(r, 16) + 1] = 712.0
    cases.append(("a (2, 3, 17) float64 batch of logits near 600, every row holding a 705, "
                  "half of them a 712", x.reshape(2, 3, 17),
                  "Work along the last axis and return shape x.shape[:-1]; the float64 "
                  "threshold is 709.78."))
    return cases


@exercise(
    title="Predict which rows the naive softmax turns NaN",
    hint="A row of the naive softmax gets a NaN in two ways: inf / inf, or 0 / 0. Which values of"
         " x make each happen?",
    forbid=(*SOFTMAX_FUNCTIONS,),
)
def check_nan_rows(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Check ``fn(x)`` against what ``teachkit.naive_softmax(x)`` actually does, row by row.

    ``fn`` gets a batch ``(..., N)`` and returns a boolean tensor of shape ``x.shape[:-1]``,
    ``True`` where the row's naive softmax holds a NaN.

    Prints ``[correct]`` when right and a hint when ``fn`` still raises
    ``NotImplementedError``; raises :class:`ExerciseFailed` when an answer is wrong.
    """
    for case, x, advice in _nan_cases(fresh_generator()):
        got = call_learner(fn, case, x.clone())
        actual = torch.isnan(naive_softmax(x)).any(dim=-1)
        expect(isinstance(got, torch.Tensor),
               f"On {case}: expected a boolean tensor, got {type(got).__name__}.")
        expect(got.shape == actual.shape,
               f"On {case}: expected shape {tuple(actual.shape)} (one answer per row), got "
               f"{tuple(got.shape)}. Reduce along the last axis with .any(dim=-1).")
        expect(got.dtype == torch.bool,
               f"On {case}: expected a boolean tensor, got dtype {got.dtype}.")
        wrong = torch.nonzero(got.cpu() != actual).tolist()
        if wrong:
            idx = tuple(wrong[0])
            row = x[idx]
            finite = row[torch.isfinite(row)]
            lo = f"{finite.min().item():.6g}" if finite.numel() else "-inf"
            hi = f"{finite.max().item():.6g}" if finite.numel() else "-inf"
            raise ExerciseFailed(
                f"On {case}: {len(wrong)} row(s) predicted wrong, e.g. row {list(idx)} "
                f"(finite logits from {lo} to {hi}): you said NaN={bool(got.cpu()[idx])}, the "
                f"naive softmax actually gives NaN={bool(actual[idx])}.\n  {advice}"
            )
