r"""Exercises of notebook 06, softmax in Triton: a one-row kernel, the combine of ``tl.reduce``,
and how many pieces to cut long rows into.

Each exercise has a checker ``check_<name>(fn)`` here and a solution ``solution_<name>`` in
:mod:`teachkit.exercises.solutions.ex06`:

* :func:`check_row_softmax` -- a launcher ``fn(x)`` of the learner's one-row softmax kernel (masked
  load with the right ``other=``, masked store);
* :func:`check_combine` -- a ``@triton.jit`` combine function ``(m_a, d_a, m_b, d_b) -> (m, d)``
  that ``tl.reduce`` uses to merge lanes of running statistics;
* :func:`check_n_splits` -- the number of chunks per row that fills a GPU of ``n_sms`` SMs;
* :func:`check_resident_rescale` -- the resident kernel's last step in torch: every chunk's
  kept ``e = exp(x - m_chunk)`` and the chunks' ``(m, d)`` in, the row's softmax out;
* :func:`check_online_kernel` -- the learner's ``@triton.jit`` two-pass online softmax for rows
  longer than one block, launched by the checker itself;
* :func:`check_pack_pair` -- the word the resident kernel's programs exchange: two float32
  tensors in, their bits side by side in int64 words out;
* :func:`check_halves` -- a ``@triton.jit`` function that reads int32 words as their two
  bfloat16 elements, as the resident kernel keeps 16-bit chunks;
* :func:`check_write_behind` -- one program's turns written behind: its items published in
  turn, each row waited for and written one item later, checked for every program of a few
  persistent grids.

The kernel checkers run on :data:`teachkit.DEVICE` (the interpreter on a CPU) with fresh random
inputs of odd sizes, values times 1000, ``-inf`` masks and all-``-inf`` rows, and compare with
float64 references.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import warnings
from collections.abc import Callable

import numpy as np
import torch
import triton

from ..compare import relative_error
from ..device import DEVICE
from ..kernels import teaching
from .checking import (
    SOFTMAX_FUNCTIONS,
    ExerciseFailed,
    exercise,
    expect,
    expect_close,
    fresh_generator,
    matching_mistake,
    raise_if_stub,
    random_int,
)
from .launching import SENTINEL, expect_untouched, launch, require_kernel
from .load_counting import count_loads

__all__ = [
    "check_row_softmax",
    "check_combine",
    "check_n_splits",
    "check_online_kernel",
    "check_resident_rescale",
    "check_pack_pair",
    "check_halves",
    "check_write_behind",
    "chunk_statistics",
    "MIN_CHUNK",
    "PROGRAMS_PER_SM",
]

NEG_INF = float("-inf")
MIN_CHUNK = 2048
"""Shortest chunk (columns) exercise 3 allows: below it a program's fixed costs dominate."""
PROGRAMS_PER_SM = 4
"""Programs per SM exercise 3 aims for, so that every SM has work while others finish."""


def _quiet(fn: Callable, *args: object) -> object:
    """Call ``fn`` with NumPy's and Python's floating-point warnings silenced (the interpreter
    computes with NumPy, which warns on the NaN a wrong answer produces)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args)


# --------------------------------------------------------------------------------------------
# Exercise 1: a one-row softmax kernel
# --------------------------------------------------------------------------------------------


def _row_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor, float]]:
    """``(case, input on DEVICE, rtol)`` for the one-row softmax checker."""
    n = int(torch.randint(40, 200, (1,), generator=g)) | 1  # odd: never a power of two
    rows = int(torch.randint(3, 8, (1,), generator=g)) | 1
    base = torch.randn(rows, n, generator=g)
    masked = base.clone()
    masked[:, 1::3] = NEG_INF
    masked[0] = NEG_INF  # a row with nothing to attend to: NaN, as torch.softmax
    # Built on the device: moving a sliced view with .to() would make it contiguous again.
    wide = torch.randn(rows, n + 9, generator=g).to(DEVICE)
    return [
        (f"{rows} random rows of {n} values (float32)", base, 1e-5),
        (f"{rows} rows of {n} values times 1000 (float32)", base * 1000, 1e-5),
        (f"{rows} rows of {n} values with every third entry -inf and row 0 all -inf "
         "(expected NaN there, as torch.softmax)", masked, 1e-5),
        (f"{rows} rows of {n} values in bfloat16", (base * 4).bfloat16(), 1e-2),
        (f"{rows} rows of {n} values in float16", (base * 4).half(), 2e-3),
        (f"{rows} rows of {n} columns cut from rows of {n + 9} (row stride {n + 9})",
         wide[:, :n], 1e-5),
    ]


@exercise(
    "a one-row softmax kernel",
    hint="One program owns one row: load it with a mask, compute in float32, store with the same "
         "mask. What must the lanes past the row's end hold so they change neither the max nor "
         "the sum?",
    forbid=("teachkit.kernels.teaching.row_softmax_kernel", "teachkit.kernels.teaching.row_softmax",
            "teachkit.kernels.teaching.fused_one_row", "teachkit.kernels.softmax_kernels.softmax",
            "teachkit.kernels.softmax_kernels.softmax_fused",
            "teachkit.kernels.softmax_kernels.softmax_blog",
            "teachkit.kernels.softmax_kernels.softmax_online",
            "teachkit.kernels.softmax_kernels.softmax_split",
            "teachkit.kernels.softmax_kernels.fused_kernel",
            "teachkit.kernels.softmax_kernels.blog_kernel",
            "teachkit.kernels.softmax_kernels.online_kernel", *SOFTMAX_FUNCTIONS,),
)
def check_row_softmax(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Run ``fn(x)`` on rows of odd length (not a power of two), large and masked values, three
    dtypes and a strided view, and compare with ``torch.softmax`` in float64.

    Parameters
    ----------
    fn
        The learner's launcher: a 2-D tensor on :data:`teachkit.DEVICE` in, its row softmax out.
    """
    g = fresh_generator()
    for case, x, rtol in _row_cases(g):
        x = x.to(DEVICE)
        got = _quiet(fn, x)
        ref = torch.softmax(x.cpu().double(), dim=-1)
        expect(isinstance(got, torch.Tensor), f"On {case}: expected a tensor, got "
               f"{type(got).__name__}. Return the output tensor your kernel wrote.")
        expect(got.dtype == x.dtype, f"On {case}: the result is {got.dtype}, the input "
               f"{x.dtype}. Cast before the store: y.to(Y.dtype.element_ty).")
        if got.shape == ref.shape:
            g64 = got.detach().cpu().double()
            bad_nan = torch.isnan(g64) & ~torch.isnan(ref)
            if bool(bad_nan.any()) and "1000" in case:
                raise ExerciseFailed(
                    f"On {case}: NaN where the reference is finite. exp(1000 * ...) overflows "
                    "float32: did you subtract the row maximum (tl.max) before tl.exp?")
            if bool(bad_nan.any()):
                raise ExerciseFailed(
                    f"On {case}: NaN where the reference is finite. Are the padding lanes "
                    "loaded with other=float('-inf') and is the maximum taken over the "
                    "loaded block?")
            padded = torch.cat([x.cpu().double(), torch.zeros(x.shape[0], triton.next_power_of_2(
                x.shape[1]) - x.shape[1], dtype=torch.float64)], dim=1)
            wrong = torch.softmax(padded, dim=-1)[:, : x.shape[1]]
            if relative_error(got, ref) > rtol and relative_error(got, wrong) <= max(rtol, 1e-4):
                raise ExerciseFailed(
                    f"On {case}: your probabilities sum to less than 1 per row, as if the "
                    "padding lanes past n_cols were loaded as 0: each adds exp(0 - m) to the "
                    "denominator. Load with other=float('-inf'), so they add exp(-inf) = 0.")
        expect_close(got, ref, case, rtol=rtol,
                     advice="Check the mask (cols < n_cols), other=float('-inf'), the row "
                     "offset row * stride_x (the input's row stride, not n_cols), and that the "
                     "store uses the output's row stride and the same mask.")


# --------------------------------------------------------------------------------------------
# Exercise 2: the combine function of tl.reduce
# --------------------------------------------------------------------------------------------


def _lane_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-lane ``(m, d)`` of ``x`` of shape ``(rows, lanes, k)``: max and sum of exp over ``k``
    (an all ``-inf`` lane gives ``(-inf, 0)``)."""
    m = x.amax(dim=-1)
    safe = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    return m, torch.exp(x - safe[..., None]).sum(dim=-1)


def _merged_stats(m: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge per-lane ``(m, d)`` of shape ``(rows, lanes)`` into each row's ``(m, d)``."""
    row_m = m.amax(dim=-1)
    safe = torch.where(torch.isinf(row_m) & (row_m < 0), torch.zeros_like(row_m), row_m)
    return row_m, (d * torch.exp(m - safe[:, None])).sum(dim=-1)


def _combine_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor]]:
    """``(case, x of shape (rows, lanes, k) in float64)``: each lane's values give its stats."""
    lanes = int(torch.randint(20, 70, (1,), generator=g)) | 1
    x = torch.randn(5, lanes, 7, generator=g, dtype=torch.float64)
    holes = x.clone()
    holes[:, 2::5] = NEG_INF  # lanes that saw only masked entries: (-inf, 0)
    empty = x.clone()
    empty[3] = NEG_INF  # a row in which every lane is empty
    return [
        (f"5 rows of {lanes} lanes", x),
        (f"5 rows of {lanes} lanes, values times 1000", x * 1000),
        (f"5 rows of {lanes} lanes, every fifth lane empty (m = -inf, d = 0)", holes),
        (f"5 rows of {lanes} lanes, row 3 entirely empty (expected m = -inf, d = 0)", empty),
        ("3 rows of 1000 lanes (a tree ten levels deep)",
         torch.randn(3, 1000, 3, generator=g, dtype=torch.float64) * 30),
    ]


@exercise(
    "the combine function of tl.reduce over (m, d) pairs",
    hint="It is notebook 03's merge written with tl functions. What happens when both sides are "
         "empty?",
    forbid=("teachkit.kernels.teaching.merge_combine_natural",
            "teachkit.kernels.softmax_kernels.merge_combine",),
)
def check_combine(combine: object) -> None:
    """Reduce lanes of ``(m, d)`` with ``tl.reduce(..., combine)`` in a kernel and compare each
    row's result with the statistics of all its values, computed in float64.

    Parameters
    ----------
    combine
        The learner's ``@triton.jit`` function ``(m_a, d_a, m_b, d_b) -> (m, d)``, with
        ``d = sum exp(x - m)`` (natural units).
    """
    raise_if_stub(combine)
    expect(hasattr(combine, "fn") and callable(getattr(combine, "fn", None)),
           f"{getattr(combine, '__name__', combine)!r} is not a Triton function: put @triton.jit "
           "above def, so tl.reduce can call it inside the kernel.")
    g = fresh_generator()
    for case, x in _combine_cases(g):
        m_lane, d_lane = (s.float() for s in _lane_stats(x))
        # The reference merges the float32 lane statistics the kernel is given, in float64: at
        # values near 1000, rounding m to float32 alone moves exp(m_a - m) by about 1e-4.
        ref_m, ref_d = _merged_stats(m_lane.double(), d_lane.double())
        got_m, got_d = _quiet(teaching.reduce_stats, m_lane.to(DEVICE), d_lane.to(DEVICE),
                              combine)
        got_m, got_d = got_m.cpu(), got_d.cpu()
        bad_nan = torch.isnan(got_d) & ~torch.isnan(ref_d)
        if bool(bad_nan.any()):
            # Two empty lanes can meet anywhere in tl.reduce's tree: lanes that hold nothing, and
            # the padding lanes (-inf, 0) past a lane count that is not a power of two.
            lanes = x.shape[1]
            both_empty = ("empty" in case or bool((m_lane == float("-inf")).sum() > 1)
                          or lanes & (lanes - 1) != 0)
            raise ExerciseFailed(
                f"On {case}: d is NaN in {int(bad_nan.sum())} row(s) where the reference is a "
                "number. " + ("When both sides are empty, m_a = m_b = m = -inf and "
                              "exp(m_a - m) = exp(-inf - (-inf)) = NaN: subtract "
                              "tl.where(m == float('-inf'), 0.0, m) instead of m."
                              if both_empty else
                              "Exponents should be m_side - m <= 0: is the maximum "
                              "tl.maximum(m_a, m_b)?"))
        expect_close(got_m, ref_m, f"{case} (the maximum m)", rtol=1e-6,
                     advice="m is the larger of the two maxima: tl.maximum(m_a, m_b).")
        finite = torch.isfinite(ref_d) & (ref_d > 0)
        if bool(finite.any()):
            ratio = float((got_d[finite].double() / ref_d[finite]).max())
            if ratio > 1.001:
                raise ExerciseFailed(
                    f"On {case}: d is up to {ratio:.3g} times too large. Each side's d was "
                    "measured against its own maximum: multiply it by exp(m_side - m) <= 1 "
                    "before adding (not d_a + d_b, and not exp(m - m_side)).")
        expect_close(got_d, ref_d.float(), f"{case} (the denominator d)", rtol=1e-5,
                     advice="d = d_a * exp(m_a - m) + d_b * exp(m_b - m) with m the new maximum.")


# --------------------------------------------------------------------------------------------
# Exercise 3: how many chunks per row
# --------------------------------------------------------------------------------------------


@exercise(
    "chunks per row to fill the GPU",
    hint="The smallest k that gives the GPU enough programs, then the limit that keeps chunks "
         "long enough, then at least 1.",
    forbid=("teachkit.kernels.softmax_kernels._split_chunk",),
)
def check_n_splits(fn: Callable[[int, int, int], int]) -> None:
    """Compare ``fn(n_rows, n_cols, n_sms)`` with the rule on the benchmark's shapes, tiny and
    random ones, for an H100 (132 SMs), an A100 (108) and a T4 (40).

    Parameters
    ----------
    fn
        The learner's rule: shape and SM count in, chunks per row out.
    """
    g = fresh_generator()
    shapes = [(16384, 1024), (1024, 65536), (64, 1048576), (4, 16777216), (1, 1_000_001),
              (2, 10_007), (4, 3000)]
    shapes += [(int(torch.randint(1, 40, (1,), generator=g)),
                int(torch.randint(5_000, 3_000_000, (1,), generator=g))) for _ in range(5)]
    for n_sms in (132, 108, 40):
        for n_rows, n_cols in shapes:
            case = f"{n_rows} rows x {n_cols} columns on {n_sms} SMs"
            k = fn(n_rows, n_cols, n_sms)
            expect(isinstance(k, int | np.integer) and not isinstance(k, bool) and k >= 1,
                   f"On {case}: expected a whole number >= 1, got {k!r}. Use math.ceil and //, "
                   "and return int(...).")
            k = int(k)
            want = 1  # the smallest k that fills the SMs, unless chunks get too short first
            while n_rows * want < PROGRAMS_PER_SM * n_sms and n_cols // (want + 1) >= MIN_CHUNK:
                want += 1
            if k == want:
                continue
            programs, chunk = n_rows * k, math.ceil(n_cols / k)
            if k > 1 and n_cols // k < MIN_CHUNK:
                raise ExerciseFailed(
                    f"On {case}: {k} chunks are {n_cols // k} columns long, shorter than "
                    f"{MIN_CHUNK}; cap k at n_cols // {MIN_CHUNK} = {n_cols // MIN_CHUNK} "
                    f"(expected {want}).")
            if programs < PROGRAMS_PER_SM * n_sms:
                raise ExerciseFailed(
                    f"On {case}: {programs} programs for {n_sms} SMs; aim for "
                    f"{PROGRAMS_PER_SM} per SM ({PROGRAMS_PER_SM * n_sms}) when chunks of "
                    f"{MIN_CHUNK}+ columns allow it (expected k = {want}, chunks of "
                    f"{math.ceil(n_cols / want)}).")
            raise ExerciseFailed(
                f"On {case}: k = {k} (chunks of {chunk}) is more than needed: {want} chunks "
                f"already give {n_rows * want} programs >= {PROGRAMS_PER_SM} x {n_sms}. Every "
                "extra chunk adds a partial (m, d) to write and merge; take the smallest k.")


# --------------------------------------------------------------------------------------------
# Exercise 4: the resident kernel's rescale
# --------------------------------------------------------------------------------------------


def chunk_statistics(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, ...]:
    """What each program of the resident kernel holds after its first step, for rows ``x``
    ``(rows, G * chunk)`` cut into ``G`` chunks: ``(e, m, d)`` with ``e`` ``(rows, G, chunk)``
    the chunk's ``exp(x - m)``, ``m`` and ``d`` ``(rows, G)`` its maximum and ``sum(e)``. A
    chunk of ``-inf`` has ``m = -inf``, ``e = 0`` and ``d = 0``.

    Examples
    --------
    >>> e, m, d = chunk_statistics(torch.tensor([[0.0, 1.0, float("-inf"), float("-inf")]]), 2)
    >>> m.tolist(), d[0, 1].item(), e[0, 1].tolist()
    ([[1.0, -inf]], 0.0, [0.0, 0.0])
    """
    rows, n = x.shape
    chunks = x.reshape(rows, n // chunk, chunk)
    m = chunks.amax(-1)
    safe = torch.where(m == NEG_INF, torch.zeros_like(m), m)
    e = torch.exp(chunks - safe[..., None])
    return e, m, e.sum(-1)


def _rescale_mistakes(e: torch.Tensor, m: torch.Tensor, d: torch.Tensor
                      ) -> dict[str, torch.Tensor]:
    """The softmax each usual mistake gives on the same statistics."""
    m_row = m.amax(-1, keepdim=True)
    shift = torch.exp(m - m_row)
    d_row = (d * shift).sum(-1, keepdim=True)
    safe = torch.where(m == NEG_INF, torch.zeros_like(m), m)
    return {
        "Each chunk's e is relative to its own maximum m_c: multiply it by exp(m_c - m_row) "
        "before dividing by the row's sum.": e / d_row[..., None],
        "The row's sum adds every chunk's d rescaled to the row's maximum, "
        "d_row = sum_c d_c exp(m_c - m_row), not the plain sum of the d_c.":
            e * shift[..., None] / d.sum(-1, keepdim=True)[..., None],
        "A chunk of -inf has m_c = -inf: its factor exp(m_c - m_row) is 0 as it stands. "
        "Replacing that m_c by 0 makes the factor exp(-m_row), infinite when the row's values "
        "are very negative, and 0 * inf is NaN.":
            e * torch.exp(safe - m_row)[..., None] / d_row[..., None],
    }


def _rescale_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor, int]]:
    """``(case, rows of float64 values, chunk)`` for the rescale checker."""
    chunk = int(torch.randint(5, 12, (1,), generator=g)) | 1
    chunks = int(torch.randint(3, 7, (1,), generator=g))
    rows = int(torch.randint(3, 6, (1,), generator=g))
    base = torch.randn(rows, chunks * chunk, generator=g, dtype=torch.float64)
    spread = base.clone()
    spread[:, :chunk] += 40.0  # the first chunk dominates: the others' factors are tiny
    masked = base * 3 - 1000.0  # very negative values ...
    masked[:, chunk:2 * chunk] = NEG_INF  # ... and a whole chunk of -inf in every row
    empty = base.clone()
    empty[0] = NEG_INF  # a row with nothing in it: NaN, as torch.softmax gives
    return [
        (f"{rows} rows of {chunks} chunks of {chunk} random values", base, chunk),
        (f"{rows} rows whose first chunk is 40 larger than the rest", spread, chunk),
        (f"{rows} rows of values near -1000 with a chunk of -inf in each", masked, chunk),
        (f"{rows} rows, the first all -inf", empty, chunk),
    ]


@exercise(
    "the resident kernel's rescale",
    hint="The row's maximum is the largest chunk maximum; every chunk's weights and sum must be "
         "brought to that maximum before they are added or divided.",
)
def check_resident_rescale(fn: Callable[..., torch.Tensor]) -> None:
    """Check ``fn(e, m, d)`` (what :func:`chunk_statistics` gives) against ``torch.softmax`` of
    the rows the statistics came from, in float64: random rows, a dominant chunk, a chunk of
    ``-inf`` among very negative values, a row of ``-inf`` (NaN). The rows themselves are never
    passed: the softmax has to come from the chunks' statistics.

    Parameters
    ----------
    fn
        The learner's rescale: ``e`` ``(rows, G, chunk)``, ``m`` and ``d`` ``(rows, G)`` in,
        ``(rows, G, chunk)`` probabilities out.
    """
    g = fresh_generator()
    for case, x, chunk in _rescale_cases(g):
        e, m, d = chunk_statistics(x, chunk)
        ref = torch.softmax(x, -1).reshape(e.shape)
        got = _quiet(fn, e.clone(), m.clone(), d.clone())
        expect(isinstance(got, torch.Tensor) and got.shape == e.shape,
               f"On {case}: expected a tensor of shape {tuple(e.shape)} (rows, chunks, "
               f"columns), got {getattr(got, 'shape', type(got).__name__)}.")
        mistake = matching_mistake(got, _rescale_mistakes(e, m, d))
        expect(torch.equal(torch.isnan(got), torch.isnan(ref)),
               f"On {case}: {int(torch.isnan(got).sum())} NaN where torch.softmax gives "
               f"{int(torch.isnan(ref).sum())}. "
               + (mistake or "Only a row that is all -inf has no maximum to rescale to."))
        if mistake and relative_error(got, ref) > 1e-6:
            raise ExerciseFailed(f"On {case}: {mistake}")
        expect_close(got, ref, case, rtol=1e-9,
                     advice="Merge the chunks' (m, d) into the row's, then rescale each chunk.")


# --------------------------------------------------------------------------------------------
# Exercise 5: two floats in one word
# --------------------------------------------------------------------------------------------
def _bits(t: torch.Tensor) -> np.ndarray:
    """The 32 bits of each float32 of ``t``, as unsigned integers."""
    return t.detach().cpu().contiguous().numpy().view(np.uint32).astype(np.uint64)


def _words(high: np.ndarray, low: np.ndarray) -> torch.Tensor:
    """int64 words from 32-bit halves (unsigned integers, NumPy's arithmetic)."""
    return torch.from_numpy(((high << np.uint64(32)) | low).view(np.int64))


def _hex64(word: int) -> str:
    """An int64 word's 64 bits in hexadecimal, 16 digits."""
    return f"{word & 0xFFFFFFFFFFFFFFFF:#018x}"


def _pack_mistakes(m: torch.Tensor, d: torch.Tensor) -> dict[str, torch.Tensor]:
    """The words each usual mistake gives for the same pairs."""
    extended = d.detach().cpu().view(torch.int32).to(torch.int64)  # sign-extended low half
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the casts of inf and NaN below are the mistake
        by_value = ((m.detach().cpu().to(torch.int64) << 32)
                    | (d.detach().cpu().to(torch.int64) & 0xFFFFFFFF))
    return {
        "m belongs in the high half and d in the low half: the word is (m bits << 32) | d bits.":
            _words(_bits(d), _bits(m)),
        "Widening d's int32 bits to int64 copies their top bit into the whole high half when "
        "it is set (a negative d, -0.0, a NaN with its sign set): keep only the low 32 bits "
        "(& 0xFFFFFFFF) before combining.":
            (torch.from_numpy(_bits(m).view(np.int64)) << 32) | extended,
        "The word holds the floats' bits, not their values: read them with "
        ".view(torch.int32); .to() rounds the value (and has no integer for inf or NaN).":
            by_value,
    }


def _pack_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(case, m, d)`` float32 pairs for the pack checker."""
    n = random_int(6, 12, g)
    m = torch.randn(n, generator=g) * 100
    d = torch.rand(n, generator=g) * 50 + 1
    special_m = torch.tensor([float("-inf"), 0.0, -0.0, 1e-40, -3.5, float("nan"), 7.0])
    special_d = torch.tensor([0.0, 1.0, 2.5, 1e-40, 3e38, 1.0, -0.0])
    negative_nan = torch.tensor([-1], dtype=torch.int32).view(torch.float32)  # every bit set
    return [
        (f"{n} pairs of random maxima and sums", m, d),
        ("pairs with -inf, -0.0, subnormals, a huge sum and NaN", special_m, special_d),
        ("a 2 x 3 batch of pairs", m[:6].reshape(2, 3), d[:6].reshape(2, 3)),
        ("a pair whose m and d are NaNs with every bit set", negative_nan, negative_nan.clone()),
    ]


@exercise(
    "two floats in one word",
    hint="The word carries the two floats' bits, not their values: m's 32 bits above d's 32. "
         "Hint 1 below the exercise says how to get at a float's bits.",
)
def check_pack_pair(fn: Callable[..., torch.Tensor]) -> None:
    """Check ``fn(m, d)`` against the resident kernel's packing (``pack_pair``): float32 ``m``
    and ``d`` of one shape in, int64 words of that shape out, each the bits of ``m`` in its high
    32 bits and those of ``d`` in its low 32 bits. The cases include -inf, -0.0, subnormals and
    NaNs, whose bits a conversion of values loses, and a d with its sign bit set. The expected
    words are built from the bits with NumPy, not with a kernel.

    Parameters
    ----------
    fn
        The learner's packing: ``m``, ``d`` float32 tensors in, an int64 tensor out.
    """
    g = fresh_generator()
    for case, m, d in _pack_cases(g):
        m_in, d_in = m.to(DEVICE), d.to(DEVICE)
        got = _quiet(fn, m_in.clone(), d_in.clone())
        expect(isinstance(got, torch.Tensor) and got.dtype == torch.int64
               and got.shape == m.shape,
               f"On {case}: expected an int64 tensor of shape {tuple(m.shape)}, got "
               f"{getattr(got, 'dtype', type(got).__name__)} of shape "
               f"{tuple(getattr(got, 'shape', ()))}.")
        got = got.cpu()
        want = _words(_bits(m), _bits(d)).reshape(m.shape)
        if torch.equal(got, want):
            continue
        wrong = int((got != want).sum())
        first = int((got != want).flatten().nonzero()[0])
        mf, df = m.flatten()[first : first + 1], d.flatten()[first : first + 1]
        detail = (f"{wrong} of {m.numel()} words differ; the first, for m = {mf.item()!r} "
                  f"(bits {int(_bits(mf)[0]):#010x}) and d = {df.item()!r} (bits "
                  f"{int(_bits(df)[0]):#010x}), is {_hex64(got.flatten()[first].item())} where "
                  f"(m bits << 32) | d bits is {_hex64(want.flatten()[first].item())}")
        for advice, words in _pack_mistakes(m, d).items():
            if torch.equal(got, words.reshape(m.shape)):
                raise ExerciseFailed(f"On {case}: {detail}. {advice}")
        raise ExerciseFailed(f"On {case}: {detail}. The hints below the exercise go step by "
                             "step.")


# --------------------------------------------------------------------------------------------
# Exercise 6: two bfloat16 in one word
# --------------------------------------------------------------------------------------------
def _halves_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor]]:
    """``(case, bfloat16 values)``, an even number along the last axis: the words are their
    ``.view(torch.int32)``, two neighbouring values each."""
    n = 2 * random_int(40, 90, g)
    special = torch.tensor([float("-inf"), 1.0, -0.0, 2.5, 3.0e38, -3.0e38, float("inf"), -7.0,
                            0.0, -1.5, float("nan"), 1e-30])
    return [
        (f"{n // 2} words of random values", (torch.randn(n, generator=g) * 100).bfloat16()),
        ("words holding -inf, inf, -0.0, the largest values, negative values and NaN",
         special.bfloat16()),
        ("a 3 x 5 batch of words", (torch.randn(3, 10, generator=g) * 5).bfloat16()),
    ]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def _halves_detail(words: torch.Tensor, got: tuple[torch.Tensor, torch.Tensor],
                   want: tuple[torch.Tensor, torch.Tensor]) -> str:
    """How many ``(low, high)`` pairs differ from ``want`` (bit for bit), and the first of
    them: its word, and what came out against what was expected, values and bits."""
    def bits(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous().view(torch.int32).flatten()

    wrong = (bits(got[0]) != bits(want[0])) | (bits(got[1]) != bits(want[1]))
    first = int(wrong.nonzero()[0])

    def show(pair: tuple[torch.Tensor, torch.Tensor]) -> str:
        return ", ".join(f"{name} = {t.flatten()[first].item()!r} "
                         f"({bits(t)[first].item() & 0xFFFFFFFF:#010x})"
                         for name, t in zip(("low", "high"), pair, strict=True))

    return (f"{int(wrong.sum())} of {wrong.numel()} words give wrong halves; the first, the word "
            f"{words.flatten()[first].item() & 0xFFFFFFFF:#010x}, gives {show(got)} where its "
            f"elements are {show(want)}")


def _halves_mistakes(words: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The ``(low, high)`` float32 each usual mistake gives for int32 ``words`` (bit for bit)."""
    pairs = words.view(torch.bfloat16).float().view(*words.shape, 2)
    low, high = pairs[..., 0], pairs[..., 1]
    return {
        "low and high are swapped. A GPU is little-endian: the element at the even column "
        "(the first of the pair) is in the word's low 16 bits.": (high, low),
        "the high element still carries the low element's 16 bits below it (the whole word read "
        "as a float32): clear them with & -65536 (0xFFFF0000 as an int32) first.":
            (low, words.view(torch.float32)),
        "the low element's 16 bits must become the top half of the float32: shift them up "
        "(words << 16); masked in place they read as a tiny subnormal.":
            ((words & 0xFFFF).view(torch.float32), high),
    }


@exercise(
    "two bfloat16 in one word",
    hint="No value is converted here, bits only move: where are each element's 16 bits in the "
         "word, and where must they be for a float32 of the same value? The hints below the "
         "exercise go further.",
    forbid=("teachkit.kernels.softmax_kernels.halves",),
)
def check_halves(fn: object) -> None:
    """Run the learner's ``@triton.jit`` function ``words -> (low, high)`` in a kernel
    (:func:`teachkit.kernels.teaching.bf16_halves`) on int32 words made from bfloat16 values,
    and compare bit for bit with the values' float32: ``low`` the element at the even column
    (the word's low 16 bits), ``high`` the odd one. The cases include -inf, inf, -0.0, the
    largest values and NaN; the expected floats are torch's conversion of the bfloat16 values,
    not a kernel's.

    Parameters
    ----------
    fn
        The learner's ``@triton.jit`` function of one int32 tensor, returning two float32
        tensors of its shape.
    """
    raise_if_stub(fn)
    expect(callable(getattr(fn, "fn", None)),
           f"{getattr(fn, '__name__', fn)!r} is not a Triton function: put @triton.jit above "
           "def, so the checker's kernel can call it.")
    g = fresh_generator()
    for case, values in _halves_cases(g):
        words = values.view(torch.int32)
        pairs = values.float().view(*words.shape, 2)
        low, high = (t.cpu() for t in _quiet(teaching.bf16_halves, values.to(DEVICE), fn))
        if _same_bits(low, pairs[..., 0]) and _same_bits(high, pairs[..., 1]):
            continue
        detail = _halves_detail(words, (low, high), (pairs[..., 0], pairs[..., 1]))
        for advice, (mistake_low, mistake_high) in _halves_mistakes(words).items():
            if _same_bits(low, mistake_low) and _same_bits(high, mistake_high):
                raise ExerciseFailed(f"On {case}: {detail}. {advice}")
        if torch.allclose(low, words.double().float(), rtol=1e-2, equal_nan=True):
            raise ExerciseFailed(
                f"On {case}: {detail}. low is the word's integer value converted to a float. "
                "Read the bits instead: .to(tl.float32, bitcast=True) keeps them, "
                ".to(tl.float32) converts the number they spell.")
        raise ExerciseFailed(f"On {case}: {detail}. The hints below the exercise go step by "
                             "step.")


# --------------------------------------------------------------------------------------------
# Exercise 2b: the two-pass online kernel
# --------------------------------------------------------------------------------------------

ONLINE_BLOCK = 256
"""The block exercise 2b's checker launches with: rows of a few thousand columns take many."""
_ONLINE_SIGNATURE = "(X, Y, n_cols, stride_x, stride_y, BLOCK)"


def _padded_blocks(x: torch.Tensor, block: int, fill: float) -> torch.Tensor:
    """``x`` ``(rows, n)`` padded with ``fill`` to whole blocks, as ``(rows, blocks, block)``."""
    pad = (-x.shape[1]) % block
    full = torch.cat([x, x.new_full((x.shape[0], pad), fill)], dim=1)
    return full.reshape(x.shape[0], -1, block)


def _exp_or_zero(t: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``exp(t - shift)`` with 0 where ``t`` is ``-inf``."""
    return torch.where(t == NEG_INF, torch.zeros_like(t), torch.exp(t - shift))


def _online_mistakes(x: torch.Tensor, block: int) -> dict[str, torch.Tensor]:
    """Usual wrong answers of a two-pass kernel on ``x`` ``(rows, n)`` float64 with no ``-inf``,
    for both designs: per-lane ``(m, d)`` vectors and one scalar ``(m, d)`` per row."""
    n = x.shape[1]
    xb = _padded_blocks(x, block, NEG_INF)                   # (rows, blocks, block)
    m_row = x.amax(dim=1, keepdim=True)                      # (rows, 1)
    lane_run = torch.cummax(xb, dim=1).values                # each lane's running maximum
    lane_m = lane_run[:, -1]                                 # (rows, block)
    scalar_run = torch.cummax(xb.amax(dim=2), dim=1).values  # (rows, blocks)
    lane_d = _exp_or_zero(xb, lane_m[:, None]).sum(dim=1)    # exact per-lane d
    unscaled_lanes = _exp_or_zero(xb, lane_run).sum(dim=1)   # d += exp(x - m_new), no rescale
    d_no_rescale_lanes = (unscaled_lanes * torch.exp(lane_m - m_row)).sum(dim=1, keepdim=True)
    d_no_rescale_scalar = _exp_or_zero(xb, scalar_run[..., None]).sum(dim=(1, 2))[:, None]

    def normalised(d: torch.Tensor) -> torch.Tensor:
        return torch.exp(x - m_row) / d

    zero_pad = torch.softmax(_padded_blocks(x, block, 0.0).reshape(x.shape[0], -1), dim=1)
    rescale = ("When the maximum grows, the d summed so far was measured against the old "
               "maximum: multiply it by exp(m_old - m_new) before adding exp(x - m_new).")
    return {
        "d was not rescaled when the running maximum grew (each term was added as "
        "exp(x - m_new) but the old sum kept its old maximum). " + rescale:
            normalised(d_no_rescale_lanes),
        "d was not rescaled when the running maximum grew. " + rescale:
            normalised(d_no_rescale_scalar),
        "the lanes' d were added without rescaling: each lane's d was measured against that "
        "lane's own maximum. Merge them at the row's maximum, sum_j d_j * exp(m_j - m_row) "
        "(or tl.reduce with exercise 2's combine).": normalised(lane_d.sum(dim=1, keepdim=True)),
        "your probabilities sum to less than 1 per row, as if the lanes past n_cols in the last "
        "block were loaded as 0: each adds exp(0 - m) to d. Load with other=float('-inf'), so "
        "they add exp(-inf) = 0.": zero_pad[:, :n],
    }


def _online_cases(g: torch.Generator, block: int) -> list[tuple[str, torch.Tensor, float, str]]:
    """``(case, x (rows, n) on the CPU, rtol, advice)``."""
    n = random_int(2000, 3000, g) | 1  # odd: never a whole number of blocks
    whole = block * random_int(8, 11, g)
    rows = 3
    rising = torch.linspace(0, 40, whole).repeat(rows, 1) + torch.rand(rows, whole, generator=g)
    prefix = torch.randn(rows, n, generator=g)
    prefix[:, : 2 * block + 37] = NEG_INF  # every lane's first blocks hold nothing
    prefix[:, 1::3] = NEG_INF
    short = torch.randn(rows, 100, generator=g)
    short[1] = NEG_INF  # a row with nothing: NaN, as torch.softmax
    guard = ("A lane (or the row) that has seen only -inf has m = -inf, and exp(-inf - (-inf)) "
             "is NaN: subtract shift = tl.where(m_new == float('-inf'), 0.0, m_new) instead.")
    return [
        (f"{rows} random rows of {n} values", torch.randn(rows, n, generator=g), 1e-5, ""),
        (f"{rows} rows of {whole} values rising along the row (the maximum grows in every "
         "block)", rising, 1e-5, "Rescale d by exp(m_old - m_new) whenever the maximum grows."),
        (f"{rows} rows of {n} values around -10 (the lanes past n_cols in the last block must "
         "add nothing)", torch.randn(rows, n, generator=g) - 10.0, 1e-5,
         "Load with mask=cols < n_cols and other=float('-inf')."),
        (f"{rows} rows of {n} values times 1000", torch.randn(rows, n, generator=g) * 1000,
         1e-5, "Subtract the running maximum inside every exp: exp(x - m)."),
        (f"{rows} rows of {n} values whose first {2 * block + 37} entries and every third "
         "are -inf", prefix, 1e-5, guard),
        (f"{rows} rows of 100 values (shorter than one block), row 1 all -inf (expected NaN, "
         "as torch.softmax)", short, 1e-5, guard),
        (f"{rows} rows of {n} values in bfloat16", (torch.randn(rows, n, generator=g) * 4)
         .bfloat16(), 1e-2, "Keep m and d in float32: .to(tl.float32) after the load."),
        (f"{rows} rows of {n} values in float16", (torch.randn(rows, n, generator=g) * 4).half(),
         2e-3, "Keep m and d in float32: .to(tl.float32) after the load."),
    ]


def _loops(fn: object, seen: set[int] | None = None) -> int:
    """Loops (``for`` and ``while``) in a ``@triton.jit`` function's source and in the learner's
    ``@triton.jit`` functions it calls, once per call (0 if the source cannot be read). What the
    checker falls back on where it cannot count loads (compiled kernels, on a GPU)."""
    seen = set() if seen is None else seen
    target = getattr(fn, "fn", fn)
    if id(target) in seen:
        return 0
    seen.add(id(target))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    except (OSError, TypeError, SyntaxError):
        return 0
    names = getattr(target, "__globals__", {})
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.While):
            total += 1
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = names.get(node.func.id)
            module = getattr(getattr(callee, "fn", None), "__module__", "") or ""
            if callee is not None and hasattr(callee, "fn") and not module.startswith(
                    ("triton", "teachkit")):
                total += _loops(callee, seen)
    return total


def _online_buffers(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input, output)`` CPU buffers for the rows of ``x``, each row wider than ``x``'s by
    more than a block: the input holds ``x`` and NaN past it (so an unmasked load shows), the
    output :data:`~teachkit.exercises.launching.SENTINEL` (so a store past the row shows)."""
    rows, n = x.shape
    wide = torch.full((rows, n + block + 3), float("nan"), dtype=x.dtype)
    wide[:, :n] = x
    return wide, torch.full(wide.shape, SENTINEL, dtype=x.dtype)


def _online_reads(kernel: object, x: torch.Tensor, block: int) -> int | None:
    """How many times ``kernel`` loads an element of the rows of ``x`` (from ``X`` and ``Y``
    together, the most of any element), counted while Triton's interpreter runs it on CPU
    buffers laid out as the checker's (:func:`~teachkit.exercises.load_counting.count_loads`);
    ``None`` where the interpreter cannot run it (then the checker counts loops instead)."""
    rows, n = x.shape
    wide, out = _online_buffers(x, block)
    counts = count_loads(kernel, (rows,), (wide, out), wide, out, n, wide.stride(0),
                         out.stride(0), BLOCK=block)
    if counts is None or int(sum(c.sum() for c in counts)) == 0:
        return None
    return int((counts[0][:, :n] + counts[1][:, :n]).max())


def _reads_message(reads: int) -> str:
    """What to say about a kernel that gives the right numbers but reads each element ``reads``
    times (counted), instead of twice."""
    if reads < 2:
        return (f"Your kernel gives the right numbers, but it read each element of a row "
                f"{'once' if reads == 1 else 'not at all'} (the checker counted its loads "
                "while it ran): it holds the whole row at once, which works only on rows "
                "short enough for one block. Read the row in blocks of BLOCK columns, once "
                "for (m, d) and once for the output.")
    return (f"Your kernel gives the right numbers, but it read each element of a row {reads} "
            "times (the checker counted its loads from X and Y while it ran), where a two-pass "
            "kernel reads it twice: once for (m, d), once for the output. Does it take the "
            "maximum in one pass and the sum in another (or load a block twice in one pass)? "
            "Keep the maximum and the sum together in one pass with the online update (Hint 1 "
            "below the exercise).")


@exercise(
    "the two-pass online softmax kernel",
    hint="Pass 1 is notebook 03's online update on a block at a time; pass 2 reads the row again. "
    "What must a lane past the row's end hold so it changes neither m nor d?",
    forbid=("teachkit.kernels.softmax_kernels.online_kernel",
            "teachkit.kernels.softmax_kernels.online_update",
            "teachkit.kernels.softmax_kernels.row_stats",
            "teachkit.kernels.softmax_kernels.blog_kernel",
            "teachkit.kernels.softmax_kernels.fused_kernel"),
)
def check_online_kernel(kernel: object) -> None:
    """Launch the learner's ``@triton.jit`` kernel ``(X, Y, n_cols, stride_x, stride_y, BLOCK)``
    with one program per row and ``BLOCK = 256`` on rows of a few thousand columns (never a whole
    number of blocks), and compare with ``torch.softmax`` in float64.

    Every input sits in a buffer wider than the row, NaN past ``n_cols`` (so an unmasked load
    shows), rows further apart than ``n_cols``; the output sits in a buffer of
    :data:`~teachkit.exercises.launching.SENTINEL` (so a store past the row shows). Cases:
    random rows, rows whose maximum grows block after block, negative rows (padding read as 0
    shows), values times 1000, ``-inf`` prefixes and holes, a row shorter than one block and an
    all ``-inf`` row, bfloat16 and float16. A kernel that gives the right numbers must also
    read each element twice: the checker runs it once more on the first case's rows under
    Triton's interpreter (on a GPU, an interpreted twin of the compiled kernel) and counts the
    loads from ``X`` and ``Y`` of every element (however the loops are written, in the kernel
    or in functions it calls). Only where the interpreter cannot run it does it fall back on
    counting the ``for`` and ``while`` loops of the kernel and of the ``@triton.jit`` functions
    it calls.

    Parameters
    ----------
    kernel
        The learner's ``@triton.jit`` function.
    """
    require_kernel(kernel, _ONLINE_SIGNATURE)
    g = fresh_generator()
    block = ONLINE_BLOCK
    reads = None  # loads per element of the first case's rows, X's and Y's together
    for index, (case, x, rtol, advice) in enumerate(_online_cases(g, block)):
        rows, n = x.shape
        wide, out = (buffer.to(DEVICE) for buffer in _online_buffers(x, block))
        x_dev = wide[:, :n]
        launch(kernel, (rows,), case, x_dev, out, n, x_dev.stride(0), out.stride(0),
               BLOCK=block,
               advice=f"The kernel's arguments are {_ONLINE_SIGNATURE}; grid (n_rows,).")
        if index == 0:
            reads = _online_reads(kernel, x, block)
        outside = torch.zeros(out.shape, dtype=torch.bool)
        outside[:, n:] = True
        expect_untouched(out, outside, case,
                         f"your kernel stored past column {n - 1} of a row. The last block runs "
                         "past n_cols: store with mask=cols < n_cols, at Y + row * stride_y.")
        got = out.cpu()[:, :n]
        ref = torch.softmax(x.double(), dim=-1)
        bad_nan = torch.isnan(got) & ~torch.isnan(ref)
        if bool(bad_nan.any()):
            raise ExerciseFailed(
                f"On {case}: NaN where the reference is finite. "
                + (advice if "-inf" in case or "1000" in case else
                   "The checker fills the memory past n_cols with NaN, as any memory may hold: "
                   "load with mask=cols < n_cols, other=float('-inf'), and start each row at "
                   "X + row * stride_x (stride_x is not n_cols here)."))
        if x.dtype == torch.float32 and "-inf" not in case and relative_error(got, ref) > rtol:
            mistake = matching_mistake(got, _online_mistakes(x.double(), block), rtol=1e-4)
            if mistake:
                raise ExerciseFailed(f"On {case}: your result matches a usual mistake: "
                                     + mistake)
        expect(got.dtype == x.dtype, f"On {case}: Y is {x.dtype}; store y.to(Y.dtype.element_ty).")
        expect_close(got, ref, case, rtol=rtol,
                     advice=advice or "Rows start at X + row * stride_x and Y + row * "
                     "stride_y; m and d in float32; merge the lanes at the row's maximum.")
    if reads is not None:
        expect(reads == 2, _reads_message(reads))
        return
    loops = _loops(kernel)  # the interpreter could not run it: its loops can still be counted
    expect(loops <= 2,
           f"Your kernel gives the right numbers, but it has {loops} loops (for or while, "
           "counting those of the @triton.jit functions it calls): one for the maximum, one "
           "for the sum and one for the output read the row three times. Keep the maximum and "
           "the sum together in one loop with the online update (Hint 1 below the exercise), "
           "so the row is read twice.")


# --------------------------------------------------------------------------------------------
# Exercise 7: writing behind
# --------------------------------------------------------------------------------------------

BEHIND_GRIDS = ((4, 6, 5), (3, 3, 4), (6, 8, 7), (1, 4, 6), (5, 5, 1))
"""``(chunks a row, programs, rows)`` of the grids exercise 7's checker runs the learner's order
on: rows that straddle rounds, a row a round, single-chunk rows, a program with one item."""


def _record_steps(fn: Callable[..., object], items: list[int]) -> list[tuple[str, int]]:
    """The calls ``fn(items, publish, wait_row, write)`` makes, as ``(step, item)`` in order;
    an item that is not one of ``items`` (or not an int) fails at once, naming the step."""
    steps: list[tuple[str, int]] = []

    def step(kind: str) -> Callable[[int], None]:
        def call(item: int) -> None:
            expect(isinstance(item, int) and not isinstance(item, bool) and item in items,
                   f"{kind}({item!r}): this program's items are {items}; call {kind} with one "
                   "of them.")
            steps.append((kind, item))
        return call

    fn(list(items), step("publish"), step("wait_row"), step("write"))
    return steps


def _order_mistake(steps: list[tuple[str, int]], items: list[int]) -> str | None:
    """What is wrong with one program's steps for ``items``, or ``None``: each item published
    once and in turn, waited for after it is published, written once after that wait, at most
    two chunks held (published, not yet written), and the next item published before the wait
    for the one before."""
    for kind in ("publish", "wait_row", "write"):
        done = [item for step, item in steps if step == kind]
        if sorted(done) != items:
            missing = sorted(set(items) - set(done))
            twice = sorted({item for item in done if done.count(item) > 1})
            return (f"{kind} was called for {done}, but each of the program's items {items} "
                    f"needs it once" + (f" (missing {missing})" if missing else "")
                    + (f" (twice: {twice})" if twice else "") + ".")
    published = [item for step, item in steps if step == "publish"]
    if published != items:
        return (f"the items were published in the order {published}; a program takes its "
                f"items in turn ({items}): its next chunk is the one TMA copies for it.")
    at = {(step, item): n for n, (step, item) in enumerate(steps)}
    held = 0
    for step, item in steps:
        if step == "wait_row" and at["wait_row", item] < at["publish", item]:
            return (f"wait_row({item}) comes before publish({item}): the row of item {item} "
                    "waits for that item's own pair, so it would wait for ever.")
        if step == "write" and at["write", item] < at["wait_row", item]:
            return (f"write({item}) comes before wait_row({item}): the results need the whole "
                    "row's (m, d), which only the wait brings.")
        held += {"publish": 1, "write": -1}.get(step, 0)
        if held > 2:
            return (f"after publish({item}) the program holds {held} chunks (published, not "
                    "yet written); its registers hold two. Write each item before publishing "
                    "the one two after it.")
    for before, after in zip(items[:-1], items[1:], strict=True):
        if at["wait_row", before] < at["publish", after]:
            return (f"wait_row({before}) comes before publish({after}): that is the plain "
                    "order, where every program of the row waits with nothing in hand. Publish "
                    f"item {after}'s pair first, then wait for item {before}'s row and write it.")
    return None


@exercise(
    "writing behind",
    hint="Each item is written one turn late: what must a program remember from one turn to "
         "the next, and what is left to do after its last turn?",
    forbid=("teachkit.plots.write_behind.program_steps",),
)
def check_write_behind(fn: Callable[..., object]) -> None:
    """Run ``fn(items, publish, wait_row, write)``, one program's turns written behind, for
    every program of a few persistent grids (:data:`BEHIND_GRIDS`), recording its calls, and
    check them (:func:`_order_mistake`): each item published in turn, waited for after that, and
    written after the wait; at most two chunks held; each next item published before the wait
    for the row of the one before. Those rules leave one order, and no program of it waits for
    ever (notebook 06 gives the argument).

    Parameters
    ----------
    fn
        The learner's program: ``items`` (its item numbers in turn) and three functions of an
        item, ``publish`` (its chunk summed and its pair published), ``wait_row`` (until every
        pair of its row is published) and ``write`` (its results), to call in the right order.
    """
    for chunks, programs, rows in BEHIND_GRIDS:
        case = f"rows of {chunks} chunks, {programs} programs, {rows} rows"
        for p in range(programs):
            items = list(range(p, rows * chunks, programs))
            mistake = _order_mistake(_record_steps(fn, items), items)
            expect(mistake is None, f"On {case}, program {p} (items {items}): {mistake}")
