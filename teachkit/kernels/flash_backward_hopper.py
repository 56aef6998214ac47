r"""FlashAttention's backward for Hopper (sm_90), written in Gluon: the dK/dV loop, and dQ with it.

:func:`~teachkit.kernels.flash_backward.flash_bwd_dkdv_kernel` holds ``dK`` and ``dV`` of its key
block in registers while it walks over the query blocks; at ``D = 128`` that is 128 float32
values a thread before any tile of a step, and the compiled kernel spills. Triton can split the
loop between warpgroups itself (:mod:`teachkit.kernels.flash_backward_ws`), but it picks the
schedule. :func:`flash_bwd_dkdv_hopper_kernel` writes FlashAttention-3's structure for this loop
with Gluon's explicit pieces, as :mod:`teachkit.kernels.flash_hopper` does for the forward:

* **Warp specialisation.** A program owns 128 keys of one key head. One *loader* warp
  (:func:`load_query_blocks`) copies blocks of ``q`` and ``dO`` with TMA into a ring of
  ``STAGES`` shared-memory buffers; two *consumer* warpgroups (:func:`dkdv_rows`) each own 64 of
  the keys, with their ``dK`` and ``dV`` in registers, and walk every query block of every query
  head of the group (grouped-query attention sums the group in registers). Each consumer arrives
  on a buffer's ``empty`` barrier when its products that read it are done; the loader refills it
  once both have. The loader gives its registers to the consumers (``setmaxnreg``): 240 a thread
  in a consumer warpgroup, 24 in the loader.
* **Transposed tiles, so nothing is transposed.** A consumer computes the scores of its keys
  against a query block as ``S^T = K Q^T`` (keys down, queries across), so that ``P^T`` and
  ``dS^T`` come out of ``warpgroup_mma`` already in the shape the next products need:
  ``dV += P^T dO`` and ``dK += dS^T Q`` take them straight from registers as the left operand.
* **Two products in flight.** ``K Q^T`` and ``V dO^T`` are issued together; the exponentials of
  ``P^T`` run while ``V dO^T`` is still on the tensor cores, and ``dV += P^T dO`` is issued
  before ``dS^T`` is formed.

With ``FUSED_DQ`` the same kernel computes ``dQ`` too, FlashAttention-3's way, so that the two
products the dQ loop would recompute (``q k^T`` and ``dO v^T``) are not computed at all:

* **dS^T handed over.** ``dQ`` of a query block sums ``dS K`` over the program's 128 keys, and
  each consumer has ``dS^T`` of its 64. Each stores its ``dS^T`` in shared memory and arrives on
  an mbarrier that completes once both have; two slots, alternating with the steps, keep a
  consumer from overwriting what the other may still read.
* **Half the head dim each.** A consumer computes ``dQ[:, half] = dS K[:, half]`` over both
  halves of the keys (two products of 64 keys, ``dS`` read from shared memory as ``dS^T``
  transposed): 32 float32 accumulators a thread beside ``dK`` and ``dV``.
* **Added by TMA.** The scaled tile goes to shared memory and :data:`TMA_REDUCE_ADD`
  (``cp.reduce.async.bulk.tensor ... .add``) adds it into a zeroed float32 ``dQ`` in global
  memory, where every program of the head adds its keys' share. The adds land in any order, so
  ``dQ`` is not bitwise reproducible.

The arithmetic is :mod:`teachkit.kernels.flash_backward`'s: ``P^T = exp2(S^T scale log2(e) -
lse log2(e))`` from the forward's lse, ``dS^T = P^T (dP^T - delta)`` with ``delta = rowsum(dO o
O)`` from :func:`~teachkit.kernels.flash_backward.flash_bwd_delta_kernel`, and ``dK`` scaled
once at the end. The tiles are whole: ``L`` a multiple of the query block, ``S`` of 128 (the
causal diagonal is masked in the scores). Without ``FUSED_DQ``, ``dQ`` is the Triton kernel's
(:func:`~teachkit.kernels.flash_backward.flash_bwd_dq_kernel`), the other loop order.

:func:`~teachkit.kernels.flash_backward.flash_backward` launches this kernel (through
:func:`launch_dkdv_hopper`) where the tiles of
:func:`~teachkit.kernels.flash_backward.backward_config` ask for it (``kv_hopper_dq`` with dQ,
unless ``torch.use_deterministic_algorithms(True)`` is on; ``kv_hopper`` without) and
:func:`dkdv_hopper_ready` accepts the tensors.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ..device import INTERPRETED, compute_capability, on_other_gpu
from .flash_hopper import LOG2E, handover_barriers, tile_descriptor
from .gluon_names import THREAD_BARRIER, TMA_LOAD, TMA_REDUCE_ADD, TMA_STORE, tma_reduce_add
from .launch_cache import cached_launch

__all__ = ["DKDV_CONSUMER_REGISTERS", "DKDV_HOPPER_KEYS", "DKDV_HOPPER_MAX_REGISTERS",
           "DKDV_HOPPER_TILES", "DKDV_LOADER_REGISTERS", "THREAD_BARRIER", "TMA_REDUCE_ADD",
           "dkdv_descriptors",
           "dkdv_hopper_ready", "dkdv_rows", "flash_bwd_dkdv_hopper_kernel",
           "launch_dkdv_hopper", "load_query_blocks", "tma_reduce_add"]



KERNEL_LOG2E = gl.constexpr(LOG2E)
"""log2(e) inside the kernel: the forward's lse is in natural-log units, the scores in log2."""
DKDV_HOPPER_KEYS = 128
"""Keys per program: two consumer warpgroups of 64."""
DKDV_HOPPER_TILES = {64: (64, 3), 128: (64, 2)}
"""Head dim -> ``(BLOCK_M, STAGES)``: query rows per step and buffers in the ring. At
``D = 128`` two stages of ``q`` and ``dO`` blocks and the program's keys and values take
128 KiB of shared memory, and with ``FUSED_DQ`` the ``dS^T`` slots and ``dQ`` halves 64 KiB
more: a third stage (32 KiB) would pass the SM's 227 KiB."""
DKDV_HOPPER_MAX_REGISTERS = 168
"""Registers a thread at launch (``maxnreg``), as the forward's: 12 warps x 32 threads x 168
fit the SM's 65,536. The partitions then move them (``setmaxnreg``)."""
DKDV_CONSUMER_REGISTERS = gl.constexpr(240)
"""Registers a thread of a consumer warpgroup after the move."""
DKDV_LOADER_REGISTERS = gl.constexpr(24)
"""Registers a thread of the loader after the move."""


@gluon.jit
def load_query_blocks(q_desc, do_desc, q_smem, do_smem, ready, empty, first_q, n_q, group,
                      bh0, L, STAGES: gl.constexpr):
    """The loader partition (one warp): the blocks of ``q`` and ``dO`` that the consumers walk,
    ``j = 0 .. group * n_q - 1`` (query head ``bh0 + j // n_q``, block ``first_q + j % n_q``),
    into the ring, each once both consumers have released its buffer. A fresh barrier counts as
    having completed the phase before its first, so the first round of waits on ``empty``
    passes at once."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    for j in range(group * n_q):
        stage = j % STAGES
        row = (bh0 + j // n_q) * L + (first_q + j % n_q) * BLOCK_M
        mbarrier.wait(empty.index(stage), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(stage), 2 * q_desc.block_type.nbytes)
        TMA_LOAD(q_desc, [row, 0], ready.index(stage), q_smem.index(stage))
        TMA_LOAD(do_desc, [row, 0], ready.index(stage), do_smem.index(stage))


@gluon.jit
def dkdv_rows(wg: gl.constexpr, k_desc, v_desc, dk_desc, dv_desc, dq_desc, LSE, DELTA, k_smem,
              v_smem, q_smem, do_smem, ds_smem, dq_smem, ready, empty, kv_bars, ds_bars, kv_row,
              start_n, first_q, n_q, group, bh0, L, qk_scale, scale, CAUSAL: gl.constexpr,
              STAGES: gl.constexpr, FUSED_DQ: gl.constexpr):
    """A consumer partition (one warpgroup): keys ``start_n + 64 * wg ..`` of the program's
    block against every query block it is given, then their ``dK`` and ``dV``. With
    ``FUSED_DQ``, also each query block's ``dQ`` share of the program's 128 keys, for half
    the head dim (``wg`` picks which half), added into the float32 ``dQ`` by TMA."""
    ROWS: gl.constexpr = k_desc.block_type.shape[0]       # keys of this warpgroup
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[1]
    HALF: gl.constexpr = HEAD_DIM // 2
    BLOCK_M: gl.constexpr = q_smem.type.shape[1]            # queries per step
    dtype: gl.constexpr = k_desc.dtype
    # wgmma's accumulator layouts for the transposed scores (ROWS x BLOCK_M), for dK, dV
    # (ROWS x D) and for a half of dQ (BLOCK_M x D/2), and the register operand layout in
    # which P^T and dS^T feed the products
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)

    k_buf = k_smem.index(wg)
    v_buf = v_smem.index(wg)
    kv_bar = kv_bars.index(wg)
    row0 = kv_row + wg * ROWS       # this warpgroup's first key in the flattened (B*H_kv*S, D)
    first_key = start_n + wg * ROWS  # and its position in the sequence
    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes)
    TMA_LOAD(k_desc, [row0, 0], kv_bar, k_buf)
    TMA_LOAD(v_desc, [row0, 0], kv_bar, v_buf)

    dk = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=acc_layout)
    s_zero = gl.zeros([ROWS, BLOCK_M], gl.float32, layout=s_layout)
    cols = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))   # queries of a block
    keys = first_key + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    mbarrier.wait(kv_bar, 0)
    if FUSED_DQ:
        dq_zero = gl.zeros([BLOCK_M, HALF], gl.float32, layout=dq_layout)
        dq_buf = dq_smem.index(wg)
        # dQ's half of the head dim that this warpgroup owns, over both warpgroups' keys
        k0_half = k_smem.index(0).slice(wg * HALF, HALF, dim=1)
        k1_half = k_smem.index(1).slice(wg * HALF, HALF, dim=1)
        mbarrier.wait(kv_bars.index(1 - wg), 0)

    for j in range(group * n_q):
        stage = j % STAGES
        start_m = (first_q + j % n_q) * BLOCK_M
        q_row = (bh0 + j // n_q) * L + start_m        # the block's first row of (B*H*L, D)
        stats = q_row + cols
        lse = gl.load(LSE + stats) * KERNEL_LOG2E  # log2 units, as the scores
        delta = gl.load(DELTA + stats)
        mbarrier.wait(ready.index(stage), (j // STAGES) & 1)
        q_buf = q_smem.index(stage)
        do_buf = do_smem.index(stage)
        # S^T = K Q^T and dP^T = V dO^T in flight together; wait for S^T only
        sT = warpgroup_mma(k_buf, q_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        dpT = warpgroup_mma(v_buf, do_buf.permute((1, 0)), s_zero, use_acc=False,
                            is_async=True)
        sT = warpgroup_mma_wait(1, deps=[sT])
        pT = gl.exp2(sT * qk_scale - lse[None, :])
        if CAUSAL:  # query start_m + c sees key k only where k <= start_m + c
            pT = gl.where((start_m + cols)[None, :] >= keys[:, None], pT, 0.0)
        dv = warpgroup_mma(gl.convert_layout(pT.to(dtype), op_layout), do_buf, dv,
                           is_async=True)
        dpT = warpgroup_mma_wait(1, deps=[dpT])
        dsT = (pT * (dpT - delta[None, :])).to(dtype)
        if FUSED_DQ:  # hand dS^T to the other warpgroup through shared memory (two slots)
            slot = j % 2
            ds_smem.index(2 * slot + wg).store(dsT)
            fence_async_shared()
            THREAD_BARRIER()
            mbarrier.arrive(ds_bars.index(slot), count=1)
        dk = warpgroup_mma(gl.convert_layout(dsT, op_layout), q_buf, dk, is_async=True)
        if FUSED_DQ:
            # dQ[:, half] = dS K[:, half] over the 128 keys: both warpgroups' dS^T, transposed
            mbarrier.wait(ds_bars.index(slot), (j // 2) & 1)
            dq = warpgroup_mma(ds_smem.index(2 * slot).permute((1, 0)), k0_half, dq_zero,
                               use_acc=False, is_async=True)
            dq = warpgroup_mma(ds_smem.index(2 * slot + 1).permute((1, 0)), k1_half, dq,
                               is_async=True)
            dv = warpgroup_mma_wait(2, deps=[dv])
            dk = warpgroup_mma_wait(0, deps=[dk])
            dq = warpgroup_mma_wait(0, deps=[dq])
            mbarrier.arrive(empty.index(stage), count=1)  # done with this block's buffers
            tma.store_wait(0)  # the previous block's add has read dq_buf
            dq_buf.store(dq * scale)
            fence_async_shared()
            TMA_REDUCE_ADD(dq_desc, [q_row, wg * HALF], dq_buf)
        else:
            dk = warpgroup_mma_wait(0, deps=[dk])
            dv = warpgroup_mma_wait(0, deps=[dv])
            mbarrier.arrive(empty.index(stage), count=1)  # done with this block's buffers

    if FUSED_DQ:  # one more handover: the other warpgroup has stopped reading our keys
        tma.store_wait(0)
        THREAD_BARRIER()
        last = group * n_q
        mbarrier.arrive(ds_bars.index(last % 2), count=1)
        mbarrier.wait(ds_bars.index(last % 2), (last // 2) & 1)
    # the keys and values are no longer needed: stage dK and dV there
    k_buf.store((dk * scale).to(dtype))
    v_buf.store(dv.to(dtype))
    fence_async_shared()
    TMA_STORE(dk_desc, [row0, 0], k_buf)
    TMA_STORE(dv_desc, [row0, 0], v_buf)
    tma.store_wait(0)


@cached_launch
@gluon.jit
def flash_bwd_dkdv_hopper_kernel(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, dq_desc,
                                 LSE, DELTA, L, S, H, H_KV, qk_scale, scale,
                                 CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                                 FUSED_DQ: gl.constexpr):
    """Program ``(key block, b * H_KV + hk)``: 128 rows of ``dK`` and ``dV``. The descriptors
    view ``q``/``dO`` as ``(B * H * L, D)`` in tiles of ``BLOCK_M`` rows and ``k``/``v``/``dK``/
    ``dV`` as ``(B * H_KV * S, D)`` in tiles of 64 rows; ``LSE`` (natural-log units) and
    ``DELTA`` are ``(B * H * L,)`` float32. Causal: query blocks before the key block's first
    key are skipped. With ``FUSED_DQ``, ``dq_desc`` views a zeroed float32 ``dQ`` as
    ``(B * H * L, D)`` in tiles of ``BLOCK_M x D/2``, and every program adds its keys' share
    into it; without, ``dq_desc`` is not read."""
    ROWS: gl.constexpr = k_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[1]
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    dtype: gl.constexpr = k_desc.dtype
    start_n = gl.program_id(0) * (2 * ROWS)
    bhk = gl.program_id(1)
    group = H // H_KV
    bh0 = (bhk // H_KV) * H + (bhk % H_KV) * group   # first query head of the group
    kv_row = bhk * S + start_n
    if CAUSAL:  # query blocks that end before the first key see none of the keys
        first_q = gl.minimum(start_n // BLOCK_M, L // BLOCK_M)
    else:
        first_q = 0
    n_q = L // BLOCK_M - first_q

    k_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    ready, empty, kv_bars = handover_barriers(STAGES)
    if FUSED_DQ:  # dS^T of both warpgroups for two steps, a half of dQ each, their barriers
        ds_smem = gl.allocate_shared_memory(
            dtype, [4, ROWS, BLOCK_M], gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_M], dtype))
        dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_DIM // 2],
                                            dq_desc.layout)
        ds_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(ds_bars.index(i), count=2)   # complete once both have handed over
    else:  # not read
        ds_smem = k_smem
        dq_smem = k_smem
        ds_bars = kv_bars
    gl.warp_specialize([
        # the default partition (the kernel's own 4 warps) and a second one: 64 keys each
        (dkdv_rows, (0, k_desc, v_desc, dk_desc, dv_desc, dq_desc, LSE, DELTA, k_smem, v_smem,
                     q_smem, do_smem, ds_smem, dq_smem, ready, empty, kv_bars, ds_bars, kv_row,
                     start_n, first_q, n_q, group, bh0, L, qk_scale, scale, CAUSAL, STAGES,
                     FUSED_DQ)),
        (dkdv_rows, (1, k_desc, v_desc, dk_desc, dv_desc, dq_desc, LSE, DELTA, k_smem, v_smem,
                     q_smem, do_smem, ds_smem, dq_smem, ready, empty, kv_bars, ds_bars, kv_row,
                     start_n, first_q, n_q, group, bh0, L, qk_scale, scale, CAUSAL, STAGES,
                     FUSED_DQ)),
        (load_query_blocks, (q_desc, do_desc, q_smem, do_smem, ready, empty, first_q, n_q,
                             group, bh0, L, STAGES)),
    ], [4, 1], [DKDV_CONSUMER_REGISTERS, DKDV_LOADER_REGISTERS])


def dkdv_hopper_ready(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      do: torch.Tensor) -> bool:
    """Whether :func:`launch_dkdv_hopper` takes these backward inputs: compiled on a GPU of
    compute capability 9.x, float16 or bfloat16, head dim in :data:`DKDV_HOPPER_TILES`, ``L`` a
    positive multiple of the query block and ``S`` of :data:`DKDV_HOPPER_KEYS`, and
    ``q``, ``k``, ``v``, ``dO`` contiguous from 16-byte aligned addresses (TMA copies them).

    Examples
    --------
    >>> q = torch.zeros(1, 2, 128, 128, dtype=torch.float16)  # on the CPU
    >>> dkdv_hopper_ready(q, q, q, q)
    False
    """
    D, L, S = q.shape[-1], q.shape[-2], k.shape[-2]
    tensors = (q, k, v, do)
    return (not INTERPRETED and q.is_cuda and compute_capability(q.device)[0] == 9
            and q.dtype in (torch.float16, torch.bfloat16) and D in DKDV_HOPPER_TILES
            and L > 0 and L % DKDV_HOPPER_TILES[D][0] == 0 and S > 0
            and S % DKDV_HOPPER_KEYS == 0
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in tensors))


def launch_dkdv_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                       lse: torch.Tensor, delta: torch.Tensor, dk: torch.Tensor,
                       dv: torch.Tensor, causal: bool, scale: float,
                       dq: torch.Tensor | None = None) -> None:
    """Launch :func:`flash_bwd_dkdv_hopper_kernel` on inputs :func:`dkdv_hopper_ready` accepts,
    with the forward's ``lse`` and the ``delta`` of
    :func:`~teachkit.kernels.flash_backward.flash_bwd_delta_kernel` (both ``(B, H, L)``
    contiguous float32), writing the contiguous ``dk`` and ``dv``. Given ``dq``, a zeroed
    contiguous float32 tensor shaped like ``q``, the kernel also adds ``dQ`` into it
    (``FUSED_DQ``). No checks: :func:`~teachkit.kernels.flash_backward.flash_backward` calls it
    on validated inputs."""
    if on_other_gpu(q):
        with torch.cuda.device(q.device):
            return launch_dkdv_hopper(q, k, v, do, lse, delta, dk, dv, causal, scale, dq)
    B, H, L, D = q.shape
    H_kv, S = k.shape[1], k.shape[2]
    flash_bwd_dkdv_hopper_kernel[(S // DKDV_HOPPER_KEYS, B * H_kv)](
        *dkdv_descriptors(q, do, k, v, dk, dv, dq), lse, delta, L, S, H, H_kv, scale * LOG2E,
        scale, CAUSAL=causal, STAGES=DKDV_HOPPER_TILES[D][1], FUSED_DQ=dq is not None,
        num_warps=4, maxnreg=DKDV_HOPPER_MAX_REGISTERS)


def dkdv_descriptors(q: torch.Tensor, do: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     dk: torch.Tensor, dv: torch.Tensor, dq: torch.Tensor | None = None,
                     ) -> tuple[TensorDescriptor, ...]:
    """The TMA descriptors :func:`flash_bwd_dkdv_hopper_kernel` takes, in its order, over
    contiguous tensors (:func:`~teachkit.kernels.flash_hopper.tile_descriptor`): ``q`` and
    ``dO`` in tiles of the query block of :data:`DKDV_HOPPER_TILES`, ``k``, ``v``, ``dK`` and
    ``dV`` in tiles of 64 rows (one consumer's keys), and the float32 ``dq`` in tiles of the
    query block by half the head dim (without ``dq``, ``dK``'s again, which the kernel does
    not read)."""
    block_m = DKDV_HOPPER_TILES[q.shape[-1]][0]
    rows = DKDV_HOPPER_KEYS // 2
    dk_desc = tile_descriptor(dk, rows)
    dq_desc = dk_desc if dq is None else tile_descriptor(dq, block_m, dq.shape[-1] // 2)
    return (tile_descriptor(q, block_m), tile_descriptor(do, block_m), tile_descriptor(k, rows),
            tile_descriptor(v, rows), dk_desc, tile_descriptor(dv, rows), dq_desc)
