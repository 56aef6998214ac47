"""Exercises of notebook 02 (the safe softmax): the checkers (solutions in
:mod:`teachkit.exercises.solutions.ex02`).

1. :func:`check_safe_softmax`: the safe softmax along any ``dim``.
2. :func:`check_mean_breaker`: a row for which shifting by the
   *mean* still overflows in float32, while shifting by the max works.
3. :func:`check_softmax_stats`: the statistics ``(m, d)`` of
   every row, including a fully masked one.

Every checker builds fresh random inputs, compares with a float64 reference and, on a wrong answer,
raises :class:`~teachkit.exercises.checking.ExerciseFailed` naming the case and the likely mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..compare import relative_error
from ..numerics import overflow_threshold
from ..softmax import naive_softmax, safe_softmax, softmax_stats
from .checking import (
    SOFTMAX_FUNCTIONS,
    call_learner,
    exercise,
    expect,
    expect_close,
    fresh_generator,
    matching_mistake,
    random_normal,
)

__all__ = [
    "check_safe_softmax",
    "check_mean_breaker",
    "check_softmax_stats",
]

INF = float("inf")
LOW = (torch.float16, torch.bfloat16)

# Largest relative error accepted per input dtype: a few roundings of the output dtype, so that an
# answer computed in float32 inside and one computed in the low-precision dtype both pass.
RTOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

NO_MAX = ("NaN or inf where the reference is finite: did you subtract the maximum before exp? "
          "exp(x) overflows above {limit:.2f} in {dtype}.")
GLOBAL_MAX = ("Rows far below the largest value of the whole tensor came out NaN: with one max "
              "for the whole tensor, every exp(x - max) of such a row underflows to 0 and 0/0 = "
              "NaN. Subtract each row's own maximum: m = x.amax(dim, keepdim=True), not x.max().")
WRONG_DIM = ("Wrong along dim={dim}: take the max and the sum along the dim argument (with "
             "keepdim=True so they broadcast), not along the last axis.")
BASICS = ("Compute p = exp(x - m) / sum(exp(x - m)) with m the maximum along dim; every row of "
          "the result should sum to 1.")


SHAPE_ADVICE = (
    "If shapes do not broadcast, keep the reduced axis (keepdim=True) so m has "
    "shape (..., 1, ...)."
)
"""Advice shown when the learner's function raises (most often a shape that does not broadcast)."""


def _has_bad_nan(got: Any, ref: torch.Tensor) -> bool:
    """True when ``got`` has NaN or inf where ``ref`` is finite (same shape assumed)."""
    if not isinstance(got, torch.Tensor) or got.shape != ref.shape:
        return False
    g = got.detach().to("cpu", torch.float64)
    return bool((~torch.isfinite(g) & torch.isfinite(ref)).any())


# --------------------------------------------------------------------------------------------
# Exercise 1: safe softmax along any dim
# --------------------------------------------------------------------------------------------

def _softmax_cases(gen: torch.Generator) -> Iterator[tuple[str, torch.Tensor, int, str, str]]:
    """(case, input, dim, advice when NaN appears, advice otherwise), easiest first."""
    no_max32 = NO_MAX.format(limit=overflow_threshold(torch.float32), dtype="float32")
    yield "a row of 37 random values", random_normal(37, gen=gen).float(), -1, BASICS, BASICS
    yield "a row of 41 random values times 1000", \
        random_normal(41, gen=gen, scale=1000).float(), -1, no_max32, BASICS
    offsets = torch.tensor([0.0, -150.0, -300.0, 40.0, -1000.0, 7.0])
    x = random_normal(6, 45, gen=gen, scale=3).float() + offsets[:, None]
    yield ("6 rows of 45 values at very different heights (row offsets 0, -150, -300, 40, "
           "-1000, 7)"), x, -1, GLOBAL_MAX, BASICS
    yield "a (29, 3) tensor along dim=0", random_normal(29, 3, gen=gen, scale=5).float(), 0, \
        WRONG_DIM.format(dim=0), WRONG_DIM.format(dim=0)
    yield "a (3, 5, 23) tensor times 300 along dim=1", \
        random_normal(3, 5, 23, gen=gen, scale=300).float(), 1, \
        WRONG_DIM.format(dim=1) + " " + no_max32, WRONG_DIM.format(dim=1)
    no_max16 = NO_MAX.format(limit=overflow_threshold(torch.float16), dtype="float16")
    yield "float16 logits around 12 (a row of 17)", \
        random_normal(17, gen=gen, dtype=torch.float16, scale=2, shift=11), -1, no_max16, BASICS
    no_max_bf = NO_MAX.format(limit=overflow_threshold(torch.bfloat16), dtype="bfloat16")
    yield "bfloat16 values times 100 (4 rows of 31)", \
        random_normal(4, 31, gen=gen, dtype=torch.bfloat16, scale=100), -1, no_max_bf, BASICS
    x = random_normal(19, 19, gen=gen, scale=4).float()
    x = x.masked_fill(torch.ones(19, 19, dtype=torch.bool).triu(1), -INF)
    masked = ("NaN where the reference is finite on a row with -inf entries: exp(-inf - m) is 0 "
              "when m is finite; m must be the row maximum (each row here has a finite entry).")
    yield "a 19 x 19 causal mask (-inf above the diagonal)", x, -1, masked, BASICS
    long16 = ("A float16 row of 70001 values near its maximum: each exp(x - m) is about 1, so "
              "the sum is about 70001, past 65504, the largest float16, and overflows to inf if "
              "computed in float16 (every p becomes 0). Compute in float32 inside (x.float()) "
              "and convert the result back with .to(x.dtype) once at the end.")
    yield "a float16 row of 70001 values within 0.01 of each other", \
        random_normal(70001, gen=gen, dtype=torch.float16, scale=0.003), -1, long16, long16
    f64 = "float64 input should be computed in float64 (do not convert it to float32)."
    yield "float64 rows of 3 values", random_normal(7, 3, gen=gen, scale=50), -1, \
        NO_MAX.format(limit=overflow_threshold(torch.float64), dtype="float64"), f64


@exercise(
    "safe softmax along any dim",
    hint="Shift each row by a constant that makes every exponent at most 0, and think about which"
         " dtype the arithmetic runs in.",
    forbid=(*SOFTMAX_FUNCTIONS,),
)
def check_safe_softmax(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """Check ``fn(x, dim)`` against the float64 softmax on odd sizes, huge values, masks, dtypes.

    Parameters
    ----------
    fn : callable
        The learner's ``softmax(x, dim)``; called with ``dim`` as the second positional argument.

    Examples
    --------
    >>> from teachkit.exercises.solutions.ex02 import solution_safe_softmax
    >>> check_safe_softmax(solution_safe_softmax)
    [correct] safe softmax along any dim
    """
    gen = fresh_generator()
    for case, x, dim, nan_advice, advice in _softmax_cases(gen):
        before = x.clone()
        got = call_learner(fn, case, x, dim, advice=SHAPE_ADVICE)
        expect(torch.equal(x, before), f"On {case}: your function changed its input in place; "
               "work on new tensors (x - m, not x -= m).")
        ref = torch.softmax(x.double(), dim=dim)
        if isinstance(got, torch.Tensor) and got.shape == ref.shape:
            expect(got.dtype == x.dtype, f"On {case}: returned dtype {got.dtype}, expected "
                   f"{x.dtype}. Return the input's dtype (compute in float32 inside if you like, "
                   "then .to(x.dtype)), as torch.softmax does.")
        # Each p of the 70001-value float16 row is about 1.4e-5, a float16 subnormal: its
        # rounding alone is up to 2.1e-3 of the largest p.
        rtol = 5e-3 if x.numel() > 65504 else RTOL[x.dtype]
        expect_close(got, ref, case, rtol,
                     nan_advice if _has_bad_nan(got, ref) else advice)
        if bool(torch.isinf(x).any()):
            expect(bool((got[torch.isinf(x)] == 0).all()),
                   f"On {case}: -inf entries must give exactly 0.")


# --------------------------------------------------------------------------------------------
# Exercise 2: the mean is not a safe shift
# --------------------------------------------------------------------------------------------

@exercise(
    "a row where the mean shift overflows but the max shift does not",
    hint="The mean of a row sits among its ordinary values. What happens to one value far above "
         "all the others?",
)
def check_mean_breaker(fn: Callable[[], torch.Tensor]) -> None:
    """Check that ``fn()`` returns a float32 row whose softmax overflows when shifted by its mean.

    Verified: the row is 1-D float32 with finite entries and a finite mean; ``exp(x - mean)``
    computed in float32 overflows, so ``softmax(x - mean)`` has NaN or inf; and the max-shifted
    softmax matches the float64 reference.

    Examples
    --------
    >>> from teachkit.exercises.solutions.ex02 import solution_mean_breaker
    >>> check_mean_breaker(solution_mean_breaker)
    [correct] a row where the mean shift overflows but the max shift does not
    """
    case = "the row you returned"
    x = call_learner(fn, case, advice=SHAPE_ADVICE)
    expect(isinstance(x, torch.Tensor), f"Return a torch.Tensor, got {type(x).__name__}; e.g. "
           "torch.tensor([...], dtype=torch.float32).")
    expect(x.dtype == torch.float32, f"Return a float32 row (the exercise is about float32's "
           f"range), got {x.dtype}; e.g. x.float().")
    expect(x.dim() == 1 and x.numel() >= 2, f"Return one row: a 1-D tensor of at least two "
           f"values, got shape {tuple(x.shape)}.")
    expect(bool(torch.isfinite(x).all()), "Every entry must be finite: with inf or NaN in the row "
           "no shift helps (torch.softmax gives NaN as well).")
    mean = x.mean()
    expect(bool(torch.isfinite(mean)), f"The mean of your row is {mean.item()}: its sum "
           "overflowed float32. Keep the values small enough that the mean is a number "
           "(|x| well below 1e36).")
    limit = overflow_threshold(torch.float32)
    top = float((x - mean).max())
    shifted = naive_softmax(x - mean)
    expect(not bool(torch.isfinite(shifted).all()),
           f"softmax(x - mean) came out finite: the largest x - mean is {top:.4g}, not above "
           f"the float32 overflow threshold {limit:.2f}. You need one entry more than {limit:.2f} "
           "above the mean; since the mean is pulled towards that entry too, put it among many "
           "small values.")
    ref = torch.softmax(x.double(), dim=-1)
    expect_close(safe_softmax(x), ref, "the max-shifted softmax of your row", RTOL[torch.float32])


# --------------------------------------------------------------------------------------------
# Exercise 3: the statistics (m, d) of each row
# --------------------------------------------------------------------------------------------

STATS_BASICS = ("m is the row maximum and d = sum_j exp(x_j - m); d lies between 1 and the row "
                "length.")
OWN_MAX = ("Rows far below the largest value of the whole tensor came out wrong: every row needs "
           "its own maximum (x.amax(-1)), not the maximum of the whole tensor; otherwise all "
           "exp(x - max) of a low row underflow to 0.")
ALL_MASKED = ("A row of only -inf holds no probability mass: its statistics are m = -inf and "
              "d = 0 (what merging chunks in later notebooks relies on). There x - m = -inf - "
              "(-inf) = NaN; use torch.where(m == -inf, 0, torch.exp(x - m)) for the terms.")


def _stats_cases(gen: torch.Generator) -> Iterator[tuple[str, torch.Tensor, str]]:
    """(case, input, advice), easiest first; the statistics are taken along the last axis."""
    yield "the by-hand row [1, 3, 2, 5] (m = 5, d = 1.2034)", \
        torch.tensor([1.0, 3.0, 2.0, 5.0]), STATS_BASICS
    yield "7 rows of 33 random values", random_normal(7, 33, gen=gen, scale=3).float(), STATS_BASICS
    yield "5 rows of 29 values times 1000", random_normal(5, 29, gen=gen, scale=1000).float(), \
        NO_MAX.format(limit=overflow_threshold(torch.float32), dtype="float32")
    offsets = torch.tensor([0.0, -200.0, 60.0, -500.0])
    yield "4 rows of 27 values at very different heights (offsets 0, -200, 60, -500)", \
        random_normal(4, 27, gen=gen, scale=2).float() + offsets[:, None], OWN_MAX
    yield "float16 rows (3 of 21) times 8", \
        random_normal(3, 21, gen=gen, dtype=torch.float16, scale=8), \
        NO_MAX.format(limit=overflow_threshold(torch.float16), dtype="float16")
    x = random_normal(6, 15, gen=gen, scale=4).float()
    x[:, ::3] = -INF
    yield "6 rows of 15 with every third entry -inf", x, STATS_BASICS
    x = random_normal(3, 11, gen=gen).float()
    x[1] = -INF
    yield "3 rows of 11 whose middle row is all -inf", x, ALL_MASKED


@exercise(
    "the statistics (m, d) of each row",
    hint="m is the row's maximum; d sums the exponentials measured from it. What should a row of "
         "only -inf give, and what does exp(-inf - (-inf)) give?",
    forbid=("teachkit.softmax.softmax_stats", "teachkit.softmax.online_stats",
            "teachkit.softmax.online_prefix_stats", "teachkit.softmax.chunk_stats",
            "teachkit.softmax.reduce_stats",),
)
def check_softmax_stats(
    fn: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """Check ``fn(x) -> (m, d)`` (last axis, reduced axis dropped) against float64 statistics.

    Examples
    --------
    >>> from teachkit.exercises.solutions.ex02 import solution_softmax_stats
    >>> check_softmax_stats(solution_softmax_stats)
    [correct] the statistics (m, d) of each row
    """
    gen = fresh_generator()
    for case, x, advice in _stats_cases(gen):
        out = call_learner(fn, case, x, advice=SHAPE_ADVICE)
        expect(isinstance(out, tuple | list) and len(out) == 2,
               f"On {case}: return a pair (m, d), got {type(out).__name__}.")
        m, d = out
        m_ref, d_ref = softmax_stats(x.double())
        for name, t in (("m", m), ("d", d)):
            expect(isinstance(t, torch.Tensor) and t.shape == m_ref.shape,
                   f"On {case}: {name} should be a tensor of shape {tuple(m_ref.shape)} (one value "
                   f"per row, the last axis dropped: no keepdim), got "
                   f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}.")
        expect_close(m, m_ref, f"{case}, m", 1e-6,
                     "m is the maximum of each row (x.amax(-1)), with the last axis dropped.")
        if isinstance(d, torch.Tensor) and d.shape == d_ref.shape and x.dim() == 1:
            unshifted = torch.exp(x.double()).sum()
            expect(relative_error(d, unshifted) > 1e-3,
                   f"On {case}: d = {float(d):.6g} is sum(exp(x)), not shifted: the denominator "
                   f"in the statistics is sum(exp(x - m)), expected {float(d_ref):.6g}.")
        small = (d.detach().double().cpu() < 1 - 1e-3) & (m_ref > -INF)
        expect(not bool(small.any()),
               f"On {case}: d = {d.flatten()[int(small.flatten().int().argmax())]:.4g} < 1 in "
               "a row with a finite maximum. With m the row's own maximum the largest term is "
               "exp(0) = 1, so d >= 1: did you subtract the maximum of the whole tensor?")
        rtol_d = 2e-3 if x.dtype in LOW else 1e-5
        if relative_error(d, d_ref) > rtol_d:
            # d from the whole tensor's maximum is < 1 in a row below that maximum, but a draw
            # whose rows all peak alike leaves every d >= 1 (7 random rows do once in 1400):
            # name that mistake by its values too
            whole = torch.exp(x.double() - x.double().max()).sum(-1)
            advice = matching_mistake(d, {OWN_MAX: whole}) or advice
        expect_close(d, d_ref, f"{case}, d", rtol_d, advice)


