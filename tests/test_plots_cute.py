"""Plot helpers of notebook 11: the row's layout over threads and vectors, and the tiers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from inputs import randn  # noqa: E402

from teachkit.cute import elements_of_thread, simulate_cute_softmax  # noqa: E402
from teachkit.plots.cute import layout_grid, plot_row_layout, plot_tiers, tier_lse  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_layout_grid_matches_thread_ownership():
    n, threads, vec = 75, 8, 4
    grid = layout_grid(n, threads, vec)
    assert grid.shape == (3, 32)
    flat = grid.reshape(-1)
    assert (flat[n:] == -1).all()
    for t in range(threads):
        assert np.flatnonzero(flat == t).tolist() == elements_of_thread(t, n, threads, vec)


def test_plot_row_layout_labels_elements_and_sweeps():
    fig = plot_row_layout(75, threads=8, vec=4, warp_size=4)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"0", "74", "sweep 2", "t7"} <= texts and "75" not in texts
    assert "warps of 4" in " ".join(texts)


def test_tier_lse_ends_at_the_rows_logsumexp(gen):
    x = randn(2, 500, gen=gen, scale=2.0)
    trace = simulate_cute_softmax(x, threads=64, vec=4, warp_size=16)
    data = tier_lse(trace, row=1)
    ref = torch.logsumexp(x[1].double(), -1).item()
    assert data["block"] == pytest.approx(ref, rel=1e-6)
    assert data["rounds"].shape == (5, 64)  # start + log2(16) rounds
    last = data["rounds"][-1].reshape(4, 16)
    assert np.allclose(last, data["warps"][:, None])  # every lane holds its warp's pair


def test_plot_tiers_handles_idle_threads_and_warps(gen):
    trace = simulate_cute_softmax(randn(100, gen=gen), threads=128, vec=4)
    with np.errstate(all="raise"):
        fig = plot_tiers(trace, title="a short row")
    assert len(fig.axes) == 4  # three panels and a colour bar
    assert sum(t.get_text() == "idle" for t in fig.axes[2].texts) == 3
