"""Checking a softmax implementation against float64 ``torch.softmax`` on many rows at once.

One function, used three ways: the GPU check script and notebook 11 check the CuTe DSL kernel
with it, and on a machine without one the notebook checks the simulation with the same cases.
Cases are odd row lengths (a single element, fewer elements than threads, lengths no vector
divides) in every dtype, and special rows: ``-inf`` masks, a row of ``-inf`` only, NaN, ``+inf``,
and values in the thousands.

Examples
--------
>>> from teachkit.cute import simulate_cute_softmax
>>> checks = verify_softmax(lambda x: simulate_cute_softmax(x).out, lengths=(7, 100),
...                         dtypes=(torch.float32,), device="cpu")
>>> all(c.ok for c in checks), len(checks)
(True, 4)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ..compare import relative_error

__all__ = ["TOLERANCE", "Check", "special_rows", "verify_softmax", "format_checks"]

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
"""Largest relative error accepted against float64, per dtype (bf16 and fp16: their rounding)."""


@dataclass
class Check:
    """One verified case: which input, the relative error, whether NaN sat where torch's does."""

    case: str
    dtype: torch.dtype
    error: float
    tolerance: float
    nan_match: bool

    @property
    def ok(self) -> bool:
        """Within tolerance, and NaN exactly where ``torch.softmax`` has NaN."""
        return self.nan_match and self.error <= self.tolerance


def special_rows(n_cols: int, dtype: torch.dtype, device: torch.device | str,
                 gen: torch.Generator) -> torch.Tensor:
    """Six rows of ``n_cols``: plain, every third ``-inf``, all ``-inf``, a NaN, a ``+inf``, and
    values times 1000 (drawn in float64 on the CPU, then converted)."""
    x = torch.randn(6, n_cols, generator=gen, dtype=torch.float64) * 4
    x[1, ::3] = float("-inf")
    x[2] = float("-inf")
    x[3, n_cols // 2] = float("nan")
    x[4, n_cols // 3] = float("inf")
    x[5] *= 250
    return x.to(device=device, dtype=dtype)


def verify_softmax(
    fn: Callable[[torch.Tensor], torch.Tensor],
    lengths: Iterable[int] = (1, 7, 1000, 1024, 4097),
    dtypes: Iterable[torch.dtype] = (torch.float32, torch.bfloat16),
    rows: int = 3,
    device: torch.device | str = "cuda",
    special: bool = True,
    seed: int = 0,
) -> list[Check]:
    """Run ``fn`` (softmax over the last axis of a 2-D tensor) on every case; compare with float64.

    Parameters
    ----------
    fn : callable
        ``fn(x) -> y`` with ``y`` of ``x``'s shape and dtype.
    lengths : iterable of int
        Row lengths to try.
    dtypes : iterable of torch.dtype
        Input dtypes (keys of :data:`TOLERANCE`).
    rows : int
        Random rows per plain case.
    device : torch.device or str
        Where the inputs live.
    special : bool
        Also try :func:`special_rows` at each length.
    seed : int
        Seed of the random inputs (fixed, so a failure can be reproduced).

    Returns
    -------
    list of Check
        One per (length, dtype, plain or special); none is raised on, so a report can list all.
    """
    gen = torch.Generator().manual_seed(seed)
    checks = []
    for n in lengths:
        for dtype in dtypes:
            inputs = {f"{rows} x {n}": (torch.randn(rows, n, generator=gen, dtype=torch.float64)
                                        * 3).to(device=device, dtype=dtype)}
            if special:
                inputs[f"6 x {n} special rows"] = special_rows(n, dtype, device, gen)
            for case, x in inputs.items():
                y = fn(x)
                ref = torch.softmax(x.double(), dim=-1)
                nan_match = (y.shape == ref.shape and y.dtype == x.dtype
                             and torch.equal(torch.isnan(y).cpu(), torch.isnan(ref).cpu()))
                err = relative_error(y, ref) if y.shape == ref.shape else float("inf")
                checks.append(Check(case, dtype, err, TOLERANCE[dtype], nan_match))
    return checks


def format_checks(checks: list[Check]) -> str:
    """A compact report: one line per case, ``ok`` or ``FAIL``, then a summary line.

    Examples
    --------
    >>> print(format_checks([Check("3 x 7", torch.float32, 1.5e-7, 1e-5, True)]))
    3 x 7  float32   error 1.5e-07 (allowed 1e-05)  ok
    1 of 1 cases ok
    """
    width = max((len(c.case) for c in checks), default=0)
    lines = []
    for c in checks:
        verdict = "ok" if c.ok else "FAIL" + ("" if c.nan_match else " (NaN, dtype or shape)")
        dtype = str(c.dtype).replace("torch.", "")
        lines.append(f"{c.case:<{width}}  {dtype:<8}  error {c.error:.1e} "
                     f"(allowed {c.tolerance:g})  {verdict}")
    lines.append(f"{sum(c.ok for c in checks)} of {len(checks)} cases ok")
    return "\n".join(lines)
