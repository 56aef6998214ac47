"""Property-based tests of the merge rules: exact, commutative, associative, any chunking."""

from __future__ import annotations

import random

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from teachkit import attention as at
from teachkit import reduction as rd
from teachkit import softmax as sm
from teachkit.compare import relative_error

finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32)
entry = st.one_of(finite, finite, finite, st.just(float("-inf")))
rows = st.lists(entry, min_size=1, max_size=60)


def stats(values: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    return sm.softmax_stats(torch.tensor(values, dtype=torch.float64))


def close(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> bool:
    return bool(torch.equal(a[0], b[0])) and relative_error(a[1], b[1]) < 1e-12


@settings(max_examples=150, deadline=None)
@given(rows, st.integers(min_value=1, max_value=17))
def test_any_chunking_is_exact(values, chunk):
    x = torch.tensor(values, dtype=torch.float64)
    out, ref = sm.chunked_softmax(x, chunk), torch.softmax(x, dim=-1)
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert relative_error(out, ref) < 1e-12
    assert close(sm.reduce_stats(*sm.chunk_stats(x, chunk)), sm.softmax_stats(x))


@settings(max_examples=150, deadline=None)
@given(rows, rows, rows)
def test_merge_is_exact_commutative_associative(a, b, c):
    sa, sb, sc = stats(a), stats(b), stats(c)
    assert close(sm.merge_stats(*sa, *sb), stats(a + b))
    assert close(sm.merge_stats(*sa, *sb), sm.merge_stats(*sb, *sa))
    left = sm.merge_stats(*sm.merge_stats(*sa, *sb), *sc)
    right = sm.merge_stats(*sa, *sm.merge_stats(*sb, *sc))
    assert close(left, right)
    assert not torch.isnan(left[1])


@settings(max_examples=60, deadline=None)
@given(rows, st.randoms(use_true_random=False))
def test_fold_shuffled_and_tree_agree(values, rnd: random.Random):
    singles = [stats([v]) for v in values]
    shuffled = singles[:]
    rnd.shuffle(shuffled)
    ref = stats(values)
    assert close(rd.fold(singles), ref)
    assert close(rd.fold(shuffled), ref)
    assert close(rd.tree_reduce(shuffled)[0], ref)


@settings(max_examples=40, deadline=None)
@given(rows, st.sampled_from([32, 64, 128]), st.sampled_from([4, 8, 32]))
def test_block_reduction_simulation(values, threads, warp):
    x = torch.tensor(values, dtype=torch.float64)
    sim = rd.simulate_block_reduction(x, threads=threads, warp_size=warp)
    assert close((sim.block_m, sim.block_d), stats(values))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 70), st.integers(1, 69), st.floats(-50, 50))
def test_merge_partials_any_split(L, S, cut, shift):
    g = torch.Generator().manual_seed(L * 1000 + S)
    q = torch.randn(2, L, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, S, 8, generator=g, dtype=torch.float64) + shift
    v = torch.randn(2, S, 5, generator=g, dtype=torch.float64)
    cut = min(cut, S)
    a = at.blockwise_attention(q, k[:, :cut], v[:, :cut], block_size=7)
    b = at.blockwise_attention(q, k[:, cut:], v[:, cut:], block_size=7)
    out, lse = at.merge_partials(*a, *b)
    assert relative_error(out, at.naive_attention(q, k, v)) < 1e-12
    full_lse = torch.logsumexp(at.attention_scores(q, k), dim=-1)
    assert relative_error(lse, full_lse) < 1e-12
