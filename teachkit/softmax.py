r"""Softmax in plain PyTorch, from the naive formula to chunks merged by their statistics.

Every function takes a floating tensor of any shape, works along ``dim`` and returns the input's
dtype and shape. Low precision (float16, bfloat16) is computed in float32 inside, as the kernels
do; only :func:`naive_softmax` computes in the input's own dtype, so that it overflows the way a
learner would see it overflow.

The statistics of a row are its maximum and its denominator,

.. math::  m = \max_j x_j, \qquad d = \sum_j e^{x_j - m},

and two rows' statistics merge into the statistics of their concatenation
(:func:`merge_stats`). That one rule gives the online softmax, the chunked softmax, the
log-sum-exp forms and, with one more accumulator, FlashAttention.

Semantics follow ``torch.softmax``: a row containing NaN or ``+inf``, or only ``-inf``, gives NaN;
``-inf`` entries give 0 and the rest of the row stays right.
"""

from __future__ import annotations

import torch

from .validation import (
    compute_dtype,
    normalize_dim,
    require_broadcastable,
    require_float_tensor,
    require_positive_int,
)

__all__ = [
    "naive_softmax",
    "safe_softmax",
    "softmax_stats",
    "online_prefix_stats",
    "online_stats",
    "online_softmax",
    "exp_shift",
    "merge_stats",
    "chunk_stats",
    "reduce_stats",
    "chunked_softmax",
    "to_lse",
    "merge_lse",
    "logsumexp",
    "normalize_with_stats",
]


def _prepare(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, int]:
    """Validate ``x``; view a 0-d tensor as a row of one; return it and the non-negative dim."""
    require_float_tensor(x)
    dim = normalize_dim(x, dim)
    return (x.reshape(1) if x.dim() == 0 else x), dim


def naive_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""The definition, :math:`e^{x_i} / \sum_j e^{x_j}`, computed in ``x``'s own dtype.

    This is the version that overflows: ``exp`` of anything above about 88.72 is ``inf`` in
    float32 (about 11.09 in float16); an entry whose ``exp`` overflows comes out NaN
    (``inf / inf``) and every other entry of its row 0 (``finite / inf``), so the row no longer
    sums to 1 and any product with it (``p @ v``) is NaN. It is here to be broken; use
    :func:`safe_softmax` for real work.

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

    Examples
    --------
    >>> naive_softmax(torch.tensor([1.0, 2.0, 3.0]))
    tensor([0.0900, 0.2447, 0.6652])
    >>> naive_softmax(torch.tensor([1.0, 2.0, 3.0]) * 1000)
    tensor([nan, nan, nan])
    """
    y, dim = _prepare(x, dim)
    e = torch.exp(y)
    return (e / e.sum(dim=dim, keepdim=True)).reshape(x.shape)


def exp_shift(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    r""":math:`e^{x - m}`, except that a row whose maximum is ``m = -inf`` contributes 0, not NaN.

    A row (or chunk) made only of ``-inf`` has ``m = -inf`` and ``x - m = -inf - (-inf) = NaN``.
    Such a row holds no probability mass, so its terms must be 0 for merges to stay right. Only
    ``m = -inf`` is special: ``m = +inf`` or NaN still give NaN, as they do in ``torch.softmax``.

    Parameters
    ----------
    x, m : torch.Tensor
        Values and the maximum they are shifted by (broadcastable; ``x <= m`` where defined).
    """
    return torch.where(m == float("-inf"), torch.zeros((), dtype=x.dtype), torch.exp(x - m))


def softmax_stats(x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The statistics ``(m, d)`` of each row, by two passes: first the max, then the sum.

    :math:`m = \max_j x_j` and :math:`d = \sum_j e^{x_j - m}`. An empty row gives
    ``(-inf, 0)``, the identity of :func:`merge_stats`; an all ``-inf`` row gives ``(-inf, 0)``.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``m`` and ``d`` with ``dim`` removed, in float32 for low-precision input.
    """
    y, dim = _prepare(x, dim)
    y = y.to(compute_dtype(y.dtype))
    if y.shape[dim] == 0:
        shape = y.shape[:dim] + y.shape[dim + 1 :]
        return y.new_full(shape, float("-inf")), y.new_zeros(shape)
    m = y.amax(dim=dim)
    d = exp_shift(y, m.unsqueeze(dim)).sum(dim=dim)
    return m, d


def normalize_with_stats(
    x: torch.Tensor, m: torch.Tensor, d: torch.Tensor, dim: int = -1
) -> torch.Tensor:
    r"""The last pass of every safe softmax: :math:`p_i = e^{x_i - m} / d` from the row's stats.

    Plain ``exp``, not :func:`exp_shift`, so an all ``-inf`` row comes out NaN, as in
    ``torch.softmax``.

    Parameters
    ----------
    x : torch.Tensor
        The scores.
    m, d : torch.Tensor
        Statistics of each row along ``dim``, with ``dim`` removed.
    dim : int
        The softmax axis.
    """
    y, dim = _prepare(x, dim)
    p = torch.exp(y.to(m.dtype) - m.unsqueeze(dim)) / d.unsqueeze(dim)
    return p.to(x.dtype).reshape(x.shape)


def safe_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""The safe softmax in three passes: max, sum of shifted exponentials, normalise.

    Shifting by the row maximum changes nothing mathematically
    (:math:`e^{x_i - c}/\sum_j e^{x_j - c} = e^{x_i}/\sum_j e^{x_j}` for any ``c``) but keeps every
    exponent at most 0, so nothing overflows. What underflows to 0 was below
    :math:`e^{-103}` relative to the largest term: invisible in the sum anyway.

    Parameters
    ----------
    x : torch.Tensor
        Floating tensor of any shape.
    dim : int
        The axis the probabilities sum over.

    Returns
    -------
    torch.Tensor
        Same shape and dtype as ``x``; equal to ``torch.softmax(x, dim)`` within rounding.

    Examples
    --------
    >>> safe_softmax(torch.tensor([1.0, 3.0, 2.0, 5.0]))
    tensor([0.0152, 0.1125, 0.0414, 0.8310])
    """
    m, d = softmax_stats(x, dim)
    return normalize_with_stats(x, m, d, dim)


def online_prefix_stats(x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The running ``(m, d)`` after each element of one sweep along ``dim``: the online trace.

    Element ``j`` of the result holds the statistics of ``x[..., :j+1]``, built by the update

    .. math::  m_j = \max(m_{j-1}, x_j), \qquad
               d_j = d_{j-1}\, e^{m_{j-1} - m_j} + e^{x_j - m_j},

    starting from ``(m, d) = (-inf, 0)``. The loop runs along ``dim`` in Python and is vectorised
    over all other dimensions.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``m`` and ``d`` with the shape of ``x``, in float32 for low-precision input.
    """
    y, dim = _prepare(x, dim)
    y = y.to(compute_dtype(y.dtype)).movedim(dim, -1)
    ms, ds = torch.empty_like(y), torch.empty_like(y)
    m = y.new_full(y.shape[:-1], float("-inf"))
    d = y.new_zeros(y.shape[:-1])
    for j in range(y.shape[-1]):
        xj = y[..., j]
        m_new = torch.maximum(m, xj)
        d = d * exp_shift(m, m_new) + exp_shift(xj, m_new)
        m = m_new
        ms[..., j], ds[..., j] = m, d
    return ms.movedim(-1, dim).reshape(x.shape), ds.movedim(-1, dim).reshape(x.shape)


def online_stats(x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """The final ``(m, d)`` of the one-sweep online update along ``dim`` (``dim`` removed).

    Equal to :func:`softmax_stats` up to rounding, but reads each element once. An empty row gives
    ``(-inf, 0)``.
    """
    y, dim = _prepare(x, dim)
    if y.shape[dim] == 0:
        return softmax_stats(y, dim)
    ms, ds = online_prefix_stats(y, dim)
    last = torch.tensor([y.shape[dim] - 1], device=y.device)
    return ms.index_select(dim, last).squeeze(dim), ds.index_select(dim, last).squeeze(dim)


def online_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax by the online algorithm: one sweep for ``(m, d)``, then one normalising pass.

    Two passes over the data instead of the safe softmax's three, with the same result.

    Parameters
    ----------
    x : torch.Tensor
        Floating tensor of any shape.
    dim : int
        The axis the probabilities sum over.

    Examples
    --------
    >>> online_softmax(torch.tensor([1.0, 3.0, 2.0, 5.0]))
    tensor([0.0152, 0.1125, 0.0414, 0.8310])
    """
    m, d = online_stats(x, dim)
    return normalize_with_stats(x, m, d, dim)


def merge_stats(
    m_a: torch.Tensor, d_a: torch.Tensor, m_b: torch.Tensor, d_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Merge the statistics of two parts of a row into the statistics of the whole row.

    .. math::  m = \max(m_a, m_b), \qquad d = d_a e^{m_a - m} + d_b e^{m_b - m}.

    The merge is exact, commutative and associative, with identity ``(-inf, 0)``; an all-masked
    part (``m = -inf``) adds nothing instead of NaN (see :func:`exp_shift`).

    Parameters
    ----------
    m_a, d_a, m_b, d_b : torch.Tensor
        Statistics of the two parts; any shapes that broadcast together.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``(m, d)`` of the union, with the broadcast shape.

    Examples
    --------
    >>> first, last = torch.tensor([1.0, 3.0, 2.0]), torch.tensor([5.0])
    >>> m, d = merge_stats(*softmax_stats(first), *softmax_stats(last))
    >>> round(m.item(), 4), round(d.item(), 4)
    (5.0, 1.2034)
    """
    require_broadcastable(("m_a", m_a), ("d_a", d_a), ("m_b", m_b), ("d_b", d_b))
    m = torch.maximum(m_a, m_b)
    return m, d_a * exp_shift(m_a, m) + d_b * exp_shift(m_b, m)


def chunk_stats(
    x: torch.Tensor, chunk_size: int, dim: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Statistics ``(m, d)`` of each chunk of ``chunk_size`` elements along ``dim``.

    The last chunk is shorter when the length is not a multiple of ``chunk_size``.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``m`` and ``d`` shaped like ``x`` except that ``dim`` has one entry per chunk.
    """
    y, dim = _prepare(x, dim)
    require_positive_int(chunk_size, "chunk_size")
    stats = [softmax_stats(c, dim) for c in y.split(chunk_size, dim)]
    if not stats:
        shape = list(y.shape)
        shape[dim] = 0
        empty = y.new_empty(shape, dtype=compute_dtype(y.dtype))
        return empty, empty.clone()
    return torch.stack([s[0] for s in stats], dim), torch.stack([s[1] for s in stats], dim)


def reduce_stats(
    m: torch.Tensor, d: torch.Tensor, dim: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold :func:`merge_stats` left to right along ``dim``; an empty axis gives ``(-inf, 0)``."""
    require_broadcastable(("m", m), ("d", d))
    dim = normalize_dim(m, dim, "m")
    shape = m.shape[:dim] + m.shape[dim + 1 :]
    acc_m, acc_d = m.new_full(shape, float("-inf")), d.new_zeros(shape)
    for mc, dc in zip(m.unbind(dim), d.unbind(dim), strict=True):
        acc_m, acc_d = merge_stats(acc_m, acc_d, mc, dc)
    return acc_m, acc_d


def chunked_softmax(x: torch.Tensor, chunk_size: int, dim: int = -1) -> torch.Tensor:
    """Softmax from per-chunk statistics merged by :func:`merge_stats`, then one normalising pass.

    Each chunk is reduced on its own (as separate programs or devices would), the chunks'
    ``(m, d)`` are merged, and every element is normalised with the merged statistics.

    Parameters
    ----------
    x : torch.Tensor
        Floating tensor of any shape.
    chunk_size : int
        Elements per chunk along ``dim`` (the last chunk may be shorter).
    dim : int
        The axis the probabilities sum over.

    Examples
    --------
    >>> chunked_softmax(torch.tensor([1.0, 3.0, 2.0, 5.0]), chunk_size=3)
    tensor([0.0152, 0.1125, 0.0414, 0.8310])
    """
    y, dim_ = _prepare(x, dim)
    m, d = reduce_stats(*chunk_stats(y, chunk_size, dim_), dim=dim_)
    return normalize_with_stats(x, m, d, dim)


def to_lse(m: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    r"""Fold ``(m, d)`` into one number per row, the log-sum-exp :math:`m + \log d`.

    An empty or all ``-inf`` row (``d = 0``) gives ``-inf``.
    """
    require_broadcastable(("m", m), ("d", d))
    return m + torch.log(d)


def merge_lse(lse_a: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    r"""Merge two log-sum-exps: :math:`\log(e^{a} + e^{b})`, computed without overflow.

    Written as :math:`\max(a, b) + \log(e^{a - \max} + e^{b - \max})`; ``-inf`` (an empty part)
    is the identity, ``+inf`` with anything but NaN gives ``+inf`` (as ``torch.logaddexp``).
    """
    require_broadcastable(("lse_a", lse_a), ("lse_b", lse_b))
    m = torch.maximum(lse_a, lse_b)
    merged = m + torch.log(exp_shift(lse_a, m) + exp_shift(lse_b, m))
    return torch.where(m == float("inf"), m, merged)


def logsumexp(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``log(sum(exp(x)))`` along ``dim`` from the row statistics, like ``torch.logsumexp``.

    A row holding ``+inf`` gives ``+inf`` (as ``torch.logsumexp`` does), one holding NaN gives NaN.
    """
    m, d = softmax_stats(x, dim)
    return torch.where(m == float("inf"), m, to_lse(m, d))
