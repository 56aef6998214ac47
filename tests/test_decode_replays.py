"""``decode_attention``'s kept launches: a kind of call met before makes its launches again on
new tensors, skipping the checks, the plan and the launch cache's keys, and gives what the full
path gives, bit for bit; calls it cannot serve take the full path.

On a GPU the kept launches are Triton's launchers (the launch cache's short path). Under the
interpreter there is no launcher, so nothing is kept; the fixture :func:`kept` puts a stand-in
in its place (:class:`InterpretedReplay`), which launches the kernel again on tensors rebuilt
from the addresses a kept call hands it, so that everything around the launcher runs on a CPU
too.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kept_launches import kept_in, launches_through, outputs

import teachkit

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels import decode  # noqa: E402
from teachkit.kernels.decode import DecodeConfig, decode_attention  # noqa: E402
from teachkit.kernels.launch_cache import LaunchReplay  # noqa: E402
from teachkit.paging import paged_from_contiguous  # noqa: E402

DEV = teachkit.DEVICE
ON_GPU = teachkit.ON_GPU
GPU = pytest.mark.skipif(not ON_GPU, reason="CUDA graphs and the launch cache need a GPU")
S, D, H = (300, 128, 8) if ON_GPU else (40, 16, 4)  # sizes of the calls: small off the GPU

KINDS_OF_CALLS = ["cache of full length", "int32 lengths", "int64 lengths", "grouped heads",
                  "several new tokens", "with its lse", "unsplit", "split in one launch",
                  "split, merge kernel", "paged", "paged, int64 table, lse", "values checked",
                  "float32", "bfloat16, D=64", "a scale", "strided cache"]
"""Calls of decode_attention that its kept launches serve (:func:`decode_call`)."""


def decode_call(kind: str, seed: int) -> tuple[tuple, dict]:
    """Fresh arguments of the kind named ``kind`` of :data:`KINDS_OF_CALLS`, their values drawn
    from ``seed``: the tensors, then the keywords."""
    gen = torch.Generator(device=DEV).manual_seed(seed)

    def contiguous(H_kv=H, Lq=1, S=S, D=D, dtype=torch.float16):
        return tuple(torch.randn(2, heads, n, D, device=DEV, generator=gen).to(dtype)
                     for heads, n in ((H, Lq), (H_kv, S), (H_kv, S)))

    def lengths(dtype=torch.int32):
        return torch.tensor([S, S // 2 + 1], device=DEV, dtype=dtype)

    def paged(table_dtype=torch.int32, **kwargs):
        q, k, v = contiguous()
        kp, vp, table = paged_from_contiguous(k.cpu(), v.cpu(), lengths().cpu(), 16,
                                              num_pages=2 * S // 16 + 8)
        return (q, kp.to(DEV), vp.to(DEV)), {"cache_seqlens": lengths(),
                                             "block_table": table.to(DEV, table_dtype), **kwargs}

    def strided():  # each cache (B, S, H_kv, D) in memory, seen as (B, H_kv, S, D)
        q, k, v = contiguous()
        return (q, *(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))), {}

    off = {"check_values": False}
    merged = {"num_splits": 3, "config": DecodeConfig(64 if ON_GPU else 16, 4, 2, False)}
    return {
        "cache of full length": lambda: (contiguous(), {}),
        "int32 lengths": lambda: (contiguous(), {"cache_seqlens": lengths(), **off}),
        "int64 lengths": lambda: (contiguous(), {"cache_seqlens": lengths(torch.int64), **off}),
        "grouped heads": lambda: (contiguous(H_kv=H // 4), {"cache_seqlens": lengths(), **off}),
        "several new tokens": lambda: (contiguous(Lq=3), {"cache_seqlens": lengths(), **off}),
        "with its lse": lambda: (contiguous(), {"cache_seqlens": lengths(), "return_lse": True,
                                                **off}),
        "unsplit": lambda: (contiguous(), {"num_splits": 1, "return_lse": True}),
        "split in one launch": lambda: (contiguous(S=4 * S), {"num_splits": 5}),
        "split, merge kernel": lambda: (contiguous(), merged),
        "paged": lambda: paged(**off),
        "paged, int64 table, lse": lambda: paged(torch.int64, return_lse=True),
        "values checked": lambda: (contiguous(), {"cache_seqlens": lengths()}),
        "float32": lambda: (contiguous(dtype=torch.float32), {}),
        "bfloat16, D=64": lambda: (contiguous(D=64 if ON_GPU else 32, dtype=torch.bfloat16), {}),
        "a scale": lambda: (contiguous(), {"scale": 0.05}),
        "strided cache": strided,
    }[kind]()


def launches() -> int:
    """Launches of the two decoding kernels through Triton's path so far."""
    return launches_through(decode.decode_split_kernel, decode.decode_merge_kernel)


@pytest.fixture
def kept(monkeypatch):
    """:data:`decode.DECODE_REPLAYS`, empty, with stand-in launchers under the interpreter."""
    with kept_in(decode, decode.DECODE_REPLAYS, monkeypatch) as table:
        yield table


@pytest.mark.parametrize("kind", KINDS_OF_CALLS)
def test_a_kind_of_call_met_before_makes_its_launches_again(kind, kept):
    tensors, kwargs = decode_call(kind, 0)
    first = decode_attention(*tensors, **kwargs)
    assert len(kept) == 1
    before = launches()
    again = decode_attention(*tensors, **kwargs)
    for a, b in zip(outputs(again), outputs(first), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)  # bit for bit
        assert a.data_ptr() != b.data_ptr() and a.stride() == b.stride()
    other, other_kwargs = decode_call(kind, 1)  # new tensors of the same kind
    got = decode_attention(*other, **other_kwargs)
    assert launches() < before if not ON_GPU else launches() == before  # none through Triton
    kept.clear()
    want = decode_attention(*other, **other_kwargs)  # the full path
    for a, b in zip(outputs(got), outputs(want), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(B=st.integers(1, 3), group=st.sampled_from([1, 2]), Lq=st.integers(1, 3),
       S=st.integers(1, 40), splits=st.sampled_from([None, 1, 2, 5]),
       page_size=st.sampled_from([0, 8]), dtype=st.sampled_from([torch.float16, torch.float32]),
       lse=st.booleans(), seed=st.integers(0, 2**16))
def test_any_kept_call_gives_what_the_full_path_gives(kept, B, group, Lq, S, splits, page_size,
                                                      dtype, lse, seed):
    """Random kinds of calls: sizes, grouped heads, new tokens, splits, pages, dtypes, lse; the
    second call of a kind, on new values, equals the full path's call bit for bit."""
    kept.clear()
    gen = torch.Generator(device=DEV).manual_seed(seed)
    D = 16 if not ON_GPU else 64

    def call():
        q = torch.randn(B, 2 * group, Lq, D, device=DEV, generator=gen).to(dtype)
        k, v = (torch.randn(B, 2, S, D, device=DEV, generator=gen).to(dtype) for _ in "kv")
        lens = torch.randint(0, S + 1, (B,), device=DEV, generator=gen)
        lens[0] = S  # the longest sets the table's width, which the kind holds
        kwargs = {"cache_seqlens": lens, "num_splits": splits, "return_lse": lse}
        if page_size:
            k, v, table = paged_from_contiguous(k.cpu(), v.cpu(), lens.cpu(), page_size,
                                                num_pages=B * S // page_size + B + 2)
            k, v, kwargs["block_table"] = k.to(DEV), v.to(DEV), table.to(DEV)
        return (q, k, v), kwargs

    decode_attention(*call()[0], **call()[1])  # kept (on a GPU, or by the stand-in)
    tensors, kwargs = call()
    got = decode_attention(*tensors, **kwargs)
    assert len(kept) == 1
    kept.clear()
    want = decode_attention(*tensors, **kwargs)
    for a, b in zip(outputs(got), outputs(want), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_calls_it_cannot_serve_have_no_key():
    q = torch.randn(1, 2, 1, 16, device=DEV)
    k = torch.randn(1, 2, 8, 16, device=DEV)
    plain = (q, k, k, None, None, None, None, False, None, True)
    assert decode.replay_key(*plain) is not None
    assert decode.replay_key(*plain[:8], DecodeConfig(16, 4, 1), True) is not None
    for place, value in ((5, torch.tensor(0.5)), (6, 2.0), (7, 1), (8, (16, 4, 1, True)),
                         (8, DecodeConfig(16.0, 4, 1)), (3, [8]), (9, None)):
        call = list(plain)
        call[place] = value
        assert decode.replay_key(*call) is None, value
    q.requires_grad_(True)
    assert decode.replay_key(*plain) is None  # autograd would record it: the checks refuse
    with torch.no_grad():
        assert decode.replay_key(*plain) is not None
    if ON_GPU:
        assert decode.replay_key(q.detach().cpu(), k.cpu(), k.cpu(), *plain[3:]) is None
    else:  # the interpreter: a key, but no launcher to keep
        decode_attention(q.detach(), k, k)
        assert decode.DECODE_REPLAYS == {}


def test_a_kept_call_still_checks_the_values_and_refuses_what_the_full_path_refuses(kept):
    (q, k, v), kwargs = decode_call("values checked", 0)
    decode_attention(q, k, v, **kwargs)
    decode_attention(q, k, v, **kwargs)
    assert len(kept) == 1
    with pytest.raises(ValueError, match=f"at most the cache length {S}"):
        decode_attention(q, k, v, cache_seqlens=torch.tensor([S + 1, 3], device=DEV,
                                                             dtype=torch.int32))
    k.requires_grad_(True)
    with pytest.raises(ValueError, match="requires grad"):
        decode_attention(q, k, v, **kwargs)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        decode_attention(q, k.detach(), v, scale=float("nan"), **kwargs)


def test_a_change_of_the_tables_takes_effect_after_forget_plans(kept, monkeypatch):
    """A kept call holds its plan: a change of the module's tables reaches it once
    ``forget_plans`` is called."""
    tensors, kwargs = decode_call("paged", 0)
    decode_attention(*tensors, **kwargs)
    assert next(iter(kept.values())).plan.table_tile  # the table row is held
    monkeypatch.setattr(decode, "HELD_TABLE_PAGES", {})
    decode_attention(*tensors, **kwargs)
    assert next(iter(kept.values())).plan.table_tile  # still the kept plan
    decode.forget_plans()
    decode_attention(*tensors, **kwargs)
    assert next(iter(kept.values())).plan.table_tile == 0
    monkeypatch.undo()
    decode.forget_plans()


@GPU
def test_a_kept_call_is_captured_with_the_plan_for_replays(kept):
    """The key holds whether the stream is being captured: a call captured into a CUDA graph
    after plain calls of its kind takes the merge kernel, as the full path's capture does,
    and a graph of it replays new queries."""
    q, k, v = (torch.randn(1, 8, n, 128, device=DEV, dtype=torch.float16)
               for n in (1, 4096, 4096))
    decode_attention(q, k, v, check_values=False)
    decode_attention(q, k, v, check_values=False)
    merge = decode.decode_merge_kernel.run
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    for capture in range(2):  # the second capture is served by the first one's kept call
        side.wait_stream(torch.cuda.current_stream())
        merges = merge.hits + merge.misses
        with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
            out = decode_attention(q, k, v, check_values=False)
        torch.cuda.current_stream().wait_stream(side)
        assert merge.hits + merge.misses == merges + (1 - capture)
        q.copy_(torch.randn_like(q))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, decode_attention(q, k, v, check_values=False),
                                   atol=1e-3, rtol=1e-3)
        graph.reset()
    assert len(kept) == 2  # plain and captured


def test_the_host_benchmark_swaps_the_launchers_a_kept_call_holds():
    from teachkit.bench import host

    def replay(name):
        return LaunchReplay(name, (1, 1, 1), (), (), lambda device: 0)

    kept = decode.DecodeReplay(None, replay("split"), replay("merge"), None, None, False)
    swapped = host._launchers_replaced(kept, lambda launch: launch + " swapped")
    assert (swapped.split.launch, swapped.merge.launch) == ("split swapped", "merge swapped")
    assert host._launchers_replaced(kept, lambda launch: None) is None
    assert host._launchers_replaced(kept._replace(merge=None), str.upper).merge is None
    assert host._launchers_replaced(replay("alone"), str.upper).launch == "ALONE"


def test_the_decoding_sweeps_variants_plan_rather_than_make_a_kept_call_again(kept,
                                                                             monkeypatch):
    """``gpu_checks/decode_gpu.py`` times variants of a call by changing how it plans
    (``pipelined_tail``, ``planned_with``): each variant's call must plan, not make a kept
    default call's launches again, and leave the kept calls as they were (``pipelined_tail``)
    or forgotten (``planned_with``, which changes a table)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "gpu_checks" / "decode_gpu.py"
    spec = importlib.util.spec_from_file_location("decode_gpu", path)
    decode_gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(decode_gpu)

    planned = []
    own = decode._launch_plan

    def spy(*args, **kwargs):
        planned.append(args)
        return own(*args, **kwargs)

    spy.cache_clear = own.cache_clear
    monkeypatch.setattr(decode, "_launch_plan", spy)
    tensors, kwargs = decode_call("paged", 0)
    call = functools.partial(decode_attention, *tensors, **kwargs)
    want = call()
    before = dict(kept)
    assert len(before) == 1 and len(planned) == 1
    call()
    assert len(planned) == 1  # the kept call: no plan
    torch.testing.assert_close(decode_gpu.pipelined_tail(call), want, rtol=0, atol=0)
    assert len(planned) == 2 and kept == before
    decode_gpu.planned_with("HELD_TABLE_PAGES", {}, call)
    assert len(planned) == 3 and kept == {}


@GPU
def test_a_graph_captured_after_a_plain_call_reads_the_lengths_that_call_kept():
    """A call without ``cache_seqlens`` reads lengths of the cache's capacity, made by its first
    plain call and kept: a graph captured after it reads the same ones, not a fill of its own
    at every replay (a kernel beside the attention, about a µs of a short cache's 20). A graph
    captured first fills its own, and nothing is kept from it."""
    B, S = 3, 512
    q, k, v = (torch.randn(B, 8, n, 128, device=DEV, dtype=torch.float16) for n in (1, S, S))
    key = (B, S, q.device)
    decode._FULL_LENGTHS.pop(key, None)
    side = torch.cuda.Stream()

    def captured() -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        graph = torch.cuda.CUDAGraph()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
            out = decode_attention(q, k, v, check_values=False)
        torch.cuda.current_stream().wait_stream(side)
        return graph, out

    def after_replay(graph: torch.cuda.CUDAGraph, out: torch.Tensor) -> torch.Tensor:
        graph.replay()
        torch.cuda.synchronize()
        return out.clone()

    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    graph, out = captured()
    assert key not in decode._FULL_LENGTHS  # the graph's own, filled at each replay
    torch.testing.assert_close(after_replay(graph, out), want, atol=1e-3, rtol=1e-3)
    graph.reset()
    decode_attention(q, k, v, check_values=False)  # a plain call: keeps them
    kept_lengths = decode._FULL_LENGTHS[key]
    graph, out = captured()
    torch.testing.assert_close(after_replay(graph, out), want, atol=1e-3, rtol=1e-3)
    try:
        kept_lengths.fill_(S // 2)  # the replay reads these: half of every cache
        half = decode_attention(q, k, v, cache_seqlens=torch.full((B,), S // 2, device=DEV))
        torch.testing.assert_close(after_replay(graph, out), half, atol=1e-3, rtol=1e-3)
    finally:
        kept_lengths.fill_(S)
    graph.reset()
