r"""Exercises of notebook 03, the online softmax: the online step, the merge, the warp butterfly.

Each exercise has a checker ``check_<name>(fn)`` here and a solution ``solution_<name>`` in
:mod:`teachkit.exercises.solutions.ex03`:

* :func:`check_online_step` -- one step of the running update
  :math:`m_j = \max(m_{j-1}, x_j)`, :math:`d_j = d_{j-1} e^{m_{j-1}-m_j} + e^{x_j - m_j}`;
* :func:`check_merge` -- merging the statistics of two parts of a row;
* :func:`check_warp_allreduce` -- the butterfly (``lane ^ offset``) reduction of one warp,
  written as the code of one lane that reaches the others only through ``shfl_xor``.

The checkers feed fresh random rows of odd lengths, rows scaled by 1000, ``-inf`` masks and
all-masked parts, and compare with :func:`teachkit.softmax.softmax_stats` of the whole row,
computed in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..compare import relative_error
from ..softmax import exp_shift, softmax_stats
from .checking import (
    ExerciseFailed,
    call_learner,
    exercise,
    expect,
    expect_close,
    expect_stats_pair,
    fresh_generator,
    matching_mistake,
)

__all__ = [
    "check_online_step",
    "check_merge",
    "check_warp_allreduce",
]

Stats = tuple[torch.Tensor, torch.Tensor]
NEG_INF = float("-inf")


def _nan_check(d: torch.Tensor, ref_d: torch.Tensor, case: str, advice: str) -> None:
    """Raise with ``advice`` when ``d`` has NaN where the reference is a number."""
    bad = torch.isnan(d.detach().cpu()) & ~torch.isnan(ref_d.cpu())
    expect(
        not bool(bad.any()),
        f"On {case}: {int(bad.sum())} NaN value(s) in d where the reference is a number.\n  "
        + advice,
    )


def _check_stats(
    got: Stats,
    ref: Stats,
    case: str,
    rtol: float,
    advice_d: str,
    mistakes: dict[str, torch.Tensor] | None = None,
    advice_m: str = "m is the largest value seen: torch.maximum of the two maxima.",
    advice_nan: str | None = None,
) -> None:
    """Compare ``(m, d)`` with the float64 reference: NaN first, then ``m``, then ``d``.

    ``mistakes`` maps an explanation to the ``d`` a typical wrong answer gives on this case;
    a learner's ``d`` that matches one gets that explanation. ``advice_nan`` (default
    ``advice_d``) explains NaN in ``d``.
    """
    m, d = got
    ref_m, ref_d = ref
    _nan_check(m, ref_m, case, "m should be a running maximum, which is never NaN: "
               "use torch.maximum(m_old, x).")
    _nan_check(d, ref_d, case, advice_nan or advice_d)
    overflow = torch.isinf(d.detach().cpu()) & torch.isfinite(ref_d.cpu())
    expect(
        not bool(overflow.any()),
        f"On {case}: d is inf where the reference is finite: exp overflowed. Subtract the "
        "(new) maximum before exp, so every exponent is at most 0.",
    )
    if relative_error(d, ref_d) > rtol:
        explanation = matching_mistake(d, mistakes or {}, rtol=1e-4)
        if explanation:
            raise ExerciseFailed(f"On {case}: {explanation}")
    expect_close(m, ref_m, f"{case} (the maximum m)", rtol=rtol, advice=advice_m)
    expect_close(d, ref_d, f"{case} (the denominator d)", rtol=rtol, advice=advice_d)


# --------------------------------------------------------------------------------------------
# Exercise 1: the online step
# --------------------------------------------------------------------------------------------


def _step_cases(g: torch.Generator) -> list[tuple[str, torch.Tensor, torch.dtype, float]]:
    """``(case, rows, dtype of the running state, rtol)`` for the online-step checker."""
    n = int(torch.randint(31, 80, (1,), generator=g)) | 1  # an odd length
    base = torch.randn(5, n, generator=g, dtype=torch.float64)
    masked = base.clone()
    masked[0, :7] = NEG_INF  # a masked prefix
    masked[1, 3::4] = NEG_INF  # scattered masked entries
    all_masked = base.clone()
    all_masked[2] = NEG_INF
    return [
        (f"5 random rows of {n} values (float32)", base.float(), torch.float32, 1e-5),
        (f"5 random rows of {n} values times 1000 (float32)", (base * 1000).float(),
         torch.float32, 1e-5),
        (f"5 random rows of {n} values (float64)", base, torch.float64, 1e-12),
        (f"a (2, 3) batch of rows of {n} values (float32)",
         torch.randn(2, 3, n, generator=g).float(), torch.float32, 1e-5),
        (f"bfloat16 scores of {n} values with a float32 running state",
         (base * 8).bfloat16(), torch.float32, 1e-5),
        ("rows whose first 7 entries are -inf (a masked prefix)", masked.float(),
         torch.float32, 1e-5),
        ("a batch where row 2 is entirely -inf (expected m = -inf, d = 0)", all_masked.float(),
         torch.float32, 1e-5),
    ]


def _step_mistakes(rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """The final ``d`` that two typical wrong online steps give on ``rows`` (float64)."""
    x = rows.double()
    m = torch.full(x.shape[:-1], NEG_INF, dtype=torch.float64)
    d_keep = d_flip = torch.zeros(x.shape[:-1], dtype=torch.float64)
    for j in range(x.shape[-1]):
        m_new = torch.maximum(m, x[..., j])
        d_keep = d_keep + exp_shift(x[..., j], m_new)
        d_flip = d_flip * torch.where(m == NEG_INF, 0.0, torch.exp(m_new - m)) + exp_shift(
            x[..., j], m_new)
        m = m_new
    return {
        "your d matches adding exp(x - m_new) without rescaling the old d. When the maximum "
        "grows, the terms already in d were measured against the old maximum: multiply d by "
        "exp(m_old - m_new) first.": d_keep,
        "your d matches rescaling by exp(m_new - m_old), which is at least 1 and inflates d. "
        "The old terms shrink when the maximum grows: the factor is exp(m_old - m_new) <= 1.":
        d_flip,
    }


@exercise(
    "the online step (m, d, x) -> (m, d)",
    hint="Reading x may raise the running maximum. The old d was measured from the old maximum: "
         "what factor moves it to the new one?",
    forbid=("teachkit.softmax.merge_stats", "teachkit.softmax.online_stats",
            "teachkit.softmax.online_prefix_stats", "teachkit.softmax.merge_lse",),
)
def check_online_step(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Stats]) -> None:
    """Feed rows to ``fn(m, d, x)`` element by element, from ``(-inf, 0)``, and compare the final
    ``(m, d)`` with the float64 statistics of the whole row.

    Parameters
    ----------
    fn
        The learner's step: running ``(m, d)`` and the next element of each row (all of one
        shape) in, updated ``(m, d)`` out.
    """
    g = fresh_generator()
    for case, rows, state_dtype, rtol in _step_cases(g):
        m = torch.full(rows.shape[:-1], NEG_INF, dtype=state_dtype)
        d = torch.zeros(rows.shape[:-1], dtype=state_dtype)
        for j in range(rows.shape[-1]):
            m, d = expect_stats_pair(fn(m, d, rows[..., j]), case, "online_step")
            expect(
                m.shape == rows.shape[:-1] and d.shape == rows.shape[:-1],
                f"On {case}: after step {j + 1}, (m, d) have shapes {tuple(m.shape)} and "
                f"{tuple(d.shape)}, expected {tuple(rows.shape[:-1])} (one entry per row). "
                "Work elementwise; do not reduce over the rows.",
            )
        ref = softmax_stats(rows.double())
        masked = "-inf" in case
        _check_stats(
            (m, d), ref, case, rtol, mistakes=_step_mistakes(rows), advice_d=(
                "While m_old and m_new are both -inf, exp(m_old - m_new) = exp(NaN): make that "
                "factor 0 (torch.where(m_new == -inf, 0, ...) or teachkit.softmax.exp_shift)."
                if masked else
                "Did you subtract the new maximum before exp (exp(x - m_new), not exp(x)), and "
                "rescale the old d by exp(m_old - m_new) (not exp(m_new - m_old)) before adding "
                "the new term?"
            ),
        )


# --------------------------------------------------------------------------------------------
# Exercise 2: the merge of two partial statistics
# --------------------------------------------------------------------------------------------


MERGE_ADVICE = (
    "Each d is a sum relative to its own part's maximum: bring both to the common maximum, "
    "d = d_a * exp(m_a - m) + d_b * exp(m_b - m) with m = max(m_a, m_b); adding d_a + d_b, or "
    "using exp(m - m_a), mixes frames."
)
MASK_ADVICE = (
    "An all-masked part has (m, d) = (-inf, 0); with m = -inf too, exp(m_a - m) is exp(NaN). "
    "Make that factor 0 (torch.where(m == -inf, 0, ...) or teachkit.softmax.exp_shift)."
)


def _random_cuts(n: int, pieces: int, g: torch.Generator) -> list[int]:
    """Sizes of ``pieces`` non-empty consecutive parts of ``range(n)``."""
    cuts = sorted(torch.randperm(n - 1, generator=g)[: pieces - 1].add(1).tolist())
    edges = [0, *cuts, n]
    return [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _random_tree(
    items: list[Stats], merge: Callable[..., object], case: str, g: torch.Generator
) -> Stats:
    """Merge neighbouring items in a random order until one is left (a random grouping)."""
    items = list(items)
    while len(items) > 1:
        i = int(torch.randint(len(items) - 1, (1,), generator=g))
        a, b = items[i], items[i + 1]
        items[i : i + 2] = [expect_stats_pair(merge(a[0], a[1], b[0], b[1]), case, "merge")]
    return items[0]


@exercise(
    "the merge of two partial statistics (m_a, d_a, m_b, d_b) -> (m, d)",
    hint="Both parts' d are sums of exponentials, each measured from its own maximum. Bring them "
         "to a common reference before adding.",
    forbid=("teachkit.softmax.merge_stats", "teachkit.softmax.merge_lse",
            "teachkit.softmax.reduce_stats", "teachkit.cute.simulate.block_merge",),
)
def check_merge(fn: Callable[..., Stats]) -> None:
    """Check ``fn(m_a, d_a, m_b, d_b)`` against the float64 statistics of the concatenated parts,
    and that it is commutative, associative and has the identity ``(-inf, 0)`` (without NaN).

    Parameters
    ----------
    fn
        The learner's merge.
    """
    g = fresh_generator()
    n_a = int(torch.randint(20, 60, (1,), generator=g)) | 1
    n_b = n_a + 2 * int(torch.randint(1, 20, (1,), generator=g))  # odd, different length
    a = torch.randn(5, n_a, generator=g, dtype=torch.float64)
    b = torch.randn(5, n_b, generator=g, dtype=torch.float64) + 1.5
    masked_b = b.clone()
    masked_b[1] = NEG_INF  # one row of part b entirely masked
    masked_b[3, ::2] = NEG_INF

    cases = [
        (f"5 rows, parts of {n_a} and {n_b} values (float32 stats)", a, b, torch.float32, 1e-5),
        (f"5 rows, parts of {n_a} and {n_b} values times 1000 (float32 stats)", a * 1000,
         b * 1000, torch.float32, 1e-5),
        (f"5 rows, parts of {n_a} and {n_b} values (float64 stats)", a, b, torch.float64, 1e-12),
        (f"a (2, 3) batch of parts of {n_a} and {n_b} values", a[:2, None].expand(2, 3, n_a),
         torch.randn(2, 3, n_b, generator=g, dtype=torch.float64), torch.float32, 1e-5),
        ("part b with one all -inf row and half-masked rows", a, masked_b, torch.float32, 1e-5),
    ]
    for case, xa, xb, dtype, rtol in cases:
        # Round the data to the stats' dtype first, so the reference sees the same numbers.
        xa, xb = xa.to(dtype).double(), xb.to(dtype).double()
        sa = tuple(t.to(dtype) for t in softmax_stats(xa))
        sb = tuple(t.to(dtype) for t in softmax_stats(xb))
        ref = softmax_stats(torch.cat([xa, xb], dim=-1))
        advice = MASK_ADVICE if "-inf" in case else MERGE_ADVICE
        got = expect_stats_pair(fn(*sa, *sb), case, "merge")
        m_ab = torch.maximum(sa[0], sb[0])
        mistakes = {
            "your d matches d_a + d_b. The two sums are measured against different maxima "
            "(m_a and m_b): rescale each by exp(m_part - max(m_a, m_b)) before adding.":
            sa[1] + sb[1],
            "your d matches the larger part's d alone: the smaller part's d must be added too, "
            "scaled by exp(m_small - m).": torch.where(sa[0] >= sb[0], sa[1], sb[1]),
        }
        if "-inf" not in case:
            mistakes["your d matches rescaling by exp(m - m_part), which is at least 1: the "
                     "factor is exp(m_part - m) <= 1."] = (
                sa[1] * torch.exp(m_ab - sa[0]) + sb[1] * torch.exp(m_ab - sb[0]))
        _check_stats(got, ref, case, rtol, advice, mistakes=mistakes)
        swapped = expect_stats_pair(fn(*sb, *sa), case + ", parts swapped", "merge")
        for name, u, v in (("m", got[0], swapped[0]), ("d", got[1], swapped[1])):
            expect(
                relative_error(u, v) <= 1e-6,
                f"On {case}: merge(a, b) and merge(b, a) give different {name} (relative "
                f"difference {relative_error(u, v):.3g}); the merge must not depend on the "
                "order of its parts. Treat both parts the same way.",
            )

    # Associativity: one row cut into random pieces, merged in different groupings.
    n = int(torch.randint(150, 260, (1,), generator=g)) | 1
    row = (torch.randn(3, n, generator=g, dtype=torch.float64) * 4).float().double()
    row[:, :5] = NEG_INF
    sizes = _random_cuts(n, 9, g)
    parts = [tuple(t.float() for t in softmax_stats(p)) for p in row.split(sizes, dim=-1)]
    ref = softmax_stats(row)
    case = f"3 rows of {n} values, the first 5 masked, cut into pieces of sizes {sizes}"
    acc = parts[0]
    for p in parts[1:]:
        acc = expect_stats_pair(fn(*acc, *p), case, "merge")
    _check_stats(acc, ref, case + ", merged left to right", 1e-5, MERGE_ADVICE,
                 advice_nan=MASK_ADVICE)
    for k in range(3):
        got = _random_tree(parts, fn, case, g)
        _check_stats(got, ref, f"{case}, merged in random grouping #{k + 1}", 1e-5,
                     MERGE_ADVICE, advice_nan=MASK_ADVICE)

    # The identity: merging with an empty or all-masked part (-inf, 0) changes nothing.
    m, d = (t.float() for t in softmax_stats(a))
    empty_m, empty_d = torch.full_like(m, NEG_INF), torch.zeros_like(d)
    for case, args in (
        ("merge((m, d), (-inf, 0))", (m, d, empty_m, empty_d)),
        ("merge((-inf, 0), (m, d))", (empty_m, empty_d, m, d)),
    ):
        got = expect_stats_pair(fn(*args), case, "merge")
        _check_stats(got, (m.double(), d.double()), f"{case}: the identity", 1e-6, MASK_ADVICE)
    got_m, got_d = expect_stats_pair(fn(empty_m, empty_d, empty_m, empty_d), "two empty parts",
                                     "merge")
    _nan_check(got_d, empty_d, "merge((-inf, 0), (-inf, 0))", MASK_ADVICE)
    expect(
        bool((got_m == NEG_INF).all()) and bool((got_d == 0).all()),
        "On merge((-inf, 0), (-inf, 0)): expected (-inf, 0), the statistics of an empty row; "
        f"got m = {got_m.flatten()[0].item()}, d = {got_d.flatten()[0].item()}.",
    )


# --------------------------------------------------------------------------------------------
# Exercise 3: a warp's butterfly all-reduce
# --------------------------------------------------------------------------------------------


def _lane_stats(x: torch.Tensor, lanes: int) -> Stats:
    """Each lane's statistics of its strided elements ``lane, lane + lanes, ...`` (float32)."""
    n = x.shape[-1]
    pad = -n % lanes
    padded = torch.nn.functional.pad(x, (0, pad), value=NEG_INF) if pad else x
    per_lane = padded.reshape(*x.shape[:-1], -1, lanes)
    m, d = softmax_stats(per_lane, dim=-2)
    return m.float(), d.float()


class _Warps:
    """The lanes of many warps, laid out in one flat tensor in a random order, and the only way
    between them: ``shfl_xor(t, offset)``, which gives every entry the value ``t`` holds in lane
    ``lane ^ offset`` of the same warp (``__shfl_xor_sync`` on a GPU). The random order hides
    which entries share a warp, so a reduction over the tensor mixes warps; the calls are logged.
    """

    def __init__(self, warps: int, lanes: int, case: str, g: torch.Generator) -> None:
        self.lanes, self.case, self.n = lanes, case, warps * lanes
        self.thread = torch.randperm(self.n, generator=g)  # entry i is thread self.thread[i]
        self.warp, self.lane = self.thread // lanes, self.thread % lanes
        self.entry = torch.empty_like(self.thread)
        self.entry[self.thread] = torch.arange(self.n)  # where thread t sits
        self.offsets: list[int] = []

    def spread(self, t: torch.Tensor) -> torch.Tensor:
        """``(..., lanes)`` per-warp values -> the flat, shuffled layout ``(n,)``."""
        return t.reshape(-1)[self.thread]

    def __call__(self, t: torch.Tensor, offset: int) -> torch.Tensor:
        expect(
            isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] == self.n,
            f"On {self.case}: shfl_xor(t, offset) takes a tensor holding one value per lane, "
            f"like m (shape ({self.n},)); got "
            f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}.",
        )
        ok = isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset < self.lanes
        expect(ok, f"On {self.case}: shfl_xor's offset must be an int from 0 to "
                   f"{self.lanes - 1} (the lane whose value comes back is lane ^ offset); "
                   f"got {offset!r}.")
        self.offsets.append(offset)
        partner = self.warp * self.lanes + (self.lane ^ offset)
        return t[self.entry[partner].to(t.device)]

    def reach(self) -> int:
        """How many lanes' values can reach a lane through the offsets used (the size of the
        group that XOR-combinations of the offsets span)."""
        group = {0}
        for offset in self.offsets:
            group |= {lane ^ offset for lane in group}
        return len(group)


@exercise(
    "a warp's butterfly all-reduce of (m, d) over lanes",
    hint="A lane sees the other lanes only through shfl_xor. After a round in which every lane "
         "merges with lane ^ offset, a lane holds the statistics of a group twice as large. How "
         "many rounds cover the warp?",
    forbid=("teachkit.cute.simulate.warp_butterfly", "teachkit.cute.simulate.butterfly_round",
            "teachkit.reduction.simulate_block_reduction", "teachkit.softmax.reduce_stats",
            "teachkit.softmax.softmax_stats",),
)
def check_warp_allreduce(
    fn: Callable[[torch.Tensor, torch.Tensor, Callable[[torch.Tensor, int], torch.Tensor], int],
                 Stats],
) -> None:
    """Give ``fn(m, d, shfl_xor, lanes)`` the per-lane statistics of strided slices of random
    rows, one row per warp; every lane of the result must hold its warp's float64 statistics.

    ``m`` and ``d`` are flat: entry ``i`` is one lane of one warp, the lanes of all warps in a
    random order, so the learner's code works elementwise, as the code of one lane, and reaches
    other lanes only through ``shfl_xor(t, offset)`` (the value of ``t`` in lane
    ``lane ^ offset`` of the same warp). An answer that reduces over the whole tensor mixes the
    warps and is refused, and so is one that gathers the warp with more than the ``log2(lanes)``
    exchanges of ``m`` and ``d`` a butterfly makes.

    Parameters
    ----------
    fn
        The learner's all-reduce: ``(m, d, shfl_xor, lanes) -> (m, d)``.
    """
    g = fresh_generator()
    n = int(torch.randint(300, 500, (1,), generator=g)) | 1
    short = int(torch.randint(9, 20, (1,), generator=g)) | 1
    cases = [
        (f"4 warps of 32 lanes, each reducing a row of {n} values", torch.randn(4, n, generator=g),
         32),
        (f"4 warps of 32 lanes, rows of {n} values times 1000",
         torch.randn(4, n, generator=g) * 1000, 32),
        (f"6 warps of 8 lanes, rows of {n} values", torch.randn(6, n, generator=g), 8),
        (f"3 warps of 32 lanes, short rows of {short} values (lanes past the end hold (-inf, 0))",
         torch.randn(3, short, generator=g), 32),
        ("2 warps of 4 lanes, rows of 101 values", torch.randn(2, 101, generator=g) * 3, 4),
    ]
    for case, x, lanes in cases:
        m_w, d_w = _lane_stats(x.double(), lanes)  # (warps, lanes)
        warps = _Warps(x.shape[0], lanes, case, g)
        m, d = warps.spread(m_w), warps.spread(d_w)
        ref_m, ref_d = softmax_stats(x.double())
        ref = (ref_m[warps.warp], ref_d[warps.warp])  # every lane: its warp's statistics
        got = expect_stats_pair(
            call_learner(fn, case, m.clone(), d.clone(), warps, lanes), case, "warp_allreduce")
        expect(
            got[0].shape == m.shape and got[1].shape == d.shape,
            f"On {case}: expected (m, d) of shape {tuple(m.shape)} (one pair per lane, every lane "
            f"holding its warp's result), got {tuple(got[0].shape)} and {tuple(got[1].shape)}.",
        )
        steps = lanes.bit_length() - 1
        wrong = relative_error(got[0], ref[0]) > 1e-5 or relative_error(got[1], ref[1]) > 1e-5
        if wrong and not warps.offsets:
            raise ExerciseFailed(
                f"On {case}: your function never called shfl_xor, and the lanes do not hold "
                "their warp's (m, d). The entries of m and d are lanes of many warps in no "
                "particular order: a lane sees the other lanes of its warp only through "
                "shfl_xor(t, offset)."
            )
        m_got = got[0].detach().cpu().double()
        leaked = m_got > ref[0] + 1e-6 * ref[0].abs().clamp(min=1.0)
        if bool(leaked.any()):
            raise ExerciseFailed(
                f"On {case}: {int(leaked.sum())} lane(s) hold a maximum larger than any value of "
                "their own warp: values from other warps got mixed in. m and d hold the lanes "
                "of many warps in no particular order, so a reduction over the whole tensor "
                "(amax, sum, a reshape into warps) mixes them. Work elementwise, as the code of "
                "one lane, and reach the other lanes only through shfl_xor(t, offset)."
            )
        if wrong and warps.reach() < lanes:
            raise ExerciseFailed(
                f"On {case}: through the offsets you shuffled at, {sorted(set(warps.offsets))}, "
                f"a lane hears from only {warps.reach()} of the {lanes} lanes of its warp. With "
                f"{lanes} lanes every lane needs {steps} butterfly steps, at offsets "
                f"{lanes // 2}, ..., 2, 1, merging after each one."
            )
        _nan_check(got[1], ref[1], case, MASK_ADVICE + " (teachkit.merge_stats does.)")
        _check_stats(
            got, ref, case, 1e-5,
            "Every lane must merge with lane ^ offset for every offset lanes/2, ..., 2, 1 "
            "(log2(lanes) steps), and the merge must rescale both d's to the common maximum.",
            advice_m=f"Some lanes miss part of the warp: with {lanes} lanes every lane needs "
            f"{steps} butterfly steps, at offsets {lanes // 2}, ..., 2, 1.",
        )
        expect(
            len(warps.offsets) <= 2 * steps,
            f"On {case}: every lane holds the right (m, d), but your function called shfl_xor "
            f"{len(warps.offsets)} times. A butterfly needs {steps} exchanges of (m, d) for "
            f"{lanes} lanes (at most {2 * steps} calls, one for m and one for d per step): merge "
            "right after each exchange, so that each step doubles the group a lane holds, "
            "instead of gathering the lanes' values one by one.",
        )
