r"""Pictures of merges: chunks' local softmaxes rescaled into one, and the weights of partials.

A chunk's softmax computed on its own sums to 1. In the softmax of the whole row the same chunk
holds only the share :math:`w_i = d_i e^{m_i - m} / d = e^{lse_i - lse}` of the mass;
multiplying the local probabilities by :math:`w_i` gives the global ones.
:func:`plot_chunk_rescale` draws both stages, :func:`plot_part_weights` draws the shares
:math:`w_i` of several parts for a few rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from ..softmax import chunk_stats, exp_shift, softmax_stats
from .figures import new_axes

__all__ = ["chunk_weights", "plot_chunk_rescale", "plot_part_weights"]


def chunk_weights(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    r"""The share :math:`w_i = d_i e^{m_i - m} / d` of each chunk of a 1-D row, in float64.

    Parameters
    ----------
    x : torch.Tensor
        A 1-D floating row with at least one finite entry.
    chunk_size : int
        Elements per chunk (the last chunk may be shorter).

    Returns
    -------
    torch.Tensor
        One weight per chunk; they sum to 1.

    Examples
    --------
    >>> w = chunk_weights(torch.tensor([1.0, 3.0, 2.0, 5.0]), 2)
    >>> [round(v, 4) for v in w.tolist()]
    [0.1277, 0.8723]
    """
    if x.dim() != 1:
        raise ValueError(f"chunk_weights takes a 1-D row, got shape {tuple(x.shape)}; "
                         "pass one row, e.g. x[0]")
    x64 = x.detach().to("cpu", torch.float64)
    m_i, d_i = chunk_stats(x64, chunk_size)
    m, d = softmax_stats(x64)
    return d_i * exp_shift(m_i, m) / d


def plot_chunk_rescale(
    x: torch.Tensor, chunk_size: int,
    title: str = "Each chunk's own softmax, rescaled into the softmax of the row",
) -> plt.Figure:
    r"""Two panels: every chunk's softmax computed alone, then the same bars times :math:`w_i`.

    Top: the local probabilities :math:`p_i = e^{x - m_i}/d_i` (each chunk's bars sum to 1).
    Bottom, on the same scale: :math:`p_i \cdot w_i` with :math:`w_i = d_i e^{m_i - m}/d`,
    written above each chunk, and the softmax of the whole row as black dots: the rescaled bars
    reach exactly the dots.

    Parameters
    ----------
    x : torch.Tensor
        A short 1-D floating row (a few dozen entries stay readable).
    chunk_size : int
        Elements per chunk (the last chunk may be shorter).
    title : str
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    w = chunk_weights(x, chunk_size)
    x64 = x.detach().to("cpu", torch.float64)
    chunks = x64.split(chunk_size)
    fig, axes = plt.subplots(2, 1, figsize=(8.0, 5.6), sharex=True, sharey=True)
    start = 0
    global_p = torch.softmax(x64, dim=-1)
    for i, c in enumerate(chunks):
        idx = torch.arange(start, start + len(c))
        m_i = c.max()
        local = exp_shift(c, m_i)
        local = local / local.sum() if bool(local.sum() > 0) else local
        color = f"C{i % 10}"
        axes[0].bar(idx.numpy(), local.numpy(), color=color, width=0.8)
        axes[1].bar(idx.numpy(), (local * w[i]).numpy(), color=color, width=0.8)
        mid = start + (len(c) - 1) / 2
        axes[0].text(mid, 1.02, f"chunk {i}", ha="center", va="bottom", fontsize=8,
                     transform=axes[0].get_xaxis_transform())
        axes[1].text(mid, 1.02, f"$w_{i}$ = {w[i].item():.2f}", ha="center", va="bottom",
                     fontsize=8, transform=axes[1].get_xaxis_transform())
        if start:
            for ax in axes:
                ax.axvline(start - 0.5, color="0.6", lw=0.8, ls="--")
        start += len(c)
    axes[1].plot(range(len(x64)), global_p.numpy(), "k.", ms=5, label="softmax of the whole row")
    axes[0].set_ylabel("local softmax $p_i$\n(each chunk sums to 1)")
    axes[1].set_ylabel("$p_i \\cdot w_i$,  $w_i = d_i e^{m_i - m}/d$")
    axes[1].set_xlabel("position in the row")
    axes[1].legend(loc="upper left", fontsize=8)
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.margins(x=0.01)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_part_weights(
    lse_parts: torch.Tensor, part_labels: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    title: str = r"Share of each part in the merged result, $e^{\mathrm{lse}_i - \mathrm{lse}}$",
    ax: plt.Axes | None = None,
) -> plt.Figure:
    r"""Stacked horizontal bars: for each row, the weight :math:`e^{lse_i - lse}` of every part.

    The weights of one row sum to 1; a part with ``lse = -inf`` (it saw no key) gets 0.

    Parameters
    ----------
    lse_parts : torch.Tensor
        ``(parts, rows)``: the log-sum-exp of every part for every row (each row needs at least
        one finite entry).
    part_labels : sequence of str, optional
        Legend entries, one per part (default ``part 0``, ``part 1``, ...).
    row_labels : sequence of str, optional
        Tick labels, one per row (default ``row 0``, ``row 1``, ...).
    title : str
        Axes title.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if lse_parts.dim() != 2:
        raise ValueError(f"lse_parts must be (parts, rows), got shape {tuple(lse_parts.shape)}; "
                         "stack one lse vector per part, e.g. torch.stack(lses)")
    lse = lse_parts.detach().to("cpu", torch.float64)
    weights = torch.softmax(lse, dim=0)  # e^{lse_i - lse}, 0 where lse_i = -inf
    parts, rows = weights.shape
    part_labels = list(part_labels or [f"part {i}" for i in range(parts)])
    row_labels = list(row_labels or [f"row {r}" for r in range(rows)])
    if ax is None:
        fig, ax = new_axes(width=7.5, height=0.45 * rows + 1.6)
    else:
        fig = ax.figure
    left = torch.zeros(rows, dtype=torch.float64)
    for i in range(parts):
        ax.barh(range(rows), weights[i].numpy(), left=left.numpy(), color=f"C{i % 10}",
                label=part_labels[i], edgecolor="white", lw=0.5)
        for r in range(rows):
            if weights[i, r] > 0.06:
                ax.text(left[r] + weights[i, r] / 2, r, f"{weights[i, r].item():.2f}",
                        ha="center", va="center", fontsize=7, color="white")
        left += weights[i]
    ax.set_yticks(range(rows), row_labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("weight in the merged output (each row sums to 1)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig
