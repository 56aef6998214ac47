"""Where figures go and how they are labelled: one place for every plot helper."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use(matplotlib.get_backend())  # keep Jupyter's inline backend; Agg where headless

import matplotlib.pyplot as plt  # noqa: E402

from ..device import device_name  # noqa: E402

__all__ = ["figures_dir", "save_figure", "new_axes", "label_device"]


def figures_dir() -> Path:
    """Where :func:`save_figure` writes.

    In order: the folder named by the environment variable ``TEACHKIT_FIGURES``; the course's
    ``figures/`` folder when teachkit runs from a clone of the repository (an editable install),
    so a clean run regenerates the figures the README shows; otherwise ``figures/`` in the
    current folder, which is the notebook's own folder in Jupyter and ``/content`` in Colab,
    where the file browser shows it.
    """
    if os.environ.get("TEACHKIT_FIGURES"):
        return Path(os.environ["TEACHKIT_FIGURES"])
    clone = Path(__file__).resolve().parents[2]
    if (clone / "pyproject.toml").is_file() and (clone / "figures").is_dir():
        return clone / "figures"
    return Path.cwd() / "figures"


def save_figure(fig: plt.Figure, name: str) -> Path:
    """Save ``fig`` as ``figures/<name>.png`` (150 dpi, tight) and return the path."""
    path = figures_dir() / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    return path


def new_axes(ncols: int = 1, width: float = 6.0, height: float = 3.6):
    """A figure with ``ncols`` side-by-side axes of a common size; returns ``(fig, axes)``."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, axes[0] if ncols > 1 else axes[0, 0]


def label_device(fig: plt.Figure, name: str | None = None) -> None:
    """Write a device's name in the figure's lower-right corner (for measured figures).

    ``name`` defaults to this machine's device; pass the recorded one for figures measured
    elsewhere.
    """
    fig.text(0.99, 0.01, name or device_name(), ha="right", va="bottom", fontsize=7, color="0.4")
