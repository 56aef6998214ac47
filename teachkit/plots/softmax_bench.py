"""Softmax benchmark figures: achieved bandwidth per provider and shape against the copy
ceiling (notebook 06)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from .figures import label_device

__all__ = ["plot_bandwidth"]


def plot_bandwidth(results: list, ceiling: float | None = None,
                   title: str = "Softmax: achieved bandwidth",
                   device: str | None = None) -> plt.Figure:
    """Grouped bars of GB/s per problem (x) and provider (colour), one panel per dtype.

    Each provider keeps its colour in every panel, and the legend lists every provider, also one
    timed in only one dtype (the 16-bit resident rows rounded an element at a time).

    Parameters
    ----------
    results : list of teachkit.bench.Measurement
        What :func:`teachkit.bench.bench_softmax` returned (or a saved record): grouped by
        their ``params`` (``rows``, ``cols``, ``dtype``), labelled by ``problem``.
    ceiling : float, optional
        The measured copy bandwidth, drawn as a dashed line.
    title : str
        Figure title.
    device : str, optional
        The device the results were measured on, written in the corner (default: this one).
    """
    dtypes = list(dict.fromkeys(r.params["dtype"] for r in results))
    providers = list(dict.fromkeys(r.provider for r in results))
    labels = {(r.params["rows"], r.params["cols"]): r.problem for r in results}
    problems = list(labels)  # (rows, cols), in the order measured
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(11, 3.4 * len(dtypes)), squeeze=False)
    width = 0.8 / max(len(providers), 1)
    for ax, dt in zip(axes[:, 0], dtypes, strict=True):
        mine = [r for r in results if r.params["dtype"] == dt]
        for j, prov in enumerate(providers):
            vals = {(r.params["rows"], r.params["cols"]): r.value for r in mine
                    if r.provider == prov}
            xs = [i + (j - (len(providers) - 1) / 2) * width for i, p in enumerate(problems)
                  if p in vals]
            ax.bar(xs, [vals[p] for p in problems if p in vals], width, color=_colour(j))
        top = max([r.value for r in mine] + [ceiling or 0])
        ax.set_ylim(0, top * 1.35)  # headroom for the legend above the bars
        if ceiling:
            ax.axhline(ceiling, color="k", ls="--", lw=1)
            ax.text(-0.5, ceiling, f" copy {ceiling:.0f} GB/s", va="bottom", ha="left",
                    fontsize=8)
        ax.set_xticks(np.arange(len(problems)), [labels[p] for p in problems], fontsize=8)
        ax.set_ylabel(f"{mine[0].dtype}: GB/s")
        ax.grid(axis="y", alpha=0.3)
    handles = [Patch(color=_colour(j), label=prov) for j, prov in enumerate(providers)]
    axes[0, 0].legend(handles=handles, fontsize=8, ncol=min(len(providers), 3),
                      loc="upper right")
    axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel("rows x columns")
    label_device(fig, device)
    fig.tight_layout()
    return fig


def _colour(index: int) -> str:
    """The colour of the ``index``-th provider: matplotlib's default cycle, ``C0`` to ``C9``."""
    return f"C{index % 10}"
