"""Solutions of the exercises of notebook 01, kept apart from their checkers in
:mod:`teachkit.exercises.ex01`."""

from __future__ import annotations

import math

import torch

from ...numerics import overflow_threshold, underflow_threshold

__all__ = ["solution_naive_softmax", "solution_overflow_threshold", "solution_nan_rows"]


def solution_naive_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""The definition :math:`e^{x_i} / \sum_j e^{x_j}` along ``dim``, in ``x``'s own dtype.

    ``keepdim=True`` keeps the summed axis (with length 1), so the sums broadcast back against
    every element of their row, whatever ``dim`` is.

    Parameters
    ----------
    x : torch.Tensor
        Floating tensor of any shape.
    dim : int
        The axis the probabilities sum over.

    Returns
    -------
    torch.Tensor
        Same shape and dtype as ``x``.
    """
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def solution_overflow_threshold(dtype: torch.dtype) -> float:
    """The largest ``x`` of ``dtype`` whose ``exp``, computed in ``dtype``, is finite.

    Start from the guess ``log(finfo(dtype).max)`` rounded to the dtype, then step one
    representable value at a time with :func:`torch.nextafter`: down while ``exp`` is ``inf``,
    then up while the next value's ``exp`` is still finite. The guess is within a step or two of
    the answer, so only a few ``exp`` are computed.

    Parameters
    ----------
    dtype : torch.dtype
        ``torch.float16``, ``torch.bfloat16``, ``torch.float32`` or ``torch.float64``.

    Returns
    -------
    float
        The threshold, a value of ``dtype`` (e.g. 11.0859375 for float16).
    """

    def finite(v: torch.Tensor) -> bool:
        return bool(torch.isfinite(torch.exp(v)))

    up = torch.tensor(math.inf, dtype=dtype)
    v = torch.tensor(math.log(torch.finfo(dtype).max), dtype=dtype)
    while not finite(v):
        v = torch.nextafter(v, -up)
    while finite(torch.nextafter(v, up)):
        v = torch.nextafter(v, up)
    return float(v)


def solution_nan_rows(x: torch.Tensor) -> torch.Tensor:
    """Predict which rows (along the last axis) of ``naive_softmax(x)`` will hold a NaN.

    A NaN appears in two ways. An entry above the dtype's overflow threshold has ``exp = inf``,
    so the sum is ``inf`` and that entry is ``inf / inf = NaN``. And if every entry of a row is
    below the underflow threshold (``-inf`` included), every ``exp`` is 0 and the whole row is
    ``0 / 0 = NaN``. A sum that overflows while no single ``exp`` does gives zeros, not NaN.

    Parameters
    ----------
    x : torch.Tensor
        Floating tensor ``(..., N)`` of finite values or ``-inf``.

    Returns
    -------
    torch.Tensor
        Boolean tensor of shape ``x.shape[:-1]``.
    """
    overflows = (x > overflow_threshold(x.dtype)).any(dim=-1)
    all_underflow = (x < underflow_threshold(x.dtype)).all(dim=-1)
    return overflows | all_underflow
