"""Pictures for the naive softmax: temperature, ``exp`` running out of range, rows breaking.

Three figures of notebook ``01_naive_softmax``:

* :func:`plot_temperature` -- one row's softmax at several temperatures, as grouped bars;
* :func:`plot_exp_range` -- for each dtype, the range of ``x`` where ``exp(x)`` is finite and
  nonzero, between the thresholds of :mod:`teachkit.numerics`;
* :func:`plot_broken_rows` -- the fraction of random rows whose naive softmax breaks, against the
  scale of the logits, one curve per dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Patch

from ..numerics import overflow_threshold, underflow_threshold
from .figures import new_axes

__all__ = ["dtype_name", "dtype_color", "plot_temperature", "plot_exp_range", "plot_broken_rows"]

_COLORS = {"float16": "C3", "bfloat16": "C2", "float32": "C0", "float64": "C4"}
_STYLES = {"float16": "-", "bfloat16": "--", "float32": "-", "float64": ":"}


def dtype_name(dtype: torch.dtype) -> str:
    """The short name of a dtype, e.g. ``'float16'`` for ``torch.float16``."""
    return str(dtype).removeprefix("torch.")


def dtype_color(name: str) -> str:
    """The colour every figure of the course uses for the dtype called ``name``."""
    return _COLORS.get(name, "0.3")


def _axes(ax: plt.Axes | None, width: float, height: float) -> tuple[plt.Figure, plt.Axes]:
    if ax is None:
        return new_axes(width=width, height=height)
    return ax.figure, ax


def plot_temperature(x: torch.Tensor, temperatures: Sequence[float],
                     ax: plt.Axes | None = None) -> plt.Figure:
    r"""Bar chart of :math:`\mathrm{softmax}(x / T)` for each temperature ``T``, grouped by entry.

    A small ``T`` sharpens the distribution towards the largest entry, a large ``T`` flattens it
    towards uniform; the order of the entries never changes.

    Parameters
    ----------
    x : torch.Tensor
        A short 1-D row of logits (a handful of entries reads best).
    temperatures : sequence of float
        Positive temperatures, one group member each.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if x.dim() != 1:
        raise ValueError(f"plot_temperature takes a 1-D row, got shape {tuple(x.shape)}")
    if not temperatures or any(t <= 0 for t in temperatures):
        raise ValueError(f"temperatures must be positive, got {list(temperatures)}")
    fig, ax = _axes(ax, 6.0, 3.4)
    xs = x.detach().double().cpu()
    n, k = len(xs), len(temperatures)
    width = 0.8 / k
    cmap = plt.get_cmap("viridis")
    for i, t in enumerate(temperatures):
        p = torch.softmax(xs / t, dim=0)
        pos = [j - 0.4 + width * (i + 0.5) for j in range(n)]
        ax.bar(pos, p.tolist(), width=width, color=cmap(i / max(k - 1, 1)), label=f"$T = {t:g}$")
    ax.set_xticks(range(n))
    ax.set_xticklabels([f"$x_{j}$ = {v:g}" for j, v in enumerate(xs.tolist())])
    ax.set_ylabel(r"$\mathrm{softmax}(x / T)_i$")
    ax.set_ylim(0, 1.08)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Temperature: small T sharpens, large T flattens")
    return fig


def plot_exp_range(dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16, torch.float32,
                                                    torch.float64),
                   lo: float = -130.0, hi: float = 115.0,
                   ax: plt.Axes | None = None) -> plt.Figure:
    """Draw, for each dtype, the range of ``x`` where ``exp(x)`` computed in it is finite and > 0.

    One horizontal bar per dtype runs from the underflow threshold
    (:func:`~teachkit.numerics.underflow_threshold`, below which ``exp`` rounds to 0) to the
    overflow threshold (:func:`~teachkit.numerics.overflow_threshold`, above which ``exp`` is
    ``inf``); the shaded regions beyond say what ``exp`` returns there. A threshold outside
    ``[lo, hi]`` is written at the edge with an arrow.

    Parameters
    ----------
    dtypes : sequence of torch.dtype
        Floating dtypes, drawn top to bottom.
    lo, hi : float
        The range of ``x`` shown.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not lo < hi:
        raise ValueError(f"need lo < hi, got lo={lo}, hi={hi}")
    fig, ax = _axes(ax, 7.5, 0.8 * len(dtypes) + 1.6)
    pad = 0.01 * (hi - lo)
    for row, dtype in enumerate(dtypes):
        name = dtype_name(dtype)
        y = len(dtypes) - 1 - row
        under, over = underflow_threshold(dtype), overflow_threshold(dtype)
        left, right = max(under, lo), min(over, hi)
        ax.barh(y, right - left, left=left, height=0.5, color=dtype_color(name), alpha=0.85)
        if over < hi:
            ax.barh(y, hi - over, left=over, height=0.5, color="C3", alpha=0.12, hatch="//",
                    edgecolor="C3", lw=0)
            ax.text(over, y + 0.28, f"{over:.2f}", ha="center", va="bottom", fontsize=8)
        else:
            ax.text(hi - pad, y, f"finite up to {over:.2f} \u2192", va="center", ha="right",
                    fontsize=8, color="white", fontweight="bold")
        if under > lo:
            ax.barh(y, under - lo, left=lo, height=0.5, color="0.5", alpha=0.15, lw=0)
            ax.text(under, y + 0.28, f"{under:.2f}", ha="center", va="bottom", fontsize=8)
        else:
            ax.text(lo + pad, y, f"\u2190 nonzero down to {under:.2f}", va="center", ha="left",
                    fontsize=8, color="white", fontweight="bold")
    handles = [Patch(facecolor="C3", alpha=0.12, hatch="//", edgecolor="C3", lw=0,
                     label="exp = inf (overflow)"),
               Patch(facecolor="0.5", alpha=0.15, lw=0, label="exp = 0 (underflow)")]
    ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16),
              ncol=2)
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(range(len(dtypes)))
    ax.set_yticklabels([dtype_name(d) for d in reversed(dtypes)])
    ax.set_xlim(lo, hi)
    ax.set_ylim(-0.5, len(dtypes) - 0.3)
    ax.set_xlabel("$x$")
    ax.set_title(r"Where $e^x$, computed in each dtype, is finite and nonzero")
    return fig


def plot_broken_rows(scales: Sequence[float], nan_fraction: Mapping[str, Sequence[float]],
                     breaking_scale: Mapping[str, float] | None = None,
                     zero_fraction: Mapping[str, Sequence[float]] | None = None,
                     ax: plt.Axes | None = None,
                     title: str = "Rows broken by the naive softmax") -> plt.Figure:
    """Fraction of rows that come out broken against the scale of the logits, one curve per dtype.

    Parameters
    ----------
    scales : sequence of float
        The logit scales measured (x axis, drawn on a log scale).
    nan_fraction : mapping of str to sequence of float
        For each dtype name (e.g. ``'float16'``), the fraction of rows holding a NaN at each scale
        (solid curves).
    breaking_scale : mapping of str to float, optional
        For each dtype name, the scale where a row is predicted to break half of the time (drawn as
        a vertical dotted line in the dtype's colour and labelled; scales within 5% of each
        other share one label).
    zero_fraction : mapping of str to sequence of float, optional
        For each dtype name, the fraction of rows that came out all zeros (the sum overflowed
        while no single ``exp`` did); drawn dashed.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made when omitted.
    title : str
        Axes title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    xs = [float(s) for s in scales]
    fig, ax = _axes(ax, 7.0, 4.0)
    for name, frac in nan_fraction.items():
        if len(frac) != len(xs):
            raise ValueError(f"{name}: {len(frac)} fractions for {len(xs)} scales")
        wide = name == "bfloat16"  # drawn wide and pale, so float32 stays visible on top of it
        ax.plot(xs, list(frac), "-" if wide else "-o", color=dtype_color(name), ms=3,
                lw=6 if wide else 2, alpha=0.45 if wide else 1.0, label=f"{name}: NaN")
    for name, frac in (zero_fraction or {}).items():
        if len(frac) != len(xs):
            raise ValueError(f"{name}: {len(frac)} fractions for {len(xs)} scales")
        if max(frac, default=0.0) > 0:
            ax.plot(xs, list(frac), "--", color=dtype_color(name), lw=1.5,
                    label=f"{name}: all zeros (sum overflowed)")
    groups: list[tuple[float, list[str]]] = []  # scales within 5% share one label
    for name, s in sorted((breaking_scale or {}).items(), key=lambda kv: kv[1]):
        ax.axvline(s, color=dtype_color(name), ls=":", lw=1.2)
        if groups and s <= 1.05 * groups[-1][0]:
            groups[-1][1].append(name)
        else:
            groups.append((s, [name]))
    for s, names in groups:
        ax.annotate(f"{s:.3g}", xy=(s, 1.02), xycoords=("data", "axes fraction"), ha="center",
                    va="bottom", fontsize=8, color=dtype_color(names[-1]))
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(r"scale $\sigma$ of the logits (rows of $\sigma \cdot \mathcal{N}(0, 1)$)")
    ax.set_ylabel("fraction of rows")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=3)
    ax.set_title(title, pad=16)
    return fig
