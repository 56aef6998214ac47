r"""Attention in plain PyTorch: the materialised reference and the blockwise (online) algorithm.

Shapes follow ``torch.nn.functional.scaled_dot_product_attention``: q is ``(..., L, D)``, k is
``(..., S, D)`` and v is ``(..., S, Dv)``; the output is ``(..., L, Dv)`` in q's dtype. ``scale``
defaults to :math:`1/\sqrt{D}`, and ``causal=True`` means what ``is_causal=True`` means there: query
``i`` sees keys ``0..i`` (the mask is aligned to the top-left corner).

:func:`blockwise_attention` is FlashAttention's algorithm written with tensors: it walks over
blocks of keys and values keeping, for every query row, the running maximum ``m``, the running
denominator ``l`` and an unnormalised output ``acc``, all rescaled by the same factor when the
maximum grows. It also returns the log-sum-exp of each row, the one number per row that lets two
partial results be merged later (:func:`merge_partials`).

**A query that sees no key.** When every score of a query row is ``-inf`` (no key at all, every
key masked, or scores that are ``-inf`` through ``-inf`` inputs), its output is 0 and its lse is
``-inf``: what ``scaled_dot_product_attention`` gives (its math backend in torch 2.13), and the
only value that merges correctly with another partial result (weight 0). Every attention function
of the course follows this rule. A row with a NaN score stays NaN.
"""

from __future__ import annotations

import torch

from .softmax import exp_shift, merge_lse
from .validation import (
    compute_dtype,
    require_attention_inputs,
    require_bool,
    require_float_tensor,
    require_positive_int,
    resolve_scale,
)

__all__ = [
    "causal_mask",
    "attention_scores",
    "naive_attention",
    "attention_block_update",
    "blockwise_attention",
    "merge_partials",
]


def causal_mask(L: int, S: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean ``(L, S)`` mask, ``True`` where query ``i`` may see key ``j`` (``j <= i``).

    The same top-left-aligned mask that ``scaled_dot_product_attention(is_causal=True)`` uses.
    """
    for name, n in (("L", L), ("S", S)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be an int (a length), got {type(n).__name__}")
        if n < 0:
            raise ValueError(f"{name} must be >= 0 (a length), got {n}")
    return torch.ones(L, S, dtype=torch.bool, device=device).tril()


def attention_scores(
    q: torch.Tensor, k: torch.Tensor, causal: bool = False, scale: float | None = None,
    key_offset: int = 0,
) -> torch.Tensor:
    """The scaled scores ``q @ k^T * scale`` in float32 (float64 for float64), causal entries -inf.

    Parameters
    ----------
    q, k : torch.Tensor
        ``(..., L, D)`` and ``(..., S, D)``.
    causal : bool
        Mask key ``j`` for query ``i`` when ``key_offset + j > i``.
    scale : float, optional
        Defaults to ``1/sqrt(D)``.
    key_offset : int
        Position of ``k``'s first key in the whole sequence (for a block of keys).
    """
    require_bool(causal, "causal")
    if isinstance(key_offset, bool) or not isinstance(key_offset, int):
        raise TypeError(f"key_offset must be an int, got {type(key_offset).__name__}")
    dtype = compute_dtype(q.dtype)
    s = (q.to(dtype) @ k.to(dtype).transpose(-2, -1)) * resolve_scale(scale, q.shape[-1])
    if causal:
        L, S = q.shape[-2], k.shape[-2]
        rows = torch.arange(L, device=q.device).unsqueeze(-1)
        cols = torch.arange(key_offset, key_offset + S, device=q.device)
        s = s.masked_fill(cols > rows, float("-inf"))
    return s


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    r"""Attention with the whole ``L x S`` score matrix in memory, :math:`\mathrm{softmax}(qk^Ts)v`.

    The reference the blockwise algorithm and the kernels are checked against (pass float64
    inputs for a float64 reference).

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(..., L, D)``, ``(..., S, D)``, ``(..., S, Dv)``, one floating dtype.
    causal : bool
        As ``is_causal`` of ``scaled_dot_product_attention``.
    scale : float, optional
        Multiplies the scores; defaults to ``1/sqrt(D)``.

    Returns
    -------
    torch.Tensor
        ``(..., L, Dv)`` in q's dtype; 0 in a row whose scores are all ``-inf`` (it sees no key).

    Examples
    --------
    >>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    >>> out = naive_attention(q, k, v)
    >>> torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-6)
    True
    """
    require_attention_inputs(q, k, v)
    s = attention_scores(q, k, causal, scale)
    if s.shape[-1] == 0:  # no keys: scaled_dot_product_attention returns zeros
        return q.new_zeros(q.shape[:-1] + v.shape[-1:])
    p = torch.softmax(s, dim=-1)
    # A row whose scores are all -inf sees no key: 0, as SDPA gives (softmax alone gives NaN).
    # amax of a row holding NaN is NaN, so NaN rows stay NaN.
    p = p.masked_fill(s.amax(dim=-1, keepdim=True) == float("-inf"), 0.0)
    return (p @ v.to(s.dtype)).to(q.dtype)


def attention_block_update(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""One step of the online attention update: fold a block of scores ``s`` and values ``v`` in.

    .. math::
        m' = \max(m, \max_j s_j), \quad \alpha = e^{m - m'}, \quad p_j = e^{s_j - m'},\\
        l' = \alpha\, l + \textstyle\sum_j p_j, \qquad acc' = \alpha\, acc + p\, v.

    The output is ``acc / l`` once every block is in; dividing only at the end saves work.

    Parameters
    ----------
    m, l : torch.Tensor
        Running max and denominator, ``(..., L)``.
    acc : torch.Tensor
        Unnormalised output, ``(..., L, Dv)``.
    s : torch.Tensor
        Scores of this block, ``(..., L, Sb)`` (``-inf`` where masked).
    v : torch.Tensor
        Values of this block, ``(..., Sb, Dv)``.
    """
    m_new = torch.maximum(m, s.amax(dim=-1))
    alpha = exp_shift(m, m_new)
    p = exp_shift(s, m_new.unsqueeze(-1))
    l_new = alpha * l + p.sum(dim=-1)
    acc_new = alpha.unsqueeze(-1) * acc + p @ v.to(p.dtype)
    return m_new, l_new, acc_new


def blockwise_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    scale: float | None = None, block_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over blocks of keys and values with the online softmax: FlashAttention in torch.

    Never holds more than ``L x block_size`` scores. With ``causal=True``, key blocks that no
    query can see are skipped without being read.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(..., L, D)``, ``(..., S, D)``, ``(..., S, Dv)``, one floating dtype.
    causal : bool
        As ``is_causal`` of ``scaled_dot_product_attention``.
    scale : float, optional
        Defaults to ``1/sqrt(D)``.
    block_size : int
        Keys per block (the last block may be shorter).

    Returns
    -------
    out : torch.Tensor
        ``(..., L, Dv)`` in q's dtype.
    lse : torch.Tensor
        ``(..., L)``, the log-sum-exp of each row's scaled scores, in float32 (float64 for
        float64 input); ``-inf`` for a row that sees no key.

    Examples
    --------
    >>> q, k, v = torch.randn(1, 2, 33, 16), torch.randn(1, 2, 70, 16), torch.randn(1, 2, 70, 16)
    >>> out, lse = blockwise_attention(q, k, v, block_size=16)
    >>> torch.allclose(out, naive_attention(q, k, v), atol=1e-5)
    True
    """
    L, S, D = require_attention_inputs(q, k, v)
    require_positive_int(block_size, "block_size")
    require_bool(causal, "causal")
    resolve_scale(scale, D)
    dtype = compute_dtype(q.dtype)
    batch = q.shape[:-2]
    m = torch.full((*batch, L), float("-inf"), dtype=dtype, device=q.device)
    l = torch.zeros((*batch, L), dtype=dtype, device=q.device)
    acc = torch.zeros((*batch, L, v.shape[-1]), dtype=dtype, device=q.device)
    for start in range(0, S, block_size):
        if causal and start > L - 1:
            break  # every later key lies above the diagonal for every query
        kb, vb = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        s = attention_scores(q, kb, causal, scale, key_offset=start)
        m, l, acc = attention_block_update(m, l, acc, s, vb)
    out = torch.where(l.unsqueeze(-1) > 0, acc / l.unsqueeze(-1), acc)  # no keys: zeros, like SDPA
    return out.to(q.dtype), m + torch.log(l)


def merge_partials(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Merge two partial attention results over disjoint sets of keys into the result over both.

    .. math::
        lse = \log(e^{lse_a} + e^{lse_b}), \qquad
        out = e^{lse_a - lse}\, out_a + e^{lse_b - lse}\, out_b.

    The weights are computed as :math:`\sigma(lse_a - lse_b)` and :math:`\sigma(lse_b - lse_a)`
    (the same numbers), so a large lse does not cost precision through its rounding.

    Each partial is normalised over its own keys; the weights re-normalise them over the union.
    A partial that saw no keys (``lse = -inf``) gets weight 0. This is the update ring attention
    and split-KV decoding apply to every incoming block.

    Parameters
    ----------
    out_a, out_b : torch.Tensor
        ``(..., L, Dv)`` partial outputs, one shape.
    lse_a, lse_b : torch.Tensor
        ``(..., L)`` their log-sum-exps.

    Returns
    -------
    out : torch.Tensor
        ``(..., L, Dv)`` in ``out_a``'s dtype.
    lse : torch.Tensor
        ``(..., L)`` in the lse dtype (at least float32).

    Examples
    --------
    >>> q, k, v = torch.randn(4, 8), torch.randn(10, 8), torch.randn(10, 8)
    >>> a = blockwise_attention(q, k[:6], v[:6]); b = blockwise_attention(q, k[6:], v[6:])
    >>> out, lse = merge_partials(*a, *b)
    >>> torch.allclose(out, naive_attention(q, k, v), atol=1e-6)
    True
    """
    for name, t in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)):
        require_float_tensor(t, name)
    if out_a.shape != out_b.shape:
        raise ValueError(
            f"out_a and out_b must have one shape (..., L, Dv), got {tuple(out_a.shape)} and "
            f"{tuple(out_b.shape)}"
        )
    if lse_a.shape != out_a.shape[:-1] or lse_b.shape != out_a.shape[:-1]:
        raise ValueError(
            f"lse_a and lse_b must have the shape of out without its last axis, "
            f"{tuple(out_a.shape[:-1])}, got {tuple(lse_a.shape)} and {tuple(lse_b.shape)}"
        )
    dtype = torch.promote_types(compute_dtype(lse_a.dtype), compute_dtype(lse_b.dtype))
    lse_a, lse_b = lse_a.to(dtype), lse_b.to(dtype)
    lse = merge_lse(lse_a, lse_b)
    # e^{lse_a - lse} = sigmoid(lse_a - lse_b): from the exact difference, not the rounded lse.
    diff = lse_a - lse_b
    empty = (lse_a == float("-inf")) & (lse_b == float("-inf"))
    w_a = torch.where(empty, 0.0, torch.sigmoid(diff)).unsqueeze(-1)
    w_b = torch.where(empty, 0.0, torch.sigmoid(-diff)).unsqueeze(-1)
    out = w_a * out_a.to(dtype) + w_b * out_b.to(dtype)
    return out.to(out_a.dtype), lse
