"""How the benchmarks time: plain launches, graph replays with the L2 cache cleared, and warm
back-to-back replays."""

from __future__ import annotations

import pytest
import torch

import teachkit


def test_warm_l2_is_a_kind_of_graph_timing():
    from teachkit.bench.core import time_ms

    with pytest.raises(ValueError, match="graph=True"):
        time_ms(lambda: None, graph=False, warm_l2=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="graph replays need a GPU")
def test_graph_timing_captures_one_call_and_replays_it():
    """Graph timing runs the Python of ``fn`` three times (to compile, on the capture's stream,
    in the capture) and then only replays: the GPU's time, without the host's."""
    from teachkit.bench.core import time_ms

    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    calls = []

    def fn():
        calls.append(1)
        y.copy_(x * 2)

    ms = time_ms(fn, warmup=1, rep=5, graph=True)
    assert ms > 0 and len(calls) == 3
    torch.testing.assert_close(y, x * 2)


def test_the_softmax_benchmark_times_a_copy_of_the_same_bytes():
    """The copy is checked against its input, not against a softmax, and counts the same
    bytes as the softmax providers beside it."""
    from teachkit.bench.softmax import SAME_BYTES_COPY, bench_softmax

    results = bench_softmax([(4, 100)], ["fp32"], providers=["torch", SAME_BYTES_COPY],
                            progress=False)
    assert [r.provider for r in results] == ["torch", SAME_BYTES_COPY]
    assert all(r.value == 2 * 4 * 100 * 4 / r.ms / 1e6 for r in results)


def test_softmax_providers_are_timed_in_order_and_a_wrong_one_is_reported_not_timed():
    from teachkit.bench.softmax import time_softmax_providers

    x = torch.randn(4, 100, device=teachkit.DEVICE)
    providers = {"torch": lambda t: torch.softmax(t, -1), "identity": lambda t: t,
                 "torch again": lambda t: torch.softmax(t, -1)}
    found, report, ok = time_softmax_providers(providers, x, "fp32", copy_gbps=1.0,
                                               share=".1%")
    assert [r.provider for r in found] == ["torch", "torch again"] and not ok
    parts = report.split(" | ")[1:]
    assert parts[0] == f"torch {found[0].value:.1%}"
    assert parts[1].startswith("WRONG: identity is wrong on 4x100 fp32")
    assert parts[2] == f"torch again {found[1].value:.1%}"
    assert time_softmax_providers({"torch": providers["torch"]}, x, "fp32", 1.0)[2]


def test_cut_to_chunks_checks_each_chunk_and_records_the_long_rows():
    """``time_cut_to_chunks`` runs a softmax on rows of one chunk (right against a softmax of
    each chunk, wrong against one of the long rows) and records the measurement under the long
    rows' problem and bytes; a chunk that does not divide the rows is refused."""
    from teachkit.bench.softmax import softmax_params, time_cut_to_chunks

    x = torch.randn(3, 96, device=teachkit.DEVICE)
    seen = []

    def per_row(t):
        seen.append(tuple(t.shape))
        return torch.softmax(t, -1)

    found = time_cut_to_chunks("torch, cut", per_row, x, 32, "fp32")
    assert seen[0] == (9, 32)
    assert (found.problem, found.provider) == ("3x96", "torch, cut")
    assert found.params == softmax_params(3, 96, "fp32")
    assert found.value == 2 * 3 * 96 * 4 / found.ms / 1e6
    with pytest.raises(ValueError, match="chunk = 40 does not divide rows of 96"):
        time_cut_to_chunks("torch, cut", per_row, x, 40, "fp32")


def test_timing_description_names_the_settling_on_a_gpu(monkeypatch):
    from teachkit.bench import core

    assert core.timing_description(settle_ms=core.SETTLE_MS) == core.timing_description() or (
        core.ON_GPU)
    monkeypatch.setattr(core, "ON_GPU", True)
    assert core.timing_description(settle_ms=1000) == (
        "do_bench median (CUDA events), each after 1000 ms of such calls untimed")
    assert core.timing_description(graph=True) == "cuda-graph replays, L2 cleared before each"


def test_an_attention_record_says_settled_unless_it_is_a_sweep(monkeypatch):
    import argparse

    from teachkit.bench import core
    from teachkit.bench.attention import record_timing

    monkeypatch.setattr(core, "ON_GPU", True)
    settled = "do_bench median (CUDA events), each after 1000 ms of such calls untimed"
    for mode in ("plain", "backward", "steps"):
        args = argparse.Namespace(graph=False, sweep=False, backward=mode == "backward",
                                  steps=mode == "steps")
        assert record_timing(args) == settled.replace("1000", str(core.SETTLE_MS))
    args = argparse.Namespace(graph=False, sweep=True, backward=False, steps=False)
    assert record_timing(args) == "do_bench median (CUDA events)"  # flash.sweep times bare


@pytest.mark.skipif(not torch.cuda.is_available(), reason="settling is for a GPU's clock")
def test_settle_runs_the_timed_call_first():
    from teachkit.bench.core import time_ms

    x = torch.randn(1 << 16, device="cuda")
    counts = []
    for settle in (0, 200):
        calls = []
        time_ms(lambda calls=calls: calls.append(x.add_(1)), warmup=1, rep=5, settle_ms=settle)
        counts.append(len(calls))
    assert counts[1] > counts[0] + 10, counts


def test_time_in_rounds_keeps_each_providers_median_and_names_the_wrong_one():
    """Interleaved rounds: each right provider's median time (its GB/s from that time), a report
    of shares of the copy, and a wrong provider reported, not kept."""
    from teachkit.bench.core import Measurement
    from teachkit.bench.softmax import time_in_rounds

    times = {"a": iter([3.0, 1.0, 2.0]), "b": iter([4.0, 4.0, 4.0])}

    def timer(name):
        def call():
            ms = next(times[name])
            return Measurement("1x8", "fp32", name, ms, 100 / ms, "GB/s", {})
        return call

    def wrong():
        raise AssertionError("c is wrong on 1x8 fp32")

    results, report, ok = time_in_rounds({"a": timer("a"), "b": timer("b"), "c": wrong}, 3,
                                         copy_gbps=100.0)
    assert [(m.provider, m.ms, m.value) for m in results] == [("a", 2.0, 50.0), ("b", 4.0, 25.0)]
    assert not ok and report.count("WRONG: c is wrong") == 3
    assert " | a 50.0%" in report and " | b 25.0%" in report


def test_dtype_shape_jobs_take_the_given_shapes_or_the_default():
    from teachkit.bench.softmax import dtype_shape_jobs

    default = {"fp32": [(2, 8)], "bf16": [(1, 16)]}
    assert dtype_shape_jobs(default, None) == [("fp32", (2, 8)), ("bf16", (1, 16))]
    assert dtype_shape_jobs(default, ["bf16:8x8388608"]) == [("bf16", (8, 8388608))]
    with pytest.raises(ValueError, match="dtype must be one of"):
        dtype_shape_jobs(default, ["fp64:2x8"])


def test_time_shapes_times_each_shape_with_the_timers_it_is_given():
    """The ``gpu_checks`` scripts' loop: random rows of each shape in its dtype, checked and timed
    by :func:`provider_timers` (and :func:`cut_timers` on rows cut to one chunk, the kernel given
    its configuration), the medians kept, a wrong provider reported and the run marked wrong."""
    from types import SimpleNamespace

    from teachkit.bench.softmax import cut_timers, provider_timers, time_shapes

    seen, configs = [], []

    def per_row(t, config):
        configs.append(config)
        return torch.softmax(t, -1)

    def timers_for(x, dt):
        seen.append((tuple(x.shape), x.dtype, dt))
        timers = provider_timers({"torch": lambda t: torch.softmax(t, -1)}, x, dt)
        timers |= cut_timers({"cut": SimpleNamespace(chunk=8)}, per_row, x, dt)
        if dt == "bf16":
            timers |= provider_timers({"zeros": torch.zeros_like}, x, dt)
        return timers

    results, ok = time_shapes([("fp32", (2, 16)), ("bf16", (3, 32))], timers_for, 1,
                              copy_gbps=1.0, device=teachkit.DEVICE)
    assert seen == [((2, 16), torch.float32, "fp32"), ((3, 32), torch.bfloat16, "bf16")]
    assert [(m.problem, m.dtype, m.provider) for m in results] == [
        ("2x16", "fp32", "torch"), ("2x16", "fp32", "cut"), ("3x32", "bf16", "torch"),
        ("3x32", "bf16", "cut")]
    assert all(c.chunk == 8 for c in configs) and not ok


def test_the_scripts_shape_arguments_and_their_check_against_torch():
    """:func:`add_shape_arguments` gives the resident scripts ``--rounds``, ``--shapes``,
    ``--json`` and ``--settle`` (``settle_ms``, 0 without it) with plain launches and no
    figure; :func:`agrees_with_torch` takes a softmax within the dtype's tolerance (NaN where
    torch has NaN) and refuses one off by more."""
    import argparse

    from teachkit.bench.core import SETTLE_MS
    from teachkit.bench.softmax import add_shape_arguments, agrees_with_torch

    parser = argparse.ArgumentParser()
    add_shape_arguments(parser, "fp32:2x8")
    args = parser.parse_args(["--shapes", "bf16:2x8", "--json", "r.json"])
    assert (args.rounds, args.shapes, args.json, args.graph, args.plot, args.settle_ms) == (
        3, ["bf16:2x8"], "r.json", False, None, 0)
    assert parser.parse_args(["--settle"]).settle_ms == SETTLE_MS
    x = torch.randn(4, 64)
    x[1, 3] = float("nan")
    exact = torch.softmax(x, -1)
    assert agrees_with_torch(exact, x)
    assert not agrees_with_torch(exact + 1e-3, x)  # past float32's tolerance
    half = x.bfloat16()
    assert agrees_with_torch(torch.softmax(half.float(), -1).bfloat16() + 5e-3, half)
    assert not agrees_with_torch(torch.softmax(half.float(), -1) + 5e-2, half)
