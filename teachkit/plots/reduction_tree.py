"""The shape of a GPU block's reduction of ``(m, d)``: butterfly shuffles in a warp, then warps
merged through shared memory (the tiers of :func:`teachkit.reduction.simulate_block_reduction`).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

__all__ = ["butterfly_values", "plot_block_reduction_tree"]


def butterfly_values(lane_values: Sequence[float]) -> list[list[float]]:
    """The running maximum each lane holds after each butterfly step (the ``m`` of its merged pair).

    Step ``k`` uses offset ``lanes / 2**(k+1)``: lane ``l`` takes the maximum with lane
    ``l ^ offset``. Returns one list per stage, the first being ``lane_values`` itself.

    Examples
    --------
    >>> butterfly_values([1.0, 4.0, 2.0, 3.0])
    [[1.0, 4.0, 2.0, 3.0], [2.0, 4.0, 2.0, 4.0], [4.0, 4.0, 4.0, 4.0]]
    """
    lanes = len(lane_values)
    _require_power_of_two(lanes, "len(lane_values)")
    stages = [list(lane_values)]
    offset = lanes // 2
    while offset:
        prev = stages[-1]
        stages.append([max(prev[lane], prev[lane ^ offset]) for lane in range(lanes)])
        offset //= 2
    return stages


def _require_power_of_two(n: int, name: str) -> None:
    if n < 2 or n & (n - 1):
        raise ValueError(f"{name} must be a power of two, at least 2; got {n} (e.g. 8 or 32)")


def plot_block_reduction_tree(
    lane_m: Sequence[float] | None = None, lanes: int = 8, warps: int = 4
) -> plt.Figure:
    """Draw the warp and block tiers of a GPU reduction of ``(m, d)`` pairs.

    Left: the butterfly inside one warp. Each column is a step; at offset ``o`` every lane
    merges its pair with the pair of lane ``lane ^ o`` (coloured arrows), so after
    ``log2(lanes)`` steps every lane holds the whole warp's statistics. Right: lane 0 of each
    warp writes its pair to shared memory, and the warps' pairs are merged as a tree into the
    block's ``(m, d)``.

    Parameters
    ----------
    lane_m : sequence of float, optional
        Each lane's maximum before the shuffles (its thread's ``m`` after tier 1). When given,
        every node shows the maximum it holds at that step; otherwise nodes show lane numbers.
    lanes : int
        Lanes drawn in the warp (a power of two; a real warp has 32, too many to read).
    warps : int
        Warps in the block (at least 1).

    Returns
    -------
    matplotlib.figure.Figure
    """
    if lane_m is not None:
        lanes = len(lane_m)
    _require_power_of_two(lanes, "lanes")
    if warps < 1:
        raise ValueError(f"warps must be at least 1, got {warps}")
    values = butterfly_values(list(lane_m) if lane_m is not None else [0.0] * lanes)
    steps = len(values) - 1

    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12.5, 0.55 * lanes + 2.4),
        gridspec_kw={"width_ratios": [steps * GAP + 2.2, warps + 1.6]},
    )
    _draw_butterfly(left, values, lanes, steps, labelled=lane_m is not None)
    _draw_block_tree(right, warps)
    fig.tight_layout()
    return fig


def _node(ax: plt.Axes, x: float, y: float, text: str, color: str, size: float = 0.32) -> None:
    ax.add_patch(plt.Circle((x, y), size, facecolor="white", edgecolor=color, lw=1.5, zorder=3))
    ax.text(x, y, text, ha="center", va="center", fontsize=7.5, zorder=4)


STEP_COLORS = ("C1", "C2", "C4", "C6", "C8")
GAP = 2.2  # horizontal distance between two steps, in lane heights


def _short(v: float) -> str:
    """One decimal, without a minus sign on a value that rounds to zero."""
    text = f"{v:.1f}"
    return "0.0" if text == "-0.0" else text


def _draw_butterfly(ax: plt.Axes, values: list[list[float]], lanes: int, steps: int,
                    labelled: bool) -> None:
    """Lanes top to bottom, steps left to right, an arrow from each lane's xor partner."""
    offset = lanes // 2
    for s in range(1, steps + 1):
        color = STEP_COLORS[(s - 1) % len(STEP_COLORS)]
        x0, x1 = (s - 1) * GAP, s * GAP
        for lane in range(lanes):
            partner = lane ^ offset
            ax.plot([x0, x1], [lane, lane], color="0.75", lw=1, zorder=1)
            ax.annotate("", xy=(x1 - 0.36, lane), xytext=(x0 + 0.36, partner),
                        arrowprops={"arrowstyle": "->", "color": color, "lw": 1.1,
                                    "alpha": 0.9, "shrinkA": 0, "shrinkB": 0}, zorder=2)
        ax.text(x1, -0.8, f"step {s}\noffset {offset}\npartner lane ^ {offset}", ha="center",
                va="bottom", fontsize=8, color=color)
        offset //= 2
    ax.text(0, -0.8, "tier 1 result:\neach thread's\nown (m, d)", ha="center", va="bottom",
            fontsize=8)
    for s, stage in enumerate(values):
        for lane, v in enumerate(stage):
            text = _short(v) if labelled else (str(lane) if s == 0 else "")
            _node(ax, s * GAP, lane, text, "C0" if s < steps else "C3")
    for lane in range(lanes):
        ax.text(-0.55, lane, f"lane {lane}", ha="right", va="center", fontsize=8)
    what = "the maximum m each lane holds" if labelled else "each lane's (m, d)"
    ax.set_title(f"Tier 2: butterfly shuffles in one warp ({lanes} lanes shown)\n"
                 f"nodes: {what}; after log2({lanes}) = {steps} steps all lanes agree "
                 f"(32 lanes: 5 steps)", fontsize=9)
    ax.set_xlim(-1.6, steps * GAP + 0.6)
    ax.set_ylim(lanes - 0.4, -2.2)
    ax.set_aspect("equal")
    ax.axis("off")


def _draw_block_tree(ax: plt.Axes, warps: int) -> None:
    """Each warp's lane 0 -> a shared-memory slot -> a tree of merges -> the block's (m, d)."""
    xs = [float(w) for w in range(warps)]
    for w, x in enumerate(xs):
        ax.add_patch(FancyBboxPatch((x - 0.38, -0.3), 0.76, 0.6, boxstyle="round,pad=0.02",
                                    facecolor="#e8f0fa", edgecolor="C0"))
        ax.text(x, 0, f"warp {w}\nlane 0", ha="center", va="center", fontsize=8)
        ax.annotate("", xy=(x, 0.95), xytext=(x, 0.32),
                    arrowprops={"arrowstyle": "->", "color": "0.3"})
    # Shared memory: one row of slots.
    ax.add_patch(plt.Rectangle((-0.5, 0.95), warps, 0.5, facecolor="#fff4e0", edgecolor="C1"))
    for w, x in enumerate(xs):
        ax.text(x, 1.2, f"smem[{w}]", ha="center", va="center", fontsize=7.5)
        if w:
            ax.plot([x - 0.5, x - 0.5], [0.95, 1.45], color="C1", lw=0.8)
    ax.text(warps - 0.45, 1.2, " shared\n memory", ha="left", va="center", fontsize=8, color="C1")
    ax.text(warps - 0.45, 0, " __syncthreads()\n then merge", ha="left", va="center",
            fontsize=7.5, color="0.4")
    # The tree: neighbours merge level by level (an odd one out is carried).
    level, y, levels = xs, 1.45, 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            mid = (level[i] + level[i + 1]) / 2
            for x in (level[i], level[i + 1]):
                ax.plot([x, mid], [y, y + 0.75], color="C3", lw=1.2)
            nxt.append(mid)
        if len(level) % 2:
            ax.plot([level[-1], level[-1]], [y, y + 0.75], color="C3", lw=1.2, ls="--")
            nxt.append(level[-1])
        y += 0.75
        levels += 1
        ax.plot(nxt, [y] * len(nxt), "o", color="C3", ms=8, zorder=3)
        level = nxt
    ax.text(level[0], y + 0.25, "block (m, d)", ha="center", va="top", fontsize=9,
            fontweight="bold", color="C3")
    ax.set_title(f"Tier 3: {warps} warps merged through shared memory\n"
                 f"({levels} merge level{'s' if levels != 1 else ''})", fontsize=9)
    ax.set_xlim(-0.7, warps + 0.9)
    ax.set_ylim(y + 0.6, -0.6)
    ax.axis("off")
