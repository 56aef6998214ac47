"""The merge pictures of notebook 04: they return Figures and draw the right numbers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from teachkit.compare import relative_error  # noqa: E402
from teachkit.plots.merges import chunk_weights, plot_chunk_rescale, plot_part_weights  # noqa: E402


def test_chunk_weights_sum_to_one_and_rescale_exactly(gen):
    x = torch.randn(53, generator=gen, dtype=torch.float64) * 3
    w = chunk_weights(x, 16)
    assert w.shape == (4,) and abs(w.sum().item() - 1) < 1e-12
    local = [torch.softmax(c, -1) * w[i] for i, c in enumerate(x.split(16))]
    assert relative_error(torch.cat(local), torch.softmax(x, -1)) < 1e-12


def test_chunk_weights_of_a_masked_chunk_is_zero(gen):
    x = torch.randn(40, generator=gen)
    x[:20] = float("-inf")
    w = chunk_weights(x, 10)
    assert w[:2].tolist() == [0.0, 0.0] and abs(w.sum().item() - 1) < 1e-12
    with pytest.raises(ValueError, match="1-D row"):
        chunk_weights(x.reshape(4, 10), 10)


def test_plot_chunk_rescale_returns_a_figure_with_the_global_softmax(gen):
    x = torch.randn(45, generator=gen)
    fig = plot_chunk_rescale(x, 12)
    assert isinstance(fig, plt.Figure) and len(fig.axes) == 2
    (dots,) = [ln.get_ydata() for ln in fig.axes[1].lines if ln.get_label().startswith("softmax")]
    assert relative_error(torch.as_tensor(dots), torch.softmax(x.double(), -1)) < 1e-12
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert len(texts) == 4 and texts[0].startswith("$w_0$")
    plt.close(fig)


def test_plot_part_weights_stacks_to_one(gen):
    lse = torch.randn(3, 5, generator=gen)
    lse[1, 2] = float("-inf")  # a part that saw no key for row 2
    fig = plot_part_weights(lse, ["a", "b", "c"])
    assert isinstance(fig, plt.Figure)
    ax = fig.axes[0]
    widths = torch.tensor([p.get_width() for p in ax.patches]).reshape(3, 5)
    assert torch.allclose(widths.sum(0), torch.ones(5, dtype=widths.dtype))
    assert widths[1, 2] == 0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b", "c"]
    plt.close(fig)
    with pytest.raises(ValueError, match="parts, rows"):
        plot_part_weights(torch.zeros(4))
