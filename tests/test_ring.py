"""Ring attention: layouts and masks, the ring loop against float64 attention (in one process and
in 2-4 spawned processes), the in-place merge, memory accounting, and failures that end the run
with the failing rank's error instead of a hang.

Correct in both worlds: tensors the Triton kernel takes are made on ``teachkit.DEVICE`` (the GPU
when there is one, else the CPU and the interpreter), and what the spawned ranks hold is computed
for the backend and devices they get (gloo on CPUs; on a GPU machine NCCL with a GPU per rank,
else gloo, which sends through host memory)."""

from __future__ import annotations

import queue
import time

import pytest
import torch
from inputs import RTOL, randn

import teachkit  # noqa: F401  (decides the world before triton loads)
from teachkit import DEVICE, ON_GPU
from teachkit.attention import merge_partials, naive_attention
from teachkit.compare import relative_error
from teachkit.ring import (
    LAYOUTS,
    RingCase,
    RingError,
    RingTimeout,
    attend_block,
    block_mask,
    choose_backend,
    launch,
    local_length,
    longest_sequence,
    merge_partials_,
    positions,
    ring_attention,
    ring_memory,
    ring_schedule,
    ring_step,
    ring_tiles,
    run_ring,
    run_ring_attention_cases,
    shard,
    simulate_ring,
    source_rank,
    unshard,
    workers,
)
from teachkit.tiling import FULL, MASKED, SKIP, STRICT

NEG_INF = float("-inf")


def reference(q, k, v, causal):
    """float64 attention and lse of whole sequences (on q's device)."""
    N = q.shape[-2]
    s = (q.double() @ k.double().transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1), NEG_INF)
    return torch.softmax(s, dim=-1) @ v.double(), torch.logsumexp(s, dim=-1)


def explicit_visibility(rank, src, world_size, n, causal, layout):
    """Which keys of rank ``src``'s block each query of rank ``rank`` sees, from token positions."""
    if not causal:
        return torch.ones(n, n, dtype=torch.bool)
    pq, pk = positions(rank, world_size, n, layout), positions(src, world_size, n, layout)
    return pk[None, :] <= pq[:, None]


MASK_VISIBILITY = {
    FULL: lambda n: torch.ones(n, n, dtype=torch.bool),
    MASKED: lambda n: torch.arange(n)[None, :] <= torch.arange(n)[:, None],
    STRICT: lambda n: torch.arange(n)[None, :] < torch.arange(n)[:, None],
    SKIP: lambda n: torch.zeros(n, n, dtype=torch.bool),
}


# --- layout ----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shard_and_unshard_are_inverse_and_match_positions(layout, gen):
    W, n = 3, 7
    x = randn(2, 4, W * n, 5, gen=gen)
    blocks = [shard(x, r, W, layout) for r in range(W)]
    for r, block in enumerate(blocks):
        assert block.is_contiguous() and block.data_ptr() != x.data_ptr()  # a copy, not a view
        assert torch.equal(block, x[..., positions(r, W, n, layout), :])
    assert torch.equal(unshard(blocks, layout), x)
    lse = x[..., 0]
    assert torch.equal(unshard([shard(lse, r, W, layout, dim=-1) for r in range(W)], layout,
                               dim=-1), lse)


def test_length_must_divide_evenly():
    assert local_length(12, 4) == 3
    with pytest.raises(ValueError, match="not a multiple of world_size=4.*pad to 16"):
        local_length(14, 4)
    with pytest.raises(ValueError, match="positive"):
        local_length(0, 2)
    with pytest.raises(ValueError, match="layout must be one of"):
        shard(torch.zeros(1, 4, 2), 0, 2, layout="zigzag")
    with pytest.raises(ValueError, match="rank must be an int in"):
        shard(torch.zeros(1, 4, 2), 2, 2)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [True, False])
def test_block_masks_agree_with_token_positions(layout, causal):
    n = 5
    for W in range(1, 7):
        for rank in range(W):
            for src in range(W):
                mask = block_mask(rank, src, W, causal, layout)
                assert torch.equal(MASK_VISIBILITY[mask](n),
                                   explicit_visibility(rank, src, W, n, causal, layout)), (
                    W, rank, src, mask)


def test_schedule_walks_blocks_backwards_around_the_ring():
    assert [source_rank(2, t, 4) for t in range(4)] == [2, 1, 0, 3]
    contiguous = ring_schedule(4, causal=True, layout="contiguous")
    assert [row.count(SKIP) for row in contiguous] == [3, 2, 1, 0]
    striped = ring_schedule(4, causal=True, layout="striped")
    assert all(SKIP not in row and row[0] == MASKED for row in striped)
    assert [row.count(STRICT) for row in striped] == [3, 2, 1, 0]


def test_causal_work_is_unbalanced_contiguous_and_balanced_striped():
    contiguous = ring_tiles(4, 512, causal=True, layout="contiguous", block=64)
    striped = ring_tiles(4, 512, causal=True, layout="striped", block=64)
    assert contiguous == sorted(contiguous) and contiguous[-1] > 3 * contiguous[0]
    assert max(striped) - min(striped) <= 8 * 4  # only the strict blocks' shorter diagonals
    assert max(striped) < max(contiguous)
    assert ring_tiles(4, 512, causal=False) == [4 * 64] * 4


# --- one block, one step, the merge ----------------------------------------------------------


@pytest.mark.parametrize("mask", [FULL, MASKED, STRICT, SKIP])
def test_attend_block_matches_masked_float64_attention(mask, gen):
    n = 11
    q, k, v = (randn(2, 3, n, 16, gen=gen, dtype=torch.float64) for _ in range(3))
    out, lse = attend_block(q, k, v, mask, block_attention="torch")
    visible = MASK_VISIBILITY[mask](n)
    s = ((q @ k.transpose(-2, -1)) * 0.25).masked_fill(~visible, NEG_INF)
    ref_lse = torch.logsumexp(s, dim=-1)
    p = torch.where(ref_lse.unsqueeze(-1) == NEG_INF, 0.0, torch.exp(s - ref_lse.unsqueeze(-1)))
    assert relative_error(out, p @ v) < RTOL[torch.float64]
    assert relative_error(lse, ref_lse) < RTOL[torch.float64]
    if mask in (STRICT, SKIP):
        assert bool((lse[..., 0] == NEG_INF).all()) and bool((out[..., 0, :] == 0).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_attend_block_with_the_flash_kernel(dtype, gen):
    q, k, v = (randn(1, 2, 21, 16, gen=gen, dtype=dtype).to(DEVICE) for _ in range(3))
    for mask in (FULL, MASKED, STRICT):
        got, lse = attend_block(q, k, v, mask, block_attention="flash")
        ref, ref_lse = attend_block(q.double(), k.double(), v.double(), mask,
                                    block_attention="torch")
        assert got.dtype == dtype and lse.dtype == torch.float32
        assert relative_error(got, ref) < RTOL[dtype], mask
        assert relative_error(lse, ref_lse) < 1e-5, mask


def test_attend_block_rejects_unknown_masks_and_block_functions():
    q = torch.zeros(1, 1, 4, 16)
    with pytest.raises(ValueError, match="mask must be a TileKind or one of the names"):
        attend_block(q, q, q, "diagonal")
    with pytest.raises(ValueError, match="block_attention must be one of"):
        attend_block(q, q, q, FULL, block_attention="cudnn")


def test_in_place_merge_equals_merge_partials(gen):
    q = randn(2, 3, 9, 16, gen=gen, dtype=torch.float64)
    k, v = randn(2, 3, 20, 16, gen=gen, dtype=torch.float64), randn(2, 3, 20, 16, gen=gen,
                                                                    dtype=torch.float64)
    a = attend_block(q, k[..., :9, :], v[..., :9, :], STRICT, block_attention="torch")
    b = attend_block(q, k[..., 9:18, :], v[..., 9:18, :], MASKED, block_attention="torch")
    out, lse = a[0].clone(), a[1].clone()
    merge_partials_(out, lse, *b)
    ref_out, ref_lse = merge_partials(*a, *b)
    assert relative_error(out, ref_out) < 1e-15 and relative_error(lse, ref_lse) < 1e-15
    # rows neither part saw stay (0, -inf); large lse values cost no precision
    empty_out, empty_lse = torch.zeros(2, 5), torch.full((2,), NEG_INF)
    merge_partials_(empty_out, empty_lse, torch.zeros(2, 5), torch.full((2,), NEG_INF))
    assert bool((empty_out == 0).all()) and bool((empty_lse == NEG_INF).all())
    big_out, big_lse = b[0].clone(), b[1] + 1e4
    merge_partials_(big_out, big_lse, a[0], a[1] + 1e4)
    assert relative_error(big_out, ref_out) < 1e-12


def test_in_place_merge_wants_float_accumulators():
    with pytest.raises(TypeError, match="float32 or float64 accumulators"):
        merge_partials_(torch.zeros(2, 3, dtype=torch.float16), torch.zeros(2), torch.zeros(2, 3),
                        torch.zeros(2))
    with pytest.raises(ValueError, match="shapes must match"):
        merge_partials_(torch.zeros(2, 3), torch.zeros(2), torch.zeros(3, 3), torch.zeros(3))


def test_ring_step_skips_and_merges_in_place(gen):
    q, k, v = (randn(1, 2, 6, 16, gen=gen, dtype=torch.float64) for _ in range(3))
    out, lse = torch.zeros_like(q), torch.full(q.shape[:-1], NEG_INF, dtype=q.dtype)
    ring_step(out, lse, q, k, v, SKIP)
    assert bool((out == 0).all()) and bool((lse == NEG_INF).all())
    ring_step(out, lse, q, k, v, MASKED, block_attention="torch")
    assert relative_error(out, naive_attention(q, k, v, causal=True)) < 1e-14


# --- the whole ring in one process -----------------------------------------------------------


@pytest.mark.parametrize("world_size,causal,layout", [
    (1, True, "contiguous"), (2, True, "striped"), (3, False, "striped"),
    (3, True, "contiguous"), (5, True, "striped"), (5, False, "contiguous"),
])
def test_simulated_ring_is_exact_in_float64(world_size, causal, layout, gen):
    N = world_size * 7  # odd blocks
    q, k, v = (randn(2, 3, N, 16, gen=gen, dtype=torch.float64) for _ in range(3))
    out, lse = simulate_ring(q, k, v, world_size, causal=causal, layout=layout)
    ref_out, ref_lse = reference(q, k, v, causal)
    assert relative_error(out, ref_out) < RTOL[torch.float64]
    assert relative_error(lse, ref_lse) < RTOL[torch.float64]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_simulated_ring_with_the_flash_kernel(dtype, gen):
    q, k, v = (randn(1, 2, 3 * 13, 16, gen=gen, dtype=dtype).to(DEVICE) for _ in range(3))
    out, lse = simulate_ring(q, k, v, 3, causal=True, layout="striped", block_attention="flash")
    ref_out, ref_lse = reference(q, k, v, causal=True)
    assert out.dtype == dtype and out.device == q.device
    assert relative_error(out, ref_out) < RTOL[dtype]
    assert relative_error(lse, ref_lse) < 1e-5


def test_simulated_ring_edge_cases(gen):
    q, k, v = (randn(1, 2, 8, 16, gen=gen, dtype=torch.float64) for _ in range(3))
    q[0, 1, 5, 3] = float("nan")  # a NaN query row stays NaN, the others are untouched
    out, _ = simulate_ring(q, k, v, 4, causal=True, layout="striped")
    ref = naive_attention(q, k, v, causal=True)
    assert torch.isnan(out[0, 1, 5]).all() and int(torch.isnan(out).sum()) == 16
    assert relative_error(out, ref) < 1e-12
    empty = torch.zeros(0, 2, 8, 16, dtype=torch.float64)  # an empty batch gives empty results
    out, lse = simulate_ring(empty, empty, empty, 2, causal=True)
    assert out.shape == (0, 2, 8, 16) and lse.shape == (0, 2, 8)


def test_simulated_ring_validates_its_inputs():
    q = torch.zeros(1, 2, 12, 16)
    with pytest.raises(ValueError, match="same length"):
        simulate_ring(q, q[..., :6, :], q[..., :6, :], 2)
    with pytest.raises(ValueError, match="not a multiple of world_size=5"):
        simulate_ring(q, q, q, 5)
    with pytest.raises(TypeError, match="floating-point"):
        simulate_ring(q.long(), q.long(), q.long(), 2)


def test_ring_attention_needs_a_process_group():
    q = torch.zeros(1, 1, 4, 16)
    with pytest.raises(RuntimeError, match="process group"):
        ring_attention(q, q, q)


# --- memory ----------------------------------------------------------------------------------


def test_memory_of_a_worker_against_one_device():
    m = ring_memory(1, 32, 65536, 128, world_size=4)
    block = 32 * (65536 // 4) * 128 * 2
    assert m.per_worker["queries"] == block
    assert m.per_worker["k/v block in flight"] == 2 * block
    assert m.per_worker["output accumulator"] == 2 * block  # float32
    assert m.worker_total * 2 == m.one_device_total  # W / 2 times less here
    assert m.naive_scores == 2 * 65536**2 * 32 * 4
    assert ring_memory(1, 1, 8, 16, world_size=1).per_worker["k/v block in flight"] == 0
    one, ring = longest_sequence(2**30, 1, 32, 128, world_size=4, multiple_of=128)
    assert one % 512 == 0 and ring % 512 == 0 and 2 * one - 512 <= ring <= 2 * one + 512
    assert ring_memory(1, 32, one, 128, 4).one_device_total <= 2**30


# --- processes -------------------------------------------------------------------------------


def expected_held_bytes(case, world_size, backend):
    """The buffers a rank of :func:`run_ring_attention_cases` holds, from ``ring_memory``.

    The ranks donate their shards, so the ring keeps no other copy, except where blocks travel
    through host memory while the ranks compute on a GPU (gloo on a GPU machine): the ring's
    buffers are then host copies and the rank's own k and v shards stay on the GPU, listed as
    "k, v kept by the caller" (notebook 10 says so too)."""
    B, H, N, D = case.q.shape
    per_worker = ring_memory(B, H, N, D, world_size, case.q.dtype).per_worker
    held = {k: v for k, v in per_worker.items() if not k.startswith("partial")}
    if ON_GPU and backend == "gloo":
        held["k, v kept by the caller"] = per_worker["k/v block in hand"]
    return held



def _cases(world_size, gen):
    """float64 cases checked to 1e-12 with the torch blocks; float32 through the Triton kernel
    (interpreted: once), bfloat16 through the torch blocks without overlap."""
    n = {2: 19, 3: 11, 4: 9}[world_size]
    N = world_size * n
    heads = 1 if world_size == 4 else 2  # one head: a contiguous rank's block is a plain slice
    f64 = [randn(1, heads, N, 16, gen=gen, dtype=torch.float64) for _ in range(3)]
    cases = [RingCase(*f64, causal=c, layout=lay, block_attention="torch")
             for c, lay in ((True, "contiguous"), (True, "striped"), (False, "contiguous"))]
    if world_size == 2:
        cases.append(RingCase(*(t.float() for t in f64), causal=True, layout="striped",
                              block_attention="flash"))
    if world_size == 3:
        cases.append(RingCase(*(t.bfloat16() for t in f64), causal=True, layout="striped",
                              block_attention="torch", overlap=False))
    return cases


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ring_in_processes_matches_float64_attention(world_size, gen):
    cases = _cases(world_size, gen)
    inputs = [t.clone() for case in cases for t in (case.q, case.k, case.v)]
    runs = run_ring_attention_cases(cases, world_size, timeout_s=60)
    assert len(runs) == len(cases)
    backend = choose_backend(world_size)  # gloo, or NCCL with a GPU per rank
    # the ranks received the inputs in shared memory and donated their shards: copies, not views
    assert all(torch.equal(a, b) for a, b in zip(
        inputs, [t for case in cases for t in (case.q, case.k, case.v)], strict=True))
    for case, run in zip(cases, runs, strict=True):
        ref_out, ref_lse = reference(case.q, case.k, case.v, case.causal)
        assert run.backend == backend and run.world_size == world_size
        assert run.out.dtype == case.q.dtype
        assert relative_error(run.out, ref_out) < RTOL[case.q.dtype], case.layout
        assert relative_error(run.lse, ref_lse) < max(RTOL[case.q.dtype], 1e-6)
        schedule = ring_schedule(world_size, case.causal, case.layout)
        for rank, steps in enumerate(run.timelines):
            assert [s["mask"] for s in steps] == schedule[rank]
            assert [s["source"] for s in steps] == [(rank - t) % world_size
                                                    for t in range(world_size)]
            assert all(s["compute_ms"] >= 0 and s["wait_ms"] >= 0 for s in steps)
        expected = expected_held_bytes(case, world_size, backend)
        assert run.held_bytes == [expected] * world_size  # the computed buffers, exactly


def test_a_failing_rank_ends_the_run_with_its_error():
    start = time.monotonic()
    with pytest.raises(RingError, match="rank 1 of 2 failed: ValueError") as info:
        run_ring(workers.fail_on_rank, 2, {"rank": 1, "message": "bad block"}, timeout_s=30)
    assert time.monotonic() - start < 30
    assert info.value.rank == 1  # the root cause, even if rank 0's lost connection came first
    assert "ValueError" in info.value.failures[1]
    assert "bad block (raised on purpose by rank 1)" in str(info.value)
    assert "fail_on_rank" in info.value.remote_traceback  # the rank's own traceback


def test_a_stuck_rank_times_out_instead_of_hanging():
    start = time.monotonic()
    # timeout_s also bounds the group's start-up, which can take seconds on a loaded machine:
    # 5 s lets both ranks meet, so that the timeout seen is rank 1's stall.
    with pytest.raises(RingError, match="rank 0 of 2 failed.*Timed out") as info:
        run_ring(workers.stall_on_rank, 2, {"rank": 1, "seconds": 60}, timeout_s=5, wall_s=40)
    assert time.monotonic() - start < 30
    assert not isinstance(info.value, RingTimeout)
    assert info.value.stuck == [1]  # the rank that never answered is named too
    assert "rank(s) [1] reported nothing" in str(info.value)


# --- the launcher's bookkeeping, without processes -------------------------------------------


class FakeProcess:
    def __init__(self, exitcode=None):
        self.exitcode = exitcode


def test_wall_clock_limit_and_silent_deaths_are_reported():
    start = time.monotonic()
    with pytest.raises(RingTimeout, match=r"wall-clock limit of 0.3 s; rank\(s\) \[1\]"):
        messages = queue.Queue()
        messages.put(("done", 0, "", ""))
        launch._collect([FakeProcess(), FakeProcess()], messages, wall_s=0.3)
    assert time.monotonic() - start < 2
    with pytest.raises(RingError, match="rank 0 of 1 exited with code -9 without reporting"):
        launch._collect([FakeProcess(exitcode=-9)], queue.Queue(), wall_s=30, grace_s=0.1)


def nested_target_factory():
    def target(ctx):  # pragma: no cover - never started
        return ctx

    return target


@pytest.mark.parametrize("target,match", [
    (lambda ctx: ctx, "top level of an importable module"),
    (nested_target_factory(), "top level of an importable module"),
    ("teachkit.ring.workers:no_such_function", "cannot import the target"),
    (42, "target must be a function"),
])
def test_run_ring_rejects_targets_spawned_processes_cannot_import(target, match):
    with pytest.raises(TypeError, match=match):
        run_ring(target, 2)


def test_run_ring_validates_backend_and_sizes():
    with pytest.raises(ValueError, match="backend must be one of"):
        run_ring(workers.describe_rank, 2, backend="mpi")
    if (torch.cuda.device_count() if ON_GPU else 0) < 2:
        with pytest.raises(ValueError, match="NCCL needs one GPU per rank"):
            run_ring(workers.describe_rank, 2, backend="nccl")
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        run_ring(workers.describe_rank, 0)
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        run_ring(workers.describe_rank, 2, timeout_s=-1)
    with pytest.raises(ValueError, match="timeout_s must be a positive number.*finite"):
        run_ring(workers.describe_rank, 2, timeout_s=float("inf"))
    with pytest.raises(ValueError, match="not a multiple of world_size=3"):
        run_ring_attention_cases([RingCase(*(torch.zeros(1, 1, 8, 16),) * 3)], 3)
