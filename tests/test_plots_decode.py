"""The pictures of notebook 09 draw what they are given (Agg backend)."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from teachkit.bench.core import Measurement  # noqa: E402
from teachkit.bench.decode import (  # noqa: E402
    decode_params,
    decode_problem,
    split_params,
    split_provider,
)
from teachkit.paging import (  # noqa: E402
    POLICIES,
    build_block_table,
    simulate_serving,
    waste_against_page_size,
)
from teachkit.plots.decode import (  # noqa: E402
    plot_block_table,
    plot_decode_bandwidth,
    plot_memory_snapshots,
    plot_sm_occupancy,
    plot_split_sweep,
    plot_waste_against_page_size,
    split_sweep_rates,
)


def test_sm_occupancy_fills_one_square_per_busy_sm():
    fig = plot_sm_occupancy({"B = 1": 32, "B = 16": 512}, sms=132)
    a, b = fig.axes
    busy = [sum(p.get_facecolor()[2] > 0.8 and p.get_facecolor()[0] < 0.5 for p in ax.patches)
            for ax in (a, b)]
    assert len(a.patches) == len(b.patches) == 132
    assert busy == [32, 132]
    assert "32 of 132 SMs busy" in a.get_title(loc="left")
    assert "3.9 waves" in b.get_title(loc="left")
    plt.close(fig)


def test_decode_bandwidth_has_a_column_per_batch_and_speedups():
    results = [Measurement(decode_problem(b, s), "fp16", p, 1.0, v * s / 1024, "GB/s",
                           decode_params(b, s))
               for b in (1, 8) for s in (1024, 4096, 16384)
               for p, v in (("SDPA flash", 2.0), ("teachkit unsplit", 1.0),
                            ("teachkit split-KV", 3.0))]
    fig = plot_decode_bandwidth(results, ceiling=3000, device="test GPU")
    assert len(fig.axes) == 4
    top, bottom = fig.axes[0], fig.axes[2]
    assert len(top.get_lines()) == 3 + 1  # providers and the ceiling
    speedup = [line for line in bottom.get_lines() if line.get_label() == "teachkit split-KV"]
    assert list(speedup[0].get_ydata()) == [3.0, 3.0, 3.0]
    assert any("test GPU" in t.get_text() for t in fig.texts)
    plt.close(fig)


def test_memory_snapshots_and_waste_plot():
    lens = [50, 7, 120, 33, 90, 12] * 5
    runs = [simulate_serving(lens, 512, p, page_size=8) for p in POLICIES]
    fig = plot_memory_snapshots(runs)
    assert len(fig.axes) == 3
    assert all(len(ax.patches) == 2 * len(run.snapshot) for ax, run in zip(fig.axes, runs,
                                                                             strict=True))
    assert "reserve max" in fig.axes[0].get_title(loc="left")
    plt.close(fig)
    fig = plot_waste_against_page_size(waste_against_page_size(lens, [1, 4, 16], 512), runs[:2])
    left, right = fig.axes
    assert len(left.get_lines()) == 3 and len(right.get_lines()) == 3
    plt.close(fig)


def test_block_table_picture_labels_every_page():
    lens = torch.tensor([5, 9, 0])
    table = build_block_table(lens, 4, num_pages=8, gen=torch.Generator().manual_seed(0))
    fig = plot_block_table(table, lens, 4, 8)
    left, right = fig.axes
    assert len(left.patches) == table.numel()
    labels = {t.get_text() for t in right.texts}
    assert {"s0:0", "s0:1", "s1:0", "s1:1", "s1:2"} <= labels
    plt.close(fig)


def test_decode_bandwidth_reads_params_not_labels():
    results = [Measurement("a label", "fp16", "teachkit split-KV", 1.0, float(s), "GB/s",
                           decode_params(b, s)) for b in (1, 8) for s in (64, 128)]
    fig = plot_decode_bandwidth(results)
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_xdata()) == [64, 128] and fig.axes[1].get_title() == "batch 8"
    plt.close(fig)


def _sweep() -> list[Measurement]:
    return [Measurement(decode_problem(1, s), "fp16", split_provider(n, bn), 1.0,
                        1000 + 100 * n - s / 1024, "GB/s", decode_params(1, s),
                        split_params(n, bn))
            for s in (16384, 1024) for bn in (32, 64) for n in (1, 2, 4, 8, 9)]


def test_split_sweep_rates_by_batch_and_length():
    rates = split_sweep_rates(_sweep(), block_n=32)
    assert list(rates) == [(1, 16384), (1, 1024)]
    assert rates[1, 1024] == {n: 1000 + 100 * n - 1 for n in (1, 2, 4, 8, 9)}


def test_split_sweep_draws_a_line_per_problem_and_rings_the_pick():
    results = _sweep()
    fig = plot_split_sweep(results, ceiling=3000, picks={(1, 1024): 8}, device="test GPU")
    (ax,) = fig.axes
    labelled = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert [line.get_label() for line in labelled] == ["B=1 S=1024", "B=1 S=16384"]
    assert list(labelled[0].get_xdata()) == [1, 2, 4, 8, 9]
    rings = [line for line in ax.get_lines() if line.get_markerfacecolor() == "none"]
    assert len(rings) == 1 and list(rings[0].get_xdata()) == [8]
    with pytest.raises(ValueError, match="BLOCK_N = 128"):
        plot_split_sweep(results, block_n=128)
    with pytest.raises(ValueError, match="not a split sweep's provider"):
        plot_split_sweep([Measurement("B=1 S=1", "fp16", "SDPA flash", 1.0, 1.0, "GB/s",
                                      decode_params(1, 1))])
    plt.close("all")


@pytest.mark.parametrize("with_launcher", [False, True])
def test_host_cost_bars_stack_the_python_and_the_launches_and_hatch_the_launcher(with_launcher):
    from teachkit.plots.host import plot_host_cost

    got = {"torch": 7.0, "teachkit": 13.0, "teachkit, Triton's launch path": 19.0,
           "teachkit, no launch": 5.0}
    if with_launcher:
        got["Triton's launcher alone"] = 4.5
    results = [Measurement(problem=op, dtype="fp16", provider=p, ms=v / 1e3, value=v,
                           unit="µs per call", params={"op": op})
               for op in ("softmax", "decode_attention") for p, v in got.items()]
    fig = plot_host_cost(results, device="test GPU")
    ax = fig.axes[0]
    bars = [(round(p.get_x(), 3), round(p.get_width(), 3)) for p in ax.patches]
    # per op: torch, then python + launches twice (kept or cached, JITFunction.run)
    assert bars[:5] == [(0.0, 7.0), (0.0, 5.0), (5.0, 8.0), (0.0, 5.0), (5.0, 14.0)]
    hatched = [p for p in ax.patches if p.get_hatch()]
    # the launcher over the call's last microseconds: 13.0 - 4.5
    assert [(p.get_x(), p.get_width()) for p in hatched] == (
        [(8.5, 4.5)] * 2 if with_launcher else [])
    labels = ax.get_legend_handles_labels()[1]
    assert ("of which Triton's compiled launcher alone" in labels) == with_launcher
    plt.close(fig)
