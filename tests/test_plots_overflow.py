"""The plot helpers of notebook 01 return figures and refuse bad input clearly."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from teachkit.plots.overflow import (  # noqa: E402
    dtype_color,
    dtype_name,
    plot_broken_rows,
    plot_exp_range,
    plot_temperature,
)


def test_dtype_name_and_color() -> None:
    assert dtype_name(torch.bfloat16) == "bfloat16"
    assert dtype_color("float16") != dtype_color("float32")


def test_plot_temperature() -> None:
    fig = plot_temperature(torch.tensor([1.0, 3.0, 2.0, 5.0]), [0.5, 1.0, 4.0])
    assert isinstance(fig, plt.Figure)
    assert len(fig.axes[0].patches) == 12  # 4 entries x 3 temperatures
    plt.close(fig)


def test_plot_temperature_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="1-D"):
        plot_temperature(torch.zeros(2, 3), [1.0])
    with pytest.raises(ValueError, match="positive"):
        plot_temperature(torch.zeros(3), [0.0])


def test_plot_exp_range_marks_thresholds() -> None:
    fig = plot_exp_range()
    assert isinstance(fig, plt.Figure)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "11.09" in texts and "-103.97" in texts
    assert any("709.78" in t for t in texts)  # float64's threshold is off the chart, at the edge
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "float64", "float32", "bfloat16", "float16"]
    plt.close(fig)


def test_plot_exp_range_on_given_axes() -> None:
    fig, ax = plt.subplots()
    assert plot_exp_range((torch.float32,), lo=-10, hi=10, ax=ax) is fig
    with pytest.raises(ValueError, match="lo < hi"):
        plot_exp_range(lo=1.0, hi=0.0)
    plt.close(fig)


def test_plot_broken_rows() -> None:
    scales = [1.0, 10.0, 100.0]
    fig = plot_broken_rows(scales, {"float16": [0.0, 1.0, 1.0], "float32": [0.0, 0.0, 1.0]},
                           breaking_scale={"float16": 3.4, "float32": 27.0},
                           zero_fraction={"float16": [0.1, 0.0, 0.0], "float32": [0, 0, 0]})
    assert isinstance(fig, plt.Figure)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["float16: NaN", "float32: NaN", "float16: all zeros (sum overflowed)"]
    assert [t.get_text() for t in fig.axes[0].texts] == ["3.4", "27"]
    plt.close(fig)


def test_plot_broken_rows_merges_close_labels() -> None:
    fig = plot_broken_rows([1.0, 2.0], {"bfloat16": [0, 1], "float32": [0, 1]},
                           breaking_scale={"bfloat16": 26.8, "float32": 26.9})
    assert [t.get_text() for t in fig.axes[0].texts] == ["26.8"]
    plt.close(fig)


def test_plot_broken_rows_length_mismatch() -> None:
    with pytest.raises(ValueError, match="2 fractions for 3 scales"):
        plot_broken_rows([1, 2, 3], {"float16": [0.0, 1.0]})
