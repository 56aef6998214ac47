"""The order of one program's steps in the resident TMA softmax (notebook 06), in the plain order
and written behind (``TmaConfig.write_behind``).

In the plain order a program takes item ``i``, sums it and publishes its pair, waits for the
row of item ``i`` and writes it, then takes item ``i + 1``. Written behind, it publishes item
``i``'s pair and then waits for the row of item ``i - 1`` and writes that one, so between
publishing a pair and waiting for its row lies a whole other item's work.
:func:`program_steps` lists the steps; :func:`plot_program_steps` draws both orders one above the
other, a box a step, in order only (not to scale: how long each step takes is what the records
measure).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..validation import require_positive_int

__all__ = ["STEP_COLOURS", "program_steps", "plot_program_steps"]

STEP_COLOURS = {"sum": "#4c72b0", "wait": "#dd8452", "write": "#55a868"}
"""The colour of each kind of step: sum (take the chunk, sum it, publish its pair), wait (for
the row's pairs), write (the chunk's results)."""


def program_steps(items: int, write_behind: bool) -> list[tuple[str, int]]:
    """The steps of a program that takes ``items`` items in turn, as ``(kind, item)``: ``kind``
    one of :data:`STEP_COLOURS`' keys.

    >>> program_steps(2, False)
    [('sum', 0), ('wait', 0), ('write', 0), ('sum', 1), ('wait', 1), ('write', 1)]
    >>> program_steps(2, True)
    [('sum', 0), ('sum', 1), ('wait', 0), ('write', 0), ('wait', 1), ('write', 1)]
    """
    require_positive_int(items, "items")
    if not write_behind:
        return [(kind, i) for i in range(items) for kind in ("sum", "wait", "write")]
    steps = [("sum", 0)]
    for i in range(1, items):
        steps += [("sum", i), ("wait", i - 1), ("write", i - 1)]
    return steps + [("wait", items - 1), ("write", items - 1)]


def plot_program_steps(items: int = 4) -> plt.Figure:
    """Both orders of :func:`program_steps` for ``items`` items, one row each, a box a step
    labelled with its item; a bracket under each pair's publication and its row's wait shows
    the steps between them."""
    fig, ax = plt.subplots(figsize=(10, 2.6))
    orders = {"plain order": False, "written behind": True}
    for lane, (title, behind) in enumerate(orders.items()):
        y = len(orders) - 1 - lane
        steps = program_steps(items, behind)
        for x, (kind, item) in enumerate(steps):
            ax.add_patch(plt.Rectangle((x + 0.05, y + 0.15), 0.9, 0.6, color=STEP_COLOURS[kind]))
            ax.text(x + 0.5, y + 0.45, f"{kind} {item}", ha="center", va="center",
                    color="white", fontsize=8)
        first_wait = steps.index(("wait", 0))
        ax.annotate("", xy=(first_wait + 0.5, y + 0.1), xytext=(0.5, y + 0.1),
                    arrowprops={"arrowstyle": "->", "color": "0.3"})
        ax.text(-0.2, y + 0.45, title, ha="right", va="center", fontsize=9)
    ax.set_xlim(-2.6, 3 * items + 0.2)
    ax.set_ylim(-0.1, len(orders))
    ax.axis("off")
    ax.set_title("One program's steps in order, not to scale. sum: take the chunk, sum it, "
                 "publish its pair; wait: for its row's pairs.\nThe arrow: from item 0's pair "
                 "to the wait for its row", fontsize=9)
    fig.tight_layout()
    return fig
