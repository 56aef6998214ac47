"""The attention benchmark's pieces on a CPU: flop counts, batches, a tiny run, table and plot."""

from __future__ import annotations

from teachkit.bench.attention import attention_flops, batch_for, bench_attention
from teachkit.bench.core import format_table
from teachkit.plots.attention_bench import plot_attention_tflops


def test_flops_and_batches():
    assert attention_flops(1, 1, 3, 5, 7, causal=False) == 4 * 3 * 5 * 7
    assert attention_flops(1, 1, 3, 5, 7, causal=True) == 2 * 3 * 5 * 7
    assert batch_for(4096) == 4 and batch_for(16384) == 1 and batch_for(1 << 20) == 1


def test_tiny_run_checks_every_provider_and_tabulates():
    res = bench_attention([33], [16], [False, True], providers=["sdpa math", "teachkit flash"],
                          tokens=33, heads=2, show_progress=False)
    assert {r.provider for r in res} == {"sdpa math", "teachkit flash"}
    assert {r.problem for r in res} == {"D=16 L=33", "D=16 L=33 causal"}
    table = format_table(res, baseline=("sdpa math",))
    assert "teachkit flash / sdpa math" in table
    fig = plot_attention_tflops(res, ceiling=1.0, device="test device")
    assert len(fig.axes) == 2


def test_steps_run_and_agree():
    from teachkit.bench.attention import bench_steps, step_providers

    res = bench_steps(40, [16], [True], tokens=40, heads=1)
    assert [r.provider for r in res] == list(step_providers())
