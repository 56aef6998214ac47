"""Where ``exp`` runs out of range in each floating dtype, found by experiment.

The thresholds are found by bisection over the bit patterns of the dtype's positive values (for
non-negative floats, a larger bit pattern is a larger number), so the answer is the exact
representable boundary, computed by the same ``torch.exp`` the softmax uses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .validation import FLOAT_DTYPES

__all__ = ["largest_where", "overflow_threshold", "underflow_threshold"]

_INT_OF = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def largest_where(dtype: torch.dtype, ok: Callable[[torch.Tensor], bool]) -> torch.Tensor:
    """The largest non-negative finite value ``v`` of ``dtype`` with ``ok(v)``, by bisection over
    bit patterns; ``ok`` must hold at 0 and be monotone (true, then false)."""
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be one of {FLOAT_DTYPES}, got {dtype}")
    ints = _INT_OF[torch.finfo(dtype).bits // 8]

    def value(bits: int) -> torch.Tensor:
        return torch.tensor(bits, dtype=ints).view(dtype)

    lo = 0
    hi = int(torch.tensor(torch.finfo(dtype).max, dtype=dtype).view(ints))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(value(mid)) else (lo, mid)
    return value(lo)


def overflow_threshold(dtype: torch.dtype) -> float:
    """The largest ``x`` of ``dtype`` whose ``torch.exp(x)``, computed in ``dtype``, is finite.

    Examples
    --------
    >>> round(overflow_threshold(torch.float32), 2), round(overflow_threshold(torch.float16), 2)
    (88.72, 11.09)
    """
    return float(largest_where(dtype, lambda v: bool(torch.isfinite(torch.exp(v)))))


def underflow_threshold(dtype: torch.dtype) -> float:
    """The most negative ``x`` of ``dtype`` whose ``torch.exp(x)`` is still above 0 (subnormals
    count). Anything below it rounds to exactly 0.

    Examples
    --------
    >>> round(underflow_threshold(torch.float32), 2)
    -103.97
    """
    return -float(largest_where(dtype, lambda v: bool(torch.exp(-v) > 0)))
