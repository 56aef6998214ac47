"""The causal tile schedule agrees with the explicit mask; memory formulas match real tensors."""

from __future__ import annotations

import pytest
import torch

from teachkit.attention import attention_scores, causal_mask
from teachkit.tiling import (
    FULL,
    MASKED,
    SKIP,
    TileCounts,
    blockwise_score_bytes,
    count_tiles,
    schedule_from_mask,
    score_matrix_bytes,
    tile_bounds,
    tile_schedule,
)


@pytest.mark.parametrize("L,S,bm,bn", [
    (1, 1, 1, 1), (5, 7, 2, 3), (100, 100, 32, 32), (70, 130, 16, 24), (130, 45, 24, 16),
    (37, 53, 8, 5), (5, 9, 16, 16), (64, 64, 16, 16), (299, 301, 64, 48),
])
def test_schedule_matches_the_explicit_causal_mask(L, S, bm, bn):
    assert torch.equal(tile_schedule(L, S, bm, bn, causal=True),
                       schedule_from_mask(causal_mask(L, S), bm, bn))


def test_schedule_matches_the_mask_on_random_sizes(gen):
    for _ in range(20):
        L, S = (int(torch.randint(1, 200, (), generator=gen)) for _ in range(2))
        bm, bn = (int(torch.randint(1, 50, (), generator=gen)) for _ in range(2))
        assert torch.equal(tile_schedule(L, S, bm, bn, True),
                           schedule_from_mask(causal_mask(L, S), bm, bn)), (L, S, bm, bn)


def test_skipped_tiles_are_exactly_the_all_minus_inf_score_tiles(gen):
    L, S, bm, bn = 45, 77, 16, 12
    s = attention_scores(torch.randn(L, 8, generator=gen), torch.randn(S, 8, generator=gen),
                         causal=True)
    sched = tile_schedule(L, S, bm, bn, causal=True)
    for i in range(sched.shape[0]):
        for j in range(sched.shape[1]):
            tile = s[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            assert bool(torch.isinf(tile).all()) == (int(sched[i, j]) == SKIP)
            assert bool(torch.isfinite(tile).all()) == (int(sched[i, j]) == FULL)


def test_no_mask_means_all_full_and_shapes():
    sched = tile_schedule(33, 77, 16, 16, causal=False)
    assert sched.shape == (3, 5) and bool((sched == FULL).all())
    assert tile_schedule(0, 5, 4, 4, causal=True).shape == (0, 2)


def test_counts():
    c = count_tiles(4096, 4096, 128, 128, causal=True)
    assert c == TileCounts(full=496, masked=32, skipped=496)
    assert c.total == 1024 and c.computed == 528
    assert count_tiles(10, 10, 4, 4, causal=False) == TileCounts(9, 0, 0)
    c = count_tiles(200, 300, 64, 48, causal=True)
    sched = tile_schedule(200, 300, 64, 48, causal=True)
    assert c.masked == int((sched == MASKED).sum()) and c.total == sched.numel()


def test_tile_bounds_cut_the_last_tile():
    assert tile_bounds(0, 4, 10) == (0, 4)
    assert tile_bounds(2, 4, 10) == (8, 10)


@pytest.mark.parametrize("bad", [
    dict(L=-1, S=3, block_m=1, block_n=1), dict(L=3, S=3, block_m=0, block_n=1),
    dict(L=3.0, S=3, block_m=1, block_n=1),
])
def test_bad_sizes_are_refused(bad):
    with pytest.raises((ValueError, TypeError)):
        tile_schedule(causal=True, **bad)


def test_schedule_from_mask_wants_a_2d_bool_mask():
    with pytest.raises(ValueError, match="2-D bool"):
        schedule_from_mask(torch.ones(3, 3), 2, 2)


def test_memory_formulas_match_real_tensors():
    L, S = 37, 101
    s = attention_scores(torch.randn(2, 3, L, 8), torch.randn(2, 3, S, 8))
    assert s.numel() * s.element_size() == score_matrix_bytes(L, S, 2, 3, torch.float32, 1)
    assert score_matrix_bytes(L, S, dtype=torch.float16) == L * S * 2 * 2
    assert blockwise_score_bytes(L, 16) == score_matrix_bytes(L, 16)
