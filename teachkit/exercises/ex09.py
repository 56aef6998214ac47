r"""Exercises of notebook 09, *split-KV decoding and paged attention*.

Eight exercises, each with a checker ``check_<name>(fn)`` here and a solution
``solution_<name>`` in :mod:`teachkit.exercises.solutions.ex09`:

1. :func:`check_num_splits`: how many ranges to cut each row's keys into so that a decoding
   grid fills the GPU (the rule of :func:`teachkit.kernels.decode.choose_num_splits`).
2. :func:`check_merge_splits`: merge the partial ``(out, lse)`` of any number of splits at once,
   empty splits included: what the merge kernel does for every row.
3. :func:`check_token_rows`: translate logical token positions through a block table into rows
   of a page pool.
4. :func:`check_tile_keys`: the key each row of a tile holds when the tile's pages are
   interleaved, so that a thread's rows share one page.
5. :func:`check_merge_kernel`: the merge of exercise 2 as a Triton kernel, one program per row,
   the kernel that follows the split kernel in split-KV decoding.
6. :func:`check_last_wave_splits`: how many ranges to cut the keys of a grid a little past one
   program an SM into, so that its last wave of programs is the fullest (the rule of
   :func:`teachkit.kernels.decode.last_wave_splits`).
7. :func:`check_fullest_wave_tiles`: which tiles a grid of many programs an SM runs with, so
   that its last wave is the fullest (:func:`teachkit.kernels.decode.fullest_wave_tiles`).
8. :func:`check_fullest_wave_plan`: when such a grid should cut its keys into ranges instead,
   and into how many, with which tiles (:func:`teachkit.kernels.decode.fullest_wave_plan`).

Every checker runs the learner's function on fresh random cases and compares with a reference
(the library's rule, float64 attention over all keys, the pool's contents); a wrong answer
raises :class:`~teachkit.exercises.checking.ExerciseFailed` naming the case and the likely slip.

Examples
--------
>>> from teachkit.exercises.solutions.ex09 import solution_num_splits
>>> check_num_splits(solution_num_splits)
[correct] Choose the number of splits of a decoding grid
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import torch
import triton

from ..compare import relative_error
from ..device import DEVICE
from ..kernels.decode import (
    FULLEST_WAVE_TILES,
    MAX_SPLITS,
    choose_num_splits,
    fullest_wave_plan,
    fullest_wave_tiles,
    last_wave_fill,
    last_wave_splits,
)
from ..paging import build_block_table, token_rows
from .checking import (
    ExerciseFailed,
    call_learner,
    exercise,
    expect,
    expect_close,
    fresh_generator,
    matching_mistake,
    random_int,
)
from .launching import SENTINEL, expect_untouched, launch, require_kernel

__all__ = [
    "check_num_splits",
    "check_merge_splits",
    "check_token_rows",
    "check_tile_keys",
    "check_merge_kernel",
    "check_last_wave_splits",
    "check_fullest_wave_tiles",
    "check_fullest_wave_plan",
]

NEG_INF = float("-inf")





# ---------------------------------------------------------------------------------------------
# Exercise 1: the number of splits
# ---------------------------------------------------------------------------------------------


def _unless_full(rule: Callable[[int, int, int], int]) -> Callable[[int, int, int], int]:
    return lambda p, k, s: 1 if p >= s else rule(p, k, s)


_SPLIT_MISTAKES: dict[str, Callable[[int, int, int], int]] = {
    "you split a grid that already gives every SM a program: when programs >= sms, return 1 "
    "(more splits only add partial results to write and merge).":
        lambda p, k, s: max(1, min(2 * s // p, k, MAX_SPLITS)),
    "you rounded up: ceil(2 * sms / programs) makes a grid a little larger than one wave, and "
    "the call waits for a second wave that is nearly empty (notebook 09's recorded sweep shows "
    "the drop). Round down: 2 * sms // programs.":
        _unless_full(lambda p, k, s: max(1, min(-(-2 * s // p), k, MAX_SPLITS))),
    "you aimed at one program per SM. Two per SM let one program's memory stalls hide behind "
    "another's: 2 * sms // programs.":
        _unless_full(lambda p, k, s: max(1, min(s // p, k, MAX_SPLITS))),
    "a split must hold at least one key block: bound the answer by key_blocks (a short cache "
    "cannot be cut into more pieces than it has blocks).":
        _unless_full(lambda p, k, s: max(1, min(2 * s // p, MAX_SPLITS))),
    f"the merge kernel takes at most MAX_SPLITS = {MAX_SPLITS} partials per row: bound the "
    "answer by it.":
        _unless_full(lambda p, k, s: max(1, min(2 * s // p, k))),
    "there is always at least one split (an empty cache still needs its one program, which "
    "writes zeros): max(1, ...).":
        _unless_full(lambda p, k, s: min(2 * s // p, k, MAX_SPLITS)),
}


@exercise(
    "Choose the number of splits of a decoding grid",
    "No split when the grid already fills the GPU; otherwise as many as fit in one wave of two "
    "programs per SM, within the limits.",
    forbid=("teachkit.kernels.decode.choose_num_splits",),
)
def check_num_splits(fn: Callable[[int, int, int], int]) -> None:
    """Check ``fn(programs, key_blocks, sms) -> int`` against the library's rule.

    Cases: a T4 (40 SMs), an A100 (108) and an H100 (132); unsplit grids of 1 to 1024
    programs (batch 1 to 32 times 8 or 32 heads, odd counts, exactly one per SM); caches of 0,
    1, 3 key blocks and of thousands.
    """
    gen = fresh_generator()
    cases = [(b * h, blocks, sms) for sms in (40, 108, 132) for b in (1, 2, 8, 16, 32)
             for h in (8, 32) for blocks in (0, 1, 3, 2048)]
    cases += [(1, 5000, 132), (1, 200, 132), (132, 2048, 132), (40, 64, 40)]
    cases += [(random_int(1, 700, gen), random_int(0, 4000, gen), random_int(10, 150, gen))
              for _ in range(30)]
    for programs, blocks, sms in cases:
        case = f"programs = {programs}, key_blocks = {blocks}, sms = {sms}"
        got = call_learner(fn, case, programs, blocks, sms)
        want = choose_num_splits(programs, blocks, sms)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"On {case}: return an int, got {type(got).__name__} {got!r}.")
        if got != want:
            raise ExerciseFailed(
                f"On {case}: expected {want} splits ({programs * want} programs), got {got}."
                + (_slip(_SPLIT_MISTAKES, got, programs, blocks, sms)
                   or "\n  " + _split_hint(programs, blocks, sms)))


def _slip(mistakes: dict[str, Callable[..., Any]], got: Any, *args: Any) -> str:
    """Lines naming each of ``mistakes`` (explanation -> a wrong answer's function of ``args``)
    whose answer is ``got`` (on one case two slips can give the same answer), or ``""`` where
    none is."""
    advice = [e for e, wrong in mistakes.items() if wrong(*args) == got]
    if not advice:
        return ""
    return "\n  Your answer matches a common slip: " + "\n  Or: ".join(advice)


def _split_hint(programs: int, blocks: int, sms: int) -> str:
    if programs >= sms:
        return f"{programs} programs already give each of the {sms} SMs one: no split, 1."
    return (f"one wave of two programs per SM holds {2 * sms} programs, so {2 * sms} // "
            f"{programs} = {2 * sms // programs} splits, then bounded by key_blocks = {blocks}, "
            f"by {MAX_SPLITS} and from below by 1.")


# ---------------------------------------------------------------------------------------------
# Exercise 1b: the fullest last wave
# ---------------------------------------------------------------------------------------------


_WAVE_MISTAKES: dict[str, Callable[[int, int, int, int], int]] = {
    "you measured the last wave alone, by the fractional part of the waves (waves - "
    "floor(waves)): a grid of exactly two waves then looks empty, and 1.5 waves beat 2.4, though "
    "each range's work shrinks as ranges are added and 2.4 waves of it end sooner. Every wave "
    "lasts as long as a full one, so divide by the waves the grid runs: waves / ceil(waves), "
    "the share of their places it fills.":
        lambda p, s, r, m: max(range(2, m + 1), key=lambda n: (
            p * n / (r * s) - math.floor(p * n / (r * s)), -n)),
    "on a tie you took the most ranges: take the fewest (each range writes a partial result "
    "for the merge to read back).":
        lambda p, s, r, m: max(range(2, m + 1),
                               key=lambda n: (last_wave_fill(p * n, r * s), n)),
    "you counted one range as a candidate: start at 2 (one range is the unsplit grid this rule "
    "improves on).":
        lambda p, s, r, m: max(range(1, m + 1),
                               key=lambda n: (last_wave_fill(p * n, r * s), -n)),
    "range(2, most) leaves out `most` itself: count from 2 up to and including most.":
        lambda p, s, r, m: max(range(2, max(m, 3)),
                               key=lambda n: (last_wave_fill(p * n, r * s), -n)),
    "a wave is resident * sms programs, not sms: each SM holds `resident` of these programs at "
    "once.":
        lambda p, s, r, m: max(range(2, m + 1), key=lambda n: (last_wave_fill(p * n, s), -n)),
}


def _wave_cases(gen: torch.Generator) -> list[tuple[int, int, int, int]]:
    """``(programs, sms, resident, most)``: grids of one to two programs an SM on an H100, a T4,
    an A100 and random GPUs. Two counts of ranges often fill their last wave alike (``n`` and
    ``2n`` whenever the last of ``n``'s waves is more than half full); the cases keep those
    ties, which any way of computing the fill in floats ranks alike (doubling is exact), and
    leave out other exact ties, which floats may break either way. Two cases of at most two
    ranges fill the unsplit grid's last wave as full as two ranges do (a whole wave, 0.95), so
    a count from one instead of two shows on every run."""
    cases = [(160, 132, 2, 5), (136, 132, 2, 5), (176, 132, 2, 5), (152, 132, 2, 5),
             (44, 40, 2, 5), (120, 108, 2, 5), (66, 132, 1, 5), (132, 132, 2, 8),
             (150, 132, 3, 4), (200, 132, 4, 6), (264, 132, 2, 2), (250, 132, 1, 2)]
    for _ in range(200):
        sms = random_int(10, 150, gen)
        cases.append((random_int(sms, 2 * sms, gen), sms, random_int(1, 4, gen),
                      random_int(2, 8, gen)))

    def fair(case: tuple[int, int, int, int]) -> bool:
        programs, sms, resident, most = case
        places = resident * sms
        fill = {n: Fraction(programs * n, places * -(-programs * n // places))
                for n in range(1, most + 1)}
        return all(fill[a] != fill[b] or b == 2 * a
                   for a in fill for b in fill if a < b)

    return [case for case in cases if fair(case)][:60]


@exercise(
    "Choose the ranges that fill the last wave",
    "For each count of ranges from 2 to most: how many waves of resident * sms programs does the "
    "split grid take, and how full is its last one?",
    forbid=("teachkit.kernels.decode.last_wave_splits",),
)
def check_last_wave_splits(fn: Callable[[int, int, int, int], int]) -> None:
    """Check ``fn(programs, sms, resident, most) -> int`` against the library's rule.

    Cases: five sequences of 32 heads on an H100 (160 programs, two an SM resident: three
    ranges), grids of 136, 176 and 192 programs there, a T4 and an A100, grids that fill
    whole waves at two counts (the fewer wins), and random GPUs of 10 to 150 SMs with one to
    four programs resident and 2 to 8 ranges at most.
    """
    for programs, sms, resident, most in _wave_cases(fresh_generator()):
        case = f"programs = {programs}, sms = {sms}, resident = {resident}, most = {most}"
        got = call_learner(fn, case, programs, sms, resident, most)
        want = last_wave_splits(programs, sms, resident, most)
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"On {case}: return an int, got {type(got).__name__} {got!r}.")
        if got == want:
            continue
        places = resident * sms
        fills = ", ".join(f"{n} ranges: {programs * n / places:.2f} waves, "
                          f"{last_wave_fill(programs * n, places):.0%} of their places"
                          for n in range(2, most + 1))
        raise ExerciseFailed(
            f"On {case}: expected {want} ranges, got {got}.\n  With waves of {places} "
            f"programs: {fills}."
            + _slip(_WAVE_MISTAKES, got, programs, sms, resident, most))


def _picked(programs: int, sms: int, tiles: tuple, fill: Callable[[tuple], float],
            last: bool = False) -> tuple:
    """What a rule that keeps ``tiles[0]`` while the grid fits in one wave of them, and else
    takes the tiles with the largest ``fill``, the first (or the ``last``) on a tie, picks."""
    if programs <= tiles[0][2] * sms:
        return tiles[0]
    return max(tiles[::-1] if last else tiles, key=fill)


_TILE_MISTAKES: dict[str, Callable[[int, int, tuple], tuple]] = {
    "the grid fits in one wave of the usual tiles (programs <= tiles[0][2] * sms): every program "
    "runs at once, so there is no last wave to wait for. Keep tiles[0] there, and compare fills "
    "only when the usual tiles' grid overflows one wave.":
        lambda p, s, t: max(t, key=lambda x: last_wave_fill(p, x[2] * s)),
    "on a tie you took the later tiles: keep the first (the usual tiles come first, and the "
    "others must beat them).":
        lambda p, s, t: _picked(p, s, t, lambda x: last_wave_fill(p, x[2] * s), last=True),
    "you measured the last wave alone, by the fractional part of the waves (waves - "
    "floor(waves)): a grid of whole waves then looks empty, though its last wave is full. Every "
    "wave lasts as long as a full one, so divide by the waves the grid runs: waves / "
    "ceil(waves), the share of their places it fills.":
        lambda p, s, t: _picked(p, s, t, lambda x: p / (x[2] * s) - math.floor(p / (x[2] * s))),
    "you kept the usual tiles past one wave: where their grid overflows a wave, tiles whose last "
    "wave is fuller win. A wave of tiles t is t[2] * sms programs (with sms alone every tile's "
    "fill comes out the same).":
        lambda p, s, t: t[0],
}


_TILE_SETS = tuple(FULLEST_WAVE_TILES[90].values())
"""The contiguous and paged tiles of an H200 at ``D = 128`` (``decode.FULLEST_WAVE_TILES``)."""


def _tile_cases(gen: torch.Generator) -> list[tuple[int, int, tuple]]:
    """``(programs, sms, tiles)``: 12 to 48 sequences of 32 heads on an H200's 132 SMs with its
    contiguous and paged tiles, and random grids, GPUs and tiles (one to four, one to six
    programs an SM each). Tiles whose programs an SM differ by a power of two often fill their
    last wave alike, and any way of computing the fill in floats ranks them alike (halving is
    exact); the cases keep those ties and leave out other exact ties for the fullest wave, which
    floats may break either way."""
    cases = [(B * 32, 132, tiles) for tiles in _TILE_SETS for B in range(12, 50, 2)]
    for _ in range(300):
        sms = random_int(10, 150, gen)
        tiles = tuple((32768 * random_int(1, 2, gen), random_int(2, 4, gen), random_int(1, 6, gen))
                      for _ in range(random_int(1, 4, gen)))
        cases.append((random_int(sms, 14 * sms, gen), sms, tiles))

    return [case for case in cases if _fair_tiles(*case)][:90]


def _fair_tiles(programs: int, sms: int, tiles: tuple) -> bool:
    """Whether the tiles whose unsplit last wave is the fullest all hold programs an SM that
    differ by powers of two (or the grid fits in one wave of the usual tiles): ties that any
    order of float arithmetic ranks alike."""
    if programs <= tiles[0][2] * sms:
        return True
    fill = [Fraction(programs, t[2] * sms * -(-programs // (t[2] * sms))) for t in tiles]
    best = [t[2] for t, f in zip(tiles, fill, strict=True) if f == max(fill)]
    return all(_power_of_two(a, b) for a in best for b in best)


@exercise(
    "Choose the tiles that fill the last wave",
    "Does the grid fit in one wave of the usual tiles? If not, what share of its waves' places "
    "does each tile fill, with tile[2] * sms programs a wave?",
    forbid=("teachkit.kernels.decode.fullest_wave_tiles",),
)
def check_fullest_wave_tiles(fn: Callable[[int, int, tuple], tuple]) -> None:
    """Check ``fn(programs, sms, tiles) -> one of tiles`` against the library's rule.

    Cases: 12 to 48 sequences of 32 heads on an H200 with its contiguous tiles (four, two and
    three programs an SM) and its paged ones (five, three and three), and random grids on GPUs
    of 10 to 150 SMs with one to four tiles of one to six programs an SM.
    """
    for programs, sms, tiles in _tile_cases(fresh_generator()):
        case = f"programs = {programs}, sms = {sms}, tiles = {tiles}"
        got = call_learner(fn, case, programs, sms, tiles)
        want = fullest_wave_tiles(programs, sms, tiles)
        expect(got in tiles, f"On {case}: return one of the tiles, got {got!r}.")
        if got == want:
            continue
        fills = ", ".join(f"{t}: {programs / (t[2] * sms):.2f} waves, "
                          f"{last_wave_fill(programs, t[2] * sms):.0%} of their places"
                          for t in tiles)
        raise ExerciseFailed(
            f"On {case}: expected {want}, got {got}.\n  {fills}."
            + _slip(_TILE_MISTAKES, got, programs, sms, tiles))


# ---------------------------------------------------------------------------------------------
# Exercise 1d: tiles or ranges
# ---------------------------------------------------------------------------------------------


def _planned(programs: int, sms: int, tiles: tuple, most: int, gain: float, *,
             one_wave: bool = True, kept_tile: Callable[..., tuple] = fullest_wave_tiles,
             counts: Callable[[int], range] = lambda most: range(2, most + 1),
             order: Callable[[int, int], tuple] = lambda n, i: (-n, -i),
             split_tiles: Callable[[tuple, tuple], tuple] = lambda tiles, kept: tiles,
             ) -> tuple[tuple, int]:
    """The rule of ``fullest_wave_plan`` with one of its steps swapped for a slip: no
    one-wave exception, another unsplit tile to beat, other counts of ranges, another order on
    a tie (``order(ranges, index)``, the largest wins), or fewer tiles tried in ranges."""
    kept = kept_tile(programs, sms, tiles)
    if one_wave and programs <= tiles[0][2] * sms:
        return kept, 1
    base = last_wave_fill(programs, kept[2] * sms)
    best = max(((last_wave_fill(programs * n, t[2] * sms), *order(n, i), n, t)
                for n in counts(most) for i, t in enumerate(split_tiles(tiles, kept))),
               default=None, key=lambda c: c[:3])
    if best is None or best[0] <= base + gain:
        return kept, 1
    return best[4], best[3]


_PLAN_MISTAKES: dict[str, Callable[[int, int, tuple, int, float], tuple]] = {
    "the grid fits in one wave of the usual tiles (programs <= tiles[0][2] * sms): every program "
    "runs at once, so there is no last wave to fill. Keep (tiles[0], 1) there.":
        lambda p, s, t, m, g: _planned(p, s, t, m, g, one_wave=False),
    "you split for any fuller last wave: split only where it comes out more than `gain` fuller "
    "than the unsplit pick's (each range writes a partial result, and the fill is a model).":
        lambda p, s, t, m, g: _planned(p, s, t, m, 0.0) if g > 0 else None,
    "you compared with the usual tiles' last wave, not with the unsplit pick's: the grid would "
    "run unsplit with fullest_wave_tiles's tiles (exercise 1c), so the ranges must beat those.":
        lambda p, s, t, m, g: _planned(p, s, t, m, g, kept_tile=lambda p, s, t: t[0]),
    "on a tie you took more ranges: take the fewest (each writes a partial result for the "
    "merge), then the first tiles.":
        lambda p, s, t, m, g: _planned(p, s, t, m, g, order=lambda n, i: (n, -i)),
    "on a tie of ranges you took the later tiles: keep the first (the usual tiles come first).":
        lambda p, s, t, m, g: _planned(p, s, t, m, g, order=lambda n, i: (-n, i)),
    "range(2, most) leaves out `most` itself: count from 2 up to and including most.":
        lambda p, s, t, m, g: _planned(p, s, t, m, g, counts=lambda m: range(2, max(m, 3))),
    "you cut only the unsplit pick's tiles into ranges: try every tile, since another tile's "
    "count an SM may fill the last wave of the split grid better.":
        lambda p, s, t, m, g: _planned(p, s, t, m, g, split_tiles=lambda t, kept: (kept,)),
}


def _power_of_two(a: int, b: int) -> bool:
    """Whether the larger of ``a`` and ``b`` is the smaller times a power of two."""
    small, large = min(a, b), max(a, b)
    return large % small == 0 and (large // small).bit_count() == 1


def _plan_cases(gen: torch.Generator) -> list[tuple[int, int, tuple, int, float]]:
    """``(programs, sms, tiles, most, gain)``: 12 to 48 sequences of 32 heads on an H200 with
    its contiguous and paged tiles, 5 ranges at most and the library's gain (and 43 sequences
    on the paged tiles), then random grids, GPUs, tiles, counts and gains. As in
    :func:`_tile_cases`, exact ties for the fullest last wave are kept only where any order of
    float arithmetic ranks them alike (counts of ranges and programs an SM that differ by powers
    of two), and so are cases whose fullest split beats the unsplit pick by the gain exactly,
    which floats may round either way."""
    cases = [(B * 32, 132, tiles, 5, 0.03) for tiles in _TILE_SETS for B in range(12, 50, 2)]
    # 43 sequences on the paged tiles: 2 and 4 ranges of (65536, 2, 3) fill the last wave alike,
    # so more ranges taken on a tie shows on every run (the cases above never tie there, and
    # the random ones missed it about once in 300 runs)
    cases.append((43 * 32, 132, _TILE_SETS[1], 5, 0.03))
    for _ in range(400):
        sms = random_int(10, 150, gen)
        tiles = tuple((32768 * random_int(1, 2, gen), random_int(2, 4, gen), random_int(1, 6, gen))
                      for _ in range(random_int(1, 4, gen)))
        gain = (0.0, 0.03, 0.05, 0.1)[random_int(0, 3, gen)]
        cases.append((random_int(sms, 14 * sms, gen), sms, tiles, random_int(2, 7, gen), gain))

    def fair(case: tuple[int, int, tuple, int, float]) -> bool:
        programs, sms, tiles, most, gain = case
        if not _fair_tiles(programs, sms, tiles):
            return False
        if programs <= tiles[0][2] * sms:
            return True
        kept = fullest_wave_tiles(programs, sms, tiles)
        base = Fraction(programs, kept[2] * sms * -(-programs // (kept[2] * sms)))
        fills = {(n, t[2]): Fraction(programs * n, t[2] * sms * -(-programs * n // (t[2] * sms)))
                 for n in range(2, most + 1) for t in tiles}
        top = max(fills.values())
        tied = [key for key, fill in fills.items() if fill == top]
        return (abs(top - base - Fraction(gain)) > Fraction(1, 10**9)
                and all(_power_of_two(a[0], b[0]) and _power_of_two(a[1], b[1])
                        for a in tied for b in tied))

    return [case for case in cases if fair(case)][:120]


@exercise(
    "Cut the keys into ranges where no tiles fill the last wave",
    "Start from the unsplit pick (exercise 1c) and how full its last wave is. Then try every tile "
    "in 2 to most ranges: which fills its last wave the most, and by more than gain?",
    forbid=("teachkit.kernels.decode.fullest_wave_plan",),
)
def check_fullest_wave_plan(fn: Callable[[int, int, tuple, int, float], tuple]) -> None:
    """Check ``fn(programs, sms, tiles, most, gain) -> (one of tiles, ranges)`` against the
    library's rule.

    Cases: 12 to 48 sequences of 32 heads on an H200 with its contiguous and paged tiles, at
    most 5 ranges and a gain of 0.03, 43 sequences on the paged tiles (2 and 4 ranges tie), and
    random grids on GPUs of 10 to 150 SMs with one to four tiles of one to six programs an SM,
    2 to 7 ranges at most and gains of 0 to 0.1.
    """
    for programs, sms, tiles, most, gain in _plan_cases(fresh_generator()):
        case = (f"programs = {programs}, sms = {sms}, tiles = {tiles}, most = {most}, "
                f"gain = {gain}")
        got = call_learner(fn, case, programs, sms, tiles, most, gain)
        want = fullest_wave_plan(programs, sms, tiles, most, gain)
        expect(isinstance(got, tuple) and len(got) == 2 and got[0] in tiles
               and isinstance(got[1], int) and not isinstance(got[1], bool),
               f"On {case}: return (one of the tiles, a count of ranges), got {got!r}.")
        if got == want:
            continue
        kept = fullest_wave_tiles(programs, sms, tiles)
        fills = "; ".join(
            f"{t} in {n}: {last_wave_fill(programs * n, t[2] * sms):.0%} of the places"
            for n in range(2, most + 1) for t in tiles)
        raise ExerciseFailed(
            f"On {case}: expected {want}, got {got}.\n  Unsplit the pick {kept} fills "
            f"{last_wave_fill(programs, kept[2] * sms):.0%} of its waves' places; in ranges: "
            f"{fills}."
            + _slip(_PLAN_MISTAKES, got, programs, sms, tiles, most, gain))


# ---------------------------------------------------------------------------------------------
# Exercise 2: merge many partials
# ---------------------------------------------------------------------------------------------


def _split_partials(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bounds: list[int],
                    scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 partial results of attention over the key ranges ``bounds[i] .. bounds[i+1]``."""
    outs, lses = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        s = (q @ k[..., lo:hi, :].transpose(-2, -1)) * scale
        lse = torch.logsumexp(s, dim=-1) if hi > lo else s.new_full(s.shape[:-1], NEG_INF)
        p = torch.exp(s - lse.unsqueeze(-1)) if hi > lo else s
        outs.append(p @ v[..., lo:hi, :] if hi > lo else q.new_zeros(q.shape[:-1] + (
            v.shape[-1],)))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def _split_merge_mistakes(outs: torch.Tensor, lses: torch.Tensor) -> dict[str, torch.Tensor]:
    o, lse = outs.double(), lses.double()
    w = torch.exp(lse)
    total = w.sum(0)
    return {
        "you averaged the outputs. Splits that saw larger scores weigh more: weight each by "
        "exp(lse_s - lse).": o.mean(0),
        "you weighted by exp(lse_s) without normalising. Divide by the sum of the weights.":
            (w.unsqueeze(-1) * o).sum(0),
        "the weights exp(lse_s) overflowed (inf / inf = NaN). Subtract the largest lse first: "
        "exp(lse_s - max) is at most 1.": (w.unsqueeze(-1) * o).sum(0) / total.unsqueeze(-1),
    }


@exercise(
    "Merge the partial results of many splits",
    "Subtract the largest lse so every weight lies in [0, 1]. What must an empty split, and a row"
    " with only empty splits, give?",
    forbid=("teachkit.attention.merge_partials", "teachkit.ring.attention.merge_partials_",
            "teachkit.kernels.decode.decode_merge_kernel",
            "teachkit.exercises.solutions.ex04.solution_merge_out_lse",),
)
def check_merge_splits(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Check ``fn(outs, lses) -> (out, lse)`` against float64 attention over all the keys.

    Cases: 37 keys in 4 uneven splits for a ``(2, 3)`` batch of 1 query; 3 queries with
    splits past the end (empty: ``lse = -inf``, zeros); scores in the thousands (``exp(lse)``
    overflows even float64); one split; a row whose splits are all empty; float32 partials.
    """
    gen = fresh_generator()
    D = 8
    cases = [
        ("a (2, 3) batch of 1 query, 37 keys in splits of 10, 10, 10, 7", (2, 3), 1,
         [0, 10, 20, 30, 37], 1.0, torch.float64, 1e-12),
        ("3 queries, 20 keys in 6 splits of which 3 are empty (past the end)", (2,), 3,
         [0, 8, 16, 20, 20, 20, 20], 1.0, torch.float64, 1e-12),
        ("scores in the thousands (exp(lse) overflows), 30 keys in 3 splits", (2,), 2,
         [0, 11, 22, 30], 2000.0, torch.float64, 1e-10),
        ("a single split of 13 keys", (3,), 1, [0, 13], 1.0, torch.float64, 1e-12),
        ("float32 partials, 50 keys in 5 splits", (2, 2), 1, [0, 16, 32, 48, 50], 1.0,
         torch.float32, 1e-5),
    ]
    for case, batch, L, bounds, size, dtype, rtol in cases:
        q = torch.randn(*batch, L, D, generator=gen, dtype=torch.float64) * size ** 0.5
        S = bounds[-1]
        k = torch.randn(*batch, S, D, generator=gen, dtype=torch.float64) * size ** 0.5
        v = torch.randn(*batch, S, D, generator=gen, dtype=torch.float64)
        scale = 1 / math.sqrt(D)
        outs, lses = _split_partials(q, k, v, bounds, scale)
        s = (q @ k.transpose(-2, -1)) * scale
        ref_out, ref_lse = torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)
        outs_in, lses_in = outs.to(dtype), lses.to(dtype)
        got = call_learner(fn, case, outs_in.clone(), lses_in.clone())
        expect(isinstance(got, tuple) and len(got) == 2,
               f"On {case}: return a pair (out, lse), got {type(got).__name__}.")
        out, lse = got
        advice = ""
        if not (isinstance(out, torch.Tensor) and out.shape == ref_out.shape
                and relative_error(out, ref_out) <= rtol):
            advice = matching_mistake(out, _split_merge_mistakes(outs_in, lses_in)) or ""
        expect_close(out, ref_out, case + " (out)", rtol,
                     advice or "weights exp(lse_s - lse), normalised over the splits.")
        expect_close(lse, ref_lse, case + " (lse)", rtol,
                     "lse = m + log(sum_s exp(lse_s - m)), not the largest lse alone.")
        expect(out.dtype == dtype, f"On {case}: return out in the partials' dtype {dtype}, "
               f"got {out.dtype}.")
    # A row whose every split is empty: zeros and -inf, not NaN.
    outs = torch.zeros(3, 2, 4, dtype=torch.float64)
    lses = torch.full((3, 2), NEG_INF, dtype=torch.float64)
    outs[:, 1], lses[:, 1] = torch.randn(3, 4, generator=gen, dtype=torch.float64), 0.5
    case = "row 0 of 2, whose 3 splits are all empty (it saw no key)"
    out, lse = call_learner(fn, case, outs.clone(), lses.clone())
    expect(bool(torch.isfinite(out).all()) and bool((out[0] == 0).all()),
           f"On {case}: expected zeros, got {out[0].tolist()}. With every weight 0 the sum is "
           "0 / 0: divide only where the total is positive, as SDPA gives zeros for a row that "
           "sees no key.")
    expect(lse[0].item() == NEG_INF, f"On {case}: expected lse = -inf, got {lse[0].item()}.")
    expect_close(out[1], outs[:, 1].mean(0), "row 1 of the same call (3 splits of equal lse)",
                 1e-12, "equal lse: equal weights, 1/3 each.")


# ---------------------------------------------------------------------------------------------
# Exercise 3: a block table lookup
# ---------------------------------------------------------------------------------------------


def _rows_mistakes(table: torch.Tensor, P: int, pos: torch.Tensor) -> dict[str, torch.Tensor]:
    t, pos = table.long(), pos.long()
    max_pages = t.shape[1]
    out = {
        "you swapped page and slot: the logical page is t // page_size and the slot t % "
        "page_size.": torch.gather(t, 1, (pos % P).clamp(max=max_pages - 1)) * P + pos // P,
        "you looked up the logical page (t // page_size) without the table: the table maps it "
        "to the physical page that holds it.": pos,
        "every sequence used row 0 of the table: sequence b's pages are in block_table[b]":
            t[0][pos // P] * P + pos % P,
        "the row is page * page_size + slot, not page * max_pages + slot.":
            torch.gather(t, 1, pos // P) * max_pages + pos % P,
        "you returned the physical page without the slot inside it: add t % page_size.":
            torch.gather(t, 1, pos // P) * P,
    }
    return out


@exercise(
    "Find a token's row in the page pool through the block table",
    "A position names a logical page and a slot in it; the block table turns the logical page "
    "into a physical one.",
    forbid=("teachkit.paging.token_rows", "teachkit.paging.gather_from_pages",
            "teachkit.paging.paged_from_contiguous",),
)
def check_token_rows(fn: Callable[..., torch.Tensor]) -> None:
    """Check ``fn(block_table, page_size, positions) -> rows`` by reading a real pool.

    Every case scatters sequences into a pool through a shuffled block table, each slot holding
    the code of its (sequence, position), and checks that the rows returned hold the tokens
    asked for. Cases: pages of 1, 3, 16 and 5 tokens; 1 to 4 sequences of random lengths;
    positions in any order, repeated, and the last token of each sequence.
    """
    gen = fresh_generator()
    for P in (1, 3, 16, 5):
        B = random_int(1, 4, gen)
        lens = torch.randint(1, 60, (B,), generator=gen)
        num_pages = int(((lens + P - 1) // P).sum()) + random_int(0, 5, gen)
        table = build_block_table(lens, P, num_pages, gen)
        # the pool holds, in each slot, the code 1000 * b + t of the token stored there
        flat = torch.full((num_pages * P,), -1, dtype=torch.int64)
        for b, n in enumerate(lens.tolist()):
            for t in range(n):
                flat[int(table[b, t // P]) * P + t % P] = 1000 * b + t
        n = random_int(1, 12, gen)
        pos = (torch.rand(B, n, generator=gen) * lens[:, None]).long()
        pos[:, -1] = lens - 1  # the last token of each sequence
        case = (f"{B} sequence(s) of {lens.tolist()} tokens, pages of {P}, a pool of "
                f"{num_pages} pages, table {table.tolist()}, positions {pos.tolist()}")
        got = call_learner(fn, case, table.clone(), P, pos.clone())
        expect(isinstance(got, torch.Tensor) and got.shape == pos.shape,
               f"On {case}: return a tensor of the positions' shape {tuple(pos.shape)}, got "
               f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}.")
        expect(not got.dtype.is_floating_point,
               f"On {case}: return integer rows (int64), got {got.dtype}; use // and %.")
        want = token_rows(table, P, pos)
        if torch.equal(got.long(), want):
            continue
        inside = (got >= 0) & (got < num_pages * P)
        held = torch.where(inside, flat[got.long().clamp(0, num_pages * P - 1)], -1)
        asked = 1000 * torch.arange(B)[:, None] + pos
        advice = next((e for e, wrong in _rows_mistakes(table, P, pos).items()
                       if torch.equal(got.long(), wrong)), "row = table[b, t // P] * P + t % P.")
        b, i = (int(x) for x in torch.nonzero(held != asked)[0])
        raise ExerciseFailed(
            f"On {case}: token {int(pos[b, i])} of sequence {b} is in row {int(want[b, i])}, "
            f"your row {int(got[b, i])} holds "
            + ("no token" if int(held[b, i]) < 0 else
               f"token {int(held[b, i]) % 1000} of sequence {int(held[b, i]) // 1000}")
            + f".\n  {advice}")


# ---------------------------------------------------------------------------------------------
# Exercise 3b: a tile's pages interleaved
# ---------------------------------------------------------------------------------------------


def _tile_keys_mistakes(start: int, block_n: int, P: int) -> dict[str, torch.Tensor]:
    rows = torch.arange(block_n)
    n = block_n // P
    return {
        "this is key order (row i holds key start + i): a thread's rows, n apart, then lie in n "
        "different pages, each its own table entry. Make rows i, i + n, i + 2n, ... share one "
        "page.": start + rows,
        "your keys leave out the tile's first key: add start.": (rows % n) * P + rows // n,
        "page and slot are swapped: with n = block_n // page_size pages a tile, row i's page is "
        "i % n (so rows n apart share it) and its slot i // n.":
            start + (rows // n) * P + rows % n,
    }


@exercise(
    "Interleave a tile's pages so that a thread's rows share one",
    "A tile of block_n keys holds n = block_n // page_size whole pages. Which rows i share the "
    "value of i % n?",
)
def check_tile_keys(fn: Callable[[int, int, int], torch.Tensor]) -> None:
    """Check ``fn(start, block_n, page_size) -> keys``, the key each tile row holds.

    Any answer with the two properties the kernel needs passes: the rows hold each of the
    tile's keys ``start .. start + block_n - 1`` once (the sum over a tile's keys does not
    depend on their order), and rows ``r, r + n, r + 2n, ...`` (``n = block_n // page_size``,
    the rows one thread loads in the sm_90 tiles that interleave) all lie in one page. Cases:
    the kernel's tiles (256 keys of pages of 16 at ``D = 64``, 128 at ``D = 128``), pages of
    2 to 64, tiles anywhere in the sequence.
    """
    gen = fresh_generator()
    cases = [(0, 256, 16), (512, 128, 16), (192, 64, 4), (1024, 128, 32), (4064, 32, 16)]
    for _ in range(3):
        P = 2 ** random_int(1, 6, gen)
        block_n = P * 2 ** random_int(1, 4, gen)
        cases.append((block_n * random_int(0, 40, gen), block_n, P))
    for start, block_n, P in cases:
        n = block_n // P
        case = f"a tile of {block_n} keys from key {start}, pages of {P} ({n} pages a tile)"
        got = call_learner(fn, case, start, block_n, P)
        expect(isinstance(got, torch.Tensor) and tuple(got.shape) == (block_n,),
               f"On {case}: return a tensor of shape ({block_n},), one key a row, got "
               f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}.")
        expect(not got.dtype.is_floating_point,
               f"On {case}: return integer keys (int64), got {got.dtype}; use // and %.")
        got = got.long().cpu()
        keys, pages = torch.arange(start, start + block_n), got // P
        if (torch.equal(got.sort().values, keys)
                and all(pages[r::n].unique().numel() == 1 for r in range(n))):
            continue  # every key once, and rows n apart in one page
        advice = next((e for e, wrong in _tile_keys_mistakes(start, block_n, P).items()
                       if torch.equal(got, wrong)), None)
        if advice is not None:
            raise ExerciseFailed(f"On {case}: {advice}")
        if not torch.equal(got.sort().values, keys):
            inside = (got >= start) & (got < start + block_n)
            counts = torch.bincount(got[inside] - start, minlength=block_n)
            missing, twice = keys[counts == 0][:5].tolist(), keys[counts > 1][:5].tolist()
            outside = got[~inside][:5].tolist()
            raise ExerciseFailed(
                f"On {case}: the rows must hold each of the tile's keys {start}.."
                f"{start + block_n - 1} once. Missing: {missing or 'none'}; held more than "
                f"once: {twice or 'none'}; outside the tile: {outside or 'none'}.")
        for r in range(n):
            held = pages[r::n].unique().tolist()
            expect(len(held) == 1,
                   f"On {case}: rows {r}, {r + n}, {r + 2 * n}, ... ({n} apart, the rows one "
                   f"thread loads) lie in pages {held} of the sequence, so one thread looks up "
                   f"{len(held)} table entries. Give rows with the same i % n the same page.")


# ---------------------------------------------------------------------------------------------
# Exercise 4: the merge kernel in Triton
# ---------------------------------------------------------------------------------------------

_MERGE_SIGNATURE = ("(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, "
                    "stride_o, HEAD_DIM, SPLITS)")


def _merge_kernel_cases(gen: torch.Generator) -> list[tuple[str, tuple[int, ...], int, list[int],
                                                             float, torch.dtype]]:
    """``(case, batch, queries, split bounds, score size, output dtype)``."""
    n = random_int(30, 60, gen)
    cut = sorted(random_int(1, n - 1, gen) for _ in range(4))
    return [
        (f"a (2, 3) batch of 1 query, {n} keys in 4 uneven splits {[0, *cut[:3], n]}", (2, 3), 1,
         [0, *cut[:3], n], 1.0, torch.float32),
        ("3 queries of 2 heads, 20 keys in 6 splits of which 3 are empty (SPLITS = 8: rows 6 "
         "and 7 of the partials are not splits)", (2,), 3, [0, 8, 16, 20, 20, 20, 20], 1.0,
         torch.float32),
        ("scores in the thousands (exp(lse) overflows float32), 30 keys in 3 splits", (2,), 2,
         [0, 11, 22, 30], 400.0, torch.float32),
        ("a single split of 13 keys", (3,), 1, [0, 13], 1.0, torch.float32),
        (f"float16 output, {n} keys in 5 splits", (2, 2), 1, [0, *cut, n], 1.0, torch.float16),
    ]


def _lse_mistakes(lses: torch.Tensor) -> dict[str, torch.Tensor]:
    """Usual wrong lse of the merge, from the partial lses ``(n, rows)``."""
    lse = lses.double()
    m = lse.amax(0)
    return {
        "lse is the largest partial lse alone: add the log of the summed weights, "
        "lse = m + log(sum_s exp(lse_s - m)).": m,
        "lse is log(sum_s exp(lse_s - m)) without m: the weights were measured against m, "
        "add it back: lse = m + log(total).": torch.log(torch.exp(lse - m).sum(0)),
    }


def _merge_kernel_mistakes(outs: torch.Tensor, lses: torch.Tensor) -> dict[str, torch.Tensor]:
    """Exercise 2's usual wrong outputs, and the kernel's own: weights shifted but not
    normalised."""
    o, lse = outs.double(), lses.double()
    w = torch.exp(lse - lse.amax(0))
    return _split_merge_mistakes(outs, lses) | {
        "you weighted by exp(lse_s - m) without normalising: divide by the sum of the "
        "weights, tl.sum(w, 0), once.": (w.unsqueeze(-1) * o).sum(0),
    }


def _run_merge_kernel(kernel: object, case: str, outs: torch.Tensor, lses: torch.Tensor,
                      dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                     torch.Tensor]:
    """Launch ``kernel`` on float32 partials ``outs`` ``(n, rows, D)`` and ``lses`` ``(n, rows)``,
    laid out with gaps of NaN between rows and NaN splits up to the next power of two; return
    ``(out, lse, out buffer, lse buffer)`` (the buffers hold :data:`SENTINEL` around them)."""
    n, rows, D = outs.shape
    splits = triton.next_power_of_2(n)
    part = torch.full((splits, rows, D + 8), float("nan"), dtype=torch.float32)
    part[:n, :, :D] = outs
    lse_part = torch.full((splits, rows + 3), float("nan"), dtype=torch.float32)
    lse_part[:n, :rows] = lses
    out_buf = torch.full((rows + 1, D + 8), SENTINEL, dtype=dtype, device=DEVICE)
    lse_buf = torch.full((rows + 4,), SENTINEL, dtype=torch.float32, device=DEVICE)
    part, lse_part = part.to(DEVICE), lse_part.to(DEVICE)
    launch(kernel, (rows,), case, part, lse_part, out_buf, lse_buf, n, part.stride(0),
           part.stride(1), lse_part.stride(0), out_buf.stride(0), HEAD_DIM=D, SPLITS=splits,
           advice=f"The kernel's arguments are {_MERGE_SIGNATURE}; grid (n_rows,).")
    out_buf, lse_buf = out_buf.cpu(), lse_buf.cpu()
    return out_buf[:rows, :D], lse_buf[:rows], out_buf, lse_buf


def _expect_merge_stores(out_buf: torch.Tensor, lse_buf: torch.Tensor, rows: int, D: int,
                         case: str) -> None:
    """Nothing stored past the last row, nor between the rows of O."""
    outside = torch.ones(out_buf.shape, dtype=torch.bool)
    outside[:rows, :D] = False
    expect_untouched(out_buf, outside, case,
                     "your kernel stored outside the rows of O: row r starts at "
                     "O + r * stride_o (stride_o is not HEAD_DIM here) and holds HEAD_DIM values.")
    expect_untouched(lse_buf, torch.arange(lse_buf.numel()) >= rows, case,
                     f"your kernel stored past LSE[{rows - 1}]: one lse per program, at "
                     "LSE + row.")


@exercise(
    "The split-KV merge kernel in Triton",
    hint="Exercise 2's merge, one row per program, with the splits along a block axis. What "
    "must a padding split's lse be so that it weighs nothing?",
    forbid=("teachkit.kernels.decode.decode_merge_kernel",
            "teachkit.kernels.decode_simple.decode_simple_merge_kernel"),
)
def check_merge_kernel(kernel: object) -> None:
    """Launch the learner's ``@triton.jit`` kernel
    ``(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
    HEAD_DIM, SPLITS)`` with one program per row, on the partials of float64 attention over
    uneven splits of the keys, and compare with float64 attention over all of them.

    The partials are laid out with NaN between the rows (strides larger than the width) and in
    the splits past ``num_splits`` up to ``SPLITS``, so unmasked loads and wrong strides show;
    the outputs sit in buffers of :data:`~teachkit.exercises.launching.SENTINEL`, so stores out
    of place show. Cases: uneven splits, empty splits (lse ``-inf``) and ``num_splits`` not a
    power of two, scores in the thousands, a single split, a float16 output, and a row whose
    splits are all empty (zeros and ``-inf``).

    Parameters
    ----------
    kernel
        The learner's ``@triton.jit`` function.
    """
    require_kernel(kernel, _MERGE_SIGNATURE)
    gen = fresh_generator()
    D = 16
    rtol32 = 1e-5
    for case, batch, L, bounds, size, dtype in _merge_kernel_cases(gen):
        q = torch.randn(*batch, L, D, generator=gen, dtype=torch.float64) * size ** 0.5
        S = bounds[-1]
        k = torch.randn(*batch, S, D, generator=gen, dtype=torch.float64) * size ** 0.5
        v = torch.randn(*batch, S, D, generator=gen, dtype=torch.float64)
        outs, lses = _split_partials(q, k, v, bounds, 1 / math.sqrt(D))
        n = len(bounds) - 1
        outs, lses = outs.reshape(n, -1, D).float(), lses.reshape(n, -1).float()
        rows = outs.shape[1]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        ref_out = (torch.softmax(s, -1) @ v).reshape(rows, D)
        ref_lse = torch.logsumexp(s, -1).reshape(rows)
        # float32 partials carry each lse to 2^-24 of its size, and exp(lse_s - m) turns an
        # error in the lse into the same relative error in the weight: scores in the thousands
        # move a right merge by up to 2 * max|lse| * 2^-24, past 1e-5
        finite = lses[torch.isfinite(lses)]
        largest = float(finite.abs().max()) if finite.numel() else 0.0
        rtol_out = max(rtol32, 2 * largest * 2.0 ** -24) if dtype == torch.float32 else 2e-3
        out, lse, out_buf, lse_buf = _run_merge_kernel(kernel, case, outs, lses, dtype)
        _expect_merge_stores(out_buf, lse_buf, rows, D, case)
        bad_nan = torch.isnan(out) & ~torch.isnan(ref_out)
        if bool(bad_nan.any()):
            if size > 1:
                advice = ("exp(lse_s) overflows (inf / inf = NaN): subtract the largest lse "
                          "first, w_s = exp(lse_s - m) <= 1.")
            elif n < triton.next_power_of_2(n):
                advice = (f"rows {n} to {triton.next_power_of_2(n) - 1} of the (SPLITS, "
                          "HEAD_DIM) tile are no split (the checker filled them with NaN): "
                          "load with mask=offs_s < num_splits, other=float('-inf') for the lse "
                          "and other=0.0 for the outputs (0 * NaN is NaN).")
            else:
                advice = ("the checker put NaN between the rows of the partials: split s, row r "
                          "starts at O_PART + s * stride_ps + r * stride_pr, and its lse is "
                          "LSE_PART + s * stride_ls + r (the strides are not HEAD_DIM or "
                          "n_rows here).")
            raise ExerciseFailed(f"On {case}: NaN in the output where the reference is finite; "
                                 + advice)
        if not relative_error(out, ref_out) <= rtol_out:
            mistake = matching_mistake(out, _merge_kernel_mistakes(outs, lses))
            if mistake:
                raise ExerciseFailed(f"On {case}: your output matches a usual mistake: "
                                     + mistake)
        expect(out.dtype == dtype, f"On {case}: O is {dtype}; store out.to(O.dtype.element_ty).")
        expect_close(out, ref_out, f"{case} (out)", rtol_out,
                     advice="weights w_s = exp(lse_s - m) with m the largest lse, out = "
                     "sum_s w_s out_s / sum_s w_s; row r of split s at O_PART + s * stride_ps "
                     "+ r * stride_pr.")
        if not relative_error(lse, ref_lse) <= rtol32:
            mistake = matching_mistake(lse, _lse_mistakes(lses), rtol=1e-5)
            if mistake:
                raise ExerciseFailed(f"On {case}: your lse matches a usual mistake: " + mistake)
        expect_close(lse, ref_lse, f"{case} (lse)", rtol32,
                     advice="lse = m + log(sum_s exp(lse_s - m)), in natural log (tl.log).")
    # Row 0 saw no key (all its splits empty); row 1 has three splits of equal lse.
    outs = torch.zeros(3, 2, D)
    lses = torch.full((3, 2), NEG_INF)
    outs[:, 1], lses[:, 1] = torch.randn(3, D, generator=gen), 0.5
    case = "row 0 of 2, whose 3 splits are all empty (it saw no key)"
    out, lse, out_buf, lse_buf = _run_merge_kernel(kernel, case, outs, lses, torch.float32)
    _expect_merge_stores(out_buf, lse_buf, 2, D, case)
    expect(bool(torch.isfinite(out[0]).all()) and bool((out[0] == 0).all()),
           f"On {case}: expected zeros, got {out[0][:4].tolist()}... With every weight 0 the "
           "sum is 0 / 0 (and m = -inf makes lse_s - m = -inf - (-inf) = NaN): shift by 0 "
           "where m is -inf and divide by 1 where the total is 0, as SDPA gives zeros for a "
           "row that sees no key.")
    expect(lse[0].item() == NEG_INF, f"On {case}: expected lse = -inf, got {lse[0].item()}.")
    expect_close(out[1], outs[:, 1].double().mean(0), "row 1 of the same call (3 splits of "
                 "equal lse)", 1e-6, "equal lse: equal weights, 1/3 each.")
    expect_close(lse[1], torch.tensor(0.5 + math.log(3), dtype=torch.float64),
                 "row 1 of the same call (lse)", 1e-6, "lse = m + log(total) = 0.5 + log 3.")
