"""How the CuTe DSL softmax kernel lays a row over its threads: vector width and threads per CTA.

One CTA (thread block) owns one row. The row is cut into *vectors* of ``vec`` consecutive
elements, one 128-bit load each where the row allows it, and thread ``t`` of ``threads`` owns
vectors ``t, t + threads, t + 2 * threads, ...``. Both numbers are chosen here, from the row length
and the element size alone, so that the kernel (:mod:`teachkit.cute.kernel`) and its plain-torch
simulation (:mod:`teachkit.cute.simulate`) use the same layout. Nothing here needs a GPU or CuTe.

Examples
--------
>>> import torch
>>> launch_config(1000, torch.float32)
LaunchConfig(threads=128, vec=4)
>>> launch_config(4097, torch.bfloat16)       # 4097 is odd: no wider load divides the row
LaunchConfig(threads=1024, vec=1)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..validation import require_positive_int

__all__ = [
    "WARP_SIZE",
    "VECTOR_BYTES",
    "MIN_THREADS",
    "MAX_THREADS",
    "VECTORS_PER_THREAD",
    "LaunchConfig",
    "vector_width",
    "launch_config",
]

WARP_SIZE = 32
"""Threads per warp on every NVIDIA GPU."""
VECTOR_BYTES = 16
"""Bytes of the widest load a thread issues (128 bits: 4 float32 or 8 bfloat16 values)."""
MIN_THREADS = 128
"""Fewest threads per CTA (4 warps), even for short rows: fewer would leave the SM idle."""
MAX_THREADS = 1024
"""Most threads a CTA may have."""
VECTORS_PER_THREAD = 4
"""Vectors each thread should load per row before the CTA grows (up to :data:`MAX_THREADS`)."""


@dataclass(frozen=True)
class LaunchConfig:
    """Threads per CTA and elements per vector load for one row length and dtype."""

    threads: int
    vec: int

    @property
    def warps(self) -> int:
        """Warps per CTA, ``threads / 32``: one ``(m, d)`` pair each in shared memory."""
        return self.threads // WARP_SIZE

    @property
    def elements_per_sweep(self) -> int:
        """Elements the whole CTA loads in one step, one vector per thread."""
        return self.threads * self.vec


def _element_size(dtype: torch.dtype) -> int:
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype, got {dtype}; e.g. torch.float32")
    return torch.finfo(dtype).bits // 8


def vector_width(n_cols: int, dtype: torch.dtype, aligned: bool = True) -> int:
    """Elements per load: ``16 // element_size``, halved until it divides ``n_cols``.

    A vector load must start on a multiple of its own size. Row ``r`` starts at element
    ``r * n_cols``, so every row is aligned only if ``vec`` divides ``n_cols``; ``aligned=False``
    (the tensor's first address is not a multiple of 16 bytes) forces scalar loads, ``vec = 1``.

    Parameters
    ----------
    n_cols : int
        Row length (at least 1).
    dtype : torch.dtype
        The tensor's dtype (float32: up to 4 elements; bfloat16/float16: up to 8).
    aligned : bool
        Whether the tensor's data pointer is a multiple of 16 bytes.

    Examples
    --------
    >>> vector_width(1024, torch.float32), vector_width(1024, torch.bfloat16)
    (4, 8)
    >>> vector_width(6, torch.bfloat16), vector_width(7, torch.float32)
    (2, 1)
    """
    require_positive_int(n_cols, "n_cols")
    vec = VECTOR_BYTES // _element_size(dtype) if aligned else 1
    while vec > 1 and n_cols % vec:
        vec //= 2
    return max(vec, 1)


def launch_config(n_cols: int, dtype: torch.dtype, aligned: bool = True) -> LaunchConfig:
    """The kernel's layout for rows of ``n_cols`` values of ``dtype``.

    ``vec`` from :func:`vector_width`; ``threads`` the power of two that gives each thread about
    :data:`VECTORS_PER_THREAD` vectors, clamped to ``[MIN_THREADS, MAX_THREADS]``. Longer rows
    than ``1024 * 4 * vec`` give each thread more vectors, never more threads.

    Examples
    --------
    >>> launch_config(16384, torch.float32)
    LaunchConfig(threads=1024, vec=4)
    >>> launch_config(16384, torch.float32).warps
    32
    """
    vec = vector_width(n_cols, dtype, aligned)
    n_vec = -(-n_cols // vec)
    want = -(-n_vec // VECTORS_PER_THREAD)
    threads = MIN_THREADS
    while threads < want and threads < MAX_THREADS:
        threads *= 2
    return LaunchConfig(threads=threads, vec=vec)
