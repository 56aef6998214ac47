"""Pictures of ring attention (notebook 10): the schedule, the work per rank, a timeline per rank,
what a worker holds in memory, and the multi-GPU benchmark.

:func:`plot_ring_schedule` draws rank x step, each cell the block in hand coloured by its mask.
:func:`plot_rank_work` compares the work of each rank under several assignments.
:func:`plot_ring_timeline` draws, per rank, when it computed and when it waited for a block.
:func:`plot_ring_memory` stacks the buffers of one worker beside one device holding everything.
:func:`plot_ring_bench` draws time against sequence length, one GPU against the ring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from ..ring.layout import ring_schedule
from ..tiling import FULL, MASKED, SKIP, STRICT, TileKind
from .figures import new_axes

__all__ = [
    "MASK_COLORS",
    "plot_ring_schedule",
    "plot_rank_work",
    "plot_ring_timeline",
    "plot_ring_memory",
    "plot_ring_bench",
]

MASK_COLORS: dict[TileKind, str] = {SKIP: "#eeeeee", FULL: "#4c9be8", MASKED: "#f5a142",
                                    STRICT: "#b07cd8"}
"""Fill colour of each block mask."""
_COMPUTE, _WAIT = "#4c9be8", "#e8574c"


def plot_ring_schedule(world_size: int, causal: bool, layout: str = "contiguous",
                       ax: plt.Axes | None = None, title: str | None = None) -> plt.Figure:
    """Rank (rows) x step (columns): which block each rank holds and how it is masked.

    Each cell is labelled with the rank the block came from (``(r - t) mod W``) and coloured by
    :func:`~teachkit.ring.layout.block_mask`: full, masked (``b <= a``), strict (``b < a``) or
    skipped.

    Parameters
    ----------
    world_size : int
        Ranks ``W``.
    causal : bool
        Causal attention over the whole sequence.
    layout : str
        ``"contiguous"`` or ``"striped"``.
    ax : matplotlib.axes.Axes, optional
        Draw there instead of a new figure.
    title : str, optional
        Axes title; defaults to the layout and mask.

    Returns
    -------
    matplotlib.figure.Figure
    """
    schedule = ring_schedule(world_size, causal, layout)
    if ax is None:
        fig, ax = new_axes(width=1.0 + 0.8 * world_size, height=1.0 + 0.6 * world_size)
    else:
        fig = ax.figure
    for r, row in enumerate(schedule):
        for t, mask in enumerate(row):
            ax.add_patch(plt.Rectangle((t, r), 1, 1, facecolor=MASK_COLORS[mask],
                                       edgecolor="white", lw=2))
            src = (r - t) % world_size
            ax.text(t + 0.5, r + 0.5, f"{src}", ha="center", va="center", fontsize=9,
                    color="0.5" if mask == SKIP else "black")
    ax.set_xlim(0, world_size)
    ax.set_ylim(world_size, 0)
    ax.set_xticks(np.arange(world_size) + 0.5, [str(t) for t in range(world_size)])
    ax.set_yticks(np.arange(world_size) + 0.5, [str(r) for r in range(world_size)])
    ax.set_xlabel("step (cell: rank the k/v block came from)")
    ax.set_ylabel("rank")
    ax.set_aspect("equal")
    used = list(dict.fromkeys(m for row in schedule for m in row))
    ax.legend(handles=[Patch(facecolor=MASK_COLORS[m], edgecolor="0.6", label=m) for m in used],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    mask_name = "causal" if causal else "no mask"
    ax.set_title(title or f"{layout}, {mask_name}, W = {world_size}", fontsize=10)
    return fig


def plot_rank_work(work: Mapping[str, Sequence[float]], ylabel: str = "tiles computed",
                   title: str = "Work per rank", ax: plt.Axes | None = None) -> plt.Figure:
    """Grouped bars: the work of every rank (x) under each labelled assignment (colour).

    A dashed line marks the busiest rank of each assignment: in the ring every step waits for
    the slowest rank, so the maximum, not the mean, sets the time.

    Parameters
    ----------
    work : mapping of str to sequence of float
        ``{label: [work of rank 0, rank 1, ...]}``, e.g. tiles or milliseconds.
    ylabel : str
        What the numbers are.
    title : str
        Axes title.
    ax : matplotlib.axes.Axes, optional
        Draw there instead of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if ax is None:
        fig, ax = new_axes(width=6.0, height=3.6)
    else:
        fig = ax.figure
    width = 0.8 / max(len(work), 1)
    for j, (label, values) in enumerate(work.items()):
        xs = np.arange(len(values)) + (j - (len(work) - 1) / 2) * width
        ax.bar(xs, values, width, color=f"C{j}", label=label)
        ax.axhline(max(values), color=f"C{j}", ls="--", lw=1)
    ranks = max((len(v) for v in work.values()), default=0)
    ax.set_xticks(np.arange(ranks), [str(r) for r in range(ranks)])
    ax.set_xlabel("rank")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig


def plot_ring_timeline(timelines: Sequence[Sequence[Mapping[str, float]]],
                       title: str = "Ring timeline", ax: plt.Axes | None = None) -> plt.Figure:
    """One row per rank: the time it computed on each block (blue) and waited for the next
    (red), from the ``timeline`` of :class:`~teachkit.ring.attention.RankResult`.

    Parameters
    ----------
    timelines : sequence of sequence of dict
        ``timelines[r]`` is rank ``r``'s list of steps with ``start_ms``, ``compute_ms``,
        ``wait_ms`` (and ``step``).
    title : str
        Axes title.
    ax : matplotlib.axes.Axes, optional
        Draw there instead of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if ax is None:
        fig, ax = new_axes(width=7.0, height=0.9 + 0.45 * len(timelines))
    else:
        fig = ax.figure
    for r, steps in enumerate(timelines):
        for s in steps:
            ax.broken_barh([(s["start_ms"], s["compute_ms"])], (r - 0.35, 0.7),
                           facecolor=_COMPUTE, edgecolor="white", lw=0.5)
            ax.broken_barh([(s["start_ms"] + s["compute_ms"], s["wait_ms"])], (r - 0.35, 0.7),
                           facecolor=_WAIT, edgecolor="white", lw=0.5)
    ax.set_yticks(range(len(timelines)), [f"rank {r}" for r in range(len(timelines))])
    ax.set_ylim(len(timelines) - 0.5, -0.5)
    ax.set_xlabel("time since the loop began (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(facecolor=_COMPUTE, label="computing"),
                       Patch(facecolor=_WAIT, label="waiting for the next block")],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(title, fontsize=10)
    return fig


def plot_ring_memory(columns: Mapping[str, Mapping[str, float]],
                     title: str = "Memory per device", unit: str = "GiB",
                     ax: plt.Axes | None = None) -> plt.Figure:
    """Stacked bars, one per column (e.g. one ring worker, one device), one segment per buffer.

    Parameters
    ----------
    columns : mapping of str to mapping of str to float
        ``{bar label: {buffer name: bytes}}``, e.g. ``RingMemory.per_worker`` and
        ``RingMemory.one_device``.
    title : str
        Axes title.
    unit : str
        ``"GiB"``, ``"MiB"``, ``"KiB"`` or ``"B"``: the bytes are divided accordingly.
    ax : matplotlib.axes.Axes, optional
        Draw there instead of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    if ax is None:
        fig, ax = new_axes(width=6.5, height=4.0)
    else:
        fig = ax.figure
    names = list(dict.fromkeys(name for parts in columns.values() for name in parts))
    colors = {name: f"C{i}" for i, name in enumerate(names)}
    for x, (label, parts) in enumerate(columns.items()):
        bottom = 0.0
        for name, nbytes in parts.items():
            ax.bar(x, nbytes / scale, 0.6, bottom=bottom, color=colors[name],
                   edgecolor="white", label=name if x == list(columns).index(label) else None)
            bottom += nbytes / scale
        ax.text(x, bottom, f"{bottom:.3g} {unit}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(columns)), list(columns), fontsize=8)
    ax.set_ylabel(unit)
    handles = [Patch(facecolor=colors[n], label=n) for n in names]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    ax.set_title(title, fontsize=10)
    return fig


def plot_ring_bench(results: Sequence, title: str = "Ring attention against one GPU",
                    unit: str = "TFLOP/s") -> plt.Figure:
    """Time (ms, log scale) against sequence length, one line per provider and mask.

    A provider's line ends where it ran out of memory; with the record of a capped run that is
    where one GPU stops and the ring goes on.

    Parameters
    ----------
    results : sequence of teachkit.bench.Measurement
        What :func:`teachkit.ring.bench_ring` measured (rows of other units are ignored): read
        by their ``params`` ``N`` and ``causal``.
    title : str
        Axes title.
    unit : str
        The unit of the rows to draw.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, ax = new_axes(width=7.0, height=4.2)
    rows = [r for r in results if r.unit == unit]
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in rows:
        mask = "causal" if r.params["causal"] else "full"
        series.setdefault((r.provider, mask), []).append((r.params["N"], r.ms))
    providers = list(dict.fromkeys(p for p, _ in series))
    for (provider, mask), points in series.items():
        points.sort()
        ax.plot([n for n, _ in points], [ms for _, ms in points],
                "o-" if mask == "full" else "s--", color=f"C{providers.index(provider)}",
                label=f"{provider}, {mask}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N (tokens)")
    ax.set_ylabel("time (ms)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig
