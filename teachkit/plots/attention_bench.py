"""FlashAttention benchmark figures: TFLOP/s against sequence length, one panel per head dim
and mask, one line per provider; and the staircase of notebook 08's ladder."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .figures import label_device
from .roofline import dtype_label

__all__ = ["plot_attention_tflops", "plot_steps"]


_TEACHKIT_LINES = {"teachkit flash": "-", "teachkit triton": "--", "teachkit hopper": ":",
                   "teachkit hopper, no overlap": "-.",
                   "teachkit hopper, wide, no overlap": (0, (5, 1)),
                   "teachkit hopper, persistent": (0, (1, 2)),
                   "teachkit hopper, wide, persistent": (0, (8, 2)),
                   "teachkit flash, atomic dQ": (0, (3, 1, 1, 1, 1, 1)),
                   "teachkit flash, deterministic": ":"}
"""Line style of each of the course's providers (others dashed)."""


def plot_attention_tflops(results: list, ceiling: float | None = None,
                          device: str | None = None,
                          ceiling_dtype: str = "bfloat16") -> plt.Figure:
    """TFLOP/s (y) against L = S (x, log scale) per provider; panels by (D, causal).

    Parameters
    ----------
    results : list of teachkit.bench.Measurement
        What :func:`teachkit.bench.attention.bench_attention` returned (or a saved record):
        read by their ``params`` ``D``, ``L`` and ``causal``.
    ceiling : float, optional
        The measured matmul rate, drawn as a dashed line.
    device : str, optional
        Where the results were measured (default: this machine).
    ceiling_dtype : str
        The dtype the matmul rate was timed in (``teachkit.bench.recorded_matmul_dtype`` of a
        record; float16 on a GPU without bfloat16 tensor cores).
    """
    def panel(r: object) -> tuple[int, bool]:
        return r.params["D"], r.params["causal"]

    panels = list(dict.fromkeys(panel(r) for r in results))
    providers = list(dict.fromkeys(r.provider for r in results))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False,
                             sharey=True)
    for ax, (D, causal) in zip(axes[0], panels, strict=True):
        for prov in providers:
            pts = sorted((r.params["L"], r.value) for r in results
                         if r.provider == prov and panel(r) == (D, causal))
            if pts:
                style = {"lw": 1.2}
                if prov.startswith("teachkit"):  # the course's kernels in black, variants apart
                    style = {"lw": 2.5, "color": "k", "ls": _TEACHKIT_LINES.get(prov, "--")}
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=prov, **style)
        ax.set_xscale("log", base=2)
        if ceiling:
            ax.axhline(ceiling, color="0.5", ls="--", lw=1)
            ax.text(0.01, ceiling, f" {dtype_label(ceiling_dtype)} matmul {ceiling:.0f}",
                    va="top", fontsize=7, color="0.4", transform=ax.get_yaxis_transform())
        ax.set_title(f"D = {D}" + (", causal" if causal else ""), fontsize=10)
        ax.set_xlabel("L = S")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("TFLOP/s")
    axes[0, 0].legend(fontsize=7, loc="lower right")
    label_device(fig, device)
    fig.tight_layout()
    return fig


def plot_steps(results: list, device: str | None = None) -> plt.Figure:
    """The ladder as a staircase: one panel per (D, causal), one bar per step in the order the
    results list them, each labelled with its TFLOP/s and its gain over the step before.

    Parameters
    ----------
    results : list of teachkit.bench.Measurement
        What :func:`teachkit.bench.attention.bench_steps` returned (or a saved record): read by
        their ``params`` ``D`` and ``causal`` and their ``provider``.
    device : str, optional
        Where the results were measured (default: this machine).
    """
    def panel(r: object) -> tuple[int, bool]:
        return r.params["D"], r.params["causal"]

    panels = list(dict.fromkeys(panel(r) for r in results))
    steps = list(dict.fromkeys(r.provider for r in results))
    fig, axes = plt.subplots(1, len(panels), figsize=(0.55 * len(steps) * len(panels) + 2, 4.2),
                             squeeze=False, sharey=True)
    for ax, (D, causal) in zip(axes[0], panels, strict=True):
        got = {r.provider: r.value for r in results if panel(r) == (D, causal)}
        names = [s for s in steps if s in got]
        values = [got[s] for s in names]
        ax.bar(range(len(names)), values, color="0.75", edgecolor="k", width=0.8)
        ax.step(range(len(names)), values, where="mid", color="k", lw=1.5)
        for i, v in enumerate(values):
            gain = "" if i == 0 else f"\n{v / values[i - 1]:.2f}x"
            ax.text(i, v, f"{v:.0f}{gain}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
        ax.set_title(f"D = {D}" + (", causal" if causal else ""), fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.margins(y=0.15)
    axes[0, 0].set_ylabel("TFLOP/s")
    label_device(fig, device)
    fig.tight_layout()
    return fig
