r"""Exercises of notebook 11, the online softmax in CuTe DSL: the kernel's tiers, on a CPU.

Three exercises, each with a checker ``check_<name>(fn)`` here and a solution
``solution_<name>`` in :mod:`teachkit.exercises.solutions.ex11`:

1. :func:`check_thread_elements`: which elements of a row thread ``t`` loads, when the CTA's
   ``threads`` threads load vectors of ``vec`` elements, vector ``t, t + threads, ...``;
2. :func:`check_fold_vector`: the thread tier's step, folding one loaded vector into the
   thread's running ``(m, d)`` with a single rescale;
3. :func:`check_block_merge`: the block tier, merging the warps' pairs read from shared memory
   into the row's ``(m, d)``, idle warps included.

The checkers use fresh random rows (odd lengths, rows scaled by 1000, ``-inf`` masks, rows
shorter than one sweep of the CTA) and compare with float64 references; a wrong answer raises
:class:`~teachkit.exercises.checking.ExerciseFailed` saying which case failed and the likely
mistake.

Examples
--------
>>> from teachkit.exercises.solutions.ex11 import solution_thread_elements
>>> check_thread_elements(solution_thread_elements)
[correct] Which elements does thread t load?
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..compare import relative_error
from ..cute.simulate import elements_of_thread, simulate_cute_softmax
from ..softmax import exp_shift, softmax_stats
from .checking import (
    ExerciseFailed,
    call_learner,
    exercise,
    expect,
    expect_close,
    expect_stats_pair,
    fresh_generator,
    random_int,
)

__all__ = [
    "check_thread_elements",
    "check_fold_vector",
    "check_block_merge",
]

Stats = tuple[torch.Tensor, torch.Tensor]
NEG_INF = float("-inf")
MASK_ADVICE = (
    "A part that has seen only -inf (or nothing: an idle thread or warp) holds (m, d) = "
    "(-inf, 0), and exp(m - m_new) is then exp(-inf - (-inf)) = NaN. Take such a factor as 0, "
    "as teachkit.softmax.exp_shift does."
)




def _check_pair(got: Stats, ref: Stats, case: str, rtol: float,
                mistakes: dict[str, Stats], advice: str) -> None:
    """Compare ``(m, d)`` with the reference: a known mistake, NaN, then m, then d."""
    m, d = got
    ref_m, ref_d = ref
    expect(m.shape == ref_m.shape and d.shape == ref_d.shape,
           f"On {case}: expected m and d of shape {tuple(ref_m.shape)}, got {tuple(m.shape)} "
           f"and {tuple(d.shape)}.")
    if relative_error(m, ref_m) <= rtol and relative_error(d, ref_d) <= rtol:
        return
    for explanation, (wm, wd) in mistakes.items():
        if relative_error(m, wm) <= 1e-4 and relative_error(d, wd) <= 1e-4:
            raise ExerciseFailed(f"On {case}: {explanation}")
    nan = (torch.isnan(d.detach().double()) & ~torch.isnan(ref_d)).any()
    expect(not bool(nan), f"On {case}: NaN in d where the reference is a number.\n  {MASK_ADVICE}")
    expect_close(m, ref_m, f"{case} (the maximum m)", rtol=rtol,
                 advice="m is the largest value seen so far: a max, never rescaled.")
    expect_close(d, ref_d, f"{case} (the denominator d)", rtol=rtol, advice=advice)


# ---------------------------------------------------------------------------------------------
# Exercise 1: which elements does thread t load?
# ---------------------------------------------------------------------------------------------


def _short(items: list[int], limit: int = 12) -> str:
    """A list for a message, cut after ``limit`` items."""
    return str(items) if len(items) <= limit else f"{str(items[:limit])[:-1]}, ...]"


def _element_mistakes(t: int, n: int, threads: int, vec: int) -> dict[str, list[int]]:
    chunk = -(-n // threads)
    return {
        "these are thread t's elements with scalar loads (t, t + threads, ...). With vectors, "
        "thread t loads vectors t, t + threads, ..., and vector j holds elements "
        "j * vec .. j * vec + vec - 1.": list(range(t, n, threads)),
        "the stride between two of thread t's vectors is threads vectors, that is "
        "threads * vec elements, not threads elements.":
            [e for k in range(t * vec, n, threads) for e in range(k, min(k + vec, n))],
        "some indices lie past the row's end: stop at n_cols (the last vector may be cut).":
            [e for j in range(t, -(-n // vec), threads) for e in range(j * vec, (j + 1) * vec)],
        "that is a contiguous chunk per thread. The kernel interleaves: in each sweep the "
        "threads load neighbouring vectors, so a warp's loads are one coalesced stretch of "
        "memory.": list(range(t * chunk, min((t + 1) * chunk, n))),
    }


@exercise(
    "Which elements does thread t load?",
    "Threads take vectors in turn: which vectors are thread t's, and which elements does a vector"
    " hold near the row's end?",
    forbid=("teachkit.cute.simulate.elements_of_thread", "teachkit.cute.simulate.thread_of_element",
            "teachkit.cute.simulate.to_thread_major",),
)
def check_thread_elements(fn: Callable[[int, int, int, int], list[int]]) -> None:
    """Check ``fn(t, n_cols, threads, vec)`` against the layout the kernel uses.

    Cases: the kernel's own layouts (1000 float32 values over 128 threads in vectors of 4;
    4097 values with scalar loads over 1024 threads), a row ending inside a vector, a thread
    past the end of a short row, and random layouts; several threads of each.
    """
    gen = fresh_generator()
    cases = [
        ("1000 values, 128 threads, vectors of 4", 1000, 128, 4, [0, 1, 61, 127]),
        ("4097 values, 1024 threads, scalar loads (vec = 1)", 4097, 1024, 1, [0, 1, 1023]),
        ("75 values, 8 threads, vectors of 4 (the row ends inside vector 18)", 75, 8, 4,
         [0, 2, 3, 7]),
        ("50 values, 128 threads, vectors of 8 (most threads idle)", 50, 128, 8, [0, 6, 7, 100]),
    ]
    for _ in range(4):
        threads = 32 * 2 ** random_int(0, 3, gen)
        vec = 2 ** random_int(0, 3, gen)
        n = random_int(1, 3 * threads * vec, gen)
        picks = sorted({random_int(0, threads - 1, gen) for _ in range(3)} | {threads - 1})
        cases.append((f"random: {n} values, {threads} threads, vectors of {vec}", n, threads,
                      vec, picks))
    for case, n, threads, vec, picks in cases:
        for t in picks:
            here = f"{case}, thread {t}"
            got = call_learner(fn, here, t, n, threads, vec)
            want = elements_of_thread(t, n, threads, vec)
            try:
                got_list = [int(e) for e in got]
            except (TypeError, ValueError):
                raise ExerciseFailed(f"On {here}: return a list of ints, got {got!r}.") from None
            if got_list == want:
                continue
            for explanation, wrong in _element_mistakes(t, n, threads, vec).items():
                if got_list == wrong and wrong != want:
                    raise ExerciseFailed(f"On {here}: expected {_short(want)}, got "
                                         f"{_short(got_list)}; " + explanation)
            if sorted(got_list) == want:
                raise ExerciseFailed(f"On {here}: the right elements in the wrong order; list them "
                                     "in load order, vector by vector (increasing).")
            raise ExerciseFailed(f"On {here}: expected {_short(want)}, got {_short(got_list)}.")


# ---------------------------------------------------------------------------------------------
# Exercise 2: fold one vector into the running (m, d)
# ---------------------------------------------------------------------------------------------


def _fold_cases(gen: torch.Generator) -> list[tuple[str, torch.Tensor, int]]:
    n = random_int(20, 40, gen) * 8
    x_mask = torch.randn(6, n, generator=gen, dtype=torch.float64)
    x_mask[:, ::3] = NEG_INF
    x_mask[1, : n // 2] = NEG_INF  # a long masked prefix: m = -inf for several steps
    x_mask[2] = NEG_INF  # all masked: (m, d) stays (-inf, 0)
    return [
        (f"5 threads' rows of {n} values, vectors of 4", torch.randn(5, n, generator=gen,
                                                                     dtype=torch.float64), 4),
        (f"rows of {n} values times 1000, vectors of 8",
         torch.randn(4, n, generator=gen, dtype=torch.float64) * 1000, 8),
        (f"rows of {n} values with -inf masks, a masked prefix and an all -inf row, vectors of 4",
         x_mask, 4),
        (f"a rising row of {n} values (the max grows at every vector), vectors of 2",
         torch.linspace(-50, 50, n, dtype=torch.float64).expand(3, n)
         + torch.randn(3, n, generator=gen, dtype=torch.float64) * 0.01, 2),
    ]


def _fold_wrong(m: torch.Tensor, d: torch.Tensor, v: torch.Tensor) -> dict[str, Stats]:
    m_new = torch.maximum(m, v.amax(dim=-1))
    m_vec = v.amax(dim=-1)
    return {
        "the old d was not rescaled. When the maximum grows from m to m', every term in d "
        "was exp(x - m) and must become exp(x - m'): multiply d by exp(m - m').":
            (m_new, d + exp_shift(v, m_new.unsqueeze(-1)).sum(-1)),
        "the vector's terms were taken relative to the vector's own maximum, exp(v - max(v)). "
        "Both sides must use the new common maximum m' = max(m, max(v)).":
            (m_new, d * exp_shift(m, m_new) + exp_shift(v, m_vec.unsqueeze(-1)).sum(-1)),
    }


@exercise(
    "Fold one loaded vector into the running (m, d)",
    "A vector is a small chunk: fold its statistics into the running pair as in notebook 04.",
    forbid=("teachkit.reduction.fold", "teachkit.cute.simulate.simulate_cute_softmax",
            "teachkit.reduction.simulate_block_reduction",),
)
def check_fold_vector(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Stats]) -> None:
    """Fold each thread's vectors with ``fn(m, d, v)``, one step at a time, from ``(-inf, 0)``.

    After every step, the pair must equal the float64 statistics of everything folded so far
    (:func:`teachkit.softmax.softmax_stats` of the prefix). Cases: random rows, rows times 1000,
    ``-inf`` masks with a masked prefix and an all ``-inf`` row, a rising row whose maximum grows
    at every vector; vectors of 2, 4 and 8.
    """
    gen = fresh_generator()
    for case, x, vec in _fold_cases(gen):
        rows, n = x.shape
        m = torch.full((rows,), NEG_INF, dtype=torch.float32)
        d = torch.zeros(rows, dtype=torch.float32)
        for k in range(n // vec):
            v = x[:, k * vec:(k + 1) * vec].float()
            here = f"{case}, vector {k} (elements {k * vec}..{(k + 1) * vec - 1})"
            wrong = _fold_wrong(m.double(), d.double(), v.double())
            got = expect_stats_pair(call_learner(fn, here, m.clone(), d.clone(), v.clone()), here)
            ref = softmax_stats(x[:, :(k + 1) * vec].float().double())
            _check_pair(got, ref, here, 1e-5, wrong,
                        "d' = d * exp(m - m') + sum(exp(v - m')), with m' = max(m, max(v)).")
            m, d = got[0].detach().float(), got[1].detach().float()


# ---------------------------------------------------------------------------------------------
# Exercise 3: the block tier
# ---------------------------------------------------------------------------------------------


def _block_wrong(m: torch.Tensor, d: torch.Tensor) -> dict[str, Stats]:
    top = m.amax(-1)
    return {
        "the warps' d were added without rescaling. Each warp's d counts exp(x - m_w) with its "
        "own m_w: bring each to the row's maximum first, d_w * exp(m_w - m).":
            (top, d.sum(-1)),
        "only the warp holding the maximum was kept. The other warps' elements belong to the row "
        "too: their d_w * exp(m_w - m) adds to d.":
            (top, torch.gather(d, -1, m.argmax(-1, keepdim=True)).squeeze(-1)),
        "that is the average of the warps' rescaled d. Merging adds the parts: the row's d is "
        "the sum of d_w * exp(m_w - m), not its mean.":
            (top, (d * exp_shift(m, top.unsqueeze(-1))).mean(-1)),
    }


@exercise(
    "Merge the warps' pairs from shared memory into the row's (m, d)",
    "Merging is associative: any order of pairwise merges works. What must an idle warp add?",
    forbid=("teachkit.cute.simulate.block_merge", "teachkit.cute.simulate.warp_butterfly",
            "teachkit.softmax.reduce_stats", "teachkit.cute.simulate.simulate_cute_softmax",
            "teachkit.reduction.tree_reduce", "teachkit.softmax.merge_stats",
            "teachkit.reduction.simulate_block_reduction",),
)
def check_block_merge(fn: Callable[[torch.Tensor, torch.Tensor], Stats]) -> None:
    """Check ``fn(warp_m, warp_d)`` on the warps' pairs of simulated CTAs.

    Each case runs random rows through :func:`teachkit.cute.simulate_cute_softmax` and hands
    ``fn`` the pairs lane 0 of each warp wrote to shared memory; the result must equal the whole
    row's float64 statistics. The learner writes the merge and the tree:
    :func:`teachkit.reduction.tree_reduce` and :func:`teachkit.softmax.merge_stats` are
    forbidden (:func:`teachkit.softmax.exp_shift`, the guard against ``-inf - (-inf)``, is not).
    Cases: 4 warps; 32 warps (1024 threads); rows times 1000; a row
    so short that most warps are idle; one warp alone; ``-inf`` masks.
    """
    gen = fresh_generator()
    n = random_int(600, 900, gen) | 1
    masked = torch.randn(3, n, generator=gen)
    masked[:, ::2] = NEG_INF
    masked[1] = NEG_INF  # a fully masked row: every warp holds (-inf, 0), and so must the row
    cases = [
        (f"rows of {n} values, 128 threads (4 warps), vectors of 1", torch.randn(4, n,
                                                                                 generator=gen),
         128, 1),
        (f"rows of {8 * n} values, 1024 threads (32 warps), vectors of 4",
         torch.randn(2, 8 * n, generator=gen), 1024, 4),
        (f"rows of {n} values times 1000, 256 threads (8 warps)",
         torch.randn(3, n, generator=gen) * 1000, 256, 1),
        ("rows of 37 values, 1024 threads in vectors of 1: warps 2 to 31 are idle, (-inf, 0)",
         torch.randn(3, 37, generator=gen), 1024, 1),
        (f"rows of {n} values, a single warp of 32 threads", torch.randn(2, n, generator=gen),
         32, 4),
        (f"rows of {n} values, every second one -inf, and a row of -inf only, 128 threads",
         masked, 128, 1),
    ]
    for case, x, threads, vec in cases:
        trace = simulate_cute_softmax(x, threads=threads, vec=vec)
        got = expect_stats_pair(
            call_learner(fn, case, trace.warp_m.clone(), trace.warp_d.clone()), case)
        ref = softmax_stats(x.double())
        _check_pair(got, ref, case, 1e-5, _block_wrong(trace.warp_m.double(),
                                                       trace.warp_d.double()),
                    "merge the pairs with m = max(m_a, m_b), d = d_a exp(m_a - m) + "
                    "d_b exp(m_b - m).")
