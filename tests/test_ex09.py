"""The checkers of notebook 09 explain wrong answers (test_exercises.py holds
every checker to its solution and to an unfilled stub)."""

from __future__ import annotations  # noqa: I001  (teachkit first: it sets TRITON_INTERPRET)

import math

import teachkit  # noqa: F401
import pytest
import torch
import triton
import triton.language as tl

from teachkit.attention import merge_partials
from teachkit.exercises import ex09
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex09 as solutions
from teachkit.kernels.decode import MAX_SPLITS

# --- exercise 1: num_splits ------------------------------------------------------------------


def _unless_full(rule):
    return lambda p, k, s: 1 if p >= s else rule(p, k, s)


def _unshifted_merge(outs, lses):
    """Weights exp(lse) with no shift, so a large lse overflows; a row with no keys (total 0)
    still gets 0, so that overflow is the only mistake."""
    w = _weights(lses, False)
    total = w.sum(0).unsqueeze(-1)
    out = (w.unsqueeze(-1) * outs).sum(0) / torch.where(total > 0, total, 1.0)
    return out, torch.logsumexp(lses, 0)


@pytest.mark.parametrize("wrong,message", [
    (lambda p, k, s: max(1, min(2 * s // p, k, MAX_SPLITS)), "already gives every SM"),
    (_unless_full(lambda p, k, s: max(1, min(-(-2 * s // p), k, MAX_SPLITS))), "rounded up"),
    (_unless_full(lambda p, k, s: max(1, min(s // p, k, MAX_SPLITS))), "one program per SM"),
    (_unless_full(lambda p, k, s: max(1, min(2 * s // p, MAX_SPLITS))),
     "at least one key block"),
    (_unless_full(lambda p, k, s: max(1, min(2 * s // p, k))), "MAX_SPLITS"),
    (_unless_full(lambda p, k, s: min(2 * s // p, k, MAX_SPLITS)), "at least one split"),
    (lambda p, k, s: 4, "// |no split"),
])
def test_num_splits_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex09.check_num_splits(wrong)
    assert "On programs = " in str(info.value) and "expected" in str(info.value)


def test_num_splits_wants_an_int(unwatched):
    with pytest.raises(ExerciseFailed, match="return an int"):
        ex09.check_num_splits(lambda p, k, s: float(solutions.solution_num_splits(p, k, s)))


# --- exercise 1b: last_wave_splits -----------------------------------------------------------


def _fill(p, n, places):
    waves = p * n / places
    return waves / math.ceil(waves)


@pytest.mark.parametrize("wrong,message", [
    (lambda p, s, r, m: max(range(2, m + 1), key=lambda n: (
        p * n / (r * s) - math.floor(p * n / (r * s)), -n)), "fractional part"),
    (lambda p, s, r, m: max(range(2, m + 1), key=lambda n: (_fill(p, n, r * s), n)),
     "take the fewest"),
    (lambda p, s, r, m: max(range(1, m + 1), key=lambda n: (_fill(p, n, r * s), -n)),
     "start at 2"),
    (lambda p, s, r, m: max(range(2, max(m, 3)), key=lambda n: (_fill(p, n, r * s), -n)),
     "including most"),
    (lambda p, s, r, m: max(range(2, m + 1), key=lambda n: (_fill(p, n, s), -n)),
     "resident \\* sms"),
    (lambda p, s, r, m: 3, "expected"),
])
def test_last_wave_splits_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex09.check_last_wave_splits(wrong)
    assert "On programs = " in str(info.value) and "places" in str(info.value)


def test_last_wave_splits_wants_an_int(unwatched):
    with pytest.raises(ExerciseFailed, match="return an int"):
        ex09.check_last_wave_splits(
            lambda p, s, r, m: float(solutions.solution_last_wave_splits(p, s, r, m)))


def test_last_wave_splits_accepts_the_fill_computed_in_another_order():
    """Dividing by the SMs and the residents one at a time rounds otherwise than dividing once;
    the checker's cases rank the counts alike either way."""
    def other_order(programs, sms, resident, most):
        fills = {n: (programs / resident / sms * n) / math.ceil(programs / resident / sms * n)
                 for n in range(2, most + 1)}
        return max(fills, key=lambda n: (fills[n], -n))

    ex09.check_last_wave_splits(other_order)


# --- exercise 1c: fullest_wave_tiles ---------------------------------------------------------


def _fill_tiles(fill):
    """A learner's ``fullest_wave_tiles`` that keeps the usual tiles within one wave and
    otherwise takes the first tiles with the largest ``fill(programs, places)``."""
    def choose(programs, sms, tiles):
        if programs <= tiles[0][2] * sms:
            return tiles[0]
        fills = [fill(programs, t[2] * sms) for t in tiles]
        return tiles[fills.index(max(fills))]

    return choose


@pytest.mark.parametrize("wrong,message", [
    (lambda p, s, t: max(t, key=lambda x: _fill(p, 1, x[2] * s)), "fits in one wave"),
    (lambda p, s, t: t[0] if p <= t[0][2] * s else max(
        t[::-1], key=lambda x: _fill(p, 1, x[2] * s)), "later tiles"),
    (_fill_tiles(lambda p, places: p / places - math.floor(p / places)), "fractional part"),
    (lambda p, s, t: t[0], "kept the usual tiles"),
    (lambda p, s, t: t[1 % len(t)], "expected"),
])
def test_fullest_wave_tiles_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex09.check_fullest_wave_tiles(wrong)
    assert "On programs = " in str(info.value) and "places" in str(info.value)


def test_fullest_wave_tiles_wants_one_of_the_tiles(unwatched):
    with pytest.raises(ExerciseFailed, match="return one of the tiles"):
        ex09.check_fullest_wave_tiles(
            lambda p, s, t: list(solutions.solution_fullest_wave_tiles(p, s, t)))


@pytest.mark.parametrize("fill", [
    lambda p, places: (p / places) / math.ceil(p / places),
    lambda p, places: p / (places * math.ceil(p / places)),
    lambda p, places: (p / 2 / (places / 2)) / math.ceil(p / places),
])
def test_fullest_wave_tiles_accepts_the_fill_computed_in_another_order(fill):
    """The cases keep only ties that any order of float arithmetic ranks alike."""
    ex09.check_fullest_wave_tiles(_fill_tiles(fill))


# --- exercise 1d: fullest_wave_plan ----------------------------------------------------------


def _plan(fill=lambda p, places: _fill(p, 1, places), one_wave=True, against_usual=False,
          counts=lambda most: range(2, most + 1), more_ranges=False, later_tiles=False,
          only_kept=False, no_gain=False):
    """A learner's ``fullest_wave_plan`` written out plainly, with one of its steps changed."""
    def plan(programs, sms, tiles, most, gain):
        if one_wave and programs <= tiles[0][2] * sms:
            return tiles[0], 1
        kept = tiles[0] if against_usual else solutions.solution_fullest_wave_tiles(
            programs, sms, tiles)
        kept_fill = fill(programs, kept[2] * sms)
        best, best_fill = (kept, 1), -1.0
        for ranges in (counts(most)[::-1] if more_ranges else counts(most)):
            for tile in ((kept,) if only_kept else tiles[::-1] if later_tiles else tiles):
                f = fill(programs * ranges, tile[2] * sms)
                if f > best_fill:
                    best, best_fill = (tile, ranges), f
        return best if best_fill > kept_fill + (0 if no_gain else gain) else (kept, 1)

    return plan


@pytest.mark.parametrize("wrong,message", [
    (_plan(one_wave=False), "fits in one wave"),
    (_plan(no_gain=True), "more than `gain` fuller"),
    (_plan(against_usual=True), "not with the unsplit pick"),
    (_plan(more_ranges=True), "take the fewest"),
    (_plan(later_tiles=True), "later tiles"),
    (_plan(counts=lambda most: range(2, max(most, 3))), "including most"),
    (_plan(only_kept=True), "try every tile"),
    (lambda p, s, t, m, g: (t[0], 2), "expected"),
])
def test_fullest_wave_plan_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex09.check_fullest_wave_plan(wrong)
    assert "On programs = " in str(info.value) and "in ranges:" in str(info.value)


def test_fullest_wave_plan_wants_a_tile_and_a_count(unwatched):
    with pytest.raises(ExerciseFailed, match="return \\(one of the tiles, a count of ranges\\)"):
        ex09.check_fullest_wave_plan(
            lambda p, s, t, m, g: list(solutions.solution_fullest_wave_plan(p, s, t, m, g)))


@pytest.mark.parametrize("fill", [
    lambda p, places: (p / places) / math.ceil(p / places),
    lambda p, places: p / (places * math.ceil(p / places)),
    lambda p, places: (p / 2 / (places / 2)) / math.ceil(p / places),
])
def test_fullest_wave_plan_accepts_the_fill_computed_in_another_order(fill):
    """The cases keep only ties, and margins over the gain, that any order of float arithmetic
    decides alike."""
    ex09.check_fullest_wave_plan(_plan(fill=fill))


# --- exercise 2: merge_splits ----------------------------------------------------------------


def test_merge_splits_refuses_a_fold_of_merge_partials():
    def fold(outs, lses):
        out, lse = outs[0], lses[0]
        for o, s in zip(outs[1:], lses[1:], strict=True):
            out, lse = merge_partials(out, lse, o, s)
        return out, lse

    with pytest.raises(ExerciseFailed, match="calls teachkit.attention.merge_partials"):
        ex09.check_merge_splits(fold)


def _weights(lses, shift):
    m = lses.amax(0) if shift else torch.zeros_like(lses[0])
    return torch.exp(lses - torch.where(m == float("-inf"), 0.0, m))


@pytest.mark.parametrize("wrong,message", [
    (lambda outs, lses: (outs.mean(0), torch.logsumexp(lses, 0)), "averaged the outputs"),
    (lambda outs, lses: ((_weights(lses, False).unsqueeze(-1) * outs).sum(0),
                         torch.logsumexp(lses, 0)), "without normalising"),
    (_unshifted_merge, "overflowed"),
])
def test_merge_splits_explains_wrong_outputs(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex09.check_merge_splits(wrong)
    assert "On " in str(info.value)


def test_merge_splits_names_a_wrong_lse_and_nan_rows(unwatched):
    def lse_is_max(outs, lses):
        out, _ = solutions.solution_merge_splits(outs, lses)
        return out, lses.amax(0)

    with pytest.raises(ExerciseFailed, match="not the largest lse alone"):
        ex09.check_merge_splits(lse_is_max)

    def no_empty_guard(outs, lses):
        w = _weights(lses, True)
        out = (w.unsqueeze(-1) * outs).sum(0) / w.sum(0).unsqueeze(-1)
        return out.to(outs.dtype), torch.logsumexp(lses, 0)

    with pytest.raises(ExerciseFailed, match="0 / 0"):
        ex09.check_merge_splits(no_empty_guard)


def test_merge_splits_wants_a_pair_in_the_partials_dtype(unwatched):
    with pytest.raises(ExerciseFailed, match=r"pair \(out, lse\)"):
        ex09.check_merge_splits(lambda outs, lses: outs[0])
    with pytest.raises(ExerciseFailed, match="partials' dtype"):
        ex09.check_merge_splits(lambda outs, lses: tuple(
            t.double() for t in solutions.solution_merge_splits(outs, lses)))


# --- exercise 3: token_rows ------------------------------------------------------------------


def _gather(t, pos):
    return torch.gather(t.long(), 1, pos)


@pytest.mark.parametrize("wrong,message", [
    (lambda t, P, pos: _gather(t, (pos % P).clamp(max=t.shape[1] - 1)) * P + pos // P,
     "swapped page and slot"),
    (lambda t, P, pos: pos.long(), "without the table"),
    (lambda t, P, pos: t[0].long()[pos // P] * P + pos % P, "row 0 of the table"),
    (lambda t, P, pos: _gather(t, pos // P) * t.shape[1] + pos % P, "not page \\* max_pages"),
    (lambda t, P, pos: _gather(t, pos // P) * P, "without the slot"),
])
def test_token_rows_explains_wrong_answers(wrong, message):
    # Some random cases cannot tell a mistake apart (one sequence, pages of one token): retry.
    for _ in range(5):
        try:
            ex09.check_token_rows(wrong)
        except ExerciseFailed as err:
            if message.replace("\\", "") in str(err):
                assert "holds" in str(err)
                return
    pytest.fail(f"no explanation mentioning {message!r}")


def test_token_rows_refuses_the_library_and_wants_integers(unwatched):
    with pytest.raises(ExerciseFailed, match="integer rows"):
        ex09.check_token_rows(lambda t, P, pos: solutions.solution_token_rows(t, P, pos).double())
    with pytest.raises(ExerciseFailed, match="shape"):
        ex09.check_token_rows(lambda t, P, pos: solutions.solution_token_rows(t, P, pos)[:, :1])


# --- exercise 3b: tile_keys ------------------------------------------------------------------


def _interleaved(start, block_n, P, page_of, slot_of):
    rows = torch.arange(block_n)
    return start + page_of(rows, block_n // P) * P + slot_of(rows, block_n // P)


@pytest.mark.parametrize("wrong,message", [
    (lambda s, b, P: s + torch.arange(b), "this is key order"),
    (lambda s, b, P: _interleaved(0, b, P, lambda r, n: r % n, lambda r, n: r // n),
     "add start"),
    (lambda s, b, P: s + torch.arange(b) // 2, r"Missing: \[128"),
    (lambda s, b, P: s + (torch.arange(b) * 7) % b, "looks up 16 table entries"),
    (lambda s, b, P: s + torch.arange(b) + b, r"outside the tile: \[256"),
])
def test_tile_keys_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        ex09.check_tile_keys(wrong)


def test_tile_keys_takes_any_interleaving_the_kernel_could_use():
    """Pages and slots in another order still give every key once, a page per thread."""
    def reversed_pages(s, b, P):
        return _interleaved(s, b, P, lambda r, n: n - 1 - r % n, lambda r, n: P - 1 - r // n)

    ex09.check_tile_keys(reversed_pages)


def test_tile_keys_wants_integers_of_the_tile_shape(unwatched):
    with pytest.raises(ExerciseFailed, match="integer keys"):
        ex09.check_tile_keys(lambda s, b, P: solutions.solution_tile_keys(s, b, P).double())
    with pytest.raises(ExerciseFailed, match="shape"):
        ex09.check_tile_keys(lambda s, b, P: solutions.solution_tile_keys(s, b, P)[:-1])


def test_tile_keys_is_the_kernels_order():
    """The solution is the order ``fold_key_block`` takes with ``INTERLEAVE_PAGES``: row ``i``
    holds slot ``i // n`` of page ``i % n``, key ``start + (i % n) * P + i // n``."""
    keys = solutions.solution_tile_keys(512, 64, 16)
    assert keys[:6].tolist() == [512, 528, 544, 560, 513, 529]
    assert sorted(keys.tolist()) == list(range(512, 576))


# --- exercise 4: the merge kernel ------------------------------------------------------------


@triton.jit
def _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr, MASK: tl.constexpr,
                SHIFT: tl.constexpr, WEIGH: tl.constexpr, NORMALISE: tl.constexpr,
                LSE_KIND: tl.constexpr, GUARD: tl.constexpr, READ_STRIDE: tl.constexpr,
                STORE_STRIDE: tl.constexpr):
    # The solution, with one mistake switched on by a flag.
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, SPLITS)
    offs_d = tl.arange(0, HEAD_DIM)
    used = offs_s < num_splits
    pr = stride_pr if READ_STRIDE else HEAD_DIM
    if MASK:
        lse = tl.load(LSE_PART + offs_s * stride_ls + row, mask=used, other=float("-inf"))
        part = tl.load(O_PART + offs_s[:, None] * stride_ps + row * pr + offs_d[None, :],
                       mask=used[:, None], other=0.0)
    else:
        lse = tl.load(LSE_PART + offs_s * stride_ls + row)
        part = tl.load(O_PART + offs_s[:, None] * stride_ps + row * pr + offs_d[None, :])
    m = tl.max(lse, 0)
    shift = tl.where(m == float("-inf"), 0.0, m) if GUARD else m
    if not SHIFT:
        shift = 0.0
    w = tl.exp(lse - shift)
    if not WEIGH:
        w = tl.where(offs_s < num_splits, 1.0, 0.0)
    total = tl.sum(w, 0)
    safe = tl.where(total == 0.0, 1.0, total) if GUARD else total
    out = tl.sum(w[:, None] * part, 0)
    if NORMALISE:
        out = out / safe
    if LSE_KIND == 0:
        res = tl.where(total == 0.0, float("-inf"), shift + tl.log(safe))
    elif LSE_KIND == 1:
        res = m
    else:
        res = tl.log(safe)
    tl.store(O + row * (stride_o if STORE_STRIDE else HEAD_DIM) + offs_d,
             out.to(O.dtype.element_ty))
    tl.store(LSE + row, res)


@triton.jit
def _unmasked(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
              HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, False, True, True, True, 0, True, True, True)


@triton.jit
def _unshifted(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
               HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, False, True, True, 0, True, True, True)


@triton.jit
def _averaged(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
              HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, True, False, True, 0, True, True, True)


@triton.jit
def _unnormalised(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                  HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, True, True, False, 0, True, True, True)


@triton.jit
def _lse_is_max(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, True, True, True, 1, True, True, True)


@triton.jit
def _lse_without_m(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                   HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, True, True, True, 2, True, True, True)


@triton.jit
def _no_empty_guard(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                    HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, True, True, True, 0, False, True, True)


@triton.jit
def _read_stride_d(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                   HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, True, True, True, 0, True, False, True)


@triton.jit
def _store_stride_d(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                    HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    _merge_body(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
                HEAD_DIM, SPLITS, True, True, True, True, 0, True, True, False)


def test_merge_kernel_accepts_the_solution_and_hints_on_the_stub(capsys):
    @triton.jit
    def stub(O_PART, LSE_PART, O, LSE, num_splits, stride_ps, stride_pr, stride_ls, stride_o,
             HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
        raise NotImplementedError  # delete this line when your kernel is written

    ex09.check_merge_kernel(solutions.solution_merge_kernel)
    ex09.check_merge_kernel(stub)
    out = capsys.readouterr().out
    assert "[correct]" in out and "[not attempted]" in out and "weighs nothing" in out


@pytest.mark.parametrize(("kernel", "says"), [
    (_unmasked, "are no split"),
    (_unshifted, "overflows"),
    (_averaged, "averaged the outputs"),
    (_unnormalised, "without normalising"),
    (_lse_is_max, "largest partial lse alone"),
    (_lse_without_m, "without m"),
    (_no_empty_guard, "0 / 0"),
    (_read_stride_d, "between the rows"),
    (_store_stride_d, "stored outside"),
    (lambda outs, lses: solutions.solution_merge_splits(outs, lses), "not a Triton kernel"),
])
def test_merge_kernel_mistakes_are_named(kernel, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex09.check_merge_kernel(kernel)


def test_merge_kernel_rejects_the_library_kernel():
    from teachkit.kernels.decode_simple import decode_simple_merge_kernel

    with pytest.raises(ExerciseFailed, match="the library's"):
        ex09.check_merge_kernel(decode_simple_merge_kernel)
