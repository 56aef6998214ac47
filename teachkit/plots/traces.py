"""Traces of the online softmax: the running maximum and denominator along a row."""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from ..softmax import online_prefix_stats
from .figures import new_axes

__all__ = ["plot_online_trace"]


def plot_online_trace(x: torch.Tensor, title: str = "Online softmax along one row",
                      ax: plt.Axes | None = None) -> plt.Figure:
    """Plot a 1-D row, its running maximum ``m`` and running denominator ``d`` step by step.

    Steps where ``m`` jumps are marked: there the old ``d`` is rescaled by ``exp(m_old - m_new)``
    and drops, before the new element's term is added.

    Parameters
    ----------
    x : torch.Tensor
        A 1-D floating row.
    title : str
        Axes title.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made when omitted.
    """
    if x.dim() != 1:
        raise ValueError(f"plot_online_trace takes a 1-D row, got shape {tuple(x.shape)}; "
                         "pass one row, e.g. x[0]")
    m, d = (t.double().cpu() for t in online_prefix_stats(x))
    xs = x.double().cpu()
    steps = torch.arange(1, len(xs) + 1)
    if ax is None:
        fig, ax = new_axes(width=7.0)
    else:
        fig = ax.figure
    many = len(xs) > 40
    ax.plot(steps, xs, ".", color="0.6", ms=3 if many else 8, label="$x_j$")
    ax.step(steps, m, where="post", color="C0", lw=2, label="running max $m_j$")
    jumps = torch.nonzero(m[1:] > m[:-1]).flatten() + 1
    ax.plot(steps[jumps], m[jumps], "o", color="C0", ms=3 if many else 7, mfc="white")
    ax.set_xlabel("step $j$ (elements read)")
    ax.set_ylabel("value / running max")
    ax2 = ax.twinx()
    ax2.plot(steps, d, "-" if many else "-s", color="C3", lw=1.5, ms=6, label="running sum $d_j$")
    ax2.set_ylabel("running denominator $d_j$", color="C3")
    ax2.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.set_title(title)
    if not many:
        ax.set_xticks(steps.tolist())
    return fig
