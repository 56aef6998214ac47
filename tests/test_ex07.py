"""The checkers of notebook 07 explain wrong answers (test_exercises.py holds
every checker to its solution and to an unfilled stub)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from teachkit.attention import attention_block_update, attention_scores  # noqa: E402
from teachkit.exercises import ex07  # noqa: E402
from teachkit.exercises.checking import ExerciseFailed  # noqa: E402
from teachkit.exercises.solutions import ex07 as solutions  # noqa: E402
from teachkit.tiling import FULL, MASKED, SKIP, tile_schedule  # noqa: E402


def _tiled_with(mistake: str, q, k, v, bm, bn, causal):
    """A learner's tiled loop with one typical mistake (the checker's own wrong formulas are
    written independently, so this also tests that they describe these loops), in float64."""
    q, k, v = q.double(), k.double(), v.double()
    L, S = q.shape[-2], k.shape[-2]
    sched = tile_schedule(L, S, bm, bn, causal)
    outs, lses = [], []
    for i, r0 in enumerate(range(0, L, bm)):
        qb = q[..., r0:r0 + bm, :]
        m = torch.full(qb.shape[:-1], float("-inf"), dtype=torch.float64)
        l, acc = torch.zeros_like(m), torch.zeros((*qb.shape[:-1], v.shape[-1]), dtype=q.dtype)
        for j, c0 in enumerate(range(0, S, bn)):
            kind = int(sched[i, j])
            if kind == SKIP or (kind == MASKED and mistake == "skip masked"):
                continue
            s = attention_scores(qb, k[..., c0:c0 + bn, :])
            if kind == MASKED and mistake != "no mask":
                off = 0 if mistake == "local indices" else 1
                rows = torch.arange(r0 * off, r0 * off + s.shape[-2]).unsqueeze(-1)
                cols = torch.arange(c0 * off, c0 * off + s.shape[-1])
                s = s.masked_fill(cols > rows, float("-inf"))
            m, l, acc = attention_block_update(m, l, acc, s, v[..., c0:c0 + bn, :])
            if mistake == "normalise each step":
                acc = acc / l.unsqueeze(-1)
        outs.append(acc if mistake == "normalise each step" else acc / l.unsqueeze(-1))
        lses.append(m if mistake == "lse = m" else m + torch.log(l))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)

# --- exercise 1: tile_kind -------------------------------------------------------------------


def _kind(clip=True, strict_full=False, half_open_bug=False, ignore_causal=False):
    def kind(i, j, L, S, bm, bn, causal):
        if not causal and not ignore_causal:
            return FULL
        r0, r1 = i * bm, (min((i + 1) * bm, L) if clip else (i + 1) * bm)
        c0, c1 = j * bn, (min((j + 1) * bn, S) if clip else (j + 1) * bn)
        if (c0 > r1) if half_open_bug else (c0 > r1 - 1):
            return SKIP
        if (c1 - 1 < r0) if strict_full else (c1 - 1 <= r0):
            return FULL
        return MASKED

    return kind


@pytest.mark.parametrize("wrong,message", [
    (_kind(clip=False), "last, shorter tile"),
    (_kind(strict_full=True), "does see key"),
    (_kind(half_open_bug=True), "half-open"),
    (_kind(ignore_causal=True), "every tile is FULL"),
])
def test_tile_kind_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex07.check_tile_kind(wrong)
    assert "On " in str(info.value) and "expected" in str(info.value)


def test_tile_kind_wants_an_int_code():
    with pytest.raises(ExerciseFailed, match="return one of the ints"):
        ex07.check_tile_kind(lambda *args: "full")


# --- exercise 2: recompute_probs -------------------------------------------------------------


def _scores(q, k, lse, scale):
    return (q.to(lse.dtype) @ k.to(lse.dtype).transpose(-2, -1)) * scale


@pytest.mark.parametrize("wrong,message", [
    (lambda q, k, lse, scale: torch.exp(_scores(q, k, lse, 1.0) - lse.unsqueeze(-1)),
     "left out the scale"),
    (lambda q, k, lse, scale: torch.softmax(_scores(q, k, lse, scale), dim=-1),
     "normalised over the tile"),
    (lambda q, k, lse, scale: torch.exp(_scores(q, k, lse, scale)) / torch.exp(lse).unsqueeze(-1),
     "NaN or infinity"),
])
def test_recompute_probs_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex07.check_recompute_probs(wrong)
    assert "On " in str(info.value)


def test_recompute_probs_without_unsqueeze():
    with pytest.raises(ExerciseFailed, match=r"unsqueeze\(-1\)"):
        ex07.check_recompute_probs(lambda q, k, lse, scale: torch.exp(_scores(q, k, lse, scale)
                                                                        - lse))


def test_recompute_probs_wants_lse_dtype(unwatched):
    def float64_out(q, k, lse, scale):
        return solutions.solution_recompute_probs(q, k, lse, scale).double()

    with pytest.raises(ExerciseFailed, match="lse's dtype"):
        ex07.check_recompute_probs(float64_out)


# --- exercise 3: tiled_attention -------------------------------------------------------------


@pytest.mark.parametrize("mistake,message", [
    ("no mask", "without their mask"),
    ("skip masked", "diagonal tiles were skipped"),
    ("local indices", "local indices"),
    ("normalise each step", "divided by l after every key block"),
])
def test_tiled_attention_explains_wrong_answers(mistake, message):
    def wrong(q, k, v, bm, bn, causal):
        out, lse = _tiled_with(mistake, q, k, v, bm, bn, causal)
        return out.to(q.dtype), lse.to(torch.float64 if q.dtype == torch.float64
                                       else torch.float32)

    with pytest.raises(ExerciseFailed, match=message) as info:
        ex07.check_tiled_attention(wrong)
    assert "On " in str(info.value)


def test_tiled_attention_names_a_wrong_lse(unwatched):
    def lse_is_m(q, k, v, bm, bn, causal):
        out, _ = solutions.solution_tiled_attention(q, k, v, bm, bn, causal)
        _, m = _tiled_with("lse = m", q, k, v, bm, bn, causal)
        return out, m.float()

    with pytest.raises(ExerciseFailed, match=r"m \+ log\(l\)"):
        ex07.check_tiled_attention(lse_is_m)


def test_tiled_attention_asks_for_a_pair():
    with pytest.raises(ExerciseFailed, match=r"pair \(out, lse\)"):
        ex07.check_tiled_attention(lambda q, k, v, bm, bn, causal: q)


def test_tiled_attention_refuses_a_materialised_softmax():
    def materialised(q, k, v, block_m, block_n, causal):
        s = attention_scores(q.double(), k.double(), causal)
        lse = torch.logsumexp(s, dim=-1)
        return (torch.exp(s - lse.unsqueeze(-1)) @ v.double()).to(q.dtype), lse.float()

    with pytest.raises(ExerciseFailed, match="SKIP.*NaN|NaN.*SKIP"):
        ex07.check_tiled_attention(materialised)


def test_tiled_attention_refuses_plain_attention_over_the_seen_keys():
    """Plain masked attention over the keys some query sees (no tiles, no NaN key read) is
    refused by the size of its score matrix."""
    def plain(q, k, v, block_m, block_n, causal):
        n = min(q.shape[-2], k.shape[-2]) if causal else k.shape[-2]
        s = attention_scores(q.double(), k[..., :n, :].double(), causal)
        lse = torch.logsumexp(s, dim=-1)
        out = torch.exp(s - lse.unsqueeze(-1)) @ v[..., :n, :].double()
        return out.to(q.dtype), lse.to(torch.float64 if q.dtype == torch.float64
                                       else torch.float32)

    with pytest.raises(ExerciseFailed, match="whole score matrix") as info:
        ex07.check_tiled_attention(plain)
    assert "one block_m x block_n tile at a time" in str(info.value)


def test_tiled_attention_refuses_all_queries_against_a_key_block():
    """Walking key blocks with every query at once (L x block_n scores) is not the tiled loop."""
    def key_blocks_only(q, k, v, block_m, block_n, causal):
        out, lse = _tiled_with("", q, k, v, q.shape[-2], block_n, causal)
        return out.to(q.dtype), lse.to(torch.float64 if q.dtype == torch.float64
                                       else torch.float32)

    with pytest.raises(ExerciseFailed, match="a row or a column of tiles"):
        ex07.check_tiled_attention(key_blocks_only)
