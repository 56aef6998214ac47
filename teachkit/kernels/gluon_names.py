"""Gluon's Hopper operations under one name whichever Triton runs them.

Gluon is experimental and renames its functions between releases: Colab's Triton 3.6 and a
newer Triton (3.7 to 3.9) spell the same TMA copies and barrier differently. The Gluon kernels
(:mod:`~teachkit.kernels.flash_hopper`, :mod:`~teachkit.kernels.flash_backward_hopper`,
:mod:`~teachkit.kernels.softmax_tma`) call these names, so each rename is handled here once.
"""

from __future__ import annotations

from triton._C.libtriton import ir
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import tma

__all__ = ["THREAD_BARRIER", "TMA_LOAD", "TMA_REDUCE_ADD", "TMA_STORE", "tma_reduce_add"]

TMA_LOAD = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
"""TMA copy of a tile from global into shared memory: ``async_load`` from Triton 3.7 on, under
its former name ``async_copy_global_to_shared`` in 3.6 (same arguments)."""
TMA_STORE = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
"""TMA copy of a tile from shared into global memory (``async_copy_shared_to_global`` in 3.6)."""


@builtin
def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """TMA's reduce-add of a shared-memory tile into global memory
    (``cp.reduce.async.bulk.tensor ... .add``), for Triton 3.6, whose Gluon has the operation
    (``create_async_tma_reduce``) but no function for it; a newer Triton calls the same
    operation ``tma.async_atomic_add``. Waited for like a TMA store (``tma.store_wait``)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle,
                                              coord, src.handle)


TMA_REDUCE_ADD = getattr(tma, "async_atomic_add", None) or tma_reduce_add
"""Adds a shared-memory tile into a tile of global memory, element by element, with TMA."""
THREAD_BARRIER = getattr(gl, "thread_barrier", None) or gl.barrier
"""Synchronises the threads of a program or a partition: ``thread_barrier`` in Triton 3.6,
``barrier`` in a newer Triton."""
