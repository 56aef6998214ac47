"""Every input to teachkit.paging gets a right answer or a clear error, never a hang: the
serving simulation ends (and gives every page back) for any valid input, and rejects the
others up front; page ids are checked before they are used as indices."""

from __future__ import annotations

import contextlib
import math
import signal
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from teachkit.paging import (
    POLICIES,
    build_block_table,
    gather_from_pages,
    paged_from_contiguous,
    pages_needed,
    request_lengths,
    scatter_to_pages,
    simulate_serving,
    token_rows,
    waste_against_page_size,
)

FAST = settings(max_examples=60, deadline=None)


@contextlib.contextmanager
def no_hang(seconds: float = 10.0):
    """Fail with ``TimeoutError`` instead of hanging (POSIX, main thread; else no limit)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- the simulation -------------------------------------------------------------------------


@st.composite
def serving_inputs(draw):
    """Any valid problem: a pool of 1 to 210 pages (the watermark grows past 100 pages), a
    capacity that may waste a partial page, lengths up to the whole pool."""
    page_size = draw(st.sampled_from([1, 2, 3, 4, 16]))
    num_pages = draw(st.sampled_from([1, 2, 3, 5, 8, 101, 210]))
    capacity = num_pages * page_size + draw(st.integers(0, page_size - 1))
    lengths = draw(st.lists(st.integers(1, num_pages * page_size), min_size=1, max_size=25))
    return lengths, capacity, page_size


@FAST
@given(serving_inputs(), st.sampled_from(POLICIES))
def test_every_valid_simulation_ends_and_gives_memory_back(problem, policy):
    lengths, capacity, page_size = problem
    with no_hang():
        stats = simulate_serving(lengths, capacity, policy, page_size=page_size)
    # it ends within the proven bound; each step writes at least one token of the oldest
    assert max(lengths) <= stats.steps <= sum(lengths) + len(lengths)
    assert 0 <= stats.used <= stats.reserved <= 1 + 1e-12
    assert stats.mean_running >= 1 - 1e-12
    spans = sorted((start, start + size) for _, start, size, _ in stats.snapshot)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:],
                                                                    strict=False))
    assert spans[-1][1] <= capacity
    if policy != "paged":
        assert stats.preemptions == 0
    # (the simulation itself raises RuntimeError if a page goes missing or stays held at the end)


@pytest.mark.parametrize("policy", ["paged", "reserve max"])
def test_a_pool_of_one_page_serves_one_sequence_at_a_time(policy):
    # one page of 16: the paged policy's watermark (one free page) could never be met; a
    # sequence now goes in when none runs, as "reserve max" (16 slots each) does
    with no_hang():
        stats = simulate_serving([5, 3, 16, 1], capacity=16, policy=policy, page_size=16)
    assert stats.steps == 5 + 3 + 16 + 1 and stats.mean_running == 1.0


@pytest.mark.parametrize("lengths,error,match", [
    ([2.5, 3], TypeError, r"whole token counts \(ints\), got lengths\[0\] = 2.5"),
    ([3, 3.0], TypeError, r"lengths\[1\] = 3.0"),
    ([3, True], TypeError, r"lengths\[1\] = True"),
    ([3, "4"], TypeError, r"lengths\[1\] = '4'"),
    (torch.tensor([1.0, 2.0]), TypeError, "1-D integer tensor"),
    ("12", TypeError, "list of ints"),
    (7, TypeError, "list of ints"),
    ([], ValueError, "lengths is empty"),
    ([3, 0], ValueError, r"lengths must be ints >= 1.*lengths\[1\] = 0"),
    ([3, -2], ValueError, r"lengths\[1\] = -2"),
])
def test_bad_lengths_are_named(lengths, error, match):
    with no_hang(), pytest.raises(error, match=match):
        simulate_serving(lengths, 64, "paged", page_size=4)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"capacity": 64.0}, TypeError, "capacity must be an int"),
    ({"capacity": 0}, ValueError, "capacity must be an int >= 1"),
    ({"page_size": 0}, ValueError, "page_size must be an int >= 1"),
    ({"page_size": 2.5}, TypeError, "page_size must be an int"),
    ({"max_len": 10.5, "policy": "reserve max"}, TypeError, "max_len must be an int"),
    ({"policy": "fifo"}, ValueError, "policy must be one of"),
    ({"policy": ["paged"]}, ValueError, "policy must be one of"),
    ({"capacity": 12, "page_size": 16}, ValueError,
     r"capacity 12 cannot hold one sequence of 10 tokens \(lengths\[1\]\) in pages of 16: it "
     r"needs 1 page\(s\), the pool has 0"),
    ({"capacity": 40, "page_size": 8, "lengths": [3, 41]}, ValueError,
     r"lengths\[1\].*needs 6 page\(s\), the pool has 5.*pass capacity >= 48"),
    ({"capacity": 9, "policy": "reserve exact"}, ValueError,
     r"capacity 9 cannot hold one sequence of 10 tokens \(lengths\[1\]\)"),
])
def test_bad_sizes_are_named(kwargs, error, match):
    args = {"lengths": [3, 10], "capacity": 64, "policy": "paged", "page_size": 4, **kwargs}
    with no_hang(), pytest.raises(error, match=match):
        simulate_serving(**args)


def test_integer_kinds_from_numpy_and_torch_are_accepted():
    lens = np.array([5, 9, 3])
    a = simulate_serving(lens, np.int64(64), "paged", page_size=np.int32(4))
    b = simulate_serving([5, 9, 3], 64, "paged", page_size=4)
    c = simulate_serving(torch.tensor([5, 9, 3]), 64, "paged", page_size=4)
    assert a == b == c


def test_request_lengths_and_page_size_sweeps_check_their_arguments():
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="min_len = 9 is larger than max_len = 4"):
        request_lengths(3, 4, gen, min_len=9)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        request_lengths(-1, 4, gen)
    with pytest.raises(TypeError, match="gen must be a torch.Generator"):
        request_lengths(3, 4, 0)
    assert request_lengths(0, 4, gen) == []
    with pytest.raises(ValueError, match=r"page_sizes\[1\] must be an int >= 1"):
        waste_against_page_size([3, 4], [4, 0], capacity=64)
    with pytest.raises(TypeError, match="page_sizes must be a list of ints"):
        waste_against_page_size([3, 4], 4, capacity=64)


# --- block tables, scatter and gather -------------------------------------------------------


@st.composite
def paged_problems(draw):
    lengths = draw(st.lists(st.integers(0, 30), min_size=1, max_size=5))
    page_size = draw(st.integers(1, 8))
    need = [-(-n // page_size) for n in lengths]
    num_pages = sum(need) + draw(st.integers(0, 4))
    width = max(need) + draw(st.integers(0, 2))
    pages = draw(st.permutations(range(num_pages)))
    padding = draw(st.sampled_from([-1, 0, num_pages + 7]))  # never read, whatever it holds
    table = torch.full((len(lengths), width), padding, dtype=draw(st.sampled_from(
        [torch.int32, torch.int64])))
    taken = 0
    for b, n in enumerate(need):
        table[b, :n] = torch.tensor(pages[taken:taken + n], dtype=table.dtype)
        taken += n
    return lengths, page_size, num_pages, table


@FAST
@given(paged_problems(), st.integers(1, 3), st.integers(1, 4))
def test_scatter_then_gather_is_the_identity(problem, heads, head_dim):
    lengths, page_size, num_pages, table = problem
    S = max(lengths) + 2
    gen = torch.Generator().manual_seed(sum(lengths) + page_size)
    cache = torch.randn(len(lengths), heads, S, head_dim, generator=gen, dtype=torch.float64)
    pool = scatter_to_pages(cache, table, lengths, page_size, num_pages, fill=math.nan)
    back = gather_from_pages(pool, table, lengths, S=S, fill=-1.0)
    for b, n in enumerate(lengths):
        assert torch.equal(back[b, :, :n], cache[b, :, :n])
        assert bool((back[b, :, n:] == -1).all())
    written = (~pool.isnan()).all(-1).all(-1).sum()
    assert int(written) == sum(lengths)  # each token in its own slot, nothing else written
    # the rows token_rows gives are the slots that hold the tokens
    for b, n in enumerate(lengths):
        if n:
            rows = token_rows(table[b:b + 1], page_size, torch.arange(n)[None],
                              num_pages=num_pages)
            flat = pool.reshape(-1, heads, head_dim)
            assert torch.equal(flat[rows[0]].transpose(0, 1), cache[b, :, :n])


@FAST
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.integers(1, 9),
       st.integers(0, 5), st.integers(0, 2**31 - 1))
def test_built_tables_give_every_page_once(lengths, page_size, spare, seed):
    need = pages_needed(lengths, page_size)
    num_pages = int(need.sum()) + spare
    table = build_block_table(lengths, page_size, num_pages,
                              torch.Generator().manual_seed(seed))
    used = torch.cat([table[b, :n] for b, n in enumerate(need.tolist())])
    assert used.unique().numel() == used.numel() == int(need.sum())
    assert bool(((used >= 0) & (used < num_pages)).all())
    S = max(lengths)
    k = torch.randn(len(lengths), 1, S, 2)
    k_pool, _, t = paged_from_contiguous(k, k, lengths, page_size, num_pages,
                                         torch.Generator().manual_seed(seed))
    assert k_pool.shape == (num_pages, page_size, 1, 2)
    valid = (torch.arange(S) < torch.tensor(lengths)[:, None])[:, None, :, None]
    assert torch.equal(gather_from_pages(k_pool, t, lengths, S=S), k * valid)


CACHE = torch.arange(2 * 1 * 6 * 1, dtype=torch.float32).reshape(2, 1, 6, 1)
LENS = [6, 3]  # pages of 4: 2 and 1 pages


@pytest.mark.parametrize("table,match", [
    ([[0, 1], [2, -1]], "block_table must be a .* integer torch.Tensor, got list"),
    (torch.tensor([[0.0, 1.0], [2.0, -1.0]]), "integer page ids .* got torch.float32"),
    (torch.tensor([[True, False], [True, False]]), "integer page ids .* got torch.bool"),
])
def test_tables_must_be_integer_tensors(table, match):
    with pytest.raises(TypeError, match=match):
        scatter_to_pages(CACHE, table, LENS, 4, 4)
    pool = scatter_to_pages(CACHE, torch.tensor([[0, 1], [2, -1]]), LENS, 4, 4)
    with pytest.raises(TypeError, match=match):
        gather_from_pages(pool, table, LENS)


@pytest.mark.parametrize("rows,match", [
    ([[0, -1], [2, -1]], r"block_table\[0, 1\] = -1 is not a page"),
    ([[-1, 1], [2, -1]], r"block_table\[0, 0\] = -1 is not a page"),
    ([[0, 1], [4, -1]], r"block_table\[1, 0\] = 4 is out of range for a pool of 4 pages"),
    ([[0, 1], [1, -1]], r"page 1 appears twice in block_table, at block_table\[0, 1\] and "
                        r"block_table\[1, 0\]"),
    ([[3, 3], [2, -1]], r"page 3 appears twice .* block_table\[0, 0\] and block_table\[0, 1\]"),
    ([[0], [2]], r"sequence 0 needs 2 pages and block_table has 1 column"),
])
def test_bad_page_ids_are_named_not_wrapped(rows, match):
    table = torch.tensor(rows, dtype=torch.int32)
    with pytest.raises(ValueError, match=match):
        scatter_to_pages(CACHE, table, LENS, 4, 4)
    pool = torch.zeros(4, 4, 1, 1)
    with pytest.raises(ValueError, match=match):
        gather_from_pages(pool, table, LENS)


def test_unread_entries_may_hold_anything():
    table = torch.tensor([[0, 1, 99], [2, -5, 1]])  # past each sequence's pages: not read
    pool = scatter_to_pages(CACHE, table, LENS, 4, 4)
    back = gather_from_pages(pool, table, LENS, S=6)
    assert torch.equal(back[0], CACHE[0]) and torch.equal(back[1, :, :3], CACHE[1, :, :3])


def test_token_rows_refuses_positions_that_would_wrap():
    table = torch.tensor([[6, 4, -1], [5, 3, 1]])
    with pytest.raises(ValueError, match=r"positions\[0, 1\] = 9 lies in block_table\[0, 2\] "
                                         r"= -1, which is not a page"):
        token_rows(table, 4, torch.tensor([[0, 9], [3, 8]]))
    with pytest.raises(ValueError, match=r"positions\[1, 0\] = 12 is outside the table's 3 "
                                         r"page\(s\) of 4 tokens"):
        token_rows(table, 4, torch.tensor([[0, 1], [12, 8]]))
    with pytest.raises(ValueError, match=r"positions\[0, 0\] = -1 is outside"):
        token_rows(table, 4, torch.tensor([[-1, 1], [1, 8]]))
    with pytest.raises(ValueError, match="= 6, which is not a page of a pool of 6"):
        token_rows(table, 4, torch.tensor([[0, 1], [1, 8]]), num_pages=6)
    with pytest.raises(TypeError, match="positions must be a .* integer tensor"):
        token_rows(table, 4, torch.tensor([[0.0, 1.0], [1.0, 8.0]]))
    with pytest.raises(ValueError, match=r"positions must be \(batch = 2, n\)"):
        token_rows(table, 4, torch.tensor([0, 1]))


@pytest.mark.parametrize("call,error,match", [
    (lambda t: scatter_to_pages(CACHE, t, LENS, 4, 4.0), TypeError, "num_pages must be an int"),
    (lambda t: scatter_to_pages(CACHE, t, LENS, 0, 4), ValueError, "page_size must be an int >= 1"),
    (lambda t: scatter_to_pages(CACHE, t, [7, 3], 4, 4), ValueError,
     r"cache_seqlens\[0\] = 7 is longer than the cache's 6 positions"),
    (lambda t: scatter_to_pages(CACHE, t, [6, -3], 4, 4), ValueError,
     r"cache_seqlens must be >= 0, got cache_seqlens\[1\] = -3"),
    (lambda t: scatter_to_pages(CACHE, t, [6.0, 3.0], 4, 4), TypeError, "list of ints"),
    (lambda t: scatter_to_pages(CACHE, t, LENS, 4, 4, fill="nan"), TypeError,
     "fill must be a number"),
    (lambda t: scatter_to_pages(CACHE.numpy(), t, LENS, 4, 4), TypeError,
     "cache must be a .* torch.Tensor, got ndarray"),
    (lambda t: gather_from_pages(torch.zeros(4, 4, 1, 1), t, LENS, S=5), ValueError,
     r"cache_seqlens\[0\] = 6 is longer than the cache's 5 positions"),
    (lambda t: gather_from_pages(torch.zeros(4, 4, 1), t, LENS), ValueError,
     r"pool must be \(num_pages, page_size >= 1, kv_heads, head_dim\)"),
    (lambda t: build_block_table(LENS, 4, num_pages=4.0), TypeError, "num_pages must be an int"),
    (lambda t: build_block_table(LENS, 4, max_pages=-1), ValueError, "max_pages must be an int"),
    (lambda t: build_block_table(LENS, 4, gen=3), TypeError, "gen must be a torch.Generator"),
    (lambda t: paged_from_contiguous(CACHE, CACHE[:1], LENS, 4), ValueError,
     "k_cache and v_cache must have the same batch"),
])
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.tensor([[0, 1], [2, -1]]))


def test_empty_batches_and_empty_sequences_work():
    empty = torch.zeros(0, 1, 4, 2)
    table = build_block_table([], 4)
    assert table.shape == (0, 0)
    pool = scatter_to_pages(empty, table, [], 4, 0)
    assert pool.shape == (0, 4, 1, 2)
    assert gather_from_pages(pool, table, []).shape == (0, 1, 0, 2)
    k_pool, _, t = paged_from_contiguous(CACHE, CACHE, [0, 0], 4)
    assert k_pool.shape == (0, 4, 1, 1) and t.shape == (2, 0)


def test_a_huge_pool_costs_nothing_until_used():
    """The free list is made lazily: a pool of 10**12 slots was a MemoryError."""
    import time

    start = time.perf_counter()
    stats = simulate_serving([5, 9, 3], 10**12, "paged", page_size=4)
    assert time.perf_counter() - start < 5
    assert stats.steps >= 9  # every sequence runs at once: the longest one's steps


def test_long_sequences_simulate_in_linear_time():
    """The peak's page layout was copied at every step that raised the token count: 150k tokens
    took 46 s. It is kept as references now (a page list only grows while it lives)."""
    import time

    start = time.perf_counter()
    stats = simulate_serving([60000, 30000], 10**6, "paged")
    assert time.perf_counter() - start < 5
    assert sum(n for *_, n in stats.snapshot) == 60000  # the peak: 30000 tokens each
