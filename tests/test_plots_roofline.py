"""The notebook 05 figures build and return a Figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from teachkit.plots.roofline import plot_roofline, plot_traffic, plot_working_set  # noqa: E402
from teachkit.traffic import VARIANTS, traffic_model  # noqa: E402


def test_plot_roofline():
    fig = plot_roofline(3000.0, 744.0, {"softmax": 0.625, "matmul": 2730.0}, "H100",
                        achieved={"softmax": 1.5})
    assert isinstance(fig, plt.Figure)
    assert "H100" in fig.axes[0].get_title()
    plt.close(fig)


def test_plot_traffic():
    fig = plot_traffic({v: traffic_model(v, 100, 1000, 4) for v in VARIANTS})
    assert isinstance(fig, plt.Figure)
    assert len(fig.axes[0].get_yticklabels()) == len(VARIANTS)
    plt.close(fig)


def test_plot_working_set():
    rows = [{"working_set_bytes": 2**k, "copy_cold": 10.0 * k, "copy_warm": 12.0 * k}
            for k in range(20, 30)]
    fig = plot_working_set(rows, copy_gbps=300.0, l2_bytes=50 * 2**20, device="GPU")
    assert isinstance(fig, plt.Figure)
    plt.close(fig)


def test_plot_roofline_names_the_matmul_dtype():
    def texts(fig):
        return " ".join(t.get_text() for t in fig.axes[0].texts)

    fig = plot_roofline(3000.0, 744.0, {"softmax": 0.625}, "H100")
    assert "744 TFLOP/s (bf16 matmul)" in texts(fig)
    plt.close(fig)
    fig = plot_roofline(300.0, 65.0, {"softmax": 0.625}, "Tesla T4", matmul_dtype="float16")
    assert "65 TFLOP/s (fp16 matmul)" in texts(fig)
    plt.close(fig)


def test_plot_working_set_with_every_size_skipped():
    fig = plot_working_set([], copy_gbps=300.0, l2_bytes=4 * 2**20)
    assert isinstance(fig, plt.Figure)
    plt.close(fig)
