"""The checkers of notebook 10 explain wrong answers (test_exercises.py holds
every checker to its solution and to an unfilled stub)."""

from __future__ import annotations

import pytest
import torch

from teachkit.attention import blockwise_attention, merge_partials, naive_attention
from teachkit.exercises import ex10
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex10 as solutions
from teachkit.ring.attention import attend_block
from teachkit.tiling import FULL, MASKED, STRICT


def _ring_rank_with(mistake: str, q, ks, vs, rank, causal, layout):
    """A learner's ring loop with one typical mistake (the checker's own wrong formulas are
    written independently, so this also tests that they describe these loops), in float64."""
    q, ks, vs = q.double(), [k.double() for k in ks], [v.double() for v in vs]
    out = lse = None
    for src, mask in solutions.solution_ring_plan(rank, len(ks), causal, layout):
        if mistake == "no masks":
            mask = FULL
        elif mistake == "causal for strict" and mask == STRICT:
            mask = MASKED
        o, l_ = attend_block(q, ks[src], vs[src], mask, block_attention="torch")
        if out is None:
            out, lse = o, l_
        elif mistake == "plain sum":
            out, lse = out + o, torch.logaddexp(lse, l_)
        elif mistake == "mean":
            out, lse = (out + o) / 2, torch.logaddexp(lse, l_)
        else:
            out, lse = merge_partials(out, lse, o, l_)
    return out, lse

# --- exercise 1: ring_plan -------------------------------------------------------------------


def _plan(forward=False, striped_diagonal="masked", contiguous_own="masked", ignore_causal=False):
    def plan(rank, world_size, causal, layout):
        out = []
        for t in range(world_size):
            src = (rank + t if forward else rank - t) % world_size
            if not causal and not ignore_causal:
                mask = "full"
            elif layout == "contiguous":
                mask = "full" if src < rank else contiguous_own if src == rank else "skip"
            else:
                mask = "masked" if src < rank else striped_diagonal if src == rank else "strict"
                if striped_diagonal == "all masked":
                    mask = "masked"
            out.append((src, mask))
        return out

    return plan


@pytest.mark.parametrize("wrong,message", [
    (_plan(forward=True), r"came from r - 1.*\(r - t\) mod W, not \(r \+ t\)"),
    (_plan(striped_diagonal="all masked"), "the diagonal is masked too, so b < a"),
    (_plan(contiguous_own="full"), "its own block is 'masked'"),
    (_plan(ignore_causal=True), "every block is 'full'"),
])
def test_ring_plan_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex10.check_ring_plan(wrong)
    assert "On rank" in str(info.value) and "expected" in str(info.value)


def test_ring_plan_names_the_kinds_for_an_unknown_mask():
    with pytest.raises(ExerciseFailed, match="is MASKED, named 'masked'"):
        ex10.check_ring_plan(_plan(contiguous_own="causal"))


def test_ring_plan_wants_one_pair_per_step():
    with pytest.raises(ExerciseFailed, match="return a list of 1"):
        ex10.check_ring_plan(lambda rank, world_size, causal, layout: [])
    with pytest.raises(ExerciseFailed, match=r"pair \(source rank, mask\)"):
        ex10.check_ring_plan(lambda rank, world_size, causal, layout: ["full"] * world_size)


# --- exercise 2: strict_block ----------------------------------------------------------------


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def strict_keeping_diagonal(q, k, v):
    return blockwise_attention(q, k, v, causal=True)


def strict_shifted_the_wrong_way(q, k, v):
    out, lse = torch.zeros_like(q), torch.full(q.shape[:-1], float("-inf"), dtype=_lse_dtype(q))
    s = (q.double() @ k.double().transpose(-2, -1)) * q.shape[-1] ** -0.5
    n = q.shape[-2]
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    ref_lse = torch.logsumexp(s, dim=-1)
    p = torch.where(ref_lse.unsqueeze(-1) == float("-inf"), 0.0,
                    torch.exp(s - ref_lse.unsqueeze(-1)))
    out[...] = (p @ v.double()).to(q.dtype)
    lse[...] = ref_lse
    return out, lse


def strict_without_row_zero(q, k, v):
    return blockwise_attention(q[..., 1:, :], k[..., :-1, :], v[..., :-1, :], causal=True)


def strict_with_nan_row_zero(q, k, v):
    out, lse = solutions.solution_strict_block(q, k, v)
    out[..., 0, :] = float("nan")
    lse[..., 0] = float("nan")
    return out, lse


@pytest.mark.parametrize("wrong,message", [
    (strict_keeping_diagonal, "kept the diagonal"),
    (strict_shifted_the_wrong_way, "shifted the wrong way"),
    (lambda q, k, v: blockwise_attention(q, k, v), "every key is visible"),
    (strict_without_row_zero, "query 0 included"),
    (strict_with_nan_row_zero, "Row 0 is NaN"),
])
def test_strict_block_explains_wrong_answers(wrong, message, unwatched):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex10.check_strict_block(wrong)
    assert "On " in str(info.value)


def test_strict_block_wants_q_dtype(unwatched):
    def float64_out(q, k, v):
        out, lse = solutions.solution_strict_block(q, k, v)
        return out.double(), lse

    with pytest.raises(ExerciseFailed, match="out should be in q's dtype"):
        ex10.check_strict_block(float64_out)


# --- exercise 3: ring_rank -------------------------------------------------------------------


@pytest.mark.parametrize("mistake,message", [
    ("plain sum", "partial outputs were added"),
    ("mean", "partial outputs were averaged"),
    ("no masks", "apply each block's mask"),
    ("causal for strict", "used b <= a"),
])
def test_ring_rank_explains_wrong_answers(mistake, message):
    def wrong(q, ks, vs, rank, causal, layout):
        out, lse = _ring_rank_with(mistake, q, ks, vs, rank, causal, layout)
        return out.to(q.dtype), lse.to(_lse_dtype(q))

    with pytest.raises(ExerciseFailed, match=message) as info:
        ex10.check_ring_rank(wrong)
    assert "On rank" in str(info.value)


def test_ring_rank_without_a_known_mistake_gets_the_general_advice(unwatched):
    def own_block_only(q, ks, vs, rank, causal, layout):
        out = naive_attention(q, ks[rank], vs[rank], causal=causal)
        return out, torch.zeros(q.shape[:-1], dtype=_lse_dtype(q))

    with pytest.raises(ExerciseFailed, match="Merge each block's partial with merge_partials"):
        ex10.check_ring_rank(own_block_only)


def test_ring_rank_refuses_the_blocks_joined_into_one_sequence():
    """Concatenating the blocks and masking by token position gives the right numbers without
    the ring or a merge; the checker refuses it by the size of what it builds."""
    from teachkit.ring.layout import positions

    def joined(q, k_blocks, v_blocks, rank, causal, layout):
        W, n = len(k_blocks), q.shape[-2]
        k, v = torch.cat(k_blocks, dim=-2).double(), torch.cat(v_blocks, dim=-2).double()
        key_pos = torch.cat([positions(s, W, n, layout) for s in range(W)])
        s = q.double() @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        if causal:
            s = s.masked_fill(key_pos[None, :] > positions(rank, W, n, layout)[:, None],
                              float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        out = torch.exp(s - lse.unsqueeze(-1)) @ v
        return out.to(q.dtype), lse.to(torch.float64 if q.dtype == torch.float64
                                       else torch.float32)

    with pytest.raises(ExerciseFailed, match="spans several blocks at once") as info:
        ex10.check_ring_rank(joined)
    assert "merge the partial (out, lse)" in str(info.value)
