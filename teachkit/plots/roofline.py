"""Figures of notebook 05: the roofline, bytes moved per softmax variant, and the L2 caveat."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_roofline", "plot_traffic", "plot_working_set", "dtype_label"]

_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def dtype_label(dtype: object) -> str:
    """The short name of a dtype for a figure: ``'bf16'`` for ``"bfloat16"``, ``"bf16"`` or
    ``torch.bfloat16``; unknown names are returned as they are.

    Examples
    --------
    >>> dtype_label("bfloat16"), dtype_label("torch.float16"), dtype_label("fp32")
    ('bf16', 'fp16', 'fp32')
    """
    name = str(dtype).removeprefix("torch.")
    return _SHORT.get(name, name)


def plot_roofline(copy_gbps: float, peak_tflops: float,
                  points: dict[str, float], device: str,
                  achieved: dict[str, float] | None = None,
                  matmul_dtype: object = "bfloat16") -> plt.Figure:
    """The roofline of a device with kernels placed at their arithmetic intensity.

    Attainable rate = min(peak, intensity x bandwidth), on log-log axes; the ridge point (where
    the two roofs meet) is marked.

    Parameters
    ----------
    copy_gbps : float
        Memory bandwidth in GB/s (the measured copy ceiling).
    peak_tflops : float
        Compute ceiling in TFLOP/s (the measured matmul rate, see ``matmul_dtype``).
    points : dict[str, float]
        Kernel name -> arithmetic intensity in FLOP/byte; each is drawn on the roof.
    device : str
        Name of the device the ceilings come from, written in the title.
    achieved : dict[str, float], optional
        Kernel name -> measured TFLOP/s, drawn as hollow markers below the roof.
    matmul_dtype : str or torch.dtype
        The dtype the compute ceiling was measured in (:func:`teachkit.bench.matmul_dtype`;
        ``teachkit.bench.recorded_matmul_dtype(record)`` for a record), written on the roof.
    """
    ridge = peak_tflops * 1e3 / copy_gbps
    lo = min([*points.values(), ridge]) / 10
    hi = max([*points.values(), ridge]) * 10
    ai = np.logspace(np.log10(lo), np.log10(hi), 200)
    roof = np.minimum(peak_tflops, ai * copy_gbps / 1e3)
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    ax.loglog(ai, roof, color="k", lw=2)
    ax.axvline(ridge, color="0.6", ls=":", lw=1)
    ax.text(ridge * 1.1, peak_tflops * 0.02, f"ridge\n{ridge:.0f} FLOP/B", fontsize=8,
            color="0.3")
    ax.text(lo * 1.3, lo * 1.3 * copy_gbps / 1e3 * 5, f"{copy_gbps:.0f} GB/s",
            rotation=0, fontsize=8, color="0.3")
    ax.text(hi / 1.3, peak_tflops * 1.15,
            f"{peak_tflops:.0f} TFLOP/s ({dtype_label(matmul_dtype)} matmul)", ha="right",
            fontsize=8, color="0.3")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, x) in enumerate(points.items()):
        y = min(peak_tflops, x * copy_gbps / 1e3)
        c = colors[i % len(colors)]
        ax.plot([x], [y], "o", color=c, ms=8, label=f"{name}: {x:.3g} FLOP/B")
        if achieved and name in achieved:
            ax.plot([x], [achieved[name]], "o", mfc="none", color=c, ms=8)
    ax.set_ylim(lo * copy_gbps / 1e3 / 2, peak_tflops * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(f"Roofline of {device}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_traffic(counts: dict[str, dict[str, int]], unit: float = 2**20,
                 unit_name: str = "MiB", title: str = "Bytes moved per softmax variant"
                 ) -> plt.Figure:
    """Horizontal stacked bars of bytes read and written per variant.

    Parameters
    ----------
    counts : dict[str, dict[str, int]]
        Variant -> ``{"reads": bytes, "writes": bytes}`` (what
        :func:`teachkit.traffic.traffic_model` returns).
    unit, unit_name : float, str
        Scale of the axis (bytes per unit) and its name.
    title : str
        Figure title.
    """
    names = list(counts)
    reads = np.array([counts[n]["reads"] for n in names]) / unit
    writes = np.array([counts[n]["writes"] for n in names]) / unit
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(names) + 1.4))
    y = np.arange(len(names))[::-1]
    ax.barh(y, reads, color="tab:blue", label="read")
    ax.barh(y, writes, left=reads, color="tab:orange", label="written")
    for yi, r, w in zip(y, reads, writes, strict=True):
        ax.text(r + w, yi, f" {r + w:.0f}", va="center", fontsize=8)
    ax.set_yticks(y, names)
    ax.set_xlabel(unit_name)
    ax.set_xlim(0, (reads + writes).max() * 1.15)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_working_set(rows: list[dict], copy_gbps: float | None = None,
                     l2_bytes: int | None = None, device: str = "") -> plt.Figure:
    """Bandwidth against working-set size, with the L2 size marked: the L2 caveat.

    Parameters
    ----------
    rows : list of dict
        What :func:`teachkit.traffic.working_set_sweep` returned: ``working_set_bytes`` and
        GB/s under keys such as ``copy_cold``, ``copy_warm``, ``softmax_cold``, ``softmax_warm``.
    copy_gbps : float, optional
        The copy ceiling (HBM), drawn as a dashed line.
    l2_bytes : int, optional
        The L2 cache size, drawn as a vertical line.
    device : str
        Written in the title.
    """
    ws = np.array([r["working_set_bytes"] for r in rows]) / 2**20
    keys = [k for k in rows[0] if k != "working_set_bytes"] if rows else []
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if not rows:  # every size was skipped (too large for this GPU's free memory)
        ax.text(0.5, 0.5, "no working set measured", ha="center", va="center",
                transform=ax.transAxes)
    for k in keys:
        style = "-" if k.endswith("warm") else "--"
        ax.semilogx(ws, [r[k] for r in rows], style, marker="o", ms=4,
                    label=k.replace("_", ", ") + (" (back to back)" if k.endswith("warm")
                                                  else " (L2 flushed)"))
    if copy_gbps and rows:
        ax.axhline(copy_gbps, color="k", ls=":", lw=1)
        ax.text(ws[-1], copy_gbps, f"copy ceiling {copy_gbps:.0f} GB/s ", ha="right",
                va="bottom", fontsize=8)
    if l2_bytes:
        ax.axvline(l2_bytes / 2**20, color="tab:red", lw=1)
        ax.text(l2_bytes / 2**20, ax.get_ylim()[1] * 0.95, f" L2 = {l2_bytes / 2**20:.0f} MiB",
                color="tab:red", fontsize=8, va="top")
    ax.set_xlabel("working set: bytes read + written (MiB)")
    ax.set_ylabel("GB/s")
    ax.set_title(f"Bandwidth against working set{', ' + device if device else ''}")
    ax.grid(True, alpha=0.3)
    if keys:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
