"""The error-versus-scale picture of notebook 02."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from teachkit.numerics import overflow_threshold  # noqa: E402
from teachkit.plots.errors import error_vs_scale, plot_error_vs_scale, scaled_rows  # noqa: E402
from teachkit.softmax import naive_softmax, safe_softmax  # noqa: E402


def test_scaled_rows_have_the_asked_maximum():
    x = scaled_rows(37.5, rows=4, n=11, seed=3)
    assert x.shape == (4, 11) and x.dtype == torch.float64
    assert torch.all(x.amax(-1) == 37.5) and torch.all(x.abs() <= 37.5)
    assert torch.equal(scaled_rows(2.0, 4, 11, 3) * 18.75, x)


def test_naive_fails_past_the_threshold_and_safe_does_not():
    limit = overflow_threshold(torch.float32)
    scales = [1.0, limit * 0.5, limit * 1.5, 1e4]
    naive = error_vs_scale(naive_softmax, torch.float32, scales)
    safe = error_vs_scale(safe_softmax, torch.float32, scales)
    assert naive[0] < 1e-6 and math.isinf(naive[2]) and math.isinf(naive[3])
    assert max(safe) < 1e-6
    assert max(error_vs_scale(safe_softmax, torch.float16, [1.0, 100.0])) < 2e-3


def test_plot_returns_a_figure_with_one_panel_per_dtype():
    methods = {"naive": naive_softmax, "safe": safe_softmax}
    fig = plot_error_vs_scale(methods, dtypes=(torch.float32, torch.float16),
                              scales=[1.0, 10.0, 100.0], rows=2, n=9)
    assert isinstance(fig, plt.Figure)
    assert len(fig.axes) == 2
    assert [line.get_label() for line in fig.axes[0].get_lines()][:2] == ["naive", "safe"]
    plt.close(fig)
    fig = plot_error_vs_scale({"safe": safe_softmax}, dtypes=(torch.bfloat16,), scales=[5.0])
    assert isinstance(fig, plt.Figure) and len(fig.axes) == 1
    plt.close(fig)


def test_plot_rejects_empty_inputs():
    with pytest.raises(ValueError, match="methods is empty"):
        plot_error_vs_scale({})
    with pytest.raises(ValueError, match="dtypes is empty"):
        plot_error_vs_scale({"safe": safe_softmax}, dtypes=())
