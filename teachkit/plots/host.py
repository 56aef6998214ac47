"""The host cost of one call: per op, torch's call beside teachkit's, split into the checks,
allocations and Python around the launch and the launches themselves."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .figures import label_device, new_axes

__all__ = ["plot_host_cost"]


def plot_host_cost(results: list, device: str | None = None) -> plt.Figure:
    """Horizontal bars of microseconds per call, two per op: torch, and teachkit stacked as
    "checks, allocations, Python" then "launches".

    Parameters
    ----------
    results : list of teachkit.bench.Measurement
        What :func:`teachkit.bench.host.bench_host` returned (or a saved record), read by their
        ``params["op"]`` and providers ``torch``, ``teachkit`` and ``teachkit, no launch``.
    device : str, optional
        Where they were measured (default: this machine).
    """
    ops = list(dict.fromkeys(r.params["op"] for r in results))
    got = {(r.params["op"], r.provider): r.value for r in results}
    fig, ax = new_axes(width=7.0, height=0.9 + 0.8 * len(ops))
    for i, op in enumerate(ops):
        y = 2 * (len(ops) - 1 - i)
        python = got[op, "teachkit, no launch"]
        launches = max(got[op, "teachkit"] - python, 0.0)
        ax.barh(y + 0.4, got[op, "torch"], 0.7, color="0.6",
                label="torch" if i == 0 else None)
        ax.barh(y - 0.4, python, 0.7, color="tab:blue",
                label="teachkit: checks, allocations, Python" if i == 0 else None)
        ax.barh(y - 0.4, launches, 0.7, left=python, color="tab:orange",
                label="teachkit: Triton launches" if i == 0 else None)
        ax.text(got[op, "teachkit"], y - 0.4, f" {got[op, 'teachkit']:.0f}", va="center",
                fontsize=8)
        ax.text(got[op, "torch"], y + 0.4, f" {got[op, 'torch']:.0f}", va="center", fontsize=8)
    ax.set_yticks([2 * (len(ops) - 1 - i) for i in range(len(ops))], ops)
    ax.set_xlabel("µs per call (host)")
    ax.margins(x=0.15)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    label_device(fig, device)
    return fig
