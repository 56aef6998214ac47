r"""Exercises of notebook 07, *online attention*.

Three exercises, each with a checker ``check_<name>(fn)`` here and a solution
``solution_<name>`` in :mod:`teachkit.exercises.solutions.ex07`:

1. :func:`check_tile_kind`: classify one tile ``(i, j)`` of a causal score matrix as skipped,
   computed in full, or computed with a mask (:mod:`teachkit.tiling`'s codes).
2. :func:`check_recompute_probs`: recompute a tile of probabilities from ``q``, ``k`` and the
   rows' log-sum-exp, as the backward pass of FlashAttention does, :math:`P = e^{s - lse}`.
3. :func:`check_tiled_attention`: the whole forward loop over query blocks and key blocks with
   the running ``(m, l, acc)``, the causal tile schedule and one division at the end.

Every checker runs the learner's function on fresh random inputs (odd sizes that blocks do not
divide, ``L != S`` both ways, large scores, several dtypes, batches) and compares with a float64
reference; a wrong answer raises :class:`~teachkit.exercises.checking.ExerciseFailed` saying
which case failed and the likely mistake.

Examples
--------
>>> from teachkit.exercises.solutions.ex07 import solution_tile_kind
>>> check_tile_kind(solution_tile_kind)
[correct] Classify one tile of the causal score matrix
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..attention import attention_block_update, attention_scores, causal_mask
from ..compare import relative_error
from ..tiling import FULL, MASKED, SKIP, TILE_NAMES, schedule_from_mask, tile_kind, tile_schedule
from .checking import (
    SOFTMAX_FUNCTIONS,
    ExerciseFailed,
    LargestFloat,
    call_learner,
    exercise,
    expect,
    expect_close,
    fresh_generator,
    matching_mistake,
    random_int,
    random_normal,
)

__all__ = [
    "check_tile_kind",
    "check_recompute_probs",
    "check_tiled_attention",
]

NEG_INF = float("-inf")
Pair = tuple[torch.Tensor, torch.Tensor]
_NAN_ADVICE = (
    "NaN or infinity where the reference is finite: exp of a large score overflowed "
    "(exp(s) / exp(lse) is inf / inf; exponentiate the difference, exp(s - lse), which is <= 0), "
    "or a row saw no key at all (l = 0, and 0 / 0 is NaN)."
)




SHAPE_ADVICE = (
    "Per-row statistics (lse, m, l) have one axis fewer than the score tile: add it "
    "back with .unsqueeze(-1) before combining them."
)
"""Advice shown when the learner's function raises (most often a shape that does not broadcast)."""


def _mismatch_advice(got: object, ref: torch.Tensor, mistakes: dict[str, torch.Tensor],
                     default: str) -> str:
    """NaN/inf advice, else the known wrong formula that ``got`` reproduces, else ``default``."""
    if not isinstance(got, torch.Tensor) or got.shape != ref.shape:
        return default
    g, r = got.detach().double(), ref.detach().double()
    explanation = matching_mistake(g, mistakes)  # first: a known mistake, NaNs included
    if explanation:
        return "Your result matches a common mistake: " + explanation
    if bool((~torch.isfinite(g) & torch.isfinite(r)).any()):
        return _NAN_ADVICE
    return default


def _check(
    got: object, ref: torch.Tensor, case: str, rtol: float,
    mistakes: Callable[[], dict[str, torch.Tensor]] | None = None, default: str = "",
) -> None:
    """:func:`expect_close`, with advice chosen only when the answer is off."""
    advice = ""
    if not (isinstance(got, torch.Tensor) and got.shape == ref.shape
            and relative_error(got, ref) <= rtol):
        advice = _mismatch_advice(got, ref, mistakes() if mistakes else {}, default)
    expect_close(got, ref, case, rtol=rtol, advice=advice)


# ---------------------------------------------------------------------------------------------
# Exercise 1: classify one tile
# ---------------------------------------------------------------------------------------------


def _tile_advice(i: int, j: int, L: int, S: int, bm: int, bn: int, got: int, want: int) -> str:
    r0, r1 = i * bm, min((i + 1) * bm, L)
    c0, c1 = j * bn, min((j + 1) * bn, S)
    visible = int(causal_mask(L, S)[r0:r1, c0:c1].sum())
    n = (r1 - r0) * (c1 - c0)
    lines = [f"it holds queries {r0}..{r1 - 1} and keys {c0}..{c1 - 1}, and {visible} of its {n} "
             f"entries are visible (key <= query)."]
    unclipped = tile_kind(i * bm, (i + 1) * bm, j * bn, (j + 1) * bn, causal=True)
    if (r1 - r0 < bm or c1 - c0 < bn) and unclipped == got:
        lines.append("This is a last, shorter tile: cut its end at L (or S), "
                     "r1 = min((i + 1) * block_m, L), before comparing.")
    elif want == FULL and got == MASKED and c1 - 1 == r0:
        lines.append(f"Off by one: query {r0} does see key {r0} (key <= query), so its last key "
                     f"{c1 - 1} is visible to every query of the tile.")
    elif want == SKIP and got == MASKED and c0 == r1:
        lines.append(f"Off by one: ranges are half-open, the tile's last query is {r1 - 1}, "
                     f"which cannot see key {c0}.")
    elif want == MASKED:
        lines.append("Some entries are visible and some are not: the diagonal crosses the tile.")
    return " ".join(lines)


def _random_tile_cases(gen: torch.Generator) -> list[tuple[str, int, int, int, int, bool]]:
    cases = [
        ("L = S = 100, blocks 32 x 32 (the last tile holds 4)", 100, 100, 32, 32, True),
        ("L = 70 < S = 130, blocks 16 x 24", 70, 130, 16, 24, True),
        ("L = 130 > S = 45, blocks 24 x 16", 130, 45, 24, 16, True),
        ("L = 37, S = 53, blocks 8 x 5 (block_m != block_n)", 37, 53, 8, 5, True),
        ("L = 5, S = 9, blocks larger than the matrix, 16 x 16", 5, 9, 16, 16, True),
        ("L = 33, S = 77 without a causal mask, blocks 16 x 16", 33, 77, 16, 16, False),
    ]
    for _ in range(6):
        L, S = random_int(1, 300, gen), random_int(1, 300, gen)
        bm, bn = random_int(1, 64, gen), random_int(1, 64, gen)
        cases.append((f"random L = {L}, S = {S}, blocks {bm} x {bn}", L, S, bm, bn, True))
    return cases


@exercise(
    "Classify one tile of the causal score matrix",
    "Think of the corners of the tile: which query and which key decide 'everything masked', and "
    "which decide 'nothing masked'?",
    forbid=("teachkit.tiling.tile_kind", "teachkit.tiling.tile_schedule",
            "teachkit.tiling.schedule_from_mask",),
)
def check_tile_kind(fn: Callable[..., int]) -> None:
    """Check ``fn(i, j, L, S, block_m, block_n, causal) -> SKIP | FULL | MASKED`` on every tile.

    Each grid is compared with the classification of the explicit causal mask
    (:func:`teachkit.tiling.schedule_from_mask`). Cases: ``L = S`` with a short last tile;
    ``L < S`` and ``L > S``; unequal blocks; blocks larger than the matrix; no mask; and six
    random grids with ``L, S`` up to 300 and blocks up to 64.
    """
    gen = fresh_generator()
    for case, L, S, bm, bn, causal in _random_tile_cases(gen):
        mask = causal_mask(L, S) if causal else torch.ones(L, S, dtype=torch.bool)
        want = schedule_from_mask(mask, bm, bn)
        for i in range(want.shape[0]):
            for j in range(want.shape[1]):
                got = call_learner(fn, case, i, j, L, S, bm, bn, causal, advice=SHAPE_ADVICE)
                expect(isinstance(got, int) and got in TILE_NAMES,
                       f"On {case}, tile ({i}, {j}): return one of the ints SKIP = {SKIP}, "
                       f"FULL = {FULL}, MASKED = {MASKED} (from teachkit.tiling), got {got!r}.")
                w = int(want[i, j])
                if got != w:
                    advice = ("Without a causal mask every key is visible: every tile is FULL."
                              if not causal else _tile_advice(i, j, L, S, bm, bn, got, w))
                    raise ExerciseFailed(
                        f"On {case}, tile ({i}, {j}): expected {TILE_NAMES[w].upper()} ({w}), "
                        f"got {TILE_NAMES[got].upper()} ({got}); {advice}")


# ---------------------------------------------------------------------------------------------
# Exercise 2: recompute a tile of probabilities from the lse
# ---------------------------------------------------------------------------------------------


def _probs_mistakes(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor,
                    scale: float) -> dict[str, torch.Tensor]:
    s = (q.double() @ k.double().transpose(-2, -1)) * scale
    lse64 = lse.double()
    out = {
        "you left out the scale. The forward pass computed exp(scale * q @ k.T - lse); use the "
        "same scores.": torch.exp(s / scale - lse64.unsqueeze(-1)),
        "you normalised over the tile's keys only (a softmax of the tile). The lse covers the "
        "whole row: exp(s - lse) sums to 1 only over all the keys.": torch.softmax(s, dim=-1),
    }
    if s.shape[-1] == s.shape[-2]:  # lse broadcast along the wrong axis
        out["lse was subtracted along the key axis: (..., Lb) broadcasts against the last axis "
            "of (..., Lb, Sb). Use lse.unsqueeze(-1), one value per query row."] = torch.exp(
                s - lse64.unsqueeze(-2))
    work = lse.dtype  # exp(s) / exp(lse) in the learner's precision: where it breaks
    s_work = (q.to(work) @ k.to(work).transpose(-2, -1)) * scale
    out["you divided exp(s) by exp(lse). With scores in the hundreds exp gives NaN or infinity "
        "(it overflows to inf, and inf / inf is NaN) or underflows to 0 in float32; "
        "exponentiate the difference, exp(s - lse), which is <= 0."] = (
            torch.exp(s_work) / torch.exp(lse).unsqueeze(-1)).double()
    return out


@exercise(
    "Recompute a tile of probabilities from q, k and lse",
    "The lse already holds the whole row's normalisation: no maximum and no sum over the tile are"
    " needed.",
)
def check_recompute_probs(fn: Callable[..., torch.Tensor]) -> None:
    """Check ``fn(q_block, k_block, lse_block, scale)`` on every tile against a float64 softmax.

    Cases: a ``(2, 3)`` batch of 37 queries and 101 keys in tiles of 16 x 32 (edge tiles of
    5 queries or 5 keys, a 5 x 5 corner); scale 8, scores in the hundreds, where ``exp(s)``
    overflows float32; float64; bfloat16 ``q`` and ``k`` with a float32 lse.
    """
    gen = fresh_generator()
    D = 16
    cases = [
        ("a (2, 3) batch, 37 queries, 101 keys, tiles of 16 x 32, float32",
         (2, 3), 37, 101, 16, 32, 1 / math.sqrt(D), torch.float32, 1e-5),
        ("scale 8: scores in the hundreds (exp(s) overflows float32), 29 queries, 70 keys, "
         "tiles of 8 x 16", (2,), 29, 70, 8, 16, 8.0, torch.float32, 1e-4),
        ("float64, 23 queries, 45 keys, tiles of 8 x 8", (3,), 23, 45, 8, 8, 0.25,
         torch.float64, 1e-12),
        ("bfloat16 q and k with a float32 lse, 33 queries, 50 keys, tiles of 16 x 16",
         (2,), 33, 50, 16, 16, 0.25, torch.bfloat16, 1e-4),
    ]
    for case, batch, L, S, bm, bn, scale, dtype, rtol in cases:
        q = random_normal(*batch, L, D, gen=gen).to(dtype)
        k = random_normal(*batch, S, D, gen=gen).to(dtype)
        s64 = (q.double() @ k.double().transpose(-2, -1)) * scale
        p64 = torch.softmax(s64, dim=-1)
        lse = torch.logsumexp(s64, dim=-1).to(torch.float64 if dtype == torch.float64
                                               else torch.float32)
        for r0 in range(0, L, bm):
            for c0 in range(0, S, bn):
                qb, kb, lb = q[..., r0:r0 + bm, :], k[..., c0:c0 + bn, :], lse[..., r0:r0 + bm]
                tile = f"{case}, tile of queries {r0}.. and keys {c0}.."
                got = call_learner(fn, tile, qb.clone(), kb.clone(), lb.clone(), scale,
                                   advice=SHAPE_ADVICE)
                ref = p64[..., r0:r0 + bm, c0:c0 + bn]
                _check(got, ref, tile, rtol, lambda qb=qb, kb=kb, lb=lb, sc=scale: _probs_mistakes(
                    qb, kb, lb, sc), default="P = exp(scale * q @ k.T - lse[..., None]).")
                expect(got.dtype == lse.dtype,
                       f"On {tile}: return the probabilities in lse's dtype ({lse.dtype}), got "
                       f"{got.dtype}; convert with .to(lse.dtype).")


# ---------------------------------------------------------------------------------------------
# Exercise 3: the tiled forward loop
# ---------------------------------------------------------------------------------------------


def _kind_of_entry(L: int, S: int, bm: int, bn: int, causal: bool) -> torch.Tensor:
    """``(L, S)``: the kind (SKIP, FULL or MASKED) of the tile each score falls in."""
    kinds = tile_schedule(L, S, bm, bn, causal)
    return kinds.repeat_interleave(bm, dim=0)[:L].repeat_interleave(bn, dim=1)[:, :S]


def _attend(s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 ``(out, lse)`` of the scores ``s`` as masked (a row of only -inf gives NaN)."""
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


def _masked_right(s: torch.Tensor, kind: torch.Tensor) -> torch.Tensor:
    """The scores with the right mask: key after query hidden, on the tiles that are not FULL."""
    later = torch.arange(s.shape[-1]) > torch.arange(s.shape[-2]).unsqueeze(-1)
    return s.masked_fill(later & (kind != FULL), NEG_INF)


def _wrong_no_mask(s: torch.Tensor, v: torch.Tensor, kind: torch.Tensor, bm: int,
                   bn: int) -> Pair:
    """Skipped tiles are left out, but the diagonal tiles are computed whole."""
    return _attend(s.masked_fill(kind == SKIP, NEG_INF), v)


def _wrong_skip_masked(s: torch.Tensor, v: torch.Tensor, kind: torch.Tensor, bm: int,
                       bn: int) -> Pair:
    """Only the FULL tiles are computed: the diagonal ones are skipped too."""
    return _attend(s.masked_fill(kind != FULL, NEG_INF), v)


def _wrong_local_indices(s: torch.Tensor, v: torch.Tensor, kind: torch.Tensor, bm: int,
                         bn: int) -> Pair:
    """Inside a diagonal tile, key ``b`` is hidden from query ``a`` when ``b > a`` counted from
    the tile's corner, not from the sequence start."""
    rows = torch.arange(s.shape[-2]).unsqueeze(-1) % bm
    cols = torch.arange(s.shape[-1]) % bn
    hidden = (kind == SKIP) | ((kind == MASKED) & (cols > rows))
    return _attend(s.masked_fill(hidden, NEG_INF), v)


def _wrong_normalise_each_step(s: torch.Tensor, v: torch.Tensor, kind: torch.Tensor, bm: int,
                               bn: int) -> Pair:
    """The right mask, but ``acc`` divided by ``l`` after every key block that is not skipped
    (and never at the end)."""
    s = _masked_right(s, kind)
    m = torch.full(s.shape[:-1], NEG_INF, dtype=s.dtype)
    l, acc = torch.zeros_like(m), torch.zeros((*s.shape[:-1], v.shape[-1]), dtype=s.dtype)
    for c0 in range(0, s.shape[-1], bn):
        m, l, acc = attention_block_update(m, l, acc, s[..., c0:c0 + bn], v[..., c0:c0 + bn, :])
        computed = (kind[:, c0] != SKIP).unsqueeze(-1)
        acc = torch.where(computed, acc / l.unsqueeze(-1), acc)
    return acc, m + torch.log(l)


def _wrong_lse_is_m(s: torch.Tensor, v: torch.Tensor, kind: torch.Tensor, bm: int,
                    bn: int) -> Pair:
    """The right output, but the running maximum returned as the lse."""
    s = _masked_right(s, kind)
    return torch.softmax(s, dim=-1) @ v, s.amax(dim=-1)


_TILED_MISTAKES: dict[str, Callable[..., Pair]] = {
    "the diagonal tiles were computed without their mask. A MASKED tile holds some keys later "
    "than some queries: set s to -inf where key > query.": _wrong_no_mask,
    "the diagonal tiles were skipped. Only tiles with every entry masked may be skipped; MASKED "
    "tiles are computed and masked inside.": _wrong_skip_masked,
    "the mask inside a diagonal tile compared local indices. Compare absolute positions: query "
    "r0 + a against key c0 + b.": _wrong_local_indices,
    "acc was divided by l after every key block. Keep acc unnormalised and divide once at the "
    "end (the rescale by alpha assumes it).": _wrong_normalise_each_step,
    "the lse is the running maximum alone: lse = m + log(l).": _wrong_lse_is_m,
}


def _tiled_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bm: int, bn: int,
                    causal: bool, index: int) -> dict[str, torch.Tensor]:
    """Output ``index`` (0: out, 1: lse) of every known mistake on these inputs, in float64."""
    s = attention_scores(q.double(), k.double())  # unmasked: each mistake masks its own way
    kind = _kind_of_entry(q.shape[-2], k.shape[-2], bm, bn, causal)
    v = v.double()
    return {explanation: mistake(s, v, kind, bm, bn)[index]
            for explanation, mistake in _TILED_MISTAKES.items()}


def _has_nan(got: object) -> bool:
    """Whether ``got`` is a pair holding a tensor with a NaN."""
    return (isinstance(got, tuple) and len(got) == 2
            and any(isinstance(t, torch.Tensor) and bool(torch.isnan(t).any()) for t in got))


def _expect_tiles(watch: LargestFloat, case: str, batch: tuple[int, ...], L: int, S: int,
                  D: int, bm: int, bn: int) -> None:
    """Fail unless the learner's run made no float tensor larger, per head, than one tile of
    scores or than q, k, v and the output: a larger one is a row, a column or the whole of the
    score matrix at once, which the tiled loop never holds."""
    heads = math.prod(batch)
    allowed = max(bm * bn, L * D, S * D)
    per_head = watch.numel / heads
    if per_head <= allowed:
        return
    what = ("the whole score matrix" if per_head >= L * min(L, S)
            else "a row or a column of tiles at once")
    raise ExerciseFailed(
        f"On {case}: your function made a float tensor of shape {watch.shape}, "
        f"{per_head:.0f} values per head; a tile of scores is {bm} x {bn} = {bm * bn}, and q, k, "
        f"v and the output hold at most {max(L, S) * D}. That looks like {what}: plain "
        "attention (a softmax or logsumexp over many keys) gives the right numbers but is not "
        "the exercise. Compute the scores one block_m x block_n tile at a time (query blocks "
        "outside, key blocks inside) and fold each tile into the running (m, l, acc).")


def _first_unseen_block(L: int, S: int, bn: int) -> int:
    """The first key of the first whole key block that no query sees under the top-left causal
    mask (query ``L - 1`` sees keys ``0 .. L - 1``), or ``S`` if there is none."""
    return min(S, -(-L // bn) * bn)


@exercise(
    "Tiled attention: query blocks, key blocks, the causal schedule, one division",
    "Two loops: query blocks outside, key blocks inside, with notebook 04's running (m, l, acc). "
    "Which tiles must you not even read?",
    forbid=("teachkit.attention.naive_attention", "teachkit.attention.blockwise_attention",
            "torch.nn.functional.scaled_dot_product_attention",
            "teachkit.kernels.flash.flash_attention",
            "teachkit.kernels.flash_simple.flash_attention_simple", *SOFTMAX_FUNCTIONS,
            "teachkit.ring.attention.attend_block",
            "teachkit.exercises.solutions.ex10.solution_ring_rank",),
)
def check_tiled_attention(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Check ``fn(q, k, v, block_m, block_n, causal) -> (out, lse)`` against float64 attention.

    Cases: causal, 37 queries and 101 keys in tiles of 16 x 32 for a ``(2, 3)`` batch; causal,
    128 x 128 with head size 8 in tiles of 16 x 16; causal with more queries than keys (150 x 61,
    tiles of 32 x 16); no mask, 45 x 70; float64; bfloat16 inputs (out in bfloat16, lse in
    float32). Every torch operation of the learner's run is watched: a float tensor larger, per
    head, than one tile of scores and than q, k, v and the output is refused (plain attention
    makes an ``L x S`` one), and so is NaN from the whole key blocks that no query sees.
    """
    gen = fresh_generator()
    D = 16
    cases = [
        ("causal, a (2, 3) batch, 37 queries, 101 keys, tiles of 16 x 32, float32",
         (2, 3), 37, 101, 16, 32, True, torch.float32, 1e-5, D),
        ("causal, 128 queries, 128 keys, head size 8, tiles of 16 x 16, float32",
         (2,), 128, 128, 16, 16, True, torch.float32, 1e-5, 8),
        ("causal, 150 queries > 61 keys, tiles of 32 x 16, float32",
         (2,), 150, 61, 32, 16, True, torch.float32, 1e-5, D),
        ("no mask, 45 queries, 70 keys, tiles of 16 x 16, float32",
         (2,), 45, 70, 16, 16, False, torch.float32, 1e-5, D),
        ("causal, 29 queries, 53 keys, tiles of 8 x 12, float64",
         (3,), 29, 53, 8, 12, True, torch.float64, 1e-12, D),
        ("causal, bfloat16 inputs, 40 queries, 77 keys, tiles of 16 x 16",
         (2,), 40, 77, 16, 16, True, torch.bfloat16, 1e-2, D),
    ]
    for case, batch, L, S, bm, bn, causal, dtype, rtol, D in cases:
        q, k, v = (random_normal(*batch, n, D, gen=gen).to(dtype) for n in (L, S, S))
        # Whole key blocks after the last query are SKIP for every query block: no query sees
        # them and a kernel never loads them. They hold NaN, so an answer that computes them
        # anyway (a materialised softmax, a loop without the schedule) gets NaN.
        unseen = _first_unseen_block(L, S, bn) if causal else S
        k_in, v_in = k.clone(), v.clone()
        k_in[..., unseen:, :] = float("nan")
        v_in[..., unseen:, :] = float("nan")
        with LargestFloat() as watch:
            got = call_learner(fn, case, q.clone(), k_in, v_in, bm, bn, causal,
                               advice=SHAPE_ADVICE)
        if unseen < S and _has_nan(got):
            # NaN may have another cause (a row that saw no key): run again without the NaN keys.
            got = call_learner(fn, case, q.clone(), k.clone(), v.clone(), bm, bn, causal,
                               advice=SHAPE_ADVICE)
            expect(_has_nan(got),
                   f"On {case}: keys {unseen}..{S - 1} fill whole key blocks that no query may "
                   "see (every tile of theirs is SKIP), and the checker filled them with NaN: "
                   "your answer has NaN, so it computed those tiles. Skip the SKIP tiles of "
                   "tile_schedule: never read their keys or values.")
        _expect_tiles(watch, case, batch, L, S, D, bm, bn)
        expect(isinstance(got, tuple) and len(got) == 2,
               f"On {case}: return a pair (out, lse), got {type(got).__name__}.")
        out, lse = got
        s64 = attention_scores(q.double(), k.double(), causal)
        ref_out = torch.softmax(s64, dim=-1) @ v.double()
        ref_lse = torch.logsumexp(s64, dim=-1)

        def wrong(index: int, args: tuple = (q, k, v, bm, bn, causal)) -> dict[str, torch.Tensor]:
            return _tiled_mistakes(*args, index)

        _check(out, ref_out, case + " (out)", rtol, lambda: wrong(0),
               default="out = acc / l after the last key block of each query block.")
        expect(out.dtype == q.dtype,
               f"On {case}: out should come back in q's dtype {q.dtype}, got {out.dtype}.")
        _check(lse, ref_lse, case + " (lse)", 1e-5 if dtype != torch.float64 else 1e-12,
               lambda: wrong(1), default="lse = m + log(l) per query row.")
