"""The serving simulation, block tables, and scattering a cache into pages and back."""

from __future__ import annotations

import pytest
import torch
from inputs import randn

from teachkit.paging import (
    POLICIES,
    build_block_table,
    gather_from_pages,
    head_major,
    paged_from_contiguous,
    pages_needed,
    request_lengths,
    scatter_to_pages,
    simulate_serving,
    token_rows,
    waste_against_page_size,
)


def lengths(gen, n=120, max_len=300):
    return request_lengths(n, max_len, gen)


def test_request_lengths_in_range(gen):
    lens = request_lengths(500, 37, gen, min_len=5)
    assert len(lens) == 500 and min(lens) >= 5 and max(lens) <= 37


def test_paging_holds_more_tokens_and_serves_faster(gen):
    lens = lengths(gen)
    runs = {p: simulate_serving(lens, 4096, p, page_size=16) for p in POLICIES}
    reserve, exact, paged = (runs[p] for p in POLICIES)
    assert paged.used > exact.used > 0 and paged.used > reserve.used > 0
    assert paged.mean_running > reserve.mean_running
    assert paged.steps < reserve.steps
    assert reserve.reserved == pytest.approx(1.0, abs=0.1)  # reserve max: memory all handed out
    assert reserve.preemptions == exact.preemptions == 0 and reserve.page_size == 0
    assert paged.page_size == 16
    # every step writes at least one token, and all tokens get written
    assert max(r.steps for r in runs.values()) <= sum(lens) + len(lens)


def test_reserving_exact_lengths_leaves_holes(gen):
    # Long and short sequences alternate: freed short regions are too small for long ones.
    lens = [256, 8] * 40
    exact = simulate_serving(lens, 1024, "reserve exact")
    assert exact.stalled > 0  # free memory existed in total, but in no single hole
    assert simulate_serving(lens, 1024, "paged", page_size=8).stalled == 0


def test_paged_waste_is_below_one_page_per_sequence(gen):
    lens = lengths(gen)
    for p, stats in waste_against_page_size(lens, [1, 8, 32], capacity=4096).items():
        held = stats.reserved * stats.capacity
        tokens = stats.used * stats.capacity
        assert held - tokens <= (p - 1) * stats.mean_running + 1e-6
        assert stats.wasted >= 0
    runs = waste_against_page_size(lens, [1, 64], capacity=4096)
    assert runs[1].wasted == 0 and runs[64].wasted > 0


def test_snapshot_regions_do_not_overlap(gen):
    lens = lengths(gen, 60, 200)
    for policy in POLICIES:
        snap = simulate_serving(lens, 2048, policy, page_size=16).snapshot
        assert snap
        spans = sorted((start, start + size) for _, start, size, _ in snap)
        gaps = zip(spans, spans[1:], strict=False)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in gaps)
        assert all(0 <= written <= size for *_, size, written in snap)
        assert spans[-1][1] <= 2048


def test_simulation_rejects_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        simulate_serving([3], 10, "best fit")
    with pytest.raises(ValueError, match="cannot hold"):
        simulate_serving([30], 10, "reserve exact")
    with pytest.raises(ValueError, match="max_len"):
        simulate_serving([30], 100, "reserve max", max_len=20)
    with pytest.raises(ValueError, match=">= 1"):
        simulate_serving([0, 3], 100, "paged")


def test_block_table_pages_are_distinct_and_scattered(gen):
    lens = torch.tensor([0, 5, 16, 17, 40])
    table = build_block_table(lens, 8, num_pages=30, gen=gen)
    need = pages_needed(lens, 8)
    assert need.tolist() == [0, 1, 2, 3, 5]
    assert table.shape == (5, 5) and table.dtype == torch.int32
    for b, n in enumerate(need.tolist()):
        assert (table[b, :n] >= 0).all() and (table[b, n:] == -1).all()
    used = table[table >= 0]
    assert used.unique().numel() == used.numel() == int(need.sum())
    assert build_block_table(lens, 8).tolist()[2] == [1, 2, -1, -1, -1]  # no gen: in order
    with pytest.raises(ValueError, match="need 11 pages"):
        build_block_table(lens, 8, num_pages=10)
    with pytest.raises(ValueError, match="max_pages >= 5"):
        build_block_table(lens, 8, max_pages=4)


def test_token_rows_follow_the_table():
    table = torch.tensor([[2, 0, -1], [1, 3, 4]])
    pos = torch.tensor([[0, 2, 3, 5], [0, 3, 4, 8]])
    assert token_rows(table, 3, pos).tolist() == [[6, 8, 0, 2], [3, 9, 10, 14]]


@pytest.mark.parametrize("page_size", [1, 4, 7, 16])
def test_scatter_and_gather_round_trip(page_size, gen):
    k = randn(3, 2, 23, 8, gen=gen)
    v = randn(3, 2, 23, 8, gen=gen)
    lens = torch.tensor([23, 0, 11])
    k_pool, v_pool, table = paged_from_contiguous(k, v, lens, page_size, num_pages=40, gen=gen,
                                                  fill=float("nan"))
    assert k_pool.shape == (40, page_size, 2, 8)
    for pool, cache in ((k_pool, k), (v_pool, v)):
        back = gather_from_pages(pool, table, lens, S=23)
        for b, n in enumerate(lens.tolist()):
            assert torch.equal(back[b, :, :n], cache[b, :, :n])
            assert (back[b, :, n:] == 0).all()
    # slots no token went to keep the fill value
    filled = (~torch.isnan(k_pool)).all(-1).all(-1).sum()
    assert int(filled) == int(lens.sum())
    again = scatter_to_pages(k, table, lens, page_size, 40, fill=float("nan"))
    assert torch.equal(again.nan_to_num(7.0), k_pool.nan_to_num(7.0))


def test_scatter_checks_shapes(gen):
    k = randn(2, 1, 5, 4, gen=gen)
    table = build_block_table([5, 5], 4)
    with pytest.raises(ValueError, match="batch"):
        scatter_to_pages(k, table[:1], [5, 5], 4, 4)
    with pytest.raises(ValueError, match="2 lengths"):
        scatter_to_pages(k, table, [5], 4, 4)
    with pytest.raises(TypeError, match="ints"):
        pages_needed(torch.tensor([1.5]), 4)
    with pytest.raises(ValueError, match=">= 0"):
        pages_needed([-1], 4)


def test_head_major_keeps_shape_and_values_and_lays_a_heads_page_out_in_one_run():
    pool = torch.randn(5, 4, 3, 8)
    hm = head_major(pool)
    assert hm.shape == pool.shape and torch.equal(hm, pool)
    assert hm.stride() == (4 * 3 * 8, 8, 4 * 8, 1)  # head h of page p: one run of 4 x 8
    page, head = 2, 1
    run = hm.as_strided((4 * 8,), (1,), hm.storage_offset() + page * 96 + head * 32)
    assert torch.equal(run, pool[page, :, head].reshape(-1))
    with pytest.raises(TypeError, match="torch.Tensor"):
        head_major(pool.numpy())
    with pytest.raises(ValueError, match=r"got shape \(5, 4, 24\)"):
        head_major(pool.reshape(5, 4, 24))
