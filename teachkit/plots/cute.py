"""Pictures of notebook 11: how the CuTe DSL kernel lays a row over threads and vectors, and
what each of its tiers holds (from :func:`teachkit.cute.simulate_cute_softmax`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle

from ..cute.simulate import CuteSoftmaxTrace, thread_of_element
from ..softmax import to_lse

__all__ = ["layout_grid", "plot_row_layout", "tier_lse", "plot_tiers"]


def layout_grid(n_cols: int, threads: int, vec: int) -> np.ndarray:
    """The thread owning each element, as the CTA sweeps the row: ``(sweeps, threads * vec)``.

    Row ``k`` of the grid is sweep ``k``, in which every thread loads one vector; entries past
    the end of the row are ``-1`` (no load: the thread's loop has ended).

    Examples
    --------
    >>> layout_grid(10, threads=2, vec=2).tolist()
    [[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, -1, -1]]
    """
    sweep = threads * vec
    sweeps = max(1, -(-n_cols // sweep))
    grid = np.full(sweeps * sweep, -1)
    grid[:n_cols] = thread_of_element(n_cols, threads, vec).numpy()
    return grid.reshape(sweeps, sweep)


def plot_row_layout(n_cols: int, threads: int, vec: int, warp_size: int | None = None,
                    title: str | None = None) -> plt.Figure:
    """Draw a row's elements as the kernel loads them: one line of cells per sweep.

    Cell ``(k, c)`` is element ``k * threads * vec + c``, coloured by the thread that loads it and
    labelled with its index; thick borders mark vectors (one load each), a gap marks warps
    (when ``warp_size`` divides ``threads``), grey cells lie past the row's end.

    Parameters
    ----------
    n_cols : int
        Row length (keep it under a few hundred to read the labels).
    threads, vec : int
        Threads per CTA and elements per vector.
    warp_size : int, optional
        Lanes per warp, to show warp boundaries (e.g. 4 when drawing 8 threads).
    title : str, optional
        Figure title.
    """
    grid = layout_grid(n_cols, threads, vec)
    sweeps, width = grid.shape
    cmap = plt.get_cmap("tab20" if threads > 10 else "tab10")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * width + 1.5), 0.55 * sweeps + 1.4))
    for k in range(sweeps):
        for c in range(width):
            t = grid[k, c]
            color = cmap(t % cmap.N) if t >= 0 else "0.92"
            ax.add_patch(Rectangle((c, k), 1, 1, facecolor=color, edgecolor="white", lw=0.5,
                                   alpha=0.85 if t >= 0 else 1.0))
            idx = k * width + c
            ax.text(c + 0.5, k + 0.5, str(idx) if idx < n_cols else "", ha="center",
                    va="center", fontsize=6.5)
        for c0 in range(0, width, vec):  # one box per vector load
            t = grid[k, c0]
            ax.add_patch(Rectangle((c0, k), vec, 1, fill=False, lw=1.4,
                                   edgecolor="k" if t >= 0 else "0.7"))
        ax.text(-0.3, k + 0.5, f"sweep {k}", ha="right", va="center", fontsize=8)
    for t in range(threads):  # thread labels above the first sweep
        ax.text(t * vec + vec / 2, -0.25, f"t{t}", ha="center", va="bottom", fontsize=7)
    if warp_size and threads % warp_size == 0 and threads > warp_size:
        for w in range(1, threads // warp_size):
            ax.axvline(w * warp_size * vec, color="C3", lw=2)
        ax.text(width, -0.25, f"  warps of {warp_size}", color="C3", fontsize=8, va="bottom")
    ax.set_xlim(-2.2, width + 0.2)
    ax.set_ylim(sweeps + 0.1, -0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or f"A row of {n_cols} over {threads} threads, vectors of {vec}: "
                 f"sweep k, thread t loads vector k * {threads} + t", fontsize=9)
    fig.tight_layout()
    return fig


def tier_lse(trace: CuteSoftmaxTrace, row: int = 0) -> dict[str, np.ndarray]:
    """Each tier's pairs for one row, as log-sum-exp ``m + log d`` (one number per pair).

    A pair's lse is the log of the sum of ``exp`` over every element it has seen, so it grows
    as pairs merge and ends at the row's ``logsumexp``. Returns ``threads`` (per thread),
    ``rounds`` (``(rounds + 1, threads)``: start, then after each shuffle round), ``warps`` and
    ``block`` (a scalar).
    """
    def lse(m: torch.Tensor, d: torch.Tensor) -> np.ndarray:
        return to_lse(m.double(), d.double()).numpy()

    def batch(t: torch.Tensor) -> torch.Tensor:  # row ``row`` of any leading shape
        return t.reshape(-1, t.shape[-1])[row]

    rounds = [lse(batch(m.flatten(-2)), batch(d.flatten(-2))) for m, d in trace.rounds]
    return {
        "threads": lse(batch(trace.thread_m), batch(trace.thread_d)),
        "rounds": np.stack(rounds),
        "warps": lse(batch(trace.warp_m), batch(trace.warp_d)),
        "block": float(to_lse(trace.block_m.double(), trace.block_d.double()).reshape(-1)[row]),
    }


def plot_tiers(trace: CuteSoftmaxTrace, row: int = 0, title: str | None = None) -> plt.Figure:
    """Three panels: what each thread, each lane after each shuffle round, and each warp holds.

    Every pair is drawn as its lse (:func:`tier_lse`); the dashed line is the row's
    ``logsumexp``, which the block tier reaches. Idle threads and warps (whose vectors all lie
    past the row's end: ``(-inf, 0)``) are left blank.

    Parameters
    ----------
    trace : CuteSoftmaxTrace
        What :func:`teachkit.cute.simulate_cute_softmax` returned.
    row : int
        Which row of a batch to draw.
    title : str, optional
        Figure title.
    """
    data = tier_lse(trace, row)
    threads, warp_size, warps = trace.threads, trace.warp_size, trace.warps
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.6),
                                  gridspec_kw={"width_ratios": [3, 3, 1.4]})
    colors = [f"C{(t // warp_size) % 10}" for t in range(threads)]
    finite = np.isfinite(data["threads"])
    a.bar(np.arange(threads)[finite], data["threads"][finite],
          color=np.array(colors)[finite], width=0.85)
    a.axhline(data["block"], color="k", ls="--", lw=1)
    a.set_xlim(-0.7, threads - 0.3)
    a.set_title("1. thread tier: each thread's (m, d)\nafter its own vectors", fontsize=9)
    a.set_xlabel("thread (colour: warp)")
    a.set_ylabel("lse = m + log d")

    img = np.where(np.isfinite(data["rounds"]), data["rounds"], np.nan)
    shown = b.imshow(img, aspect="auto", cmap="viridis", interpolation="nearest")
    offsets = [warp_size >> k for k in range(1, len(data["rounds"]))]
    b.set_yticks(range(len(data["rounds"])),
                 ["start"] + [f"offset {o}" for o in offsets], fontsize=8)
    for w in range(1, warps):
        b.axvline(w * warp_size - 0.5, color="w", lw=1.5)
    b.set_xlabel("lane, warp after warp")
    b.set_title("2. warp tier: lse per lane after each\nshuffle round (lane ^ offset)",
                fontsize=9)
    fig.colorbar(shown, ax=b, fraction=0.04, pad=0.02)

    live = np.isfinite(data["warps"])
    c.bar(np.arange(warps)[live], data["warps"][live],
          color=np.array([f"C{w % 10}" for w in range(warps)])[live])
    for w in np.flatnonzero(~live):  # a warp whose threads all lay past the row's end
        c.text(w, data["block"], "idle", ha="center", va="top", fontsize=7, color="0.4")
    c.axhline(data["block"], color="k", ls="--", lw=1,
              label=f"row logsumexp {data['block']:.3f}")
    c.set_xticks(range(warps))
    c.set_xlim(-0.6, warps - 0.4)
    c.set_xlabel("warp (smem slot)")
    c.set_title("3. block tier: warps' pairs\nmerged to the row's", fontsize=9)
    c.legend(fontsize=7, loc="lower right")
    low = np.nanmin(np.where(np.isfinite(data["threads"]), data["threads"], np.nan))
    for ax in (a, c):
        ax.set_ylim(low - 0.5, data["block"] + 0.5)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
