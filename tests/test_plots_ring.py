"""Plot helpers of notebook 10: schedule, work per rank, timeline, memory, benchmark."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from teachkit.bench.core import Measurement  # noqa: E402
from teachkit.plots.ring import (  # noqa: E402
    plot_rank_work,
    plot_ring_bench,
    plot_ring_memory,
    plot_ring_schedule,
    plot_ring_timeline,
)
from teachkit.ring import ring_memory  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_schedule_has_one_cell_per_rank_and_step_and_a_legend_of_masks():
    fig = plot_ring_schedule(4, causal=True, layout="contiguous")
    ax = fig.axes[0]
    assert len(ax.patches) == 16
    assert sorted(t.get_text() for t in ax.texts) == sorted([str(s) for s in range(4)] * 4)
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"masked", "skip", "full"}
    fig, ax = plt.subplots()
    assert plot_ring_schedule(3, causal=True, layout="striped", ax=ax) is fig
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"masked", "strict"}


def test_rank_work_bars_and_busiest_rank_lines():
    fig = plot_rank_work({"contiguous": [1, 3, 5, 7], "striped": [4, 4, 4, 4]})
    ax = fig.axes[0]
    assert len(ax.patches) == 8
    assert sorted(line.get_ydata()[0] for line in ax.lines) == [4, 7]


def test_timeline_draws_compute_and_wait_per_step():
    steps = [{"step": t, "start_ms": 3.0 * t, "compute_ms": 2.0, "wait_ms": 1.0}
             for t in range(3)]
    fig = plot_ring_timeline([steps, steps])
    ax = fig.axes[0]
    assert len(ax.collections) == 2 * 2 * 3
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]


def test_memory_bars_stack_every_buffer():
    m = ring_memory(1, 32, 65536, 128, world_size=4)
    fig = plot_ring_memory({"ring worker": m.per_worker, "one device": m.one_device})
    ax = fig.axes[0]
    assert len(ax.patches) == len(m.per_worker) + len(m.one_device)
    assert f"{m.worker_total / 2**30:.3g} GiB" in [t.get_text() for t in ax.texts]


def test_bench_lines_per_provider_and_mask_ignore_other_units():
    def params(n: int, causal: bool) -> dict:
        return {"N": n, "causal": causal, "dtype": "float16"}

    rows = [Measurement(f"{'causal' if c else 'full'} N={n}", "fp16", prov, 10.0 * n, 1.0,
                        "TFLOP/s", params(n, c))
            for c in (False, True) for n in (1024, 2048) for prov in ("1 GPU", "ring, 4 GPUs")]
    rows.append(Measurement("full N=1024", "fp16", "1 GPU", 1.0, 3.0, "GiB peak",
                            params(1024, False)))
    fig = plot_ring_bench(rows)
    ax = fig.axes[0]
    assert len(ax.lines) == 4 and ax.get_xscale() == "log"
