r"""Exercises of notebook 08, *FlashAttention in Triton*.

Three exercises, each with a checker ``check_<name>(fn)`` here and a solution
``solution_<name>`` in :mod:`teachkit.exercises.solutions.ex08`:

1. :func:`check_exp2_update`: one key block folded into ``(m, l, acc)`` with base-2
   statistics, as the kernel does it: ``exp2`` of scores multiplied by ``scale * log2(e)``.
2. :func:`check_key_range`: the kernel's loop bounds for one query block: keys
   ``[0, full_end)`` are folded in without a mask, ``[full_end, end)`` with one, and keys from
   ``end`` on are never loaded.
3. :func:`check_causal_flops`: the flops a causal kernel really spends, tile by whole tile,
   against the nominal count a benchmark divides by.
4. :func:`check_flash_kernel`: the learner's ``@triton.jit`` forward kernel for one head, its
   key loop stopping at the diagonal; the checker launches it itself, with NaN in the keys
   that no query of a program may see.

Every checker runs the learner's function on fresh random cases (odd lengths that no block
divides, ``L != S`` both ways, masked rows, large scores) and compares with a brute-force or
float64 reference; a wrong answer raises :class:`~teachkit.exercises.checking.ExerciseFailed`
saying which case failed and the likely mistake.

Examples
--------
>>> from teachkit.exercises.solutions.ex08 import solution_key_range
>>> check_key_range(solution_key_range)
[correct] The key range of one query block: unmasked, masked, never loaded
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch
import triton

from ..attention import attention_block_update
from ..compare import relative_error
from ..device import DEVICE, ON_GPU
from ..tiling import count_tiles, tile_schedule
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
    "check_key_range",
    "check_exp2_update",
    "check_causal_flops",
    "check_flash_kernel",
]

LOG2E = 1.0 / math.log(2.0)
"""``log2(e)``: ``e^x = 2^(x * log2(e))``."""
LN2 = math.log(2.0)
"""``ln(2)``: a base-2 logarithm times ``ln 2`` is a natural one."""
NEG_INF = float("-inf")




def _as_int(value: object, what: str, case: str) -> int:
    """``value`` as a Python int (ints, NumPy and 0-d torch integers), else a verdict."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ExerciseFailed(f"On {case}: {what} should be an int, got {value!r}; use // for "
                             "integer division.")
    try:
        return operator.index(value)
    except TypeError:
        raise ExerciseFailed(f"On {case}: {what} should be an int, got "
                             f"{type(value).__name__} {value!r}.") from None


# ---------------------------------------------------------------------------------------------
# Exercise 1: the key range of one query block
# ---------------------------------------------------------------------------------------------


def _brute_key_range(start_m: int, S: int, bm: int, bn: int, causal: bool) -> tuple[int, int]:
    """The bounds from the mask itself: block by block, look at every entry."""
    rows = torch.arange(start_m, start_m + bm).unsqueeze(-1)
    full_end, end = 0, 0
    leading = True
    for c0 in range(0, S, bn):
        cols = torch.arange(c0, min(c0 + bn, S))
        visible = cols <= rows if causal else torch.ones(bm, len(cols), dtype=torch.bool)
        if leading and len(cols) == bn and bool(visible.all()):
            full_end = c0 + bn
        else:
            leading = False
        if bool(visible.any()):
            end = c0 + len(cols)
    return full_end, end


def _schedule_row(start_m: int, S: int, bm: int, bn: int, causal: bool) -> str:
    """The query block's row of :func:`teachkit.tiling.tile_schedule`, e.g. ``"F F M . ."``."""
    row = tile_schedule(start_m + bm, S, bm, bn, causal)[start_m // bm]
    return " ".join(".FM"[int(c)] for c in row)


def _key_range_advice(got: tuple[int, int], want: tuple[int, int], start_m: int, S: int,
                      bm: int, bn: int, causal: bool) -> str:
    (gf, ge), (wf, we) = got, want
    s_full = (S // bn) * bn
    if not causal:
        if (gf, ge) == (min(start_m, s_full), min(start_m + bm, S)):
            return ("Without a causal mask every query sees every key: full_end = "
                    "(S // block_n) * block_n and end = S.")
        if gf == S != s_full:
            return (f"Keys {s_full}..{S - 1} form a last block shorter than block_n: its loads "
                    "need the mask cols < S, so it is not a full block.")
    if causal and (gf, ge) == (s_full, S):
        return ("With causal=True the program's last query, start_m + block_m - 1, sees no key "
                "after itself: the loop can stop at start_m + block_m (and at S).")
    if gf != wf:
        if gf == start_m and wf == s_full < start_m:
            return (f"full_end = start_m = {start_m} is beyond the whole blocks: keys "
                    f"{s_full}..{S - 1} form a last block shorter than block_n, which needs the "
                    "mask cols < S. Cap it: full_end = min(start_m, (S // block_n) * block_n).")
        if gf > wf and causal and gf >= start_m + bn:
            return (f"Keys from start_m = {start_m} on lie on or above the diagonal for some "
                    f"query of the block (query {start_m} sees only keys <= {start_m}): they need "
                    "the mask; full_end is at most start_m.")
        if gf == S and S % bn:
            return (f"Keys {s_full}..{S - 1} form a last block shorter than block_n: its loads "
                    "need the mask cols < S.")
        if gf < wf:
            return (f"Keys {gf}..{wf - 1} are visible to every query of the block and come in "
                    "whole blocks: they need no mask. Masking them gives the right numbers but "
                    "costs time on every block.")
    if ge != we:
        if ge == start_m + bm > S:
            return f"There are only S = {S} keys: end = min(start_m + block_m, S)."
        if ge in (start_m, start_m + 1) and causal:
            return (f"The block's *last* query, {start_m + bm - 1}, sees keys up to itself: "
                    "end = start_m + block_m (capped at S).")
        if ge < we:
            return (f"Keys {ge}..{we - 1} are seen by some query of the block, but your loop "
                    "never loads them: those rows lose part of their softmax.")
        return (f"Keys {we}..{ge - 1} are seen by no query of the block: loading them costs time "
                "and adds nothing.")
    return ""


def _key_range_cases(gen: torch.Generator) -> list[tuple[str, int, int, int, int, bool]]:
    """``(description, L, S, block_m, block_n, causal)``: every start_m of L is tried."""
    cases = [
        ("causal, L = S = 100, blocks 32 x 16", 100, 100, 32, 16, True),
        ("causal, L = 70 < S = 200, blocks 16 x 16", 70, 200, 16, 16, True),
        ("causal, L = 300 > S = 77, blocks 64 x 32", 300, 77, 64, 32, True),
        ("causal, L = 130, S = 131, blocks 128 x 32", 130, 131, 128, 32, True),
        ("causal, one key, L = 40, blocks 16 x 16", 40, 1, 16, 16, True),
        ("no mask, L = 50, S = 77, blocks 32 x 16", 50, 77, 32, 16, False),
        ("no mask, L = 20, S = 64, blocks 16 x 16", 20, 64, 16, 16, False),
    ]
    for _ in range(6):
        bn = 2 ** random_int(4, 6, gen)
        bm = bn * 2 ** random_int(0, 2, gen)
        L, S = random_int(1, 400, gen), random_int(1, 400, gen)
        causal = bool(random_int(0, 3, gen))
        cases.append((f"random, {'causal' if causal else 'no mask'}, L = {L}, S = {S}, blocks "
                      f"{bm} x {bn}", L, S, bm, bn, causal))
    return cases


@exercise(
    "The key range of one query block: unmasked, masked, never loaded",
    "Think of the program's first and last query, and of the last block of keys, which may be cut"
    " short at S.",
    forbid=("teachkit.tiling.tile_schedule", "teachkit.tiling.schedule_from_mask",),
)
def check_key_range(fn: Callable[..., tuple[int, int]]) -> None:
    """Check ``fn(start_m, S, block_m, block_n, causal) -> (full_end, end)`` on every query block.

    Each answer is compared with bounds read off the mask itself, block by block: the leading
    blocks whose every entry is visible and that hold ``block_n`` keys end at ``full_end``; the
    last block with any visible entry ends at ``end``. Cases: ``L = S``, ``L < S``, ``L > S``
    (query blocks past every key), ``block_m`` 1, 2 and 4 times ``block_n``, a single key, no
    mask, and six random ones.
    """
    gen = fresh_generator()
    for case, L, S, bm, bn, causal in _key_range_cases(gen):
        for start_m in range(0, L, bm):
            where = f"{case}, the query block at start_m = {start_m}"
            got = call_learner(fn, where, start_m, S, bm, bn, causal)
            expect(isinstance(got, (tuple, list)) and len(got) == 2,
                   f"On {where}: return a pair (full_end, end), got {got!r}.")
            gf, ge = (_as_int(x, name, where) for x, name in zip(got, ("full_end", "end"),
                                                                   strict=True))
            expect(gf % bn == 0,
                   f"On {where}: full_end = {gf} is not a multiple of block_n = {bn}. The "
                   "unmasked loop runs range(0, full_end, block_n) over whole blocks; the last, "
                   "partial block is masked.")
            want = _brute_key_range(start_m, S, bm, bn, causal)
            if (gf, ge) != want:
                advice = _key_range_advice((gf, ge), want, start_m, S, bm, bn, causal)
                raise ExerciseFailed(
                    f"On {where}: expected (full_end, end) = {want}, got {(gf, ge)}. This block's "
                    f"row of the tile schedule (F full, M masked, . skipped; keys in blocks of "
                    f"{bn}) is: {_schedule_row(start_m, S, bm, bn, causal)}."
                    + (f"\n  {advice}" if advice else ""))


# ---------------------------------------------------------------------------------------------
# Exercise 2: the exp2 update
# ---------------------------------------------------------------------------------------------


def _natural_update(m2, l, acc, s_raw, v, scale):
    """The float64 reference: notebook 07's natural-log update, its maximum turned to log2."""
    m, l, acc = attention_block_update(m2.double() * LN2, l.double(), acc.double(),
                                       s_raw.double() * scale, v.double())
    return m * LOG2E, l, acc


def _exp2_mistakes(m2, l, acc, s_raw, v, scale) -> dict[str, tuple[torch.Tensor, ...]]:
    """Typical wrong updates, in float64, each with what is wrong."""
    m2, l, acc, s, v = (t.double() for t in (m2, l, acc, s_raw, v))

    def run(s_units, exp_p, exp_alpha, rescale=True, natural_m=False):
        m_new = torch.maximum(m2, s_units.amax(-1))
        shift = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
        p = exp_p(s_units - shift.unsqueeze(-1))
        alpha = exp_alpha(m2 - shift)
        l_new = alpha * l + p.sum(-1)
        acc_new = (alpha.unsqueeze(-1) * acc if rescale else acc) + p @ v
        return (m_new * (LOG2E if natural_m else 1.0), l_new, acc_new)

    c = scale * LOG2E
    return {
        "you used exp2 on scores multiplied by the scale alone. 2^x is e^(x ln 2), a softer "
        "softmax: multiply the scores by scale * log2(e) (e^x = 2^(x * log2(e))).":
            run(s * scale, torch.exp2, torch.exp2),
        "you multiplied by log2(e) but exponentiated with exp. Once the scores are in log2 "
        "units every exponential must be exp2.": run(s * c, torch.exp, torch.exp),
        "the rescale factor alpha used exp while the probabilities used exp2. Both are "
        "differences of log2-unit numbers: alpha = exp2(m2_old - m2_new).":
            run(s * c, torch.exp2, torch.exp),
        "acc was not rescaled. When the maximum grows, the old acc (like l) was computed with "
        "the old maximum: acc = alpha * acc + p @ v.":
            run(s * c, torch.exp2, torch.exp2, rescale=False),
    }


_EXP2_NAN = (
    "NaN where the reference is finite: a row with no visible key yet has m2 = -inf, and "
    "-inf - (-inf) is NaN. Shift such rows by 0: shift = where(m2_new == -inf, 0, m2_new), "
    "then p = exp2(s2 - shift) and alpha = exp2(m2_old - shift)."
)


def _exp2_verdict(got: object, want: tuple[torch.Tensor, ...], mistakes, case: str,
                  rtol: float) -> None:
    expect(isinstance(got, (tuple, list)) and len(got) == 3,
           f"On {case}: return the triple (m2, l, acc), got {type(got).__name__}.")
    names = ("m2", "l", "acc")
    for name, g, w in zip(names, got, want, strict=True):
        expect(isinstance(g, torch.Tensor) and g.shape == w.shape,
               f"On {case}: {name} should be a tensor of shape {tuple(w.shape)}, got "
               + (f"shape {tuple(g.shape)}" if isinstance(g, torch.Tensor) else
                  type(g).__name__) + ".")
    if all(relative_error(g, w) <= rtol for g, w in zip(got, want, strict=True)):
        return
    advice = ""
    for explanation, wrong in mistakes().items():
        if all(relative_error(g, w) < 1e-6 for g, w in zip(got, wrong, strict=True)):
            advice = "Your result matches a common mistake: " + explanation
            break
    else:
        if any(bool((~torch.isfinite(g.double()) & torch.isfinite(w)).any())
               for g, w in zip(got, want, strict=True)):
            advice = _EXP2_NAN
        elif relative_error(got[0], want[0] * LN2) < 1e-6 and bool(torch.isfinite(want[0]).any()):
            advice = ("m2 came back in natural units (the maximum of scale * s). Keep it in "
                      "log2 units: the maximum of s * scale * log2(e).")
    for name, g, w in zip(names, got, want, strict=True):
        expect_close(g, w, f"{case} ({name})", rtol=rtol, advice=advice)


def _exp2_cases():
    """``(description, batch, rows, keys per block, blocks, D, scale, dtype, rtol, masked)``."""
    return [
        ("one block from the empty state, a (2, 3) batch of 16 rows, 32 keys, float32",
         (2, 3), 16, 32, 1, 16, 0.25, torch.float32, 1e-5, "none"),
        ("five blocks in a row (the running state), 13 rows, 16 keys each, float32",
         (2,), 13, 16, 5, 32, 32 ** -0.5, torch.float32, 1e-5, "none"),
        ("scale 8: scores in the hundreds, where exp overflows unless shifted, float32",
         (2,), 9, 16, 3, 16, 8.0, torch.float32, 1e-4, "none"),
        ("a window mask (row i sees keys j >= 2 i): rows 8 to 15 see no key of the first "
         "block, all -inf, float32", (2,), 16, 16, 3, 16, 0.25, torch.float32, 1e-5, "window"),
        ("float64, 11 rows, 24 keys per block, 3 blocks",
         (3,), 11, 24, 3, 8, 0.3, torch.float64, 1e-12, "none"),
    ]


@exercise(
    "One key block folded into (m, l, acc) with exp2 and the scale folded in",
    "Multiply the scores by scale * log2(e) once, then the update is the natural-log one with "
    "exp2 in place of exp.",
    forbid=("teachkit.attention.attention_block_update",
            "teachkit.exercises.solutions.ex04.solution_block_update",),
)
def check_exp2_update(fn: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
    """Check ``fn(m2, l, acc, s_raw, v, scale) -> (m2, l, acc)`` block after block.

    The reference is notebook 07's natural-log update in float64
    (:func:`teachkit.attention.attention_block_update` on ``scale * s_raw`` with ``m = m2 ln 2``);
    ``m2`` must equal its maximum times ``log2(e)``, ``l`` and ``acc`` must equal its own. After
    the last block, ``acc / l`` is compared with the softmax of all the blocks and
    ``(m2 + log2 l) ln 2`` with their log-sum-exp. Cases: one block from the empty state, a
    chain of five blocks, scores in the hundreds, a mask under which some rows see no key
    of the first block, float64.
    """
    gen = fresh_generator()
    for case, batch, M, N, blocks, Dv, scale, dtype, rtol, masked in _exp2_cases():
        s_all = torch.randn(*batch, M, N * blocks, generator=gen, dtype=torch.float64)
        if scale > 1:
            s_all = s_all * 12.0  # raw scores of +-40 times 8: in the hundreds
        if masked == "window":  # row i sees keys j >= 2 i: rows 8.. see none of block 1
            s_all = s_all.masked_fill(torch.arange(N * blocks) < 2 * torch.arange(M)[:, None],
                                      NEG_INF)
        v_all = torch.randn(*batch, N * blocks, Dv, generator=gen, dtype=torch.float64)
        s_all, v_all = s_all.to(dtype), v_all.to(dtype)
        m2 = torch.full((*batch, M), NEG_INF, dtype=dtype)
        l = torch.zeros((*batch, M), dtype=dtype)
        acc = torch.zeros((*batch, M, Dv), dtype=dtype)
        for b in range(blocks):
            s_b, v_b = s_all[..., b * N:(b + 1) * N], v_all[..., b * N:(b + 1) * N, :]
            step = f"{case}, block {b + 1} of {blocks}"
            got = call_learner(fn, step, m2.clone(), l.clone(), acc.clone(), s_b.clone(),
                               v_b.clone(), scale)
            # The reference continues from the learner's (checked) state: errors do not pile up.
            want = _natural_update(m2, l, acc, s_b, v_b, scale)
            _exp2_verdict(got, want,
                          lambda m2=m2, l=l, acc=acc, s_b=s_b, v_b=v_b, c=scale: _exp2_mistakes(
                              m2, l, acc, s_b, v_b, c), step, rtol)
            m2, l, acc = (g.to(dtype) for g in got)
        s64 = s_all.double() * scale
        ref_out = torch.softmax(s64, dim=-1) @ v_all.double()
        ref_lse = torch.logsumexp(s64, dim=-1)
        expect_close(acc / l.unsqueeze(-1), ref_out, f"{case}: acc / l after the last block",
                     rtol=max(rtol, 1e-12) * 10)
        expect_close((m2 + torch.log2(l)) * LN2, ref_lse,
                     f"{case}: the lse (m2 + log2 l) * ln 2 after the last block",
                     rtol=max(rtol, 1e-12) * 10)


# ---------------------------------------------------------------------------------------------
# Exercise 3: the flops of a causal kernel
# ---------------------------------------------------------------------------------------------


def _flops_reference(L: int, S: int, D: int, bm: int, bn: int) -> int:
    """From :mod:`teachkit.tiling`: the computed tiles of the padded query blocks."""
    padded_L = -(-L // bm) * bm  # the last program still runs block_m rows
    return count_tiles(padded_L, S, bm, bn, causal=True).computed * 4 * bm * bn * D


def _flops_mistakes(L: int, S: int, D: int, bm: int, bn: int) -> dict[str, int]:
    visible = sum(min(i + 1, S) for i in range(L))
    exact = 0
    sched = tile_schedule(L, S, bm, bn, causal=True)
    for r in range(sched.shape[0]):
        for c in range(sched.shape[1]):
            if int(sched[r, c]):
                exact += (min((r + 1) * bm, L) - r * bm) * (min((c + 1) * bn, S) - c * bn)
    right = _flops_reference(L, S, D, bm, bn)
    return {
        "you counted only the visible (query, key) pairs, 4 D per pair. The kernel computes "
        "every entry of a masked tile and throws the masked ones away: count whole tiles.":
            4 * D * visible,
        "you counted the nominal 2 L S D of a causal benchmark. That is the useful work a "
        "benchmark credits (half of 4 L S D); the kernel computes whole tiles along the "
        "diagonal, so it does more.": 2 * L * S * D,
        "you counted every tile, as without a mask. Tiles wholly above the diagonal are never "
        "loaded: query block start_m stops at min(start_m + block_m, S).": (
            -(-L // bm)) * (-(-S // bn)) * 4 * bm * bn * D,
        "you counted 2 * block_m * block_n * D per tile: that is one matrix product. A tile "
        "needs two, s = q @ k^T and acc += p @ v.": right // 2,
        "you clipped the last query block at L. A program always runs block_m rows (the padding "
        "rows are computed and not stored), and it loads key blocks up to "
        "min(start_m + block_m, S), not up to L.":
            count_tiles(L, S, bm, bn, causal=True).computed * 4 * bm * bn * D,
        "you counted the tail tiles by their real size. A short tile is computed whole: its "
        "padding keys (and rows) still go through both matrix products.": 4 * D * exact,
    }


@exercise(
    "The flops a causal FlashAttention kernel really spends",
    "Use exercise 2's key range: how many key blocks does each query block compute, and what does"
    " one tile cost?",
    forbid=("teachkit.tiling.count_tiles", "teachkit.tiling.tile_schedule",
            "teachkit.tiling.schedule_from_mask",),
)
def check_causal_flops(fn: Callable[[int, int, int, int, int], int]) -> None:
    """Check ``fn(L, S, D, block_m, block_n) -> flops`` against :mod:`teachkit.tiling`.

    The reference counts the computed (full or masked) tiles of
    :func:`~teachkit.tiling.count_tiles` with ``L`` padded to whole query blocks, at
    ``4 * block_m * block_n * D`` each. Cases: the benchmark's ``L = S = 4096`` in 128 x 64
    tiles, ``L < S``, ``L > S``, lengths no block divides, a single query (decoding), and six
    random ones.
    """
    gen = fresh_generator()
    cases = [
        ("L = S = 4096, D = 64, tiles 128 x 64", 4096, 4096, 64, 128, 64),
        ("L = 1000 < S = 3000, D = 128, tiles 128 x 64", 1000, 3000, 128, 128, 64),
        ("L = 700 > S = 300, D = 64, tiles 64 x 32", 700, 300, 64, 64, 32),
        ("L = 900 (the last query block holds 4 rows), S = 1000, D = 64, tiles 128 x 64",
         900, 1000, 64, 128, 64),
        ("L = 130, S = 70, D = 32, tiles 64 x 64", 130, 70, 32, 64, 64),
        ("one query, S = 777, D = 128, tiles 16 x 16", 1, 777, 128, 16, 16),
    ]
    for _ in range(6):
        bn = 2 ** random_int(4, 7, gen)
        bm = bn * 2 ** random_int(0, 1, gen)
        L, S, D = random_int(1, 3000, gen), random_int(1, 3000, gen), 2 ** random_int(4, 7, gen)
        cases.append((f"random L = {L}, S = {S}, D = {D}, tiles {bm} x {bn}", L, S, D, bm, bn))
    for case, L, S, D, bm, bn in cases:
        got = _as_int(call_learner(fn, case, L, S, D, bm, bn), "the flop count", case)
        want = _flops_reference(L, S, D, bm, bn)
        if got != want:
            advice = next((e for e, wrong in _flops_mistakes(L, S, D, bm, bn).items()
                           if wrong == got and wrong != want), "")
            tiles = want // (4 * bm * bn * D)
            raise ExerciseFailed(
                f"On {case}: expected {want:,} flops ({tiles} computed tiles of {bm} x {bn}), "
                f"got {got:,} ({got / want:.3g}x)." + (f"\n  {advice}" if advice else ""))


# ---------------------------------------------------------------------------------------------
# Exercise 2b: the forward kernel, its key loop stopping at the diagonal
# ---------------------------------------------------------------------------------------------

_FLASH_SIGNATURE = ("(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, "
                    "CAUSAL, HEAD_DIM, BLOCK_M, BLOCK_N)")
_FLASH_RTOL = {torch.float32: 5e-3 if ON_GPU else 1e-5, torch.float16: 5e-3}
"""float32 products are TF32 on a GPU by default, whose 10-bit mantissas are float16's, so both
take float16's bound (3e-3 was exceeded by a correct kernel about once in 300 random cases)."""
_LSE_RTOL = {torch.float32: 1e-3 if ON_GPU else 1e-5, torch.float16: 1e-5}
"""The lse: TF32 scores on a GPU move it by a few 1e-4; float16 inputs multiply exactly."""


def _flash_simulate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                    causal: bool, bm: int, bn: int, variant: str = "") -> tuple[torch.Tensor,
                                                                                 torch.Tensor]:
    """The kernel's algorithm in float64, program by program and key block by key block, right
    (``variant=""``) or with one usual mistake; returns ``(out (L, D), lse (L,))``."""
    L, S = q.shape[0], k.shape[0]
    out = torch.zeros(L, v.shape[1], dtype=torch.float64)
    lse = torch.zeros(L, dtype=torch.float64)
    for start_m in range(0, L, bm):
        rows = torch.arange(start_m, min(start_m + bm, L))
        end = min(start_m + bm, S) if causal else S
        m = torch.full((len(rows),), NEG_INF, dtype=torch.float64)
        l = torch.zeros(len(rows), dtype=torch.float64)
        acc = torch.zeros(len(rows), v.shape[1], dtype=torch.float64)
        for start_n in range(0, end, bn):
            cols = torch.arange(start_n, min(start_n + bn, S))
            s = (q[rows] @ k[cols].T) * scale
            if causal and variant != "no causal mask":
                keep = (cols[None, :] < rows[:, None] if variant == "strict"
                        else cols[None, :] <= rows[:, None])
                s = s.masked_fill(~keep, NEG_INF)
            m_new = torch.maximum(m, s.amax(1))
            shift = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
            p = torch.exp(s - shift[:, None])
            alpha = torch.exp(m - shift)
            l = (l if variant == "no alpha" else alpha * l) + p.sum(1)
            acc = (acc if variant in ("no alpha", "no alpha on acc") else alpha[:, None] * acc)
            acc = acc + p @ v[cols]
            if variant.startswith("divide each step"):
                acc = acc / l[:, None]
            m = m_new
        if variant not in ("no division", "divide each step only"):
            acc = acc / l[:, None]
        out[rows], lse[rows] = acc, m + torch.log(l)
    return out, lse


def _flash_out_mistakes(q, k, v, scale, causal, bm, bn) -> dict[str, torch.Tensor]:
    """Usual wrong outputs, from :func:`_flash_simulate`."""
    rescale = ("When the maximum grows, what l and acc hold was computed against the old "
               "maximum: alpha = exp(m_old - m_new); l = alpha * l + sum(p) and "
               "acc = alpha * acc + p @ v.")
    once = ("Divide acc by l once, after the loop: inside it, alpha * acc would mix a "
            "normalised acc with unnormalised new terms (FlashAttention-1 keeps acc normalised "
            "instead, with acc = (alpha * l_old * acc + p @ v) / l_new).")
    mistakes = {
        "neither l nor acc was rescaled by alpha. " + rescale: "no alpha",
        "acc was not rescaled by alpha (l was). " + rescale: "no alpha on acc",
        "acc was never divided by l: the output is unnormalised. " + once: "no division",
        "acc was divided by l inside the loop and again at the end. " + once:
            "divide each step",
        "acc was divided by l inside the loop. " + once: "divide each step only",
    }
    if causal:
        mistakes |= {
            "the causal mask is strict (cols < rows): query i also sees key i itself, "
            "keep = cols[None, :] <= offs_m[:, None].": "strict",
            "the blocks the diagonal crosses were not masked: query i must not see keys j > i, "
            "s = tl.where(cols[None, :] <= offs_m[:, None], s, float('-inf')).":
                "no causal mask",
        }
    found = {why: _flash_simulate(q, k, v, scale, causal, bm, bn, variant)[0]
             for why, variant in mistakes.items()}
    if causal:  # a kernel that guards l = 0 gives query 0 (which then sees nothing) zeros
        strict = _flash_simulate(q, k, v, scale, causal, bm, bn, "strict")[0]
        found["the causal mask is strict (cols < rows), so query 0 saw no key at all: query i "
              "also sees key i itself, keep = cols[None, :] <= offs_m[:, None]."] = (
                  torch.nan_to_num(strict, nan=0.0))
    found["the scores were not multiplied by scale (exp(q . k) instead of "
          "exp(q . k * scale))."] = _flash_simulate(q, k, v, 1.0, causal, bm, bn)[0]
    found["you used exp2 on scores multiplied by scale alone: 2^x is e^(x ln 2). Use tl.exp, "
          "or exp2 of the scores times scale * log2(e)."] = _flash_simulate(
              q, k, v, scale * LN2, causal, bm, bn)[0]
    return found


def _flash_lse_mistakes(q, k, scale, causal) -> dict[str, torch.Tensor]:
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(torch.arange(k.shape[0])[None, :] > torch.arange(q.shape[0])[:, None],
                          NEG_INF)
    m = s.amax(1)
    lse = torch.logsumexp(s, 1)
    return {
        "lse is the row maximum m alone: add log(l), lse = m + log(l).": m,
        "lse is log(l) alone: l was summed against the maximum m, add it back, "
        "lse = m + log(l).": lse - m,
        "lse is in log2 units: with exp2 and m in log2 units, lse = (m2 + log2(l)) * ln(2).":
            lse * LOG2E,
    }


def _flash_buffers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bm: int, bn: int,
                   hidden_from: int) -> tuple[torch.Tensor, ...]:
    """Device buffers: ``q``, ``k``, ``v`` in rows ``D + 8`` wide with NaN around them (and in the
    keys from ``hidden_from`` on), ``O`` and ``LSE`` filled with :data:`SENTINEL`."""
    L, D = q.shape

    def wide(t: torch.Tensor, extra: int) -> torch.Tensor:
        buf = torch.full((t.shape[0] + extra, D + 8), float("nan"), dtype=t.dtype)
        buf[: t.shape[0], :D] = t
        return buf.to(DEVICE)

    kb, vb = wide(k, bn), wide(v, bn)
    kb[hidden_from:], vb[hidden_from:] = float("nan"), float("nan")
    o = torch.full((L + bm, D + 8), SENTINEL, dtype=q.dtype, device=DEVICE)
    lse = torch.full((L + bm,), SENTINEL, dtype=torch.float32, device=DEVICE)
    return wide(q, bm), kb, vb, o, lse


def _run_flash(kernel: object, case: str, q, k, v, scale, causal, bm, bn, programs: int,
               hidden_from: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the first ``programs`` programs; return ``(out, lse, O buffer, LSE buffer)``."""
    (L, D), S = q.shape, k.shape[0]
    qb, kb, vb, ob, lb = _flash_buffers(q, k, v, bm, bn, hidden_from)
    launch(kernel, (programs,), case, qb, kb, vb, ob, lb, L, S, qb.stride(0), kb.stride(0),
           vb.stride(0), ob.stride(0), scale, CAUSAL=causal, HEAD_DIM=D, BLOCK_M=bm,
           BLOCK_N=bn, advice=f"The kernel's arguments are {_FLASH_SIGNATURE}; grid "
           "(cdiv(L, BLOCK_M),).")
    ob, lb = ob.cpu(), lb.cpu()
    return ob[:L, :D], lb[:L], ob, lb


def _flash_cases(gen: torch.Generator) -> list[tuple[str, int, int, bool, torch.dtype, float, int,
                                                     int]]:
    """``(case, L, S, causal, dtype, score size, BLOCK_M, BLOCK_N)``."""
    L1, S1 = random_int(40, 60, gen) | 1, random_int(50, 70, gen) | 1
    return [
        (f"no mask, L = {L1}, S = 64 (whole key blocks)", L1, 64, False, torch.float32, 1.0, 16,
         16),
        (f"no mask, L = {L1}, S = {S1} (the last key block cut at S; NaN past it)", L1, S1,
         False, torch.float32, 1.0, 16, 16),
        (f"causal, L = S = {S1}", S1, S1, True, torch.float32, 1.0, 16, 16),
        (f"causal, L = {L1} < S = 70", L1, 70, True, torch.float32, 1.0, 16, 16),
        (f"causal, L = 70 > S = {L1}, BLOCK_M = 32, BLOCK_N = 16", 70, L1, True, torch.float32,
         1.0, 32, 16),
        (f"causal, L = {L1}, S = {S1}, float16, scores 4 times larger", L1, S1, True,
         torch.float16, 4.0, 16, 16),
    ]


@exercise(
    "FlashAttention's forward kernel, its key loop stopping at the diagonal",
    hint="Notebook 07's loop over key blocks, with exercise 2's bounds for where it ends. Which "
    "keys of the last block must still be masked, and when is acc divided by l?",
    forbid=("teachkit.kernels.flash.flash_fwd_kernel",
            "teachkit.kernels.flash.attend_key_block",
            "teachkit.kernels.flash_ladder.ladder_key_block",
            "teachkit.kernels.flash_ladder.ladder_kernel"),
)
def check_flash_kernel(kernel: object) -> None:
    """Launch the learner's ``@triton.jit`` kernel
    ``(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL, HEAD_DIM,
    BLOCK_M, BLOCK_N)`` on one head and compare ``O`` and ``LSE`` with float64 attention.

    Rows of every tensor are ``HEAD_DIM + 8`` apart, with NaN between them and past the last
    (so wrong strides and unmasked loads show), and ``O`` and ``LSE`` sit in buffers of
    :data:`~teachkit.exercises.launching.SENTINEL` (so stores out of place show). In the causal
    cases the checker also launches the programs ``0 .. i`` alone, for each query block ``i``,
    with NaN in every key from ``start_m + BLOCK_M`` of block ``i`` on: keys that no query of
    those programs may see. A kernel that loads them and relies on the mask gets
    ``0 * NaN = NaN``; one that stops its loop at the diagonal never reads them. Wrong outputs
    are compared with the usual mistakes (no rescale, the division inside the loop, a strict or
    missing causal mask, no scale, exp2 without log2(e)) and wrong lse with theirs.

    Parameters
    ----------
    kernel
        The learner's ``@triton.jit`` function.
    """
    require_kernel(kernel, _FLASH_SIGNATURE)
    gen = fresh_generator()
    D = 16
    scale = 1 / math.sqrt(D)
    for case, L, S, causal, dtype, size, bm, bn in _flash_cases(gen):
        q = (torch.randn(L, D, generator=gen, dtype=torch.float64) * size).to(dtype)
        k, v = (torch.randn(S, D, generator=gen, dtype=torch.float64).to(dtype)
                for _ in range(2))
        q64, k64, v64 = q.double(), k.double(), v.double()
        ref_out, ref_lse = _flash_simulate(q64, k64, v64, scale, causal, bm, bn)
        rtol = _FLASH_RTOL[dtype]
        out, lse, ob, lb = _run_flash(kernel, case, q, k, v, scale, causal, bm, bn,
                                      triton.cdiv(L, bm), S)
        outside = torch.ones(ob.shape, dtype=torch.bool)
        outside[:L, :D] = False
        expect_untouched(ob, outside, case,
                         f"your kernel stored outside the rows of O: the last program's rows "
                         f"run past L = {L}, store with mask=offs_m[:, None] < L, at "
                         "O + offs_m[:, None] * stride_o + offs_d[None, :] (stride_o is not "
                         "HEAD_DIM here).")
        expect_untouched(lb, torch.arange(lb.numel()) >= L, case,
                         f"your kernel stored past LSE[{L - 1}]: mask the store with "
                         "offs_m < L.")
        if relative_error(out, ref_out) > rtol:
            # a mistake's output carries TF32's rounding on a GPU too: match it loosely there
            mistake = matching_mistake(out, _flash_out_mistakes(q64, k64, v64, scale, causal,
                                                                bm, bn),
                                       rtol=1e-2 if ON_GPU else max(rtol, 1e-4))
            if mistake:
                raise ExerciseFailed(f"On {case}: your output matches a usual mistake: "
                                     + mistake)
        bad = ~torch.isfinite(out) & torch.isfinite(ref_out)
        if bool(bad.any()):
            raise ExerciseFailed(
                f"On {case}: NaN or inf in the output where the reference is finite. The "
                "checker puts NaN past the last key and between rows, as any memory may hold: "
                "load k and v with mask=cols[:, None] < S, other=0.0 (an unmasked v gives "
                "0 * NaN = NaN even where p = 0), use the strides (rows are not HEAD_DIM "
                "apart here), and shift a row whose scores are all -inf by 0, not by -inf.")
        expect(out.dtype == dtype, f"On {case}: O is {dtype}; store out.to(O.dtype.element_ty).")
        expect_close(out, ref_out, f"{case} (O)", rtol,
                     advice="m_new = max(m, rowmax(s)); p = exp(s - m_new); alpha = exp(m - "
                     "m_new); l = alpha * l + rowsum(p); acc = alpha * acc + p @ v; out = acc "
                     "/ l after the loop.")
        lse_rtol = _LSE_RTOL[dtype]
        if relative_error(lse, ref_lse) > lse_rtol:
            # as for the output: a mistake's lse carries TF32's rounding on a GPU, which can
            # move it past the correct lse's bound
            mistake = matching_mistake(lse, _flash_lse_mistakes(q64, k64, scale, causal),
                                       rtol=1e-2 if ON_GPU else max(lse_rtol, 1e-4))
            if mistake:
                raise ExerciseFailed(f"On {case}: your lse matches a usual mistake: " + mistake)
        expect_close(lse, ref_lse, f"{case} (LSE)", lse_rtol,
                     advice="lse = m + log(l), natural log, with m and l after the last block.")
        if not causal:
            continue
        for i in range(triton.cdiv(L, bm)):
            hidden = min((i + 1) * bm, S)
            where = (f"{case}: programs 0 to {i} alone, NaN in keys {hidden} to {S - 1} (no "
                     f"query of those programs may see them)")
            if hidden == S:
                continue
            out_i, _, _, _ = _run_flash(kernel, where, q, k, v, scale, causal, bm, bn, i + 1,
                                        hidden)
            rows = slice(i * bm, min((i + 1) * bm, L))
            if not bool(torch.isfinite(out_i[rows]).all()):
                raise ExerciseFailed(
                    f"On {where}: NaN in the rows of program {i}. Its last query, "
                    f"{min((i + 1) * bm, L) - 1}, sees no key from start_m + BLOCK_M = "
                    f"{(i + 1) * bm} on, yet your loop loaded those keys (masking their scores "
                    "leaves p = 0, and 0 * NaN is NaN). Stop the loop there: end = "
                    "min(start_m + BLOCK_M, S) when CAUSAL; the blocks past the diagonal are "
                    "never loaded.")
            expect_close(out_i[rows], ref_out[rows], f"{where} (O)", rtol)
