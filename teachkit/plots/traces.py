"""Traces of the online softmax: the running maximum and denominator along a row."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import torch

from ..softmax import online_prefix_stats

__all__ = ["plot_online_trace", "max_jumps"]


def max_jumps(x: torch.Tensor) -> torch.Tensor:
    """The steps ``j`` (1-based) after the first where the running maximum of a 1-D row grows.

    At each of them the online update rescales the old denominator by ``exp(m_old - m_new) < 1``.

    Examples
    --------
    >>> max_jumps(torch.tensor([1.0, 3.0, 2.0, 5.0]))
    tensor([2, 4])
    """
    if x.dim() != 1:
        raise ValueError(f"max_jumps takes a 1-D row, got shape {tuple(x.shape)}")
    m = torch.cummax(x.detach().cpu().double(), dim=0).values
    return torch.nonzero(m[1:] > m[:-1]).flatten() + 2


def plot_online_trace(
    x: torch.Tensor, title: str = "Online softmax along one row", ax: plt.Axes | None = None
) -> plt.Figure:
    """Plot a 1-D row, its running maximum ``m_j`` and running denominator ``d_j`` step by step.

    Without ``ax``, two panels share the step axis: on top the values ``x_j`` and the running
    maximum; below the denominator. Steps where ``m`` jumps are marked in both panels. For a
    short row (at most 40 values) the lower panel also shows the rescale: the old ``d`` first
    drops to ``d_{j-1} e^{m_{j-1} - m_j}`` (open marker, dashed arrow), then the new term
    ``e^{x_j - m_j}`` is added; each ``d_j`` is written beside its point.

    Parameters
    ----------
    x : torch.Tensor
        A 1-D floating row.
    title : str
        Figure title.
    ax : matplotlib.axes.Axes, optional
        Draw a compact version (one axes, ``d`` on a twin y-axis) there instead.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if x.dim() != 1:
        raise ValueError(f"plot_online_trace takes a 1-D row, got shape {tuple(x.shape)}; "
                         "pass one row, e.g. x[0]")
    if x.numel() == 0:
        raise ValueError("plot_online_trace needs at least one value")
    m, d = (t.detach().double().cpu() for t in online_prefix_stats(x))
    xs = x.detach().double().cpu()
    steps = torch.arange(1, len(xs) + 1)
    jumps = max_jumps(x) - 1  # 0-based indices of the jump steps
    if ax is not None:
        return _compact(ax, xs, m, d, steps, jumps, title)

    short = len(xs) <= 40
    fig, (top, bottom) = plt.subplots(
        2, 1, sharex=True, figsize=(7.5, 5.4 if short else 5.0),
        gridspec_kw={"height_ratios": [1.1, 1.0], "hspace": 0.08},
    )
    # Top: the values and the running maximum (a staircase that only climbs).
    top.plot(steps, xs, "o" if short else ".", color="0.45", ms=7 if short else 3, zorder=5,
             label="value $x_j$")
    top.step(steps, m, where="post", color="C0", lw=2, label="running max $m_j$")
    if len(xs) > 1:
        top.hlines(m[-1], steps[-1], steps[-1] + 0.5, color="C0", lw=2)
    top.plot(steps[jumps], m[jumps], "o", color="C0", mfc="none", mew=1.5,
             ms=13 if short else 5, zorder=4, label=f"$m$ jumps ({len(jumps)}×)")
    top.set_ylabel("value")
    top.legend(loc="upper left" if short else "lower right", fontsize=8)
    top.set_title(title)

    # Bottom: the running denominator, with the rescale at each jump.
    bottom.plot(steps, d, "-s" if short else "-", color="C3", ms=6, lw=1.5,
                label="running denominator $d_j$")
    for j in jumps.tolist():
        for axis in (top, bottom):
            axis.axvline(j + 1, color="C0", lw=0.8, ls=":", alpha=0.7)
    if short:
        _mark_rescales(bottom, steps, m, d, jumps)
        for s, dj in zip(steps.tolist(), d.tolist(), strict=True):
            bottom.annotate(f"{dj:.4f}", (s, dj), textcoords="offset points", xytext=(8, 6),
                            fontsize=8, color="C3")
        bottom.set_xticks(steps.tolist())
        bottom.set_xlim(0.6, len(xs) + 0.9)
    bottom.set_ylim(0, float(d.max()) * 1.25)
    bottom.set_xlabel("step $j$ (elements read)")
    bottom.set_ylabel("$d_j$")
    bottom.legend(loc="upper left", fontsize=8)
    return fig


def _mark_rescales(ax: plt.Axes, steps: torch.Tensor, m: torch.Tensor, d: torch.Tensor,
                   jumps: torch.Tensor) -> None:
    """Draw, at each jump, the old ``d`` shrinking to ``d e^{m_old - m_new}`` before the add."""
    first = True
    for j in jumps.tolist():
        rescaled = float(d[j - 1] * torch.exp(m[j - 1] - m[j]))
        s = int(steps[j])
        ax.annotate("", xy=(s, rescaled), xytext=(s - 1, float(d[j - 1])),
                    arrowprops={"arrowstyle": "->", "color": "0.35", "ls": "--", "lw": 1})
        ax.plot([s], [rescaled], "o", mfc="white", color="C3", ms=7,
                label=r"old $d$ rescaled by $e^{m_{j-1}-m_j}$" if first else None)
        ax.annotate("", xy=(s, float(d[j])), xytext=(s, rescaled),
                    arrowprops={"arrowstyle": "->", "color": "C2", "lw": 1.2})
        ax.annotate(f"×{math.exp(float(m[j - 1] - m[j])):.4f}", (s, rescaled),
                    textcoords="offset points", xytext=(-9, 2), ha="right", va="bottom",
                    fontsize=8, color="0.35")
        ax.annotate(r"$+e^{x_j - m_j}$", (s, (rescaled + float(d[j])) / 2),
                    textcoords="offset points", xytext=(5, 0), va="center", fontsize=8,
                    color="C2")
        first = False


def _compact(ax: plt.Axes, xs: torch.Tensor, m: torch.Tensor, d: torch.Tensor,
             steps: torch.Tensor, jumps: torch.Tensor, title: str) -> plt.Figure:
    """One axes: values and running max on the left y-axis, ``d`` on a twin right y-axis."""
    many = len(xs) > 40
    ax.plot(steps, xs, ".", color="0.5", ms=3 if many else 8, label="$x_j$")
    ax.step(steps, m, where="post", color="C0", lw=2, label="running max $m_j$")
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
    return ax.figure
