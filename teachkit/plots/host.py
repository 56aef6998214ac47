"""The host cost of one call: per op, torch's call beside teachkit's, split into the checks,
allocations and Python around the launch and the launches themselves."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .figures import label_device, new_axes

__all__ = ["plot_host_cost"]


def plot_host_cost(results: list, device: str | None = None) -> plt.Figure:
    """Horizontal bars of microseconds per call, three per op: torch, then teachkit stacked as
    "checks, allocations, Python" and "launches", kept or through the launch cache and through
    Triton's own launch path; where the record has it, Triton's compiled launcher alone is
    hatched over the last microseconds of teachkit's call (it is part of the call: where it is
    longer than the launches, the call's other parts are shorter than the way without launches
    measured).

    Parameters
    ----------
    results : list of teachkit.bench.Measurement
        What :func:`teachkit.bench.host.bench_host` returned (or a saved record), read by their
        ``params["op"]`` and providers ``torch``, ``teachkit``, ``teachkit, Triton's launch
        path`` (optional), ``teachkit, no launch`` and ``Triton's launcher alone`` (optional).
    device : str, optional
        Where they were measured (default: this machine).
    """
    ops = list(dict.fromkeys(r.params["op"] for r in results))
    got = {(r.params["op"], r.provider): r.value for r in results}
    triton_path = "teachkit, Triton's launch path"
    launcher = "Triton's launcher alone"
    fig, ax = new_axes(width=7.0, height=0.9 + 1.0 * len(ops))
    for i, op in enumerate(ops):
        y = 2.4 * (len(ops) - 1 - i)
        python = got[op, "teachkit, no launch"]
        first = i == 0
        ax.barh(y + 0.6, got[op, "torch"], 0.55, color="0.6", label="torch" if first else None)
        ax.text(got[op, "torch"], y + 0.6, f" {got[op, 'torch']:.0f}", va="center", fontsize=8)
        for dy, provider, color, label in (
                (0.0, "teachkit", "tab:orange", "teachkit: Triton launches, kept or cached"),
                (-0.6, triton_path, "tab:red", "teachkit: Triton launches, JITFunction.run")):
            if (op, provider) not in got:  # a record from before the launch cache
                continue
            total = got[op, provider]
            ax.barh(y + dy, python, 0.55, color="tab:blue",
                    label="teachkit: checks, allocations, Python" if first and dy == 0 else None)
            ax.barh(y + dy, max(total - python, 0.0), 0.55, left=python, color=color,
                    label=label if first else None)
            ax.text(total, y + dy, f" {total:.0f}", va="center", fontsize=8)
        if (op, launcher) in got:  # the floor under the launches: the call's last microseconds
            alone = got[op, launcher]
            ax.barh(y, alone, 0.55, left=max(got[op, "teachkit"] - alone, 0.0), fill=False,
                    hatch="///",
                    edgecolor="0.15", linewidth=0,
                    label="of which Triton's compiled launcher alone" if first else None)
    ax.set_yticks([2.4 * (len(ops) - 1 - i) for i in range(len(ops))], ops)
    ax.set_xlabel("µs per call (host)")
    ax.margins(x=0.15)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    label_device(fig, device)
    return fig
