"""The problems of the attention benchmarks, forward and backward: lengths, batches, flop
counts, labels and parameters, and SDPA pinned to one backend."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

from ..validation import require_positive_int
from .core import DTYPES, dtype_name, require_dtype_name, require_sizes

__all__ = ["ATTENTION_LENGTHS", "HEADS", "SDPA_BACKENDS", "TOKENS", "TRITON_ONLY",
           "attention_flops", "attention_params", "attention_problems", "batch_for",
           "problem_name", "sdpa_backend", "triton_column"]

TRITON_ONLY = "teachkit triton"
"""The provider, on an sm_90 GPU only, that runs the course's Triton kernels alone, where
``teachkit flash`` (what ``flash_attention`` runs) takes a Gluon kernel for the forward pass or
for the backward's dK/dV loop."""


def triton_column(providers: Iterable[str]) -> str:
    """Which of a record's providers is the course's Triton kernels: :data:`TRITON_ONLY` where
    the record has it (taken on Hopper since ``flash_attention`` runs Gluon kernels there),
    else ``teachkit flash``.

    Examples
    --------
    >>> triton_column(["teachkit flash", "teachkit triton", "sdpa cudnn"])
    'teachkit triton'
    >>> triton_column(["teachkit flash", "sdpa cudnn"])
    'teachkit flash'
    """
    return TRITON_ONLY if TRITON_ONLY in set(providers) else "teachkit flash"

ATTENTION_LENGTHS = (1024, 2048, 4096, 8192, 16384)
"""Sequence lengths L = S of the benchmark."""

HEADS = 32
TOKENS = 16384
"""B x L tokens per problem (B = 4 at L = 4096, B = 1 at 16384)."""

SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


def batch_for(length: int, tokens: int = TOKENS) -> int:
    """Sequences per problem: ``tokens // length``, at least 1."""
    return max(1, tokens // length)


def attention_problems(lengths: Iterable[int], head_dims: Iterable[int],
                       causal: Iterable[bool], dtype: str, tokens: int = TOKENS,
                       heads: int = HEADS) -> list[tuple[int, int, int, bool]]:
    """The problems ``(B, L, D, causal)`` of an attention benchmark, by head dim, then mask,
    then length, with ``B`` from :func:`batch_for`; every argument checked first (``TypeError``
    or ``ValueError`` naming it).

    Examples
    --------
    >>> attention_problems([1024, 4096], [64], [False], "fp16")
    [(16, 1024, 64, False), (4, 4096, 64, False)]
    """
    lengths, head_dims = require_sizes(lengths, "lengths"), require_sizes(head_dims, "head_dims")
    require_dtype_name(dtype)
    require_positive_int(tokens, "tokens")
    require_positive_int(heads, "heads")
    return [(batch_for(L, tokens), L, D, c) for D in head_dims for c in causal for L in lengths]


def attention_flops(B: int, H: int, L: int, S: int, D: int, causal: bool) -> float:
    """Flops of one attention forward: ``4 B H L S D``, half of it when causal.

    Examples
    --------
    >>> attention_flops(4, 32, 4096, 4096, 64, causal=False) / 1e12
    0.549755813888
    """
    return 4 * B * H * L * S * D * (0.5 if causal else 1.0)


def problem_name(D: int, L: int, causal: bool, kv_heads: int | None = None,
                 sizes: tuple[int, int] | None = None) -> str:
    """How the benchmark labels a problem in tables, e.g. ``"D=64 L=4096 causal"``, or with
    ``kv_heads`` (grouped-query attention) ``"D=64 L=4096 H_kv=8"``, or with ``sizes``
    ``(B, H)`` (where the benchmark was given its tokens or heads) ``"D=64 L=4096 B=1 H=8"``;
    its parameters are :func:`attention_params`."""
    return (f"D={D} L={L}" + (" causal" if causal else "")
            + (f" H_kv={kv_heads}" if kv_heads is not None else "")
            + (f" B={sizes[0]} H={sizes[1]}" if sizes is not None else ""))


def attention_params(D: int, L: int, causal: bool, dtype: str, kv_heads: int | None = None,
                     sizes: tuple[int, int] | None = None) -> dict[str, int | bool | str]:
    """The parameters of one attention problem (``L = S``), as its :class:`Measurement` keeps
    them; ``kv_heads`` only where the benchmark was asked for grouped-query heads, ``B`` and
    ``H`` only where it was given its tokens or heads (``sizes``).

    Examples
    --------
    >>> attention_params(64, 4096, True, "fp16")
    {'D': 64, 'L': 4096, 'S': 4096, 'causal': True, 'dtype': 'float16'}
    >>> attention_params(64, 1024, False, "fp16", sizes=(1, 8))["B"]
    1
    """
    params: dict[str, int | bool | str] = {"D": D, "L": L, "S": L, "causal": causal,
                                           "dtype": dtype_name(DTYPES[dtype])}
    if kv_heads is not None:
        params["kv_heads"] = kv_heads
    if sizes is not None:
        params["B"], params["H"] = sizes
    return params


def sdpa_backend(backend: str) -> Callable[..., torch.Tensor]:
    """``scaled_dot_product_attention`` restricted to one backend (a key of
    :data:`SDPA_BACKENDS`), as ``fn(q, k, v, causal)``; it raises where the backend does not
    take the problem."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = getattr(SDPBackend, SDPA_BACKENDS[backend])

    def run(q, k, v, causal):
        gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
        with sdpa_kernel(which):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)

    return run
