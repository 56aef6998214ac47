"""Grid arithmetic on the host for the entry points a model calls on every layer and token.

``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr functions, written to be called
inside a kernel as well as on the host; on the host each call goes through Triton's wrapper,
which unwraps every argument from ``triton.language`` first. ``python -m teachkit.bench host``
measures what a call of an entry point costs. The fast entry points (:mod:`.softmax_kernels`,
:mod:`.flash`, :mod:`.flash_backward`, :mod:`.decode`) use these two plain functions instead;
the teaching kernels keep Triton's, as its tutorials write them. :func:`resident_grid` sizes
the persistent grid of the resident softmax kernels (Triton's and the TMA one).

Examples
--------
>>> cdiv(1000, 64), next_power_of_2(1000), next_power_of_2(1024)
(16, 1024, 1024)
"""

from __future__ import annotations

__all__ = ["cdiv", "next_power_of_2", "resident_grid"]


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, ``b > 0``: the number of blocks of ``b`` that cover ``a``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n``, for ``n >= 1`` (as ``triton.next_power_of_2``)."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def resident_grid(fit: int, g: int, n_rows: int, fill_grid: bool = False) -> int:
    """The programs a resident softmax kernel launches for ``n_rows`` rows of ``g`` chunks
    when ``fit`` programs fit on the GPU at once (``softmax_kernels.resident_programs``, or
    ``softmax_tma.tma_programs`` for the TMA kernel): the most whole rows' chunks that fit, so a
    row's programs take it in the same round, or with ``fill_grid`` all ``fit``, so that rows
    straddle rounds; never more than the rows' chunks, and 0 when a row does not fit.

    >>> resident_grid(264, 192, 24), resident_grid(264, 192, 24, fill_grid=True)
    (192, 264)
    >>> resident_grid(264, 192, 1, fill_grid=True), resident_grid(264, 300, 4, fill_grid=True)
    (192, 0)
    """
    if g > fit:
        return 0
    return min(fit if fill_grid else fit // g * g, n_rows * g)
