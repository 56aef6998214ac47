"""The softmax bandwidth figure (notebook 06): every provider in the legend, in the colour of its
bars in every panel, also a provider timed in one dtype only."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from teachkit.bench import Measurement  # noqa: E402
from teachkit.plots.softmax_bench import plot_bandwidth  # noqa: E402


def _result(provider: str, dtype: str, value: float) -> Measurement:
    return Measurement("4x64", dtype, provider, 1.0, value, "GB/s",
                       {"rows": 4, "cols": 64, "dtype": dtype})


def test_a_provider_of_one_dtype_keeps_its_colour_in_the_legend():
    results = [_result("torch", "fp32", 10.0), _result("torch", "bf16", 8.0),
               _result("16-bit only", "bf16", 9.0)]
    fig = plot_bandwidth(results, ceiling=12.0)
    legend = fig.axes[0].get_legend()
    colours = {text.get_text(): handle.get_facecolor()
               for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    assert list(colours) == ["torch", "16-bit only"]
    bf16 = fig.axes[1]
    bars = {bar.get_height(): bar.get_facecolor() for bar in bf16.patches}
    assert bars[9.0] == colours["16-bit only"] != colours["torch"] == bars[8.0]
    assert colours["16-bit only"] == to_rgba("C1")
    plt.close(fig)
