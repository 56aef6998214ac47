"""The online softmax as a CuTe DSL kernel: one CTA per row, the merge written out at every tier.

NVIDIA's CuTe DSL (the ``nvidia-cutlass-dsl`` package, CUTLASS 4.x) writes CUDA kernels in
Python: a ``@cute.kernel`` function is traced once into MLIR and compiled to a cubin for the GPU
at hand. Unlike Triton, nothing is hidden: the kernel below says what every *thread* does.

1. **Thread tier.** Thread ``t`` loads vectors ``t, t + THREADS, ...`` of its row, each ``VEC``
   consecutive elements in one 128-bit load, and folds each vector into its running ``(m, d)``:
   the vector's maximum and sum of exponentials are merged with the running pair, the merge of
   notebooks 03-04.
2. **Warp tier.** Five butterfly rounds: at offsets 16, 8, 4, 2, 1 each lane takes its partner
   ``lane ^ offset``'s pair by a register shuffle and merges it with its own. Every lane then
   holds its warp's pair.
3. **Block tier.** Lane 0 of each warp writes the warp's pair to shared memory; after a barrier
   every thread reads the ``THREADS / 32`` pairs and merges them as a tree into the row's pair.
4. **Normalise.** Each thread reads its vectors again and writes ``exp(x - m) / d``.

This module imports ``cutlass`` at the top: import it only where CuTe DSL is installed (the
optional extra, ``pip install -e .[cute]``). :func:`teachkit.cute.cute_softmax` is the checked
entry point; :mod:`teachkit.cute.simulate` runs the same tiers in plain torch on any machine.
Compiling needs no GPU (set ``CUTE_DSL_ARCH=sm_90a`` to compile for an H100 anywhere); running
does.

Examples
--------
>>> import torch
>>> x = torch.randn(8, 1000, device="cuda")  # doctest: +SKIP
>>> torch.allclose(run_softmax(x), torch.softmax(x, -1), atol=1e-6)  # doctest: +SKIP
True
"""

from __future__ import annotations

import cuda.bindings.driver as cuda_driver  # installed with nvidia-cutlass-dsl
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_ptr

from .config import WARP_SIZE, LaunchConfig, launch_config

# Newer releases of CuTe DSL keep the allocator in cutlass.memory, older ones in cutlass.utils.
_memory = getattr(cutlass, "memory", None)
SmemAllocator = getattr(_memory, "SmemAllocator", None) or cutlass.utils.SmemAllocator

__all__ = ["online_softmax_kernel", "launch_online_softmax", "pointer", "compiled_softmax",
           "run_softmax"]

LOG2E = 1.4426950408889634
NEG_INF = float("-inf")
BUTTERFLY_ROUNDS = WARP_SIZE.bit_length() - 1  # log2(32) = 5
SHARED_BYTES_PER_WARP = 8  # one float32 m and one float32 d
UNROLL = 4  # iterations the compiler unrolls in each of a thread's loops
_make_registers = getattr(cute, "make_rmem_tensor", None) or cute.make_fragment


@cute.jit
def merge_pair(m_a: cutlass.Float32, d_a: cutlass.Float32, m_b: cutlass.Float32,
               d_b: cutlass.Float32):
    """Merge two ``(m, d)`` pairs: ``m = max(m_a, m_b)``, ``d = d_a e^(m_a - m) + d_b e^(m_b - m)``.

    ``exp(t)`` is computed as ``exp2(t * log2(e))``, the GPU's native instruction. When both
    sides are empty (``m = -inf``) the shift is 0, so the result is ``(-inf, 0)``, not NaN.
    """
    m = cute.arch.fmax(m_a, m_b)
    shift = m
    if m == NEG_INF:
        shift = cutlass.Float32(0.0)
    d = (d_a * cute.math.exp2((m_a - shift) * LOG2E, fastmath=True)
         + d_b * cute.math.exp2((m_b - shift) * LOG2E, fastmath=True))
    return m, d


def merge_warps(s_m: cute.Tensor, s_d: cute.Tensor, warps: int):
    """Read the warps' pairs from shared memory and merge neighbours, level by level (a tree).

    A plain Python function: it runs while the kernel is traced, so the tree is unrolled into
    ``warps - 1`` merges in straight-line code.
    """
    pairs = [(s_m[w], s_d[w]) for w in range(warps)]
    while len(pairs) > 1:
        merged = [merge_pair(*pairs[i], *pairs[i + 1]) for i in range(0, len(pairs) - 1, 2)]
        pairs = merged + ([pairs[-1]] if len(pairs) % 2 else [])
    return pairs[0]


@cute.kernel
def online_softmax_kernel(mX: cute.Tensor, mY: cute.Tensor, THREADS: cutlass.Constexpr[int],
                          VEC: cutlass.Constexpr[int]):
    """Softmax of row ``blockIdx.x`` of ``mX`` into ``mY``: ``THREADS`` threads, ``VEC`` a load."""
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()

    # This CTA's row as (vector, element): gX[j, None] is vector j, VEC contiguous values.
    gX = mX[row, None, None]
    gY = mY[row, None, None]
    n_vec = cute.size(gX, mode=[0])
    rX = _make_registers((VEC,), mX.element_type)  # one vector in registers
    rY = _make_registers((VEC,), mY.element_type)

    # 1. Thread tier: a running (m, d) over this thread's vectors t, t + THREADS, ...
    m = cutlass.Float32(NEG_INF)
    d = cutlass.Float32(0.0)
    for j in cutlass.range(tidx, n_vec, THREADS, unroll=UNROLL):
        cute.autovec_copy(gX[j, None], rX)  # one 128-bit load when VEC * bytes == 16
        x = rX.load().to(cutlass.Float32)
        m_vec = x.reduce(cute.ReductionOp.MAX, NEG_INF, 0)
        m_new = cute.arch.fmax(m, m_vec)
        shift = m_new
        if m_new == NEG_INF:  # nothing but -inf so far: add 0, not NaN
            shift = cutlass.Float32(0.0)
        d_vec = cute.math.exp2((x - shift) * LOG2E, fastmath=True).reduce(
            cute.ReductionOp.ADD, 0.0, 0)
        d = d * cute.math.exp2((m - shift) * LOG2E, fastmath=True) + d_vec
        m = m_new

    # 2. Warp tier: butterfly rounds at offsets 16, 8, 4, 2, 1 (shfl.sync.bfly).
    for k in cutlass.range_constexpr(BUTTERFLY_ROUNDS):
        offset = (WARP_SIZE // 2) >> k
        m_other = cute.arch.shuffle_sync_bfly(m, offset=offset)
        d_other = cute.arch.shuffle_sync_bfly(d, offset=offset)
        m, d = merge_pair(m, d, m_other, d_other)

    # 3. Block tier: one pair per warp through shared memory, then a tree merge.
    smem = SmemAllocator()
    s_m = smem.allocate_tensor(cutlass.Float32, cute.make_layout(THREADS // WARP_SIZE), 16)
    s_d = smem.allocate_tensor(cutlass.Float32, cute.make_layout(THREADS // WARP_SIZE), 16)
    if lane == 0:
        s_m[warp] = m
        s_d[warp] = d
    cute.arch.barrier()
    m, d = merge_warps(s_m, s_d, THREADS // WARP_SIZE)

    # 4. Normalise: read the vectors again, write exp(x - m) / d in the output's dtype.
    inv_d = cutlass.Float32(1.0) / d
    for j in cutlass.range(tidx, n_vec, THREADS, unroll=UNROLL):
        cute.autovec_copy(gX[j, None], rX)
        x = rX.load().to(cutlass.Float32)
        y = cute.math.exp2((x - m) * LOG2E, fastmath=True) * inv_d
        rY.store(y.to(mY.element_type))
        cute.autovec_copy(rY, gY[j, None])


@cute.jit
def launch_online_softmax(x: cute.Pointer, y: cute.Pointer, rows: cutlass.Int32,
                          n_vec: cutlass.Int32, stream: cuda_driver.CUstream,
                          THREADS: cutlass.Constexpr[int], VEC: cutlass.Constexpr[int]):
    """Host side: view ``x`` and ``y`` as ``(rows, n_vec, VEC)``; one CTA per row on ``stream``.

    ``rows`` and ``n_vec`` are runtime values, so one compiled kernel serves every shape. The
    row stride ``n_vec * VEC`` is declared a multiple of ``VEC`` (``cute.assume``) and the
    pointers 16-byte aligned: what lets the compiler turn each vector copy into one 128-bit
    load. Shared memory holds two float32 per warp.
    """
    row_stride = cute.assume(cutlass.Int64(n_vec) * VEC, divby=VEC)
    layout = cute.make_layout((rows, n_vec, VEC), stride=(row_stride, VEC, 1))
    online_softmax_kernel(cute.make_tensor(x, layout), cute.make_tensor(y, layout), THREADS,
                          VEC).launch(
        grid=(rows, 1, 1), block=(THREADS, 1, 1),
        smem=SHARED_BYTES_PER_WARP * (THREADS // WARP_SIZE) + 64, stream=stream)


_CUTE_DTYPES = {torch.float32: cutlass.Float32, torch.bfloat16: cutlass.BFloat16,
                torch.float16: cutlass.Float16}
_COMPILED: dict[tuple[torch.dtype, LaunchConfig], object] = {}


def pointer(t: torch.Tensor, vec: int):
    """A CuTe global-memory pointer to ``t``'s data, promised aligned to ``vec`` elements."""
    return make_ptr(_CUTE_DTYPES[t.dtype], t.data_ptr(), cute.AddressSpace.gmem,
                    assumed_align=vec * t.element_size())


def _stream(t: torch.Tensor):
    """The current torch stream of ``t``'s device, as CuTe takes it (0 for a CPU tensor)."""
    return cuda_driver.CUstream(torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda
                                else 0)


def compiled_softmax(x: torch.Tensor, y: torch.Tensor, config: LaunchConfig):
    """The compiled kernel for ``x``'s dtype and ``config``, compiled on first use and cached.

    Compiling needs no GPU: ``CUTE_DSL_ARCH=sm_90a`` compiles for an H100 on any machine.
    """
    key = (x.dtype, config)
    if key not in _COMPILED:
        _COMPILED[key] = cute.compile(
            launch_online_softmax, pointer(x, config.vec), pointer(y, config.vec),
            cutlass.Int32(x.shape[0]), cutlass.Int32(x.shape[1] // config.vec), _stream(x),
            config.threads, config.vec)
    return _COMPILED[key]


def run_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis of a contiguous, non-empty 2-D CUDA tensor (no input checks).

    Use :func:`teachkit.cute.cute_softmax`, which checks its input and then calls this.
    Vector loads need 16-byte aligned data; a tensor that starts elsewhere gets ``vec = 1``.
    """
    y = torch.empty_like(x)
    aligned = x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
    config = launch_config(x.shape[1], x.dtype, aligned)
    kernel = compiled_softmax(x, y, config)
    with torch.cuda.device(x.device):
        kernel(pointer(x, config.vec), pointer(y, config.vec), x.shape[0],
               x.shape[1] // config.vec, _stream(x))
    return y
