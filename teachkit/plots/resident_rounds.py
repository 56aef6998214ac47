"""The rounds of a persistent grid (notebook 06): which row the item of each program belongs to,
round after round, when a row is cut into ``G`` chunks and the grid has ``P`` programs.

The resident kernels number the ``(row, chunk)`` items of a tensor in order, ``G`` to a row,
and program ``p`` takes items ``p``, ``p + P``, ``p + 2P``, ...: in round ``k`` it holds item
``p + kP``, of row ``(p + kP) // G``. When ``P`` is not a multiple of ``G`` a row's chunks
fall in two rounds, and the programs that hold its first chunks wait, chunk in registers, until
the next round brings the rest. :func:`round_rows` computes the rows, :func:`waiting_items` the
programs that wait for the next round (:func:`waiting_share`, their share of a tensor's items),
:func:`plot_rounds` draws both.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from ..validation import require_positive_int

__all__ = ["round_rows", "rounds_of", "waiting_items", "waiting_share", "plot_rounds"]


def round_rows(chunks_per_row: int, programs: int, rounds: int) -> np.ndarray:
    """The row of the item each program holds in each round: an ``(rounds, programs)`` array,
    item ``program + round * programs`` of rows of ``chunks_per_row`` chunks.

    >>> round_rows(3, 4, 2).tolist()
    [[0, 0, 0, 1], [1, 1, 2, 2]]
    """
    require_positive_int(chunks_per_row, "chunks_per_row")
    require_positive_int(programs, "programs")
    require_positive_int(rounds, "rounds")
    items = np.arange(rounds)[:, None] * programs + np.arange(programs)[None, :]
    return items // chunks_per_row


def rounds_of(chunks_per_row: int, programs: int, n_rows: int) -> int:
    """Rounds ``programs`` programs take over ``n_rows`` rows of ``chunks_per_row`` chunks.

    >>> rounds_of(192, 264, 24)
    18
    """
    require_positive_int(n_rows, "n_rows")
    return -(-chunks_per_row * n_rows // programs)


def waiting_items(chunks_per_row: int, programs: int, rounds: int,
                  n_rows: int | None = None) -> np.ndarray:
    """Where a program holds a chunk of a row that the round does not finish: an ``(rounds,
    programs)`` boolean array, true where the row's last chunk comes in a later round, so that
    the program waits, its pair published and its chunk in registers, for the next round;
    false past the last of ``n_rows`` rows, where given.

    >>> waiting_items(3, 4, 2).astype(int).tolist(), waiting_items(3, 4, 2, 1).tolist()
    ([[0, 0, 0, 1], [0, 0, 1, 1]], [[False, False, False, False], [False, False, False, False]])
    """
    rows = round_rows(chunks_per_row, programs, rounds)
    last_round = ((rows + 1) * chunks_per_row - 1) // programs
    waiting = last_round > np.arange(rounds)[:, None]
    return waiting if n_rows is None else waiting & (rows < n_rows)


def waiting_share(chunks_per_row: int, programs: int, n_rows: int) -> float:
    """The share of the items of ``n_rows`` rows of ``chunks_per_row`` chunks, taken by
    ``programs`` programs, whose program waits for the next round (:func:`waiting_items`).

    >>> round(waiting_share(192, 264, 24), 2), waiting_share(256, 256, 24)
    (0.31, 0.0)
    """
    rounds = rounds_of(chunks_per_row, programs, n_rows)
    waiting = waiting_items(chunks_per_row, programs, rounds, n_rows)
    return float(waiting.sum() / (chunks_per_row * n_rows))


def plot_rounds(grids: Mapping[str, tuple[int, int, int]], title: str | None = None,
                ) -> plt.Figure:
    """One panel per grid: every round (rows of the panel) of its programs (columns), each
    coloured by the row of the item it holds, hatched where the round does not finish that row
    (:func:`waiting_items`), blank past the last item.

    Parameters
    ----------
    grids : mapping of str to (int, int, int)
        A label per grid and its ``(chunks of a row, programs, rows of the tensor)``.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not grids:
        raise ValueError("grids is empty; pass {label: (chunks of a row, programs, rows)}")
    shapes = {label: tuple(require_positive_int(v, name) for v, name in zip(
        grid, ("chunks of a row", "programs", "rows"), strict=True))
        for label, grid in grids.items()}
    most = max(rounds_of(*shape) for shape in shapes.values())
    colors = ListedColormap(["#4c9be8", "#f2a541", "#7bc67b", "#d9789e"]).with_extremes(
        bad="white")
    fig, axes = plt.subplots(len(grids), 1, squeeze=False,
                             figsize=(9, (0.08 * most + 0.9) * len(grids)))
    for ax, (label, (chunks, programs, n_rows)) in zip(axes[:, 0], shapes.items(), strict=True):
        rounds = rounds_of(chunks, programs, n_rows)
        rows = round_rows(chunks, programs, rounds)
        shown = np.ma.masked_where(rows >= n_rows, rows % 4)
        ax.imshow(shown, cmap=colors, vmin=0, vmax=3, aspect="auto", interpolation="nearest",
                  extent=(0, programs, rounds, 0))
        waiting = waiting_items(chunks, programs, rounds, n_rows)
        for k in range(rounds):
            held = np.flatnonzero(waiting[k])  # consecutive programs: the round's last
            if held.size:
                ax.add_patch(plt.Rectangle((held[0], k), held.size, 1, fill=False,
                                           hatch="////", linewidth=0, edgecolor="#333333"))
        ax.set_ylim(most, 0)
        ax.set_ylabel("round", fontsize=8)
        ax.set_xlabel("program", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.set_title(f"{label}: {chunks} chunks a row, {programs} programs, {rounds} rounds; "
                     f"{waiting_share(chunks, programs, n_rows):.0%} of the items wait for the "
                     "next round", fontsize=9, loc="left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
