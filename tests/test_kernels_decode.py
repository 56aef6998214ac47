"""Split-KV decoding against a float64 reference (interpreter on CPU, GPU if any).

Tiny shapes (the interpreter runs every program in Python): cache lengths that no key block,
split or page divides, lengths varying per sequence down to 0, splits past the end, one and
several new tokens, grouped-query attention, contiguous and paged caches. Slots past a
sequence's length hold NaN in the kernel's inputs: reading one would show.
"""

from __future__ import annotations

import contextlib
import math
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inputs import randn

import teachkit
from teachkit.compare import attention_reference, relative_error
from teachkit.paging import head_major, paged_from_contiguous

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels import decode  # noqa: E402
from teachkit.kernels.decode import (  # noqa: E402
    DecodeConfig,
    choose_num_splits,
    decode_attention,
    decode_mask,
)
from teachkit.kernels.grid_math import next_power_of_2  # noqa: E402

DEV = teachkit.DEVICE
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
SDPA = torch.nn.functional.scaled_dot_product_attention
NAN = float("nan")


def make(B, H, H_kv, Lq, S, D, gen, dtype=torch.float16, lens=None):
    """q, the caches (NaN past every length), the clean caches for the reference, lengths."""
    q = randn(B, H, Lq, D, gen=gen, dtype=dtype)
    k = randn(B, H_kv, S, D, gen=gen, dtype=dtype)
    v = randn(B, H_kv, S, D, gen=gen, dtype=dtype)
    if lens is None:
        lens = torch.randint(0, S + 1, (B,), generator=gen)
        lens[0] = S
    lens = torch.as_tensor(lens)
    past = torch.arange(S)[None, None, :, None] >= lens[:, None, None, None]
    k_nan, v_nan = k.masked_fill(past, NAN), v.masked_fill(past, NAN)
    return q.to(DEV), k_nan.to(DEV), v_nan.to(DEV), k, v, lens.to(DEV)


def reference(q, k, v, lens, scale=None):
    """Output and lse in float64 on the CPU, with the explicit decoding mask."""
    q, k, v = (t.detach().cpu() for t in (q, k, v))
    return attention_reference(q, k, v, scale=scale,
                               mask=decode_mask(lens.cpu(), q.shape[2], k.shape[2]))


def check(q, k, v, k_ref, v_ref, lens, table=None, **kw):
    out, lse = decode_attention(q, k, v, cache_seqlens=lens, block_table=table, return_lse=True,
                                **kw)
    assert out.dtype == q.dtype and out.shape == q.shape and out.device == q.device
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:-1]
    ref_out, ref_lse = reference(q, k_ref, v_ref, lens, kw.get("scale"))
    assert relative_error(out, ref_out) < RTOL[q.dtype]
    assert relative_error(lse, ref_lse) < 1e-5
    return out, lse


@pytest.mark.parametrize("Lq", [1, 3])
@pytest.mark.parametrize("dtype", list(RTOL))
def test_matches_float64_with_gqa_and_varying_lengths(dtype, Lq, gen):
    # lengths: full, empty, odd
    check(*make(3, 4, 2, Lq, 45, 16, gen, dtype, lens=[45, 0, 30]), num_splits=3)


@pytest.mark.parametrize("D", decode.HEAD_DIMS)
def test_every_head_dim(D, gen):
    check(*make(1, 2, 1, 2, 21, D, gen, torch.float32), num_splits=2)


def test_unsplit_equals_split_and_default_splits(gen):
    q, k, v, k_ref, v_ref, lens = make(2, 2, 2, 1, 70, 32, gen)
    one = check(q, k, v, k_ref, v_ref, lens, num_splits=1)[0]
    many = check(q, k, v, k_ref, v_ref, lens)[0]  # the heuristic's choice
    assert relative_error(one, many) < RTOL[q.dtype]


def test_splits_past_the_end_are_empty(gen):
    # 20 keys = 2 blocks of 16 but 8 splits: 6 splits see nothing and must weigh nothing.
    check(*make(2, 2, 2, 2, 20, 16, gen, lens=[20, 3]), num_splits=8)


def test_queries_before_the_first_key_give_zeros(gen):
    # Lq = 3 new tokens but sequence 1 holds 1 key and sequence 2 none: rows see no key.
    q, k, v, k_ref, v_ref, lens = make(3, 2, 2, 3, 9, 16, gen, torch.float32, lens=[9, 1, 0])
    out, lse = check(q, k, v, k_ref, v_ref, lens, num_splits=2)
    assert torch.all(out[1, :, :2] == 0) and torch.all(lse[1, :, :2] == float("-inf"))
    assert torch.all(out[2] == 0) and torch.all(lse[2] == float("-inf"))
    assert torch.isfinite(lse[1, :, 2]).all()
    ref = SDPA(q.cpu().double(), k_ref.double(), v_ref.double(),
               attn_mask=decode_mask(lens.cpu(), 3, 9))  # SDPA: zeros for empty rows too
    assert relative_error(out, ref) < 1e-5


@pytest.mark.parametrize("page_size,Lq", [(5, 1), (16, 2), (32, 1)])
def test_paged_cache_equals_contiguous(page_size, Lq, gen):
    # Pages of 5 split key blocks, 16 is one block per page, 32 two blocks per page.
    q, k, v, k_ref, v_ref, lens = make(3, 4, 2, Lq, 53, 16, gen, torch.bfloat16)
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), page_size,
                                                  num_pages=40, gen=gen, fill=NAN)
    k_pool, v_pool, table = k_pool.to(DEV), v_pool.to(DEV), table.to(DEV)
    used = table[table >= 0]
    assert used.unique().numel() == used.numel()  # every page belongs to one sequence
    paged, lse_p = check(q, k_pool, v_pool, k_ref, v_ref, lens, table, num_splits=3)
    flat, lse_f = decode_attention(q, k, v, cache_seqlens=lens, num_splits=3, return_lse=True)
    assert relative_error(paged, flat) < 1e-6 and relative_error(lse_p, lse_f) < 1e-6


@pytest.mark.parametrize("page_size,splits", [(16, 1), (16, 3), (5, 2)])
def test_a_head_major_pool_reads_as_the_usual_layout(page_size, splits, gen):
    """``paging.head_major`` stores each head's rows of a page side by side; the kernel reads the
    pool through its strides, so the answer is the usual layout's, bit for bit (the same keys in
    the same order), with grouped-query heads and one empty sequence."""
    q, k, v, k_ref, v_ref, lens = make(3, 4, 2, 1, 70, 64, gen, torch.float16, lens=[70, 0, 37])
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), page_size,
                                                  num_pages=40, gen=gen, fill=NAN)
    k_pool, v_pool, table = k_pool.to(DEV), v_pool.to(DEV), table.to(DEV)
    k_hm, v_hm = head_major(k_pool), head_major(v_pool)
    assert k_hm.stride()[1:] == (64, page_size * 64, 1) and not k_hm.is_contiguous()
    usual = check(q, k_pool, v_pool, k_ref, v_ref, lens, table, num_splits=splits)
    relaid = check(q, k_hm, v_hm, k_ref, v_ref, lens, table, num_splits=splits)
    assert all(torch.equal(a, b) for a, b in zip(usual, relaid, strict=True))


@pytest.mark.parametrize("page_size,Lq", [(5, 1), (16, 3), (64, 1)])
def test_a_held_table_row_reads_as_the_entries_do(page_size, Lq, gen, monkeypatch):
    """A program holding its table row (narrow tables) computes exactly what one reading the
    entries as its keys need them does: the same keys, the same order. -1 past each sequence's
    pages, NaN in the pool's unused slots, one empty sequence."""
    q, k, v, k_ref, v_ref, lens = make(3, 4, 2, Lq, 70, 16, gen, torch.float16,
                                       lens=[70, 0, 37])
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), page_size,
                                                  num_pages=40, gen=gen, fill=NAN)
    k_pool, v_pool, table = k_pool.to(DEV), v_pool.to(DEV), table.to(DEV)
    assert (table == -1).any() and table.shape[1] <= decode.held_table_pages(None)

    def table_tile():  # the plan of these calls: the held row's width, 0 for none
        return decode._launch_plan(3, 4, Lq, 16, 2, torch.float16, torch.device(DEV),
                                   table.shape[1] * page_size, 3, None, page_size).table_tile

    assert table_tile() == next_power_of_2(table.shape[1])
    held = check(q, k_pool, v_pool, k_ref, v_ref, lens, table, num_splits=3)
    monkeypatch.setattr(decode, "HELD_TABLE_PAGES", {})
    decode.forget_plans()  # plans hold the row's width: work them out again
    try:
        assert decode.held_table_pages(None) == 0 and table_tile() == 0
        entries = check(q, k_pool, v_pool, k_ref, v_ref, lens, table, num_splits=3)
    finally:
        decode.forget_plans()
    for a, b in zip(held, entries, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("page_size,Lq,held", [(4, 1, True), (16, 3, True), (8, 2, False),
                                                (32, 1, False)])
def test_interleaved_pages_read_as_key_order_does(page_size, Lq, held, gen, monkeypatch):
    """Tiles of several whole pages interleaved (tile row ``i``: slot ``i // n`` of page
    ``i % n``) give what key order gives, up to the order of the sums: the same keys, masked by
    their own positions (queries of a later token see fewer keys, NaN fills the pool's unused
    slots and lies past each sequence's last page), with the row held or read entry by
    entry; tiles of 64 keys, 2 to 16 pages."""
    q, k, v, k_ref, v_ref, lens = make(3, 4, 2, Lq, 90, 16, gen, torch.float16,
                                       lens=[90, 0, 37])
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), page_size,
                                                  num_pages=40, gen=gen, fill=NAN)
    k_pool, v_pool, table = k_pool.to(DEV), v_pool.to(DEV), table.to(DEV)
    if not held:
        monkeypatch.setattr(decode, "HELD_TABLE_PAGES", {})
    tiles = decode.DecodeConfig(64, 4, 2, one_launch=False)

    def run(per_sm):
        monkeypatch.setattr(decode, "INTERLEAVE_PAGES_PER_SM", per_sm)
        decode.forget_plans()  # plans hold the choice: work them out again
        try:
            plan = decode._launch_plan(3, 4, Lq, 16, 2, torch.float16, torch.device(DEV),
                                       table.shape[1] * page_size, 2, tiles, page_size)
            assert bool(plan.table_tile) == held
            got = check(q, k_pool, v_pool, k_ref, v_ref, lens, table, num_splits=2,
                        config=tiles)
            return plan.interleave_pages, got
        finally:
            decode.forget_plans()

    interleaved, by_page = run({90: math.inf})
    in_order, by_key = run({})
    assert interleaved and not in_order
    for a, b in zip(by_page, by_key, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3, equal_nan=True)


def test_a_table_wider_than_a_program_holds_reads_entry_by_entry(gen):
    """300 pages of one token: wider than the held row, so the entries are read one by one."""
    S = decode.held_table_pages(None) + 44
    q, k, v, k_ref, v_ref, lens = make(2, 2, 1, 1, S, 16, gen, torch.float32, lens=[S, 123])
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), 1, gen=gen)
    check(q, k_pool.to(DEV), v_pool.to(DEV), k_ref, v_ref, lens, table.to(DEV), num_splits=2)


def test_paged_with_int64_indices(gen):
    q, _, _, k_ref, v_ref, _ = make(2, 2, 2, 1, 32, 16, gen, torch.float32, lens=[32, 32])
    lens = torch.tensor([32, 19])
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens, 8, gen=gen)
    out = decode_attention(q, k_pool.to(DEV), v_pool.to(DEV), block_table=table.long().to(DEV),
                           cache_seqlens=lens.to(DEV), num_splits=2)
    assert relative_error(out, reference(q, k_ref, v_ref, lens)[0]) < 1e-5
    with pytest.raises(ValueError, match="pass cache_seqlens"):
        decode_attention(q, k_pool.to(DEV), v_pool.to(DEV), block_table=table.to(DEV))


def test_scale_config_and_strided_caches(gen):
    q, _, _, k_ref, v_ref, lens = make(2, 2, 2, 2, 37, 32, gen, torch.float16)
    k = k_ref.transpose(1, 2).contiguous().transpose(1, 2).to(DEV)  # (B, S, H, D) storage
    wide = torch.cat([v_ref, v_ref], dim=-1).to(DEV)
    v = wide[..., :32]  # row stride 64
    assert not (k.is_contiguous() or v.is_contiguous())
    check(q, k, v, k_ref, v_ref, lens, scale=0.3, num_splits=2, config=DecodeConfig(32, 4, 1))


def test_strided_lengths_and_column_major_tables(gen):
    """The kernel reads lengths and table entries with unit strides: the wrapper makes them so."""
    q, k, v, k_ref, v_ref, _ = make(3, 2, 1, 1, 24, 16, gen, torch.float32, lens=[24, 24, 24])
    lens = torch.tensor([24, 0, 9])
    strided = torch.stack([lens, lens.flip(0)], 1).to(DEV, torch.int32)[:, 0]  # stride 2
    assert strided.stride() == (2,)
    check(q, k, v, k_ref, v_ref, lens.to(DEV), num_splits=2)  # contiguous, as a baseline
    out, lse = check(q, k, v, k_ref, v_ref, strided, num_splits=2)
    assert torch.all(out[1] == 0) and torch.all(lse[1] == float("-inf"))  # length 0: no key
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens, 4, gen=gen)
    col_major = table.t().contiguous().t()  # (B, max_pages) with strides (1, B)
    assert col_major.stride(0) == 1 and table.shape[1] > 1
    for t in (col_major, table.long()[:, :].t().contiguous().t(), table[:, ::1]):
        check(q, k_pool.to(DEV), v_pool.to(DEV), k_ref, v_ref, strided, table=t.to(DEV),
              num_splits=2)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lens=st.lists(st.integers(0, 20), min_size=1, max_size=3),
       page_size=st.sampled_from([3, 4, 8]), step=st.integers(1, 3), int64=st.booleans(),
       col_major=st.booleans(), seed=st.integers(0, 2**16))
def test_any_strides_of_the_index_tensors_read_right(lens, page_size, step, int64, col_major,
                                                     seed):
    """Lengths and tables as views with any strides and either integer dtype: the answer is the
    one of contiguous int32 copies."""
    gen = torch.Generator().manual_seed(seed)
    B = len(lens)
    q, _, _, k_ref, v_ref, _ = make(B, 2, 1, 1, 20, 16, gen, torch.float32, lens=[20] * B)
    lens_t = torch.tensor(lens)
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens_t, page_size, gen=gen)
    dtype = torch.int64 if int64 else torch.int32
    spread = torch.zeros(B * step, dtype=dtype)
    spread[::step] = lens_t  # lengths every step-th element: stride step
    view = spread[::step]
    tbl = table.to(dtype)
    tbl = tbl.t().contiguous().t() if col_major else tbl
    pools = k_pool.to(DEV), v_pool.to(DEV)
    got = decode_attention(q, *pools, cache_seqlens=view.to(DEV), block_table=tbl.to(DEV),
                           num_splits=2)
    want = decode_attention(q, *pools, cache_seqlens=lens_t.int().to(DEV),
                            block_table=table.int().contiguous().to(DEV), num_splits=2)
    assert torch.equal(got, want)
    assert relative_error(got, reference(q, k_ref, v_ref, lens_t)[0]) < 1e-5


def test_int64_lengths_past_int32_are_refused_before_the_cast(gen):
    q, k, v, *_ = make(2, 2, 2, 1, 8, 16, gen)
    for big in (2**31, 2**32 + 3, 2**40):  # 2**32 + 3 would wrap to 3, a valid length
        lens = torch.tensor([big, 3], dtype=torch.int64, device=DEV)
        with pytest.raises(ValueError, match="cache_seqlens"):
            decode_attention(q, k, v, cache_seqlens=lens)
    k_pool, v_pool, table = paged_from_contiguous(k.cpu(), v.cpu(), [8, 8], 4)
    bad = table.long()
    bad[0, 0] = 2**32  # would wrap to page 0
    with pytest.raises(ValueError, match=r"block_table\[0, 0\]"):
        decode_attention(q, k_pool.to(DEV), v_pool.to(DEV), block_table=bad.to(DEV),
                         cache_seqlens=torch.tensor([8, 8], device=DEV))


def test_all_minus_inf_scores_give_zeros_and_minus_inf_lse(gen):
    """A query whose every score is -inf (here through a -inf in q) sees no key, as in SDPA."""
    q, k, v, k_ref, v_ref, lens = make(2, 2, 2, 1, 20, 16, gen, torch.float32, lens=[20, 20])
    k, k_ref = k.abs() + 0.5, k_ref.abs() + 0.5
    q[0, 1, 0, 0] = float("-inf")
    for paged in (False, True):
        table = None
        kc, vc = k, v
        if paged:
            kp, vp, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), 8, gen=gen)
            kc, vc, table = kp.to(DEV), vp.to(DEV), table.to(DEV)
        out, lse = decode_attention(q, kc, vc, cache_seqlens=lens, block_table=table,
                                    num_splits=2, return_lse=True)
        assert torch.all(out[0, 1] == 0) and lse[0, 1, 0] == float("-inf")
        want = SDPA(q.cpu(), k_ref, v_ref)
        assert torch.equal(want[0, 1], out[0, 1].cpu())
        assert relative_error(out[1], want[1]) < 1e-5


def test_large_scores_stay_finite(gen):
    q, k, v, k_ref, v_ref, lens = make(1, 2, 2, 1, 40, 16, gen, torch.float32, lens=[40])
    q = q * 30
    out, lse = decode_attention(q, k * 30, v, cache_seqlens=lens, num_splits=3,
                                return_lse=True)
    ref_out, ref_lse = reference(q, k_ref * 30, v_ref, lens)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert relative_error(out, ref_out) < 1e-3 and relative_error(lse, ref_lse) < 1e-5


def test_nan_in_a_visible_key_reaches_the_output_like_sdpa(gen):
    q, k, v, k_ref, v_ref, lens = make(2, 2, 2, 1, 40, 16, gen, torch.float32, lens=[40, 25])
    k[0, 1, 7, 3] = NAN  # sequence 0, head 1: every split's merge must carry it
    out = decode_attention(q, k, v, cache_seqlens=lens, num_splits=3)
    assert torch.isnan(out[0, 1]).all()
    assert not torch.isnan(out[0, 0]).any() and not torch.isnan(out[1]).any()


def test_no_keys_no_queries_no_batch(gen):
    q, k, v, *_ = make(2, 2, 2, 3, 0, 16, gen, lens=[0, 0])
    out, lse = decode_attention(q, k, v, return_lse=True)
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))
    assert torch.equal(out.cpu(), SDPA(q.cpu().float(), k.cpu().float(), v.cpu().float()).half())
    q, k, v, *_ = make(2, 2, 2, 0, 7, 16, gen)
    assert decode_attention(q, k, v).shape == (2, 2, 0, 16)
    q, k, v, *_ = make(0, 2, 2, 1, 7, 16, gen, lens=[])
    out, lse = decode_attention(q, k, v, return_lse=True)
    assert out.shape == (0, 2, 1, 16) and lse.shape == (0, 2, 1)


def test_bad_inputs_say_what_to_pass(gen):
    q, k, v, *_ = make(2, 4, 2, 1, 8, 16, gen)
    lens = torch.tensor([8, 3], device=DEV)
    da = decode_attention
    with pytest.raises(ValueError, match="4 dimensions"):
        da(q[0], k, v)
    with pytest.raises(TypeError, match="floating-point"):
        da(q.int(), k, v)
    with pytest.raises(TypeError, match="float64"):
        da(q.double(), k.double(), v.double())
    with pytest.raises(TypeError, match="one dtype"):
        da(q, k.float(), v)
    with pytest.raises(ValueError, match="one shape"):
        da(q, k, v[:, :, :5])
    with pytest.raises(ValueError, match="multiple of the caches"):
        da(q[:, :3], k, v)
    with pytest.raises(ValueError, match="head dim"):
        da(q[..., :8], k, v)
    with pytest.raises(ValueError, match="not supported"):
        da(q[..., :12], k[..., :12], v[..., :12])
    with pytest.raises(ValueError, match="one cache per sequence"):
        da(q, k[:1], v[:1])
    with pytest.raises(TypeError, match="int32 or int64"):
        da(q, k, v, cache_seqlens=lens.float())
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        da(q, k, v, cache_seqlens=lens[:1])
    with pytest.raises(ValueError, match="at most the cache length 8"):
        da(q, k, v, cache_seqlens=lens + 1)
    with pytest.raises(ValueError, match=">= 0"):
        da(q, k, v, cache_seqlens=lens - 4)
    with pytest.raises(ValueError, match="num_splits"):
        da(q, k, v, num_splits=0)
    with pytest.raises(TypeError, match="scale"):
        da(q, k, v, scale="0.5")
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="scale must be a finite number"):
            da(q, k, v, scale=bad)
    with pytest.raises(TypeError, match="num_splits"):
        da(q, k, v, num_splits=2.0)
    with pytest.raises(TypeError, match="num_splits"):
        da(q, k, v, num_splits=True)
    with pytest.raises(TypeError, match="return_lse"):
        da(q, k, v, return_lse=None)
    with pytest.raises(TypeError, match="config must be a DecodeConfig"):
        da(q, k, v, config=(16, 4, 1))
    with pytest.raises(ValueError, match="config.block_n must be a power of two >= 16"):
        da(q, k, v, config=DecodeConfig(24, 4, 1))
    with pytest.raises(ValueError, match="config.num_warps"):
        da(q, k, v, config=DecodeConfig(16, 0, 1))
    with pytest.raises(ValueError, match="config.num_stages"):
        da(q, k, v, config=DecodeConfig(16, 4, 0))
    with pytest.raises(TypeError, match="torch reference"):
        da(q.double(), k.double(), v.double())


def test_bad_block_tables_say_what_is_wrong(gen):
    q, _, _, k_ref, v_ref, _ = make(2, 2, 2, 1, 20, 16, gen, lens=[20, 20])
    lens = torch.tensor([20, 9])
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens, 8, num_pages=6, gen=gen)
    k_pool, v_pool, table = k_pool.to(DEV), v_pool.to(DEV), table.to(DEV)
    da = decode_attention
    lens = lens.to(DEV)
    assert table[1, 2] == -1  # sequence 1 needs 2 pages: the third entry is never read
    da(q, k_pool, v_pool, cache_seqlens=lens, block_table=table)
    bad = table.clone()
    bad[1, 1] = 6
    with pytest.raises(ValueError, match=r"block_table\[1, 1\] = 6 points outside the pool of 6"):
        da(q, k_pool, v_pool, cache_seqlens=lens, block_table=bad)
    with pytest.raises(ValueError, match="the block_table has 3 columns"):
        da(q, k_pool, v_pool, cache_seqlens=lens + 5, block_table=table)
    with pytest.raises(TypeError, match="int32 or int64"):
        da(q, k_pool, v_pool, cache_seqlens=lens, block_table=table.float())
    with pytest.raises(ValueError, match="2 dimensions"):
        da(q, k_pool, v_pool, cache_seqlens=lens, block_table=table[0])
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        da(q, k_pool, v_pool, cache_seqlens=lens, block_table=table[:1])
    with pytest.raises(ValueError, match="multiple of the caches"):
        da(q, k_pool[:, :, :1].expand(-1, -1, 3, -1), v_pool[:, :, :1].expand(-1, -1, 3, -1),
           cache_seqlens=lens, block_table=table)


def test_decode_mask_is_bottom_right_aligned():
    m = decode_mask(torch.tensor([4, 6]), Lq=3, S=6)[:, 0].int()
    assert m[0].tolist() == [[1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    assert m[1].tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    # Lq = S: the causal mask of scaled_dot_product_attention
    assert torch.equal(decode_mask(torch.tensor([5]), 5, 5)[0, 0],
                       torch.ones(5, 5, dtype=torch.bool).tril())


def test_choose_num_splits_fills_the_gpu_within_bounds():
    assert choose_num_splits(32, 2048, 132) == 8  # 256 programs <= 2 x 132: one wave
    assert choose_num_splits(256, 2048, 132) == 1  # B = 8: every SM has a program already
    assert choose_num_splits(100, 2048, 132) == 2
    assert choose_num_splits(512, 2048, 132) == 1
    assert choose_num_splits(32, 3, 132) == 3  # no more splits than key blocks
    assert choose_num_splits(1, 10_000, 132) == decode.MAX_SPLITS
    assert choose_num_splits(32, 0, 132) == 1
    for programs in range(1, 300, 7):
        s = choose_num_splits(programs, 10_000, 132)
        if programs >= 132:
            assert s == 1
        else:
            assert programs * s <= 2 * 132  # one wave
            assert programs * (s + 1) > 2 * 132 or s == decode.MAX_SPLITS


def test_configs_and_launch_list():
    from teachkit.kernels.compile_check import decode_launch_configs

    cfg = decode.decode_config(128, torch.float16, (9, 0))
    assert 2 * cfg.block_n * 128 * 2 == 32 * 1024
    assert decode.decode_config(16, torch.float16, (8, 0)).block_n == 128
    # an unsplit grid of one or two programs an SM takes 64 KB iterations where measured
    # (sm_90), paged or not; the usual ones elsewhere and otherwise
    for paged in (False, True):
        for per_sm, block_n in ((None, 64), (0.25, 64), (1, 128), (2, 128), (2.9, 64), (8, 64)):
            cfg = decode.decode_config(128, torch.float16, (9, 0), paged=paged,
                                       programs_per_sm=per_sm)
            assert (cfg.block_n, cfg.num_stages) == (block_n, 2), (paged, per_sm)
    assert decode.decode_config(128, torch.float16, (8, 9), paged=True, programs_per_sm=2) == \
        decode.decode_config(128, torch.float16, (8, 9))
    assert decode.decode_config(256, torch.float32, (7, 5)).block_n == 16
    names = [c.name for c in decode_launch_configs()]
    assert len(names) == len(set(names))
    assert any("page=16" in n for n in names) and any("merge" in n for n in names)
    assert any("one launch" in n for n in names)


ONE_LAUNCH = decode.DecodeConfig(*decode.decode_config(
    16, torch.float16, None if not teachkit.ON_GPU else torch.cuda.get_device_capability())[:3],
    one_launch=True)


@pytest.mark.parametrize("dtype", list(RTOL))
@pytest.mark.parametrize("Lq,splits", [(1, 3), (3, 8), (2, 1)])
def test_one_launch_merges_in_the_split_kernel(dtype, Lq, splits, gen):
    """The last split of each row block merges; lengths full, empty and short leave splits with
    nothing to add; one split needs no merge at all. The same result as the merge kernel's, and
    every counter is back at zero after the call."""
    q, k, v, k_ref, v_ref, lens = make(3, 4, 2, Lq, 45, 16, gen, dtype, lens=[45, 0, 30])
    one, lse_one = check(q, k, v, k_ref, v_ref, lens, num_splits=splits, config=ONE_LAUNCH)
    two, lse_two = decode_attention(q, k, v, cache_seqlens=lens, num_splits=splits,
                                    config=ONE_LAUNCH._replace(one_launch=False),
                                    return_lse=True)
    # the same rule, summed in another order on a GPU
    assert relative_error(one, two) < RTOL[dtype] and relative_error(lse_one, lse_two) < 1e-6
    assert not decode.merge_counters(1, q.device).any()


def test_one_launch_paged_grouped_and_nan(gen):
    q, k, v, k_ref, v_ref, lens = make(3, 8, 2, 1, 53, 16, gen, torch.float32)
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), 5, num_pages=40,
                                                  gen=gen, fill=NAN)
    check(q, k_pool.to(DEV), v_pool.to(DEV), k_ref, v_ref, lens, table.to(DEV), num_splits=4,
          config=ONE_LAUNCH)
    k[0, 1, 7, 3] = NAN  # a visible NaN reaches its rows through the in-kernel merge too
    out = decode_attention(q, k, v, cache_seqlens=lens, num_splits=3, config=ONE_LAUNCH)
    assert torch.isnan(out[0, 4:8]).all() and not torch.isnan(out[0, :4]).any()
    assert not decode.merge_counters(1, q.device).any()


def test_merge_counters_grow_and_stay_zero():
    small = decode.merge_counters(10, DEV)
    assert small.dtype == torch.int32 and small.numel() >= 10 and not small.any()
    assert decode.merge_counters(5, DEV) is small  # kept, not made again
    big = decode.merge_counters(small.numel() + 1, DEV)
    assert big.numel() > small.numel() and not big.any()
    with pytest.raises(TypeError, match="config.one_launch"):
        q, k, v, *_ = make(1, 2, 2, 1, 8, 16, torch.Generator().manual_seed(0))
        decode_attention(q, k, v, config=ONE_LAUNCH._replace(one_launch="yes"))


@pytest.mark.skipif(not teachkit.ON_GPU, reason="streams need a GPU")
def test_merge_counters_are_kept_per_stream():
    here = decode.merge_counters(8, DEV)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert decode.merge_counters(8, DEV) is not here
    assert decode.merge_counters(8, DEV) is here


def test_the_default_merges_in_one_launch(gen):
    """With no config, the split kernel merges: the merge kernel never runs."""
    assert DecodeConfig(64, 4, 2).one_launch
    q, k, v, k_ref, v_ref, lens = make(2, 4, 2, 1, 40, 16, gen, torch.float32, lens=[40, 7])
    kernel = decode.decode_merge_kernel
    own_run = vars(kernel).get("run")

    def refuse(*args, **kwargs):
        raise AssertionError("the merge kernel was launched")

    kernel.run = refuse
    try:
        check(q, k, v, k_ref, v_ref, lens.to(DEV), num_splits=3)
    finally:
        if own_run is None:
            del kernel.run
        else:
            kernel.run = own_run


@pytest.mark.skipif(not teachkit.ON_GPU, reason="the race it looks for needs a GPU")
def test_one_launch_merge_sees_every_split_under_load():
    """Many splits finishing close together, call after call: a merge that read a partial
    before it was written, or a counter left non-zero, would show as a wrong row."""
    dev = teachkit.DEVICE
    q = torch.randn(4, 32, 1, 128, device=dev, dtype=torch.float16)
    k, v = (torch.randn(4, 8, 8192, 128, device=dev, dtype=torch.float16) for _ in range(2))
    lens = torch.tensor([8192, 5000, 1, 77], device=dev, dtype=torch.int32)
    config = decode.decode_config(128, torch.float16, torch.cuda.get_device_capability())
    want = decode_attention(q, k, v, cache_seqlens=lens, num_splits=64,
                            config=config._replace(one_launch=False))  # the merge kernel's
    config = config._replace(one_launch=True)
    for _ in range(200):
        got = decode_attention(q, k, v, cache_seqlens=lens, num_splits=64, config=config,
                               check_values=False)
        assert relative_error(got, want) < 1e-3
    assert not decode.merge_counters(1, dev).any()


@pytest.mark.skipif(not teachkit.ON_GPU, reason="CUDA graphs need a GPU")
def test_a_decoding_step_replays_from_a_cuda_graph():
    dev = teachkit.DEVICE
    q = torch.randn(2, 8, 1, 64, device=dev, dtype=torch.float16)
    k, v = (torch.randn(2, 4, 1000, 64, device=dev, dtype=torch.float16) for _ in range(2))
    lens = torch.tensor([1000, 517], device=dev, dtype=torch.int32)
    decode_attention(q, k, v, cache_seqlens=lens)  # compile outside the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        decode_attention(q, k, v, cache_seqlens=lens, check_values=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode_attention(q, k, v, cache_seqlens=lens, check_values=False)
    q.copy_(torch.randn_like(q))  # the next step: new queries, one more token for sequence 1
    lens[1] += 1
    graph.replay()
    torch.cuda.synchronize()
    # the capture took the launch for replays: the merge kernel after the splits
    replays, splits = decode.default_launch(2, 8, 64, 1000, torch.float16, kv_heads=4,
                                            captured=True)
    assert not replays.one_launch
    assert torch.equal(out, decode_attention(q, k, v, cache_seqlens=lens, config=replays,
                                             num_splits=splits))


def captured_call(call):
    """``call()`` captured into a CUDA graph on a side stream (as capture needs), and nothing
    else run: the graph and what the call returned, which each replay writes again."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        out = call()
    torch.cuda.current_stream().wait_stream(side)
    return graph, out


@pytest.mark.skipif(not teachkit.ON_GPU, reason="CUDA graphs need a GPU")
def test_a_captured_call_launches_the_merge_kernel_and_a_plain_one_does_not():
    dev = teachkit.DEVICE
    q = torch.randn(1, 8, 1, 128, device=dev, dtype=torch.float16)
    k, v = (torch.randn(1, 8, 4096, 128, device=dev, dtype=torch.float16) for _ in range(2))
    merge = decode.decode_merge_kernel.run
    decode.DECODE_REPLAYS.clear()  # every launch counted: none made again by a kept call
    launches = merge.hits + merge.misses
    want = decode_attention(q, k, v)  # one launch: the split kernel merges
    assert merge.hits + merge.misses == launches
    graph, out = captured_call(lambda: decode_attention(q, k, v, check_values=False))
    assert merge.hits + merge.misses == launches + 1
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out, want) < 1e-3


@pytest.mark.skipif(not teachkit.ON_GPU, reason="CUDA graphs need a GPU")
def test_replays_of_a_captured_merge_read_every_partial_of_new_inputs():
    """A captured split call, replayed on new contents of its inputs each time: its merge
    kernel (a programmatic dependent launch on sm_90, waiting for the split kernel's grid)
    must see each replay's partials, not the last replay's."""
    dev = teachkit.DEVICE
    gen = torch.Generator(device=dev).manual_seed(5)
    q = torch.empty(1, 32, 1, 64, device=dev, dtype=torch.float16)
    k, v = (torch.empty(1, 32, 16384, 64, device=dev, dtype=torch.float16) for _ in range(2))
    for t in (q, k, v):
        t.normal_(generator=gen)
    decode_attention(q, k, v, check_values=False)  # compile outside the capture
    graph, out = captured_call(lambda: decode_attention(q, k, v, check_values=False))
    for _ in range(20):
        for t in (q, k, v):
            t.normal_(generator=gen)
        graph.replay()
        want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
        assert relative_error(out, want) < 2e-3


def test_a_captured_split_call_merges_as_a_dependent_launch_on_sm_90_only():
    """The merge kernel of a captured split call is a programmatic dependent launch on
    ``decode.DEPENDENT_MERGE``'s GPU classes (sm_90); a plain call merges in one launch and an
    unsplit one has no merge (the plan is pure Python)."""
    dev = torch.device(DEV)
    for capability, dependent in (((9, 0), True), ((8, 0), False), ((8, 9), False),
                                  ((7, 5), False), ((10, 0), False)):
        with planned_on(capability):
            def plan(captured, splits=None):
                return decode._launch_plan(1, 32, 1, 128, 32, torch.float16, dev, 16384,
                                           splits, None, 0, captured)

            captured, plain, unsplit = plan(True), plan(False), plan(True, 1)
        assert captured.num_splits > 1 and not captured.one_launch, capability
        assert captured.dependent_merge == dependent, capability
        assert plain.one_launch and not plain.dependent_merge, capability
        assert not unsplit.dependent_merge, capability


@contextlib.contextmanager
def planned_on(capability: tuple[int, int], sms: int = 132):
    """``decode._launch_plan`` as on a compiled GPU of ``capability`` with ``sms`` SMs (the
    plan is pure Python), its cache cleared before and after."""
    with mock.patch.object(decode, "INTERPRETED", False), \
            mock.patch.object(decode, "compute_capability", lambda device: capability), \
            mock.patch.object(decode, "sm_count", lambda device=None: sms):
        decode.forget_plans()
        try:
            yield
        finally:
            decode.forget_plans()


@contextlib.contextmanager
def rule_replaced(name: str, value: object):
    """``decode``'s per-GPU-class table ``name`` (such as ``"ENTRY_GRID"``) replaced by
    ``value`` while the block runs, the plans' cache cleared before and after (a plan made
    either side would otherwise be kept)."""
    with mock.patch.object(decode, name, value):
        decode.forget_plans()
        try:
            yield
        finally:
            decode.forget_plans()


def test_a_paged_call_plans_its_tiles_and_splits_for_the_programs():
    """On sm_90 a split call whose ranges hold four 128-key tiles takes them, contiguous (plain
    or captured) or paged in one launch, and aims for 2 programs an SM; a paged split call that
    merges with the merge kernel aims for 4 where it reads its table entry by entry, 2 where it
    holds its table row (``HELD_SPLIT_WAVES``), and halves its tiles where a range would hold
    only one. A paged call in one launch aims for 2 whatever its tiles. An unsplit grid of one or
    two programs an SM takes 128-key tiles, contiguous (paged reading its entries, it splits:
    ``PAGED_ENTRY_WAVES``, or runs by ``ENTRY_GRID``) (pages of 16; planned for an H100's 132
    SMs; the plan is pure Python)."""
    dev = torch.device(DEV)
    with planned_on((9, 0)):
        def plan(B, paged, S=16384, captured=False):
            return decode._launch_plan(B, 32, 1, 128, 32, torch.float16, dev, S, None,
                                       None, 16 if paged else 0, captured)

        # 8 ranges of 2048 keys, 128 at a time, plain or captured, paged in one launch
        assert plan(1, False).config == decode.DecodeConfig(128, 4, 2, one_launch=True)
        assert plan(1, False, captured=True).config == decode.DecodeConfig(128, 4, 2, False)
        assert plan(1, False).num_splits == plan(1, True).num_splits == 8
        assert plan(1, True).config == decode.DecodeConfig(128, 4, 2, one_launch=True)
        assert decode.default_config(1, 32, 128, 16384, torch.float16, dev,
                                     captured=True) == plan(1, False, captured=True).config
        # paged (entry by entry) and captured: 8 ranges of the 64 KB tiles (ENTRY_GRID); without
        # that rule, 64 keys at a time, 16 ranges (4 programs an SM)
        paged_captured = plan(1, True, captured=True)
        assert (paged_captured.num_splits, paged_captured.config.block_n) == (8, 128)
        with rule_replaced("ENTRY_GRID", {}):
            paged_captured = plan(1, True, captured=True)
            assert (paged_captured.num_splits, paged_captured.config.block_n) == (16, 64)
        # one launch: 2 programs an SM, as contiguous: 8 ranges of 128 keys
        assert (plan(1, True, 1024).num_splits, plan(1, True, 1024).config.block_n) == (8, 64)
        # captured, the table row held (64 pages): 2 programs an SM, 8 ranges of 128 keys
        short_captured = plan(1, True, 1024, captured=True)
        assert short_captured.table_tile == 64
        assert (short_captured.num_splits, short_captured.config.block_n) == (8, 64)
        # aiming for 4 instead: 16 ranges of 64 keys, each two iterations of 32
        with rule_replaced("HELD_SPLIT_WAVES", {}):
            short_four = plan(1, True, 1024, captured=True)
            assert (short_four.num_splits, short_four.config.block_n) == (16, 32)
        assert plan(2, True, 1024, captured=True).config.block_n == 64  # 128 keys a range
        for B, splits, block_n in ((1, 8, 64), (2, 4, 64), (4, 1, 128)):
            short = plan(B, False, 1024)
            assert (short.num_splits, short.config.block_n) == (splits, block_n)
        # paged, entry by entry, 1.2 programs an SM: 4 ranges of the usual tiles (up to 5);
        # 1.45-1.94: unsplit, 64 KB tiles in 2 stages (ENTRY_GRID)
        assert (plan(5, True).num_splits, plan(5, True).config.block_n) == (4, 64)
        for B in (6, 7, 8):
            assert (plan(B, True).num_splits, plan(B, True).config[:3]) == (1, (128, 4, 2)), B
        assert plan(8, True).config == decode.DecodeConfig(128, 4, 2, one_launch=True)
        assert (plan(8, False).num_splits, plan(8, False).config.block_n) == (1, 128)
        # contiguous, 3.88 programs an SM: one uneven wave of the usual tiles, so 128 keys
        # (UNEVEN_WAVE_TILES)
        assert plan(16, False).config.block_n == 128
        # 16 sequences reading entries fill one wave of the usual tiles 0.78 full: 3 ranges of
        # 128 keys fill theirs 0.97 (ENTRIES_FILL_ONE_WAVE)
        assert (plan(16, True).num_splits, plan(16, True).config.block_n) == (3, 128)
        assert (plan(16, True, 4096).num_splits, plan(16, True, 4096).config.block_n) == (1, 64)


def test_wide_and_split_tiles_take_three_stages_of_short_rows():
    """On sm_90 a grid of one or two programs an SM, and a split call with long ranges, load
    64 KB in 2 stages where a row of K is 256 bytes or more (D = 128 in 16 bits, D = 64 in
    float32, D = 256), and 128 keys in 3 stages where it is 128 bytes and contiguous, or paged
    with the table row held (D = 64 in 16 bits: 64 KB would be 256 keys); paged reading its
    entries, or on sm_80, as before (132 SMs: 5 sequences of 32 heads are 1.2 an SM; 2k tokens,
    too few for ``LAST_WAVE_GRID`` to split them)."""
    dev = torch.device(DEV)

    def config(D, dtype=torch.float16, page_size=0, S=2048, B=5):
        plan = decode._launch_plan(B, 32, 1, D, 32, dtype, dev, S, None, None, page_size)
        assert plan.num_splits == 1
        return plan.config[:3]

    with planned_on((9, 0)):
        assert config(128, B=8) == (128, 4, 2)  # 1.9 an SM (5: SHORT_CACHE_TILES)
        assert config(64, torch.float32) == (128, 4, 2)
        assert config(256, torch.bfloat16) == (64, 4, 2)
        assert config(64) == config(64, torch.bfloat16) == (128, 4, 3)
        assert config(64, page_size=16) == (128, 4, 3)  # 128 pages: the row held
        # reading the entries, 128 keys in 2 stages (such a grid splits by default, with the
        # usual tiles: test_a_paged_grid_of_a_program_an_sm_reading_entries_splits)
        assert decode.decode_config(64, torch.float16, (9, 0), paged=True,
                                    programs_per_sm=1.2)[:3] == (128, 4, 2)
        assert config(32, torch.float32)[2] == 2  # 128-byte rows, but measured in 16 bits only
        for D, tiles in ((64, (128, 4, 3)), (128, (128, 4, 2))):
            for paged, captured in ((False, False), (False, True), (True, False)):
                got = decode.decode_config(D, torch.float16, (9, 0), paged, captured,
                                           keys_per_split=4096)[:3]
                assert got == (tiles if not paged else (128, 4, 2)), (D, paged, captured)
            short = decode.decode_config(D, torch.float16, (9, 0), keys_per_split=256)
            assert short.num_stages == 2, D
    with planned_on((8, 0)):
        assert config(64) == decode.decode_config(64, torch.float16, (8, 0))[:3]


def test_a_short_cache_on_a_grid_the_last_wave_rule_would_split_takes_three_stages():
    """On sm_90 a contiguous 16-bit grid of one to four thirds programs an SM at D = 128 whose
    cache is too short for ``LAST_WAVE_GRID`` to split it (under 4k tokens) runs unsplit with
    32 KB in 3 stages (``SHORT_CACHE_TILES``), plain or captured, or paged holding its row; more
    programs an SM, float32, another head dim, or sm_80 keep their tiles (132 SMs: 5 and 8
    sequences of 32 heads are 1.2 and 1.9 an SM)."""
    dev = torch.device(DEV)

    def config(B, S, D=128, dtype=torch.float16, page_size=0, captured=False):
        plan = decode._launch_plan(B, 32, 1, D, 32, dtype, dev, S, None, None, page_size,
                                   captured)
        assert plan.num_splits == 1, (B, S, D)
        return plan.config[:3]

    with planned_on((9, 0)):
        for S in (1024, 2048):
            for dtype, captured in ((torch.float16, False), (torch.bfloat16, True)):
                assert config(5, S, dtype=dtype, captured=captured) == (64, 4, 3), (S, dtype)
            assert config(5, S, page_size=16) == (64, 4, 3)  # the row held: as contiguous
            assert config(8, S) == (128, 4, 2)
        assert decode._launch_plan(5, 32, 1, 128, 32, torch.float16, dev, 4096, None, None,
                                   0).num_splits > 1  # from 4k tokens: ranges
        assert config(5, 1024, dtype=torch.float32) == (64, 4, 2)  # 64 KB of float32 rows
        assert config(5, 1024, D=256) == (64, 4, 2)
    with planned_on((8, 0)):
        assert config(5, 1024) == decode.decode_config(128, torch.float16, (8, 0))[:3]


def test_a_captured_split_call_of_128_byte_rows_aims_for_four_programs_an_sm():
    """On sm_90 a contiguous 16-bit call at D = 64 that splits the keys and is being captured
    (the merge kernel) aims for four programs an SM and loads 32 KB (128 keys) in 2 stages
    where a range holds four such iterations, else 16 KB (``SHORT_ROW_SPLITS``), also with
    ``num_splits`` given; merging in one launch, at D = 128, in float32 or paged it splits as
    before (paged, entry by entry, as ``ENTRY_GRID`` plans it)."""
    dev = torch.device(DEV)

    def plan(B, S, D=64, dtype=torch.float16, page_size=0, captured=True, num_splits=None):
        return decode._launch_plan(B, 32, 1, D, 32, dtype, dev, S, num_splits, None,
                                   page_size, captured)

    with planned_on((9, 0)):
        for B, S, splits, block_n in ((1, 1024, 16, 64), (1, 4096, 16, 64), (1, 16384, 16, 128),
                                      (1, 65536, 16, 128), (2, 1024, 8, 64), (2, 4096, 8, 128),
                                      (2, 16384, 8, 128)):
            got = plan(B, S)
            assert (got.num_splits, got.config, got.one_launch) == (
                splits, decode.DecodeConfig(block_n, 4, 2, one_launch=False), False), (B, S)
            assert plan(B, S, dtype=torch.bfloat16) == got
            assert plan(B, S, captured=False).num_splits == splits // 2  # one launch: two an SM
        assert plan(1, 16384, num_splits=64).config.block_n == 64  # ranges of 256 keys
        assert plan(1, 16384, D=128).num_splits == 8
        assert plan(1, 16384, dtype=torch.float32).num_splits == 8
        # paged, entry by entry: ENTRY_GRID's 64 KB tiles; without that rule, as before
        assert plan(1, 16384, page_size=16).config.block_n == 256
        with rule_replaced("ENTRY_GRID", {}):
            assert plan(1, 16384, page_size=16).config.block_n == 128
    with planned_on((8, 0)):
        assert plan(1, 16384).num_splits == 8


def test_only_a_measured_gpu_halves_the_tiles_of_short_captured_paged_ranges():
    """The halving (``paged_range_tiles``) is measured on sm_90 only; an sm_80 GPU keeps its
    tiles for a captured paged call of one sequence of 512 tokens (8 ranges of 64 keys)."""
    dev = torch.device(DEV)
    for capability, block_n in (((9, 0), 32), ((8, 0), 64)):
        with planned_on(capability):
            plan = decode._launch_plan(1, 32, 1, 128, 32, torch.float16, dev, 512, None,
                                       None, 16, True)
            assert plan.num_splits == 8 and plan.config.block_n == block_n, capability


def test_a_nearly_full_contiguous_grid_does_not_split_on_sm_90():
    """From ``unsplit_from`` (0.7) programs an SM, a contiguous 16-bit call on sm_90 runs
    unsplit with three 64 KB stages at D = 64, 128 and 256 (256, 128 and 64 keys), plain or
    captured, and so does a paged one whose programs hold their table row; below, or paged
    with a table too wide to hold, or float32, or at another head dim, or on another GPU class,
    it splits as before; a given ``num_splits`` is kept, with the tiles of its ranges (132 SMs:
    batches 3 and 4 of 32 heads are 0.73 and 0.97 programs an SM)."""
    dev = torch.device(DEV)

    def plan(B, dtype=torch.float16, page_size=0, captured=False, num_splits=None, H_kv=32,
             D=128, S=4096):
        return decode._launch_plan(B, 32, 1, D, H_kv, dtype, dev, S, num_splits, None,
                                   page_size, captured)

    with planned_on((9, 0)):
        for B, dtype, captured in ((3, torch.float16, False), (4, torch.bfloat16, True)):
            got = plan(B, dtype, captured=captured)
            assert (got.num_splits, got.config[:3]) == (1, (128, 4, 3)), (B, dtype)
        assert plan(12, H_kv=8).num_splits == 1  # grouped-query heads: 96 programs
        assert plan(2).num_splits == 4  # 0.48 an SM: splits
        for B, D, block_n in ((3, 128, 128), (4, 64, 256)):  # 256 pages of 16: held
            held = plan(B, page_size=16, D=D, captured=True)
            assert (held.num_splits, held.config[:3], held.table_tile) == (
                1, (block_n, 4, 3), 256), (B, D)
        assert plan(4, page_size=16, S=8192).num_splits > 1  # 512 pages: entries
        assert plan(4, page_size=16, S=8192).table_tile == 0
        assert plan(4, torch.float32).num_splits > 1
        for D, block_n in ((64, 256), (256, 64)):
            got = plan(3, D=D, captured=True)
            assert (got.num_splits, got.config[:3]) == (1, (block_n, 4, 3)), D
        assert plan(4, D=32).num_splits == 2  # not measured at D = 32
        given = plan(4, num_splits=2)
        assert (given.num_splits, given.config.num_stages) == (2, 2)
        assert decode.default_config(4, 32, 128, 4096, torch.float16, dev).num_stages == 3
    with planned_on((8, 0)):
        assert plan(4).num_splits == 2


def test_a_nearly_full_grid_on_a_short_cache_takes_at_most_128_keys_a_tile():
    """On sm_90 a nearly full unsplit grid at D = 64 (three or four sequences of 32 heads)
    takes 256-key tiles from ``NEARLY_FULL_MIN_BLOCKS`` such tiles of cache (2k tokens) and
    128-key ones in 3 stages below, contiguous or paged with its table row held, plain or
    captured; D = 128 and 256 keep their tiles, which hold fewer keys than that."""
    dev = torch.device(DEV)

    def tiles(B, S, D=64, page_size=0, captured=False):
        plan = decode._launch_plan(B, 32, 1, D, 32, torch.float16, dev, S, None, None,
                                   page_size, captured)
        assert plan.num_splits == 1, (B, S, D, page_size)
        return plan.config[:3]

    assert decode.NEARLY_FULL_MIN_BLOCKS * decode.NEARLY_FULL_MOST_KEYS == 2048
    with planned_on((9, 0)):
        for B in (3, 4):
            for captured in (False, True):
                assert tiles(B, 1024, captured=captured) == (128, 4, 3), (B, captured)
                assert tiles(B, 2047, captured=captured) == (128, 4, 3), (B, captured)
                assert tiles(B, 2048, captured=captured) == (256, 4, 3), (B, captured)
            assert tiles(B, 1024, page_size=16) == (128, 4, 3), B  # 64 pages: held
            assert tiles(B, 4096, page_size=16) == (256, 4, 3), B
            assert tiles(B, 1024, D=128) == (128, 4, 3), B
            assert tiles(B, 1024, D=256) == (64, 4, 3), B
        assert decode.default_config(4, 32, 64, 1024, torch.float16, dev).block_n == 128


def test_the_masked_loop_is_not_pipelined_on_a_grid_of_few_programs_an_sm():
    """On sm_90 (132 SMs) a grid of at most ``TAIL_MOST_PER_SM`` = 2 programs an SM runs the
    split kernel's masked loop unpipelined (``tail_stages`` 1): one sequence of 32 heads split
    8 ways (1.9 an SM), four and eight unsplit, paged alike, a forced config too; sixteen
    sequences (3.9) and one sequence at D = 64 captured, split 16 ways (3.9), keep it pipelined
    (``None``), and so does every call on a GPU class not measured."""
    dev = torch.device(DEV)

    def stages(B, D=128, S=1024, page_size=0, captured=False, config=None):
        return decode._launch_plan(B, 32, 1, D, 32, torch.float16, dev, S, None, config,
                                   page_size, captured).tail_stages

    with planned_on((9, 0)):
        assert decode.TAIL_LOOP_STAGES[90] == 1 and decode.TAIL_MOST_PER_SM == 2
        for B in (1, 4, 8):
            assert stages(B) == 1, B
            assert stages(B, page_size=16) == 1, B
        assert stages(1, D=64) == 1
        assert stages(4, config=decode.DecodeConfig(64, 4, 2)) == 1
        assert stages(16) is None
        assert stages(1, D=64, captured=True) is None
        assert stages(8, D=64) == 1
    with planned_on((8, 0)):
        assert stages(1) is None and stages(4) is None


def test_a_paged_call_interleaves_its_pages_at_few_programs_an_sm():
    """On sm_90 (132 SMs) a paged call whose tiles hold several whole pages interleaves them
    where its grid has at most two programs an SM (``INTERLEAVE_PAGES_PER_SM``), held row or
    not: four sequences of 32 heads unsplit (0.97 an SM), one of 16k tokens in one launch or
    captured (8 ranges, 1.9); not sixteen (3.9), nor one split 16 ways (3.9, captured without
    ``ENTRY_GRID``), nor five of 16k tokens (4
    ranges, 4.8), nor pages as large as the tile, nor a contiguous call, nor on another GPU
    class."""
    dev = torch.device(DEV)

    def plan(B, D=64, S=4096, page_size=16, captured=True):
        return decode._launch_plan(B, 32, 1, D, 32, torch.float16, dev, S, None, None,
                                   page_size, captured)

    with planned_on((9, 0)):
        assert plan(4).interleave_pages and plan(4).num_splits == 1
        one_launch = plan(1, S=16384, captured=False)
        assert one_launch.interleave_pages and one_launch.table_tile == 0
        assert (one_launch.num_splits, one_launch.one_launch) == (8, True)
        assert not plan(5, S=16384).interleave_pages and plan(5, S=16384).num_splits == 4
        assert not plan(16, S=1024).interleave_pages
        one = plan(1, D=128, S=16384)  # entry by entry: 8 ranges (ENTRY_GRID)
        assert one.num_splits * 32 <= 2 * 132 and one.interleave_pages
        with rule_replaced("ENTRY_GRID", {}):
            one = plan(1, D=128, S=16384)  # without that rule: 16 ranges
            assert one.num_splits * 32 > 2 * 132 and not one.interleave_pages
        assert not plan(4, D=128, page_size=256).interleave_pages  # one page a tile
        assert not plan(4, page_size=0).interleave_pages
    with planned_on((8, 0)):
        assert not plan(4).interleave_pages


def test_a_paged_grid_of_a_program_an_sm_reading_entries_splits():
    """On sm_90 (132 SMs, pages of 16) a paged call reading its table entry by entry (16k
    tokens: 1024 pages) whose unsplit grid has one to two and a half programs an SM splits into
    the most ranges that keep it within five an SM (``PAGED_ENTRY_WAVES``), with the usual
    tiles, captured or in one launch, grouped-query heads counted by their cache heads; at six
    to eight sequences (1.45-1.94 an SM, ``ENTRY_GRID``) it runs unsplit with 64 KB
    tiles in 2 stages in 16 bits at D = 64 (256 keys) and 128 (128 keys) (split in float32 and
    at D = 256);
    at twelve sequences (2.9 an SM) it does not split, nor where it holds its table row (2k
    tokens), nor a contiguous call at D = 64, nor on sm_80."""
    dev = torch.device(DEV)

    def plan(B, D=64, S=16384, page_size=16, captured=True):
        return decode._launch_plan(B, 32, 1, D, 32, torch.float16, dev, S, None, None,
                                   page_size, captured)

    with planned_on((9, 0)):
        for D, block_n in ((64, 128), (128, 64)):
            for B, splits in ((5, 4), (6, 1), (7, 1), (8, 1), (9, 2), (10, 2), (12, 1)):
                for captured in (True, False):
                    got = plan(B, D, captured=captured)
                    assert got.num_splits == splits, (D, B, captured)
                    assert got.num_splits * B * 32 <= 5 * 132
                    if splits > 1:
                        assert got.config.block_n == block_n
                        assert got.one_launch == (not captured)
                for B in (6, 7, 8):
                    full = plan(B, D)
                    assert (full.config.block_n, full.config.num_stages) == (16384 // D, 2)
            assert plan(5, D, S=2048).num_splits == 1  # 128 pages: the row held
            # contiguous: unsplit at D = 64; at D = 128 its own rule splits it
            # (test_a_grid_a_little_past_a_program_an_sm_splits_to_fill_its_last_wave)
            assert plan(5, D, page_size=0).num_splits == (1 if D == 64 else 3)
        # 1.94 programs an SM in float32, or at D = 256: split, as before the rule
        for D, dtype in ((128, torch.float32), (256, torch.float16)):
            got = decode._launch_plan(8, 32, 1, D, 32, dtype, dev, 16384, None, None, 16, True)
            assert got.num_splits == 2, (D, dtype)
        # grouped-query heads count their cache heads: 20 sequences of 8 (1.2 an SM)
        grouped = decode._launch_plan(20, 32, 1, 64, 8, torch.float16, dev, 16384, None, None,
                                      16, True)
        assert grouped.num_splits == 4
    with planned_on((8, 0)):
        assert plan(5).num_splits == 1


def test_a_paged_grid_under_the_entry_grid_splits_into_it():
    """On sm_90 (132 SMs, pages of 16) a 16-bit paged call reading its table entry by entry at
    D = 64 or 128 whose unsplit grid holds fewer than 1.45 programs an SM splits into the most
    ranges that keep it within two an SM, with the 64 KB tiles of ``ENTRY_GRID`` in 2 stages,
    where that brings it to 1.45 or more: one to four sequences of 32 heads into 8, 4, 2 and 2
    (1.94, 1.94, 1.45, 1.94 an SM) in one launch, and captured (the merge kernel) where that
    lands at 1.9 or more (``ENTRY_SPLIT_CAPTURED_FROM``: not three sequences); grouped-query
    heads counted by their cache heads (16 sequences of 2: 8 ranges). Not five sequences (1.21:
    two ranges would be 2.4), nor where the ranges would hold fewer than two of those tiles
    (``PAGED_MIN_BLOCKS``), nor in float32, nor at D = 256, nor where the row is held, nor with
    ``num_splits`` given, nor on sm_80 (``entry_grid_splits``)."""
    dev = torch.device(DEV)

    def plan(B, D=64, S=16384, page_size=16, captured=True, dtype=torch.float16, H_kv=32,
             num_splits=None):
        return decode._launch_plan(B, 32, 1, D, H_kv, dtype, dev, S, num_splits, None,
                                   page_size, captured)

    def without_rule(*args, **kwargs):
        with rule_replaced("ENTRY_GRID", {}):
            return plan(*args, **kwargs)

    with planned_on((9, 0)):
        for D in (64, 128):
            for B, ranges in ((1, 8), (2, 4), (3, 2), (4, 2)):
                for S in (16384, 65536):
                    for captured in (True, False):
                        got = plan(B, D, S, captured=captured)
                        if captured and B == 3:  # 1.45 an SM: captured, as before
                            assert got == without_rule(B, D, S, captured=True), (D, S)
                            assert got.num_splits == 5 and got.config.block_n < 16384 // D
                            continue
                        assert got.num_splits == ranges, (D, B, S, captured)
                        assert got.config[:3] == (16384 // D, 4, 2), (D, B, S, captured)
                        assert got.one_launch == (not captured)
                        assert 1.45 * 132 <= ranges * B * 32 <= 2 * 132
            assert plan(5, D) == without_rule(5, D)  # 1.21 an SM: as before
            assert plan(16, D, H_kv=2).num_splits == 8  # 32 cache heads
        # 2560 tokens in pages of 8 (320 entries): 10 tiles of 256 keys, ranges of two
        # iterations at most 5, 1.2 an SM: as before; 3072 tokens: 6 ranges, 1.45 an SM, in one
        # launch (captured, under 1.9: as before)
        assert plan(1, S=2560, page_size=8) == without_rule(1, S=2560, page_size=8)
        six = plan(1, S=3072, page_size=8, captured=False)
        assert (six.num_splits, six.config.block_n) == (6, 256)
        assert plan(1, S=3072, page_size=8) == without_rule(1, S=3072, page_size=8)
        for kwargs in ({"dtype": torch.float32}, {"D": 256}, {"S": 4096}, {"num_splits": 4}):
            assert plan(1, **kwargs) == without_rule(1, **kwargs), kwargs
        assert plan(1, S=4096).table_tile  # 256 pages: the row held
    with planned_on((8, 0)):
        assert plan(1) == without_rule(1)


def test_a_grid_a_little_past_a_program_an_sm_splits_to_fill_its_last_wave():
    """On sm_90 (132 SMs) a contiguous 16-bit call at D = 128 whose unsplit grid holds one to
    four thirds programs an SM, on a cache of 4k tokens or more, splits into the ranges whose
    last wave of two programs an SM is the fullest (``LAST_WAVE_GRID``, ``last_wave_splits``):
    five sequences of 32 heads (160 programs) in 3 with the split tiles (128 keys, 2 stages),
    captured or in one launch; grouped-query heads counted by their cache heads (136 programs:
    5, 176: 3). A paged call holding its table row splits alike with the usual tiles. Not at
    1.45 an SM, nor nearly full (0.97), nor on 2k tokens, nor at D = 64, nor in float32, nor
    with programs of more than 16 query rows (8 query heads a cache head, 4 new tokens each),
    nor with ``num_splits`` given, nor on sm_80."""
    dev = torch.device(DEV)

    def plan(B, H_kv=32, S=4096, D=128, dtype=torch.float16, page_size=0, captured=False,
             num_splits=None):
        return decode._launch_plan(B, 32, 1, D, H_kv, dtype, dev, S, num_splits, None,
                                   page_size, captured)

    with planned_on((9, 0)):
        for captured in (False, True):
            for dtype in (torch.float16, torch.bfloat16):
                got = plan(5, dtype=dtype, captured=captured)
                assert (got.num_splits, got.config[:3]) == (3, (128, 4, 2)), (dtype, captured)
                assert got.one_launch == (not captured)
            held = plan(5, page_size=16, captured=captured)
            assert (held.num_splits, held.config.block_n, held.table_tile) == (3, 64, 256)
            assert held.one_launch == (not captured)
        assert decode.last_wave_splits(160, 132, 2) == 3
        assert plan(34, H_kv=4, S=65536).num_splits == 5
        assert plan(22, H_kv=8, S=16384).num_splits == 3
        for unsplit in (plan(6), plan(4), plan(5, S=2048), plan(5, D=64),
                        plan(5, dtype=torch.float32), plan(5, num_splits=1)):
            assert unsplit.num_splits == 1, unsplit
        assert plan(5, num_splits=2).num_splits == 2
        rows = decode._launch_plan(20, 64, 4, 128, 8, torch.float16, dev, 4096, None, None, 0)
        assert (rows.block_m, rows.num_splits) == (32, 1)  # 160 programs of 32 rows
        assert decode._launch_plan(20, 32, 4, 128, 8, torch.float16, dev, 4096, None, None,
                                   0).num_splits == 3  # 160 programs of 16 rows
    with planned_on((8, 0)):
        assert plan(5).num_splits == 1


def test_a_grid_of_many_programs_an_sm_takes_the_tiles_that_fill_its_last_wave():
    """On sm_90 (132 SMs) an unsplit 16-bit call at D = 128 of more than two programs an SM
    takes, of ``FULLEST_WAVE_TILES`` (contiguous: 64 keys in 2 stages, four an SM; 128 keys in
    2, two; 64 keys in 3, three), the usual first tiles while its grid fits in one wave of them
    and else those whose last wave is the fullest, the first on a tie (``fullest_wave_tiles``):
    at 12 sequences of 32 heads the usual tiles, at 14 and 16 (one wave, but more than three
    programs an SM: ``UNEVEN_WAVE_TILES``) and 18-24 and 40 128 keys, at 36 three stages, at
    26-32 and 44-48 the usual tiles again; grouped-query heads counted by their cache
    heads. Paged calls with one query head a cache head choose from their own residency (five,
    three and three), holding their row or not. Not grouped-query paged calls, nor at D = 64,
    nor in float32, nor with programs of more than 16 query rows, nor on sm_80. Planned with
    ``num_splits=1``, as the default plans a grid that ranges would not fill fuller
    (``fullest_wave_plan``: the next test)."""
    dev = torch.device(DEV)

    def tiles(B, H_kv=32, D=128, dtype=torch.float16, page_size=0, num_splits=1, Lq=1,
              H=32, S=4096):
        plan = decode._launch_plan(B, H, Lq, D, H_kv, dtype, dev, S, num_splits, None,
                                   page_size)
        assert plan.num_splits == 1
        return plan.config.block_n, plan.config.num_stages

    usual, wide, deep = (64, 2), (128, 2), (64, 3)
    with planned_on((9, 0)):
        picks = {12: usual, 14: wide, 16: wide, 18: wide, 20: wide, 22: wide, 24: wide,
                 26: usual, 28: usual, 32: usual, 36: deep, 40: wide, 44: usual, 48: usual}
        assert {B: tiles(B) for B in picks} == picks
        for B, pick in picks.items():
            assert tiles(B, dtype=torch.bfloat16) == tiles(B, S=2048, num_splits=None) == pick
        assert tiles(96, H_kv=8) == wide  # 768 programs, as 24 sequences of 32
        # one wave of four an SM, uneven from 13 sequences (3.15 an SM): 128 keys
        assert [tiles(B) for B in (13, 15)] == [wide, wide]
        assert tiles(56, H_kv=8) == wide  # 448 programs, as 14 sequences of 32
        assert tiles(66, H_kv=8) == usual  # 528 programs: four on every SM, one even wave
        assert decode.fullest_wave_tiles(768, 132, decode.FULLEST_WAVE_TILES[90][False])[:2] == (
            64 * 1024, 2)
        # paged, one query head a cache head: five programs of the usual tiles an SM, three of
        # the others; with its row held (4k tokens) or reading it entry by entry (16k)
        paged_picks = {14: usual, 18: usual, 20: usual, 22: wide, 24: wide, 36: wide, 40: usual}
        for S in (4096, 16384):
            assert {B: tiles(B, page_size=16, S=S) for B in paged_picks} == paged_picks
        assert tiles(96, H_kv=8, page_size=16) == usual  # grouped-query paged: not measured
        assert tiles(24, D=64) == (128, 2)  # D = 64: the usual 32 KB
        assert tiles(24, dtype=torch.float32) == (32, 2)
        assert tiles(96, H_kv=8, Lq=8) == usual  # 768 programs of 32 query rows
    with planned_on((8, 0)):
        assert tiles(24) == (64, 3)


def test_a_grid_of_many_programs_an_sm_splits_where_ranges_fill_its_last_wave_fuller():
    """On sm_90 a call whose unsplit grid has more than two programs an SM (16-bit, D = 128,
    caches of 4k keys or more) cuts its keys into 2 to 5 ranges where some tiles so cut fill
    their last wave more than ``WAVE_SPLIT_GAIN`` fuller than the unsplit pick does
    (``fullest_wave_plan``), and merges them with the merge kernel, launched or captured:
    contiguous, 18 sequences of 32 heads in 5 ranges of 128 keys, 20 in 2, 22 in 3 of 64 keys,
    26 in 5 of 64 keys, 28 in 5 of 128 keys, 44 in 3 of 64 keys; 24, 32, 36, 40 and 48 and the
    grids that fit one wave unsplit (16 sequences with 128 keys: ``UNEVEN_WAVE_TILES``). Paged
    (one query head a cache head), 22, 26, 32 and 44 sequences in 5 ranges and 28 in 3, of 128
    keys; reading the table entry by entry, also 11 and 12 sequences unsplit with 128 keys, 14
    in 5 ranges, 16 in 3 and 18 in 2, though their grids fit in one wave of the usual tiles.
    Not below 4k keys, nor with ``num_splits`` given, nor at D = 64, nor on sm_80."""
    dev = torch.device(DEV)

    def planned(B, page_size=0, S=4096, D=128, num_splits=None, captured=False):
        plan = decode._launch_plan(B, 32, 1, D, 32, torch.float16, dev, S, num_splits, None,
                                   page_size, captured)
        return plan.config.block_n, plan.num_splits, plan.one_launch

    with planned_on((9, 0)):
        picks = {12: (64, 1), 16: (128, 1), 18: (128, 5), 20: (128, 2), 22: (64, 3),
                 24: (128, 1), 26: (64, 5), 28: (128, 5), 32: (64, 1), 36: (64, 1),
                 40: (128, 1), 44: (64, 3), 48: (64, 1)}
        paged_picks = {18: (64, 1), 20: (64, 1), 22: (128, 5), 24: (128, 1), 26: (128, 5),
                       28: (128, 3), 32: (128, 5), 36: (128, 1), 40: (64, 1), 44: (128, 5)}
        # reading the table entry by entry (from 8k tokens), a grid within one wave of the usual
        # tiles is weighed by that wave's fill too (ENTRIES_FILL_ONE_WAVE)
        entry_picks = {**paged_picks, 11: (128, 1), 12: (128, 1), 14: (128, 5), 16: (128, 3),
                       18: (128, 2)}
        for S in (4096, 16384):
            for captured in (False, True):
                assert {B: planned(B, S=S, captured=captured)[:2] for B in picks} == picks
                want = paged_picks if S == 4096 else entry_picks
                assert {B: planned(B, 16, S, captured=captured)[:2] for B in want} == want
        assert planned(18)[2] is planned(26, 16)[2] is False  # the merge kernel
        assert decode.default_config(18, 32, 128, 4096, torch.float16).one_launch is False
        assert planned(18, S=2048)[1] == planned(18, num_splits=1)[1] == 1
        assert planned(18, num_splits=3)[1] == 3
        assert planned(18, D=64)[1] == 1
    with planned_on((8, 0)):
        assert planned(18)[1] == 1


@settings(max_examples=200, deadline=None)
@given(programs=st.integers(1, 5000), sms=st.integers(1, 200), most=st.integers(1, 6),
       tiles=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 8)),
                      min_size=1, max_size=4), one_wave=st.booleans())
def test_fullest_wave_plan_splits_only_for_a_last_wave_fuller_by_the_gain(programs, sms, most,
                                                                          tiles, one_wave):
    """``fullest_wave_plan`` keeps ``fullest_wave_tiles``'s tiles unsplit (without
    ``one_wave``: the first tiles of the fullest last wave, one wave or more) unless some tiles
    in 2 to ``most`` ranges fill their last wave more than the gain fuller; then it returns the
    fullest such last wave, with the fewest ranges and the first tiles on a tie."""
    tiles = tuple((32 * 1024 * size, stages, resident) for size, stages, resident in tiles)
    tile, ranges = decode.fullest_wave_plan(programs, sms, tiles, most, one_wave=one_wave)
    fill = [decode.last_wave_fill(programs, t[2] * sms) for t in tiles]
    unsplit = (decode.fullest_wave_tiles(programs, sms, tiles) if one_wave
               else tiles[fill.index(max(fill))])
    kept = decode.last_wave_fill(programs, unsplit[2] * sms)
    fills = {(n, i): decode.last_wave_fill(programs * n, t[2] * sms)
             for n in range(2, most + 1) for i, t in enumerate(tiles)}
    if ((one_wave and programs <= tiles[0][2] * sms) or not fills
            or max(fills.values()) <= kept + 0.03):
        assert (tile, ranges) == (unsplit, 1)
        return
    best = max(fills.values())
    first = min(k for k, fill in fills.items() if fill == best)  # fewest ranges, first tiles
    assert ranges == first[0] and tile == tiles[first[1]]
    assert 2 <= ranges <= most


def test_last_wave_fill_is_one_division_of_whole_numbers():
    """``last_wave_fill(programs, places)`` is ``programs / (places * ceil(programs /
    places))`` exactly: 1 where the waves come out whole, equal for grids that fill their waves
    alike, in (0, 1]."""
    from fractions import Fraction

    for programs in range(1, 400):
        for places in (7, 64, 132, 264):
            fill = decode.last_wave_fill(programs, places)
            exact = Fraction(programs, places * -(-programs // places))
            assert fill == float(exact) and 0 < fill <= 1
            assert (fill == 1) == (programs % places == 0)
    assert decode.last_wave_fill(768, 396) == decode.last_wave_fill(768, 264)


@settings(max_examples=200, deadline=None)
@given(programs=st.integers(1, 5000), sms=st.integers(1, 200),
       tiles=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 8)),
                      min_size=1, max_size=4))
def test_fullest_wave_tiles_keeps_the_usual_tiles_in_one_wave_else_the_fullest(programs, sms,
                                                                              tiles):
    """``fullest_wave_tiles`` returns the first (usual) tiles while the grid fits in one wave of
    them, and otherwise the first of the tiles whose last wave is the fullest."""
    tiles = tuple((32 * 1024 * size, stages, resident) for size, stages, resident in tiles)
    got = decode.fullest_wave_tiles(programs, sms, tiles)
    if programs <= tiles[0][2] * sms:
        assert got == tiles[0]
        return
    fills = [decode.last_wave_fill(programs, r * sms) for _, _, r in tiles]
    assert got == tiles[fills.index(max(fills))]


def check_contiguous_and_paged(B, S, gen, contiguous=True):
    """``B`` sequences of 32 heads (``D = 128``, fp16) against caches of ``S`` keys, planned as
    the GPU plans them: contiguous (unless not ``contiguous``) and in shuffled pages of 16, each
    against float64 attention."""
    q, k, v, k_ref, v_ref, lens = make(B, 32, 32, 1, S, 128, gen)
    if contiguous:
        check(q, k, v, k_ref, v_ref, lens)
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), 16, gen=gen)
    check(q, k_pool.to(DEV), v_pool.to(DEV), k_ref, v_ref, lens, table.to(DEV))


@pytest.mark.skipif(not teachkit.ON_GPU, reason="the GPU's own plan needs a GPU")
def test_a_grid_of_many_programs_an_sm_matches_the_reference():
    """Whatever tiles the GPU plans for a grid of about 5.8 programs an SM (128 keys in 2 stages
    on an H200), contiguous or paged with the table row held, the result matches float64
    attention."""
    sms, gen = decode.sm_count(), torch.Generator().manual_seed(6)
    check_contiguous_and_paged(-(-sms * 58 // 320), 1024, gen)  # 24 sequences on 132 SMs


@pytest.mark.skipif(not teachkit.ON_GPU, reason="the GPU's own plan needs a GPU")
def test_a_grid_of_many_programs_an_sm_cut_into_ranges_matches_the_reference():
    """Whatever the GPU plans for grids of about 4.4 programs an SM on 4k tokens (5 ranges of
    128 keys on an H200), contiguous and paged with the table row held, and of about 3.9 an SM
    on a table too wide to hold (3 ranges, ``ENTRIES_FILL_ONE_WAVE``), the result matches
    float64 attention."""
    sms, gen = decode.sm_count(), torch.Generator().manual_seed(7)
    check_contiguous_and_paged(-(-sms * 436 // 3200), 4096, gen)  # 18 sequences on 132 SMs
    wide = 16 * (decode.held_table_pages(torch.cuda.get_device_capability()) + 1)
    check_contiguous_and_paged(sms * 388 // 3200, wide, gen, contiguous=False)  # 16


@pytest.mark.skipif(not teachkit.ON_GPU, reason="the GPU's own plan needs a GPU")
def test_a_grid_a_little_past_a_program_an_sm_matches_the_reference():
    """Whatever the GPU plans for a grid of one to four thirds programs an SM on 4k tokens (split
    to fill the last wave on sm_90), contiguous or paged with the table row held, the result
    matches float64 attention."""
    sms, gen = decode.sm_count(), torch.Generator().manual_seed(5)
    check_contiguous_and_paged(-(-sms // 32), 4096, gen)  # 5 sequences on 132 SMs: 1.2 an SM


def checked_entry_by_entry_plan(gen, H, D, dtype, second_len):
    """A paged call over 300 pages of one token (too many to hold the table row), two
    sequences of ``H`` heads (the second ``second_len`` tokens long), checked against the
    reference; returns the plan the interpreter makes for it (``None`` compiled, where the
    GPU's own SMs plan it)."""
    S = decode.held_table_pages(None) + 44
    q, k, v, k_ref, v_ref, lens = make(2, H, H, 1, S, D, gen, dtype, lens=[S, second_len])
    k_pool, v_pool, table = paged_from_contiguous(k_ref, v_ref, lens.cpu(), 1, gen=gen)
    check(q, k_pool.to(DEV), v_pool.to(DEV), k_ref, v_ref, lens, table.to(DEV))
    if not decode.INTERPRETED:
        return None
    return decode._launch_plan(2, H, 1, D, H, dtype, torch.device(DEV), S, None, None, 1)


def test_an_entry_by_entry_grid_that_splits_by_default_matches_the_reference(gen):
    """300 pages of one token, two sequences of two heads (one program an SM under the
    interpreter): the call splits its keys by default (``PAGED_ENTRY_WAVES``) and its result
    matches the reference."""
    plan = checked_entry_by_entry_plan(gen, 2, 16, torch.float32, 123)
    if plan is not None:
        assert plan.table_tile == 0 and plan.num_splits == 5


def test_an_entry_by_entry_grid_of_two_programs_an_sm_unsplit_matches_the_reference(gen):
    """300 pages of one token, two sequences of four float16 heads (two programs an SM under
    the interpreter): the call runs unsplit with 256 keys (64 KB) in 2 stages
    (``ENTRY_GRID``), uneven lengths included, and its result matches the reference."""
    plan = checked_entry_by_entry_plan(gen, 4, 64, torch.float16, 201)
    if plan is not None:
        assert plan.table_tile == 0 and plan.num_splits == 1
        assert (plan.config.block_n, plan.config.num_stages) == (256, 2)


@pytest.mark.skipif(not teachkit.ON_GPU, reason="the GPU's own plan needs a GPU")
@pytest.mark.parametrize("D", [64, 128, 256])
def test_a_nearly_full_grid_unsplit_matches_the_reference(D):
    """Whatever the GPU plans for a grid of nearly one program an SM (unsplit on sm_90, with up
    to 256 keys a tile; split elsewhere), the result matches float64 attention, for one query
    row and for grouped-query heads holding 64 rows a program (Lq = 8, 8 heads a cache head)."""
    sms, gen = decode.sm_count(), torch.Generator().manual_seed(D)
    for H_kv, Lq in ((32, 1), (4, 8)):
        B = max(1, round(0.8 * sms / H_kv))
        check(*make(B, 32, H_kv, Lq, 1000, D, gen))


def test_default_config_is_what_a_call_without_one_launches_and_checks_its_sizes():
    dev = torch.device(DEV)
    got = decode.default_config(2, 8, 64, 1000, torch.float16, dev, kv_heads=4)
    assert got == decode._launch_plan(2, 8, 1, 64, 4, torch.float16, dev, 1000, None, None,
                                      False).config._replace(one_launch=True)
    assert decode.default_config(2, 8, 64, 1000, torch.float16, dev, captured=True) == (
        decode._launch_plan(2, 8, 1, 64, 8, torch.float16, dev, 1000, None, None, False,
                            True).config._replace(one_launch=False))
    with pytest.raises(ValueError, match="kv_heads = 3"):
        decode.default_config(1, 8, 64, 100, torch.float16, dev, kv_heads=3)
    with pytest.raises(ValueError, match="head_dim = 48"):
        decode.default_config(1, 8, 48, 100, torch.float16, dev)
    with pytest.raises(TypeError, match="dtype"):
        decode.default_config(1, 8, 64, 100, torch.int32, dev)
    with pytest.raises(ValueError, match="capacity"):
        decode.default_config(1, 8, 64, 0, torch.float16, dev)
    with pytest.raises(ValueError, match="page_size"):
        decode.default_config(1, 8, 64, 100, torch.float16, dev, page_size=0)
    with pytest.raises(TypeError, match="page_size"):
        decode.default_config(1, 8, 64, 100, torch.float16, dev, page_size=True)
    with pytest.raises(ValueError, match="whole number of pages of 16"):
        decode.default_config(1, 8, 64, 100, torch.float16, dev, page_size=16)
    assert decode.default_launch(2, 8, 64, 1000, torch.float16, dev, kv_heads=4) == (
        got, decode._launch_plan(2, 8, 1, 64, 4, torch.float16, dev, 1000, None, None,
                                 False).num_splits)
    with planned_on((9, 0)):  # a captured D = 64 split: its splits chosen with its tiles
        config, splits = decode.default_launch(1, 32, 64, 4096, torch.float16, dev,
                                               captured=True)
        assert (config.block_n, splits) == (64, 16)
    with planned_on((9, 0)):  # four sequences of 256 pages: unsplit, as contiguous
        paged = decode.default_config(4, 32, 128, 4096, torch.float16, dev, page_size=16)
        assert paged == decode.default_config(4, 32, 128, 4096, torch.float16, dev)


@pytest.mark.parametrize("captured", [False, True], ids=["plain", "captured"])
@pytest.mark.parametrize("page_size", [0, 16], ids=["contiguous", "paged"])
def test_the_default_launch_passed_back_plans_what_the_default_call_does(captured, page_size):
    """default_launch's config and splits, passed back to a call (as a graph-replay check or the
    decode benchmark does), plan the same kernels as the call without them: tiles, splits, the
    merge where it splits, row blocks and table reads, over batches, head dims, grouped heads
    and lengths that reach every rule of the plan (planned for an H100's 132 SMs; the plan is
    pure Python)."""
    dev = torch.device(DEV)
    shapes = [(B, H, D, H_kv, S) for B in (1, 2, 5, 8, 24, 48) for H, H_kv in ((32, 32), (32, 8))
              for D in (64, 128) for S in (1024, 4096, 16384, 65536)]
    with planned_on((9, 0)):
        for B, H, D, H_kv, S in shapes:
            config, splits = decode.default_launch(B, H, D, S, torch.float16, dev, kv_heads=H_kv,
                                                   page_size=page_size or None,
                                                   captured=captured)
            default = decode._launch_plan(B, H, 1, D, H_kv, torch.float16, dev, S, None, None,
                                          page_size, captured)
            given = decode._launch_plan(B, H, 1, D, H_kv, torch.float16, dev, S, splits, config,
                                        page_size)
            if splits == 1:  # unsplit, how a split would merge is not launched
                given = given._replace(config=given.config._replace(
                    one_launch=default.config.one_launch))
            assert given == default, (B, H, D, H_kv, S)


def test_a_captured_split_call_plans_the_merge_kernel():
    """Planned as if captured into a CUDA graph: a call that splits the keys takes
    decode_config(..., captured=True), the merge kernel, with the tiles for its ranges; a call
    that does not split, or that gives its own config, keeps its plan."""
    dev = torch.device(DEV)
    capability = None if not teachkit.ON_GPU else torch.cuda.get_device_capability()
    plain = decode._launch_plan(1, 4, 1, 128, 1, torch.float16, dev, 4096, None, None, False)
    captured = decode._launch_plan(1, 4, 1, 128, 1, torch.float16, dev, 4096, None, None, False,
                                   True)
    assert plain.num_splits > 1 and plain.one_launch
    assert captured.num_splits > 1 and not captured.one_launch
    assert captured.config == decode.decode_config(
        128, torch.float16, capability, captured=True,
        keys_per_split=-(-4096 // captured.num_splits))
    assert captured.config._replace(one_launch=True) == plain.config
    many = 64 * decode.sm_count(dev)  # programs enough that nothing splits
    assert (decode._launch_plan(many, 1, 1, 128, 1, torch.float16, dev, 4096, None, None, False,
                                True)
            == decode._launch_plan(many, 1, 1, 128, 1, torch.float16, dev, 4096, None, None,
                                   False))
    mine = decode.DecodeConfig(32, 4, 2)
    assert decode._launch_plan(1, 4, 1, 128, 1, torch.float16, dev, 4096, None, mine, False,
                               True).config == mine


@pytest.mark.parametrize("B, H, H_kv, Lq, S, splits", [(1, 4, 2, 1, 40, 3), (2, 8, 8, 3, 17, 1),
                                                       (3, 2, 1, 1, 64, None)])
def test_the_buffers_a_call_keeps_are_the_contiguous_ones_the_kernels_address(B, H, H_kv, Lq, S,
                                                                             splits):
    """The kernels address the partials and the lse a call allocates as contiguous
    ``(num_splits, B, H, Lq, ...)`` rows, from the sizes alone; the buffers must be those."""
    D = 16
    plan = decode._launch_plan(B, H, Lq, D, H_kv, torch.float32, torch.device(DEV), S, splits,
                               None, False)
    o_part, lse_part, own_lse, _ = decode._decode_buffers(plan, False, torch.device(DEV))
    assert own_lse.shape == (B, H, Lq) and own_lse.is_contiguous()
    if plan.num_splits == 1:
        assert o_part is None and lse_part is None
    else:
        assert o_part.shape == (plan.num_splits, B, H, Lq, D) and o_part.is_contiguous()
        assert lse_part.shape == (plan.num_splits, B, H, Lq) and lse_part.is_contiguous()


def test_a_contiguous_q_with_odd_strides_on_its_single_axes(gen):
    """``is_contiguous`` ignores the strides of axes of size 1, and ``empty_like`` keeps them:
    the output of such a q has them too, and the kernel, which addresses the output by the
    plan's packed strides, must still write every row where the output's strides say."""
    q, k, v, k_ref, v_ref, lens = make(1, 4, 2, 1, 40, 16, gen, torch.float32, lens=[40])
    odd = torch.empty(1000, device=DEV).as_strided(q.shape, (999, 16, 7, 1))
    odd.copy_(q)
    assert odd.is_contiguous() and odd.stride() != q.stride()
    for splits in (1, 3):
        out, _ = check(odd, k, v, k_ref, v_ref, lens, num_splits=splits)
        assert out.stride() == odd.stride()  # empty_like kept them
