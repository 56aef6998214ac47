"""Pictures of blocked attention: the causal tile schedule, the memory of the score matrix, and
the walk of a persistent kernel.

:func:`plot_tile_schedule` draws the ``L x S`` score matrix cut into tiles, coloured by what a
blocked kernel does with each (skip, compute in full, compute with a mask), with the causal
diagonal on top. :func:`plot_attention_memory` draws bytes against sequence length on log-log
axes, with an optional memory budget (a GPU's memory) as a horizontal line. :func:`plot_walk`
draws which program of a persistent grid computes each query tile, and in which order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

from ..tiling import FULL, MASKED, SKIP, TILE_NAMES, tile_bounds, tile_kind, tile_schedule
from .figures import new_axes

__all__ = ["TILE_COLORS", "plot_attention_memory", "plot_key_order", "plot_tile_schedule",
           "plot_walk"]

TILE_COLORS: dict[int, str] = {SKIP: "#eeeeee", FULL: "#4c9be8", MASKED: "#f5a142"}
"""Fill colour of each tile code."""


def plot_tile_schedule(
    L: int, S: int, block_m: int, block_n: int, causal: bool = True,
    title: str | None = None, ax: plt.Axes | None = None,
) -> plt.Figure:
    """Draw the tiles of an ``L x S`` score matrix, coloured by their kind in the schedule.

    Queries run down, keys run right, in element units, so a shorter last tile looks shorter.
    With ``causal`` the line ``key = query`` is drawn: tiles it crosses are masked inside, tiles
    wholly above it are skipped. Each tile is labelled ``(r, c)`` when the grid is small enough.

    Parameters
    ----------
    L, S : int
        Queries and keys.
    block_m, block_n : int
        Tile size.
    causal : bool
        Top-left-aligned causal mask.
    title : str, optional
        Axes title; defaults to the sizes and the tile counts.
    ax : matplotlib.axes.Axes, optional
        Draw there instead of a new figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    sched = tile_schedule(L, S, block_m, block_n, causal)
    if ax is None:
        width = min(9.0, 2.5 + 5.0 * S / max(L, S, 1))
        height = min(7.0, 1.5 + 5.0 * L / max(L, S, 1))
        fig, ax = plt.subplots(figsize=(width, height))
    else:
        fig = ax.figure
    rows, cols = sched.shape
    label = rows * cols <= 120
    for r in range(rows):
        r0, r1 = tile_bounds(r, block_m, L)
        for c in range(cols):
            c0, c1 = tile_bounds(c, block_n, S)
            code = int(sched[r, c])
            ax.add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, facecolor=TILE_COLORS[code],
                                   edgecolor="white", lw=1.5))
            if label:
                ax.text((c0 + c1) / 2, (r0 + r1) / 2, f"{r},{c}", ha="center", va="center",
                        fontsize=7, color="0.55" if code == SKIP else "white")
    if causal and L and S:
        end = min(L, S)
        ax.plot([0, end], [0, end], color="crimson", lw=1.5, label="key = query")
    ax.set_xlim(0, max(S, 1))
    ax.set_ylim(max(L, 1), 0)
    ax.set_aspect("equal")
    ax.set_xlabel(f"key index j (S = {S}, blocks of {block_n})")
    ax.set_ylabel(f"query index i (L = {L}, blocks of {block_m})")
    counts = {code: int((sched == code).sum()) for code in (FULL, MASKED, SKIP)}
    handles = [Patch(facecolor=TILE_COLORS[c], edgecolor="0.6",
                     label=f"{TILE_NAMES[c]} ({counts[c]})") for c in (FULL, MASKED, SKIP)]
    if causal and L and S:
        handles.append(plt.Line2D([], [], color="crimson", label="diagonal j = i"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8,
              frameon=False)
    ax.set_title(title or f"{'causal' if causal else 'no mask'}: {rows} x {cols} tiles",
                 fontsize=10)
    return fig


def plot_attention_memory(
    lengths: Sequence[int], curves: Mapping[str, Sequence[float]],
    budget: float | None = None, budget_label: str = "memory budget",
    measured: Mapping[str, tuple[Sequence[int], Sequence[float]]] | None = None,
    title: str = "Memory of attention's score matrices",
) -> plt.Figure:
    """Bytes against sequence length on log-log axes, one line per computed curve.

    Parameters
    ----------
    lengths : sequence of int
        Sequence lengths (x axis).
    curves : mapping of str to sequence of float
        Computed bytes per length, one line each (e.g. materialised fp16 and fp32, blocked).
    budget : float, optional
        Bytes of a memory budget (a GPU's memory), drawn as a horizontal dashed line.
    budget_label : str
        Its label.
    measured : mapping of str to (lengths, bytes), optional
        Measured points, drawn as markers over the lines.
    title : str
        Axes title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, ax = new_axes(width=7.0, height=4.2)
    for i, (name, values) in enumerate(curves.items()):
        ax.plot(lengths, values, "-", color=f"C{i}", lw=2, label=name)
    for i, (name, (xs, ys)) in enumerate((measured or {}).items()):
        ax.plot(xs, ys, "o", color=f"C{i + len(curves)}", ms=7, mfc="none", mew=2, label=name)
    if budget is not None:
        ax.axhline(budget, color="crimson", ls="--", lw=1.5, label=budget_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    lo, hi = ax.get_ylim()
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    powers = [p for p in range(0, 60, 3) if lo <= 2.0**p <= hi]
    ax.set_yticks([2.0**p for p in powers], [f"{2 ** (p % 10)} {units[p // 10]}" for p in powers])
    ax.set_ylim(lo, hi)
    ax.set_xlabel("sequence length L = S")
    ax.set_ylabel("bytes")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=10)
    return fig


def plot_walk(walks: Sequence[Sequence[tuple[int, int]]], n_tiles: int, sequences: int,
              title: str | None = None) -> plt.Figure:
    """Draw the query tiles of ``sequences`` sequences (rows) of ``n_tiles`` tiles (columns),
    each coloured by the program that computes it and labelled with its step in that program's
    walk, beside a bar per program of the key blocks it reads (tile ``m`` reads ``m + 1`` with
    the causal mask, for key blocks as tall as the query tiles).

    Parameters
    ----------
    walks : sequence of sequences of (int, int)
        For each program, its tiles in order as ``(sequence, tile)``, as
        :func:`teachkit.kernels.flash_hopper.walk_schedule` gives them.
    n_tiles, sequences : int
        The grid of tiles the walks cover.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(10, 0.6 + 0.45 * max(sequences, 3)),
                                   gridspec_kw={"width_ratios": [max(n_tiles, 1), 3]})
    cmap = plt.get_cmap("tab10" if len(walks) <= 10 else "tab20")
    for pid, walk in enumerate(walks):
        for step, (seq, tile) in enumerate(walk):
            ax.add_patch(Rectangle((tile, seq), 1, 1, facecolor=cmap(pid % cmap.N),
                                   edgecolor="white", lw=1.5))
            ax.text(tile + 0.5, seq + 0.5, f"p{pid}.{step}", ha="center", va="center",
                    fontsize=7, color="white")
    ax.set_xlim(0, n_tiles)
    ax.set_ylim(sequences, 0)
    ax.set_xticks([t + 0.5 for t in range(n_tiles)], [str(t) for t in range(n_tiles)])
    ax.set_yticks([s + 0.5 for s in range(sequences)], [str(s) for s in range(sequences)])
    ax.set_xlabel("query tile (its key blocks with the mask: tile + 1)")
    ax.set_ylabel("sequence (b * H + h)")
    work = [sum(tile + 1 for _, tile in walk) for walk in walks]
    bars.bar(range(len(walks)), work, color=[cmap(p % cmap.N) for p in range(len(walks))])
    bars.set_xticks(range(len(walks)), [f"p{p}" for p in range(len(walks))], fontsize=7)
    bars.set_ylabel("key blocks read")
    bars.set_title("work per program", fontsize=9)
    fig.suptitle(title or f"{len(walks)} programs walk {sequences} x {n_tiles} tiles",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_key_order(orders: Mapping[str, Sequence[Sequence[int]]], block_n: int, S: int,
                   block_m: int = 128, title: str | None = None) -> plt.Figure:
    """Draw, for one causal sequence, the key blocks each query tile reads, one panel per way
    of ordering them: query tiles as rows of ``block_m`` queries, key blocks of ``block_n``
    keys, each block labelled with the step at which the tile's loop reads it and coloured by
    whether the causal mask crosses it (:func:`teachkit.tiling.tile_kind`). The
    diagonal marks the last key each query may see; what lies right of it inside a block is
    computed and masked away.

    Parameters
    ----------
    orders : mapping of str to sequences of sequences of int
        Panel title -> for each query tile, its key block indices in the order read, as
        :func:`teachkit.kernels.flash_hopper.key_block_order` gives them.
    block_n, S : int
        Keys per block, and keys of the sequence.
    block_m : int
        Queries per tile.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, axes = new_axes(len(orders), width=4.2, height=4.2)
    axes = list(axes) if len(orders) > 1 else [axes]
    for ax, (name, tiles) in zip(axes, orders.items(), strict=True):
        L = len(tiles) * block_m
        for t, blocks in enumerate(tiles):
            for step, j in enumerate(blocks):
                kind = tile_kind(t * block_m, (t + 1) * block_m, j * block_n,
                                 (j + 1) * block_n, causal=True)
                ax.add_patch(Rectangle((j * block_n, t * block_m), block_n, block_m,
                                       facecolor=TILE_COLORS[kind], edgecolor="white", lw=1.5))
                ax.text(j * block_n + block_n / 2, t * block_m + block_m / 2, str(step + 1),
                        ha="center", va="center", fontsize=8, color="white")
        ax.plot([0, min(L, S)], [0, min(L, S)], color="black", lw=1)
        ax.set_xlim(0, S)
        ax.set_ylim(L, 0)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_title(name, fontsize=9)
    legend = [Patch(color=TILE_COLORS[MASKED], label="masked (crosses the diagonal)"),
              Patch(color=TILE_COLORS[FULL], label="unmasked")]
    axes[-1].legend(handles=legend, loc="upper right", fontsize=7)
    fig.suptitle(title or f"key blocks of {block_n} read by query tiles of {block_m}",
                 fontsize=10)
    fig.tight_layout()
    return fig
