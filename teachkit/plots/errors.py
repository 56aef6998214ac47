"""How far a softmax lands from the float64 answer as the logits grow, per dtype.

The picture of notebook 02: the naive formula is exact up to rounding until ``exp`` overflows, then
it returns NaN; the safe (max-shifted) softmax stays at the dtype's rounding level at every scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import torch

from ..compare import relative_error
from ..numerics import overflow_threshold
from .figures import new_axes

__all__ = ["scaled_rows", "error_vs_scale", "plot_error_vs_scale"]

SoftmaxFn = Callable[[torch.Tensor], torch.Tensor]

_FLOOR = 1e-10  # errors of exactly 0 are drawn here (a log axis has no 0)
_FAIL = 10.0  # NaN / inf results are drawn on this line, above every finite error


def scaled_rows(scale: float, rows: int = 8, n: int = 257, seed: int = 0) -> torch.Tensor:
    """Random float64 rows whose largest entry is exactly ``scale``; all lie in ``[-scale, scale]``.

    The same ``seed`` gives the same rows at every scale, so only the magnitude changes.

    Parameters
    ----------
    scale : float
        The largest value of every row.
    rows, n : int
        Number of rows and their length.
    seed : int
        Seed of the random rows.

    Examples
    --------
    >>> x = scaled_rows(100.0, rows=3, n=5)
    >>> x.shape, x.amax(-1).tolist()
    (torch.Size([3, 5]), [100.0, 100.0, 100.0])
    """
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, n, generator=g, dtype=torch.float64)
    base = base - base.amax(-1, keepdim=True)  # largest entry 0, the others below it
    base = base / base.abs().amax(-1, keepdim=True).clamp_min(1e-300)  # within [-1, 0]
    return (2.0 * base + 1.0) * scale  # within [-scale, scale], largest exactly scale


def error_vs_scale(
    fn: SoftmaxFn,
    dtype: torch.dtype,
    scales: Sequence[float],
    rows: int = 8,
    n: int = 257,
    seed: int = 0,
) -> list[float]:
    """Relative error of ``fn`` against the float64 softmax, one value per scale.

    At each scale the rows of :func:`scaled_rows` are rounded to ``dtype``, passed to ``fn``, and
    compared (by :func:`teachkit.compare.relative_error`) with ``torch.softmax`` of the *rounded*
    input in float64, so only the softmax's own error is measured. A result with NaN or inf where
    the reference is finite gives ``inf``.

    Parameters
    ----------
    fn : callable
        A softmax along the last axis, e.g. :func:`teachkit.naive_softmax`.
    dtype : torch.dtype
        The dtype the input is given in.
    scales : sequence of float
        The largest logit of each row, one experiment per value.
    rows, n, seed : int
        Passed to :func:`scaled_rows`.

    Examples
    --------
    >>> from teachkit.softmax import naive_softmax
    >>> error_vs_scale(naive_softmax, torch.float32, [1.0, 1000.0])[1]
    inf
    """
    errors = []
    for s in scales:
        x = scaled_rows(float(s), rows, n, seed).to(dtype)
        ref = torch.softmax(x.double(), dim=-1)
        with torch.no_grad():
            errors.append(relative_error(fn(x), ref))
    return errors


def plot_error_vs_scale(
    methods: Mapping[str, SoftmaxFn],
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.float16, torch.bfloat16),
    scales: Sequence[float] | None = None,
    rows: int = 8,
    n: int = 257,
    seed: int = 0,
) -> plt.Figure:
    """One panel per dtype: relative error of each method against the largest logit.

    Finite errors are drawn on a log axis; a NaN or inf result is drawn on the line marked
    "NaN / inf" at the top. Each panel marks where ``exp`` overflows in that dtype
    (:func:`teachkit.numerics.overflow_threshold`) and the dtype's unit roundoff ``eps / 2``.

    Parameters
    ----------
    methods : mapping of str to callable
        Label and softmax function (last axis), e.g. ``{"naive": naive_softmax, ...}``.
    dtypes : sequence of torch.dtype
        The input dtypes, one panel each.
    scales : sequence of float, optional
        The largest logits tried; 41 values from 1 to 10**3.5 (log-spaced) when omitted.
    rows, n, seed : int
        The random rows (see :func:`scaled_rows`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not methods:
        raise ValueError(
            "methods is empty; pass e.g. {'naive': naive_softmax, 'safe': safe_softmax}"
        )
    if not dtypes:
        raise ValueError("dtypes is empty; pass e.g. (torch.float32, torch.float16)")
    scales = list(torch.logspace(0, 3.5, 41).tolist() if scales is None else scales)
    fig, axes = new_axes(ncols=len(dtypes), width=4.6, height=3.6)
    axes = [axes] if len(dtypes) == 1 else list(axes)
    markers = "os^vD"
    for ax, dtype in zip(axes, dtypes, strict=True):
        for k, (label, fn) in enumerate(methods.items()):
            errs = error_vs_scale(fn, dtype, scales, rows, n, seed)
            ys = [_FAIL if not math.isfinite(e) else max(e, _FLOOR) for e in errs]
            ax.plot(scales, ys, marker=markers[k % len(markers)], ms=4, lw=1.2,
                    color=f"C{k}", label=label)
        limit = overflow_threshold(dtype)
        ax.axvline(limit, color="0.3", ls=":", lw=1)
        ax.text(limit * 1.1, 2e-2, f"exp overflows\nabove {limit:.2f}", fontsize=7, color="0.3")
        roundoff = torch.finfo(dtype).eps / 2
        ax.axhline(roundoff, color="0.5", ls="--", lw=0.8)
        ax.text(0.02, 0.13, f"dashed: eps/2 = {roundoff:.1e}\n(rounding of one value)",
                transform=ax.transAxes, fontsize=7, color="0.4")
        ax.axhline(_FAIL, color="C3", lw=0.6, alpha=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(_FLOOR / 3, _FAIL * 5)
        ax.set_yticks([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, _FAIL])
        ax.set_yticklabels(["1e-9", "1e-7", "1e-5", "1e-3", "1e-1", "NaN / inf"])
        ax.set_xlabel("largest logit of the row")
        ax.set_title(str(dtype).replace("torch.", ""))
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("relative error vs float64")
    axes[0].legend(loc="center left", fontsize=8)
    fig.suptitle("Naive softmax breaks where exp overflows; the max shift stays at rounding level",
                 fontsize=10)
    fig.tight_layout()
    return fig
