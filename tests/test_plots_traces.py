"""Plot helpers of notebook 03: the online trace and the block-reduction tree."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from teachkit.plots.reduction_tree import (  # noqa: E402
    butterfly_values,
    plot_block_reduction_tree,
)
from teachkit.plots.traces import max_jumps, plot_online_trace  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_online_trace_short_row_is_two_panels():
    fig = plot_online_trace(torch.tensor([1.0, 3.0, 2.0, 5.0]), title="by hand")
    assert isinstance(fig, plt.Figure)
    assert len(fig.axes) == 2
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert "1.2034" in texts  # the final denominator is written on the plot
    assert "×0.1353" in texts  # the rescale factor e^{3-5} at step 4


def test_online_trace_long_row_and_compact():
    x = torch.randn(301, generator=torch.Generator().manual_seed(1)) + torch.linspace(0, 4, 301)
    assert isinstance(plot_online_trace(x), plt.Figure)
    fig, ax = plt.subplots()
    assert plot_online_trace(x[:7], ax=ax) is fig


def test_online_trace_with_masked_prefix_and_bf16():
    x = torch.tensor([float("-inf"), float("-inf"), 0.5, 2.0, 1.0])
    assert isinstance(plot_online_trace(x), plt.Figure)
    assert isinstance(plot_online_trace(x[2:].bfloat16()), plt.Figure)


def test_online_trace_rejects_bad_rows():
    with pytest.raises(ValueError, match="1-D row"):
        plot_online_trace(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="at least one"):
        plot_online_trace(torch.zeros(0))


def test_max_jumps():
    assert max_jumps(torch.tensor([1.0, 3.0, 2.0, 5.0])).tolist() == [2, 4]
    assert max_jumps(torch.tensor([5.0, 4.0, 3.0])).tolist() == []
    with pytest.raises(ValueError):
        max_jumps(torch.zeros(2, 2))


def test_butterfly_values_agree_after_log2_steps():
    vals = torch.randn(32, generator=torch.Generator().manual_seed(2)).tolist()
    stages = butterfly_values(vals)
    assert len(stages) == 6  # the lanes' own values, then 5 steps
    assert stages[-1] == [max(vals)] * 32
    with pytest.raises(ValueError, match="power of two"):
        butterfly_values([1.0, 2.0, 3.0])


@pytest.mark.parametrize("lanes, warps", [(8, 4), (4, 3), (2, 1)])
def test_block_reduction_tree(lanes, warps):
    fig = plot_block_reduction_tree(lanes=lanes, warps=warps)
    assert isinstance(fig, plt.Figure)
    assert len(fig.axes) == 2


def test_block_reduction_tree_with_values():
    fig = plot_block_reduction_tree([0.3, 2.1, -0.5, 1.2, 0.8, 1.7, -1.0, 0.4])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("2.1") >= 8  # every lane ends holding the maximum
    with pytest.raises(ValueError):
        plot_block_reduction_tree(lanes=6)
    with pytest.raises(ValueError):
        plot_block_reduction_tree(warps=0)
