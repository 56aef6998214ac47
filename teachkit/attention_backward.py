r"""The backward pass of attention in plain PyTorch: the formulas, then FlashAttention's two loops.

For one head, with scores ``S = scale * q k^T``, probabilities ``P = softmax(S)`` (row by row)
and output ``O = P v``, the gradient ``dO`` of a loss with respect to ``O`` gives

.. math::

    dV = P^T dO, \quad dP = dO\, v^T, \quad dS = P \circ (dP - \delta), \quad
    dq = scale\cdot dS\, k, \quad dk = scale\cdot dS^T q,

where :math:`\delta_i = \sum_j P_{ij}\, dP_{ij} = \sum_d dO_{id}\, O_{id}` (the second form needs
only ``O``, not ``P``). :func:`attention_gradients` writes these with the whole ``L x S``
matrices; :func:`blockwise_attention_backward` computes the same numbers tile by tile, rebuilding
each tile of ``P`` from the forward's log-sum-exp, in the two loop orders of FlashAttention-2's
backward: over query blocks for ``dK``/``dV`` and over key blocks for ``dq``. The Triton kernels
of :mod:`teachkit.kernels.flash_backward` are this second function, one program per outer block.

Shapes follow :mod:`teachkit.attention`: ``q`` and ``dO`` are ``(..., L, D)``, ``k`` and ``v``
``(..., S, D)``, ``out`` ``(..., L, D)``, ``lse`` ``(..., L)``; gradients come back in float32
for float16/bfloat16 inputs (float64 for float64).
"""

from __future__ import annotations

import torch

from .attention import attention_scores
from .validation import compute_dtype, require_attention_inputs, require_positive_int

__all__ = ["attention_gradients", "blockwise_attention_backward", "softmax_delta"]


def softmax_delta(out: torch.Tensor, d_out: torch.Tensor) -> torch.Tensor:
    r""":math:`\delta_i = \sum_d dO_{id} O_{id}`, one number per query row, in the compute dtype.

    It equals :math:`\sum_j P_{ij} dP_{ij}` (since :math:`O = P v` and :math:`dP = dO\, v^T`),
    the share of the softmax's denominator in every score's gradient.

    Examples
    --------
    >>> o, do = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, -1.0]])
    >>> softmax_delta(o, do)
    tensor([1.])
    """
    dtype = compute_dtype(out.dtype)
    return (out.to(dtype) * d_out.to(dtype)).sum(-1)


def attention_gradients(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d_out: torch.Tensor,
    causal: bool = False, scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of attention with the whole score matrix, by the formulas (no autograd).

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(..., L, D)``, ``(..., S, D)``, ``(..., S, Dv)``.
    d_out : torch.Tensor
        ``(..., L, Dv)``: the gradient of the loss with respect to the attention's output.
    causal : bool
        Query ``i`` sees keys ``j <= i``.
    scale : float, optional
        Defaults to ``1/sqrt(D)``.

    Examples
    --------
    >>> q, k, v = (torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True) for _ in "qkv")
    >>> do = torch.randn(2, 5, 8, dtype=torch.float64)
    >>> out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    >>> out.backward(do)
    >>> dq, dk, dv = attention_gradients(q.detach(), k.detach(), v.detach(), do)
    >>> all(torch.allclose(a, b.grad) for a, b in ((dq, q), (dk, k), (dv, v)))
    True
    """
    require_attention_inputs(q, k, v)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    dtype = compute_dtype(q.dtype)
    q, k, v, d_out = (t.to(dtype) for t in (q, k, v, d_out))
    p = torch.softmax(attention_scores(q, k, causal, scale), dim=-1)  # (..., L, S)
    out = p @ v
    dv = p.transpose(-2, -1) @ d_out                                  # P^T dO
    dp = d_out @ v.transpose(-2, -1)                                  # dO v^T
    ds = p * (dp - softmax_delta(out, d_out).unsqueeze(-1))           # P o (dP - delta)
    return scale * ds @ k, scale * ds.transpose(-2, -1) @ q, dv


def blockwise_attention_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    d_out: torch.Tensor, causal: bool = False, scale: float | None = None,
    block_m: int = 64, block_n: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` tile by tile from the forward's ``out`` and ``lse``: no ``L x S`` matrix.

    ``dk`` and ``dv`` of a key block sum over queries, so their loop holds one key block and
    walks the query blocks; ``dq`` of a query block sums over keys, so its loop holds one query
    block and walks the key blocks. Each tile of ``P`` is rebuilt as ``exp(S - lse)``. With
    ``causal``, tiles wholly above the diagonal (keys after every query of the block) are
    skipped in both loops.

    Parameters
    ----------
    q, k, v, out, lse, d_out : torch.Tensor
        The forward's inputs and outputs (``lse`` ``(..., L)``, natural log, as
        :func:`teachkit.attention.blockwise_attention` returns it) and the output's gradient.
    causal : bool
        The forward's mask.
    scale : float, optional
        Defaults to ``1/sqrt(D)``.
    block_m, block_n : int
        Queries and keys per tile.
    """
    require_attention_inputs(q, k, v)
    require_positive_int(block_m, "block_m")
    require_positive_int(block_n, "block_n")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    dtype = compute_dtype(q.dtype)
    q, k, v, d_out, lse = (t.to(dtype) for t in (q, k, v, d_out, lse))
    L, S = q.shape[-2], k.shape[-2]
    delta = softmax_delta(out, d_out)                                   # (..., L)

    def tile(r0: int, c0: int) -> tuple[torch.Tensor, torch.Tensor]:
        """P and dS of queries r0.. and keys c0.. : (..., block_m, block_n) each."""
        rows, cols = slice(r0, r0 + block_m), slice(c0, c0 + block_n)
        s = attention_scores(q[..., rows, :], k[..., cols, :], causal, scale, key_offset=c0 - r0)
        p = torch.exp(s - lse[..., rows, None])                         # rebuilt from the lse
        dp = d_out[..., rows, :] @ v[..., cols, :].transpose(-2, -1)
        return p, p * (dp - delta[..., rows, None])

    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for c0 in range(0, S, block_n):             # dK, dV: hold a key block, walk query blocks
        first = (c0 // block_m) * block_m if causal else 0  # earlier queries see none of it
        for r0 in range(first, L, block_m):
            p, ds = tile(r0, c0)
            rows, cols = slice(r0, r0 + block_m), slice(c0, c0 + block_n)
            dv[..., cols, :] += p.transpose(-2, -1) @ d_out[..., rows, :]
            dk[..., cols, :] += scale * ds.transpose(-2, -1) @ q[..., rows, :]
    dq = torch.zeros_like(q)
    for r0 in range(0, L, block_m):             # dQ: hold a query block, walk key blocks
        end = min(r0 + block_m, S) if causal else S  # later keys are above the diagonal
        for c0 in range(0, end, block_n):
            _, ds = tile(r0, c0)
            dq[..., r0:r0 + block_m, :] += scale * ds @ k[..., c0:c0 + block_n, :]
    return dq, dk, dv
