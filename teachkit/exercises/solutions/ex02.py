"""Solutions of the exercises of notebook 02, kept apart from their checkers in
:mod:`teachkit.exercises.ex02`."""

from __future__ import annotations

import torch

__all__ = ["solution_safe_softmax", "solution_mean_breaker", "solution_softmax_stats"]

LOW = (torch.float16, torch.bfloat16)  # computed in float32, rounded back once
INF = float("inf")


def solution_safe_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The safe softmax along ``dim``: subtract each row's maximum, exponentiate, normalise.

    Every exponent is at most 0, so nothing overflows; the largest term is 1, so the sum is at
    least 1 (no 0/0). float16 and bfloat16 are computed in float32 and rounded back once.
    """
    y = x.float() if x.dtype in LOW else x
    m = y.amax(dim=dim, keepdim=True)  # pass 1: each row's own maximum
    e = torch.exp(y - m)  # pass 2: exponents <= 0 ...
    p = e / e.sum(dim=dim, keepdim=True)  # ... their sum, and pass 3: normalise
    return p.to(x.dtype)


def solution_mean_breaker() -> torch.Tensor:
    """Zeros with one entry of 100, in a row of 100: the mean is 1, so ``x - mean`` reaches 99.

    ``exp(99)`` overflows float32 (the limit is about 88.72), so ``softmax(x - mean)`` is NaN,
    while ``x - max`` is at most 0. The mean sits among the many values; the max sits on top of
    all of them, which is the only shift that bounds every exponent.
    """
    x = torch.zeros(100)
    x[0] = 100.0
    return x


def solution_softmax_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The statistics of each row (last axis): ``m = max x`` and ``d = sum exp(x - m)``.

    An all ``-inf`` row gives ``(-inf, 0)``: it holds no mass, and ``x - m`` there would be
    ``-inf - (-inf) = NaN``, so its terms are replaced by 0. Low precision is computed in float32.
    """
    y = x.float() if x.dtype in LOW else x
    m = y.amax(dim=-1)  # pass 1
    m_ = m.unsqueeze(-1)
    terms = torch.where(m_ == -INF, torch.zeros((), dtype=y.dtype), torch.exp(y - m_))
    return m, terms.sum(dim=-1)  # pass 2
