r"""FlashAttention's forward pass for Hopper (sm_90), written in Gluon: the overlap Triton cannot.

Notebook 08 shows, from the compiled loop of :func:`~teachkit.kernels.flash.flash_attention`, that
Triton 3.6 waits for every ``wgmma`` (warpgroup matrix product) before the softmax's ``ex2``
instructions run, even when the source issues the next key block's scores first, as
FlashAttention-3 does: ``tl.dot`` gives the compiler the schedule. Gluon
(``triton.experimental.gluon``, shipped with Triton) is Triton's lower level: the same Python
front end, but the kernel states the layouts of its tensors, allocates its shared memory, issues
``warpgroup_mma`` asynchronously and says how many products may stay in flight at each wait
(``warpgroup_mma_wait(1)``), copies tiles with TMA and synchronises through ``mbarrier`` objects,
and splits its warps into partitions that run different code (``gl.warp_specialize``).

:func:`flash_fwd_hopper_kernel` uses that to write FlashAttention-3's structure:

* **Warp specialisation.** A tile is ``2 * 64`` query rows of one (batch, head). One *loader*
  warp (:func:`load_key_blocks`) copies key and value blocks with TMA into a ring of ``STAGES``
  shared-memory buffers; two *consumer* warpgroups (:func:`attend_rows`, four warps each) each
  take 64 of the rows and walk the key blocks. A buffer is handed over through two barriers: the
  loader arms ``ready[i]`` with the bytes it expects and the copy completes it; each consumer
  arrives on ``empty[i]`` when its last product reading the buffer is done, and the loader
  refills it once both have.
* **Overlap inside a warpgroup.** In step ``j`` a consumer issues the next block's scores
  ``q k_{j+1}^T`` and then ``p_j v_j``, waits only for the first (one group left in flight),
  runs the softmax of block ``j + 1`` (its ``ex2``) while ``p_j v_j`` still runs on the tensor
  cores, and only then waits for it. With ``OVERLAP=False`` the same kernel waits for each
  product where it is issued, Triton's schedule, for comparison.
* **Wider key blocks without the overlap.** With the overlap a warpgroup holds the next block's
  scores while the current block's weights still feed ``p v``, so the key block stays at 128.
  Without it one block is live at a time, and its scores may take 256 keys (128 float32
  registers a thread): half the steps, half the handovers, a longer product each step. At
  head dim 64 that form is the faster (:func:`hopper_form`, measured by
  ``python -m teachkit.bench attention``).
* **The diagonal block first, in the wide form.** With the causal mask only a tile's last key
  block can cross the diagonal (a key block is at least as wide as the query tile). With
  256-key blocks (:func:`diagonal_first`) the loader copies a tile's blocks from that last one
  back to the first, a consumer masks the first block it gets before its loop, and every step
  of the loop is the same unmasked code: no test of the mask inside it, and one copy of the
  softmax in the loop instead of two (``python -m teachkit.kernels --wgmma-overlap --gluon
  --head-dim 64`` counts them). That form gained on every problem timed
  (``attention_diagonal_first_nvidia_h200`` against ``attention_persistent_nvidia_h200``); the
  128-key form with the overlap read 1-2 % slower without the test in its loop (scratch runs on
  an H200), so it keeps its blocks in order and the test.
* **A persistent grid.** A program walks a list of units of work (:func:`unit_count`): one per
  unit, or one per SM walking many. Persistent, the loader copies the next tile's first key
  blocks and a consumer the next tile's queries while the last tile finishes, instead of a new
  program starting cold. With the causal mask a unit is a pair of tiles, the ``j``-th from the
  end of the sequence with the ``j``-th from its start, so that every unit reads as many keys.
* **Registers where the data is.** The scores come out of ``wgmma`` in its accumulator layout
  (``NVMMADistributedLayout``); the row maxima and sums are reductions in that layout, and the
  weights ``p`` go back into the next product from registers (``DotOperandLayout``): no round
  trip through shared memory. The output is staged in the query buffer, which is free by then,
  and written with one TMA copy.

The arithmetic is :mod:`teachkit.kernels.flash`'s: scores scaled by ``scale * log2(e)`` and
``exp2``, a running maximum that starts at a finite lowest value, one division at the end, the
lse returned in natural-log units. The tiles are whole: ``L`` a multiple of 128 and ``S`` of the
key block, so no load and no store needs a mask (the causal diagonal is masked in the scores).

What it takes (:func:`hopper_ready`): a compute capability 9.x GPU, float16 or bfloat16, head dim
64 or 128, those lengths. It is the forward pass only.
:func:`~teachkit.kernels.flash.flash_attention` stays the entry point: it runs this kernel for the
inputs :func:`hopper_preferred` accepts (at the head dims where it was measured faster than the
Triton kernel), gradients included (the backward kernels need only the output and the lse), and
its Triton kernel for everything else.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

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

from ..device import INTERPRETED, compute_capability, multiprocessors, on_other_gpu
from ..validation import require_bool, resolve_scale
from .attention_inputs import check_inputs
from .gluon_names import TMA_LOAD, TMA_STORE
from .launch_cache import cached_launch

__all__ = ["HOPPER_HEAD_DIMS", "HOPPER_KEY_BLOCKS", "HOPPER_MAX_REGISTERS", "HOPPER_MIN_KEYS",
           "HOPPER_MIN_UNITS_PER_SM", "HOPPER_PREFERRED_HEAD_DIMS", "HOPPER_QUERY_BUFFERS",
           "HOPPER_ROWS", "HOPPER_TILES", "HopperForm", "TMA_LOAD",
           "TMA_STORE", "attend_rows", "diagonal_first", "flash_attention_hopper",
           "flash_fwd_hopper_kernel", "flash_fwd_hopper_persistent_kernel", "handover_barriers",
           "hopper_descriptors", "hopper_device", "hopper_form", "hopper_launch_arguments",
           "hopper_preferred",
           "hopper_ready", "hopper_units", "key_block_order", "launch_hopper", "load_key_blocks",
           "next_tile", "program_tiles", "query_row", "softmax_block", "tile_at", "tile_blocks",
           "tile_descriptor", "tile_layout", "unit_count", "unit_tiles", "walk_key_blocks",
           "walk_rows", "walk_schedule"]

LOG2E = 1.4426950408889634
"""log2(e): the host folds it into the scale, so the kernel exponentiates with ``exp2``."""
LN2 = gl.constexpr(0.6931471805599453)
"""ln(2): turns the kernel's log2-unit lse into natural-log units."""
HOPPER_ROWS = 128
"""Query rows per tile: two consumer warpgroups of 64."""
HOPPER_TILES = {64: (128, 3), 128: (128, 3)}
"""Head dim -> ``(BLOCK_N, STAGES)``: keys per block and buffers in the ring. At ``D = 128``
the query tile and three stages of key and value blocks take 224 KiB of the 227 KiB a program
may use on an H100."""
HOPPER_HEAD_DIMS = tuple(HOPPER_TILES)
HOPPER_KEY_BLOCKS = {64: (128, 256), 128: (128,)}
"""Head dim -> the key blocks the kernel takes (``block_n``), its default first (that of
:data:`HOPPER_TILES`). 256 keys are for the form without the overlap: with it, the next block's
scores and the current block's weights would not fit in the registers together. At head dim 128
three stages of 256-key blocks would not fit in shared memory."""


HOPPER_QUERY_BUFFERS = {64: 2, 128: 1}
"""Head dim -> query buffers per consumer warpgroup: with two, a program copies its next tile's
queries while it works on this one. At head dim 64 two buffers and three stages of 256-key blocks
take 224 KiB; at 128 a second buffer would not fit beside three stages of key and value blocks,
and the query copy waits for the last tile's output to leave its buffer."""


class HopperForm(NamedTuple):
    """How :func:`~teachkit.kernels.flash.flash_attention` runs this kernel
    (:func:`hopper_form`): key blocks of ``block_n``, the overlap on or off, and a persistent
    grid (:func:`flash_fwd_hopper_persistent_kernel`, one program per SM walking many tiles) or
    one program per tile (:func:`flash_fwd_hopper_kernel`)."""

    block_n: int
    overlap: bool
    persistent: bool


HOPPER_PREFERRED_HEAD_DIMS = (64, 128)
"""The head dims at which :func:`~teachkit.kernels.flash.flash_attention` runs this kernel
where :func:`hopper_preferred` accepts the inputs (:func:`hopper_form` says in which form)."""
HOPPER_MIN_KEYS = {64: 1024}
"""Head dim -> the fewest keys a query tile must read (``S``, or ``min(L, S)`` with the causal
mask) for :func:`~teachkit.kernels.flash.flash_attention` to run this kernel; below, the Triton
kernel. At head dim 64 and L = S = 1024 the persistent wide form ran at 1.05x cuDNN without the
mask and 0.97x with it, the Triton kernel at 0.89x and 0.85x
(``attention_diagonal_first_nvidia_h200``); shorter problems were not timed. Head dim 128 has
no minimum: the per-tile Gluon kernel was as fast as the Triton kernel or faster on every shape
timed, few queries against many keys included (CUDA-graph replays on an H200, L = 128 to 2048
against S = 2048 to 32768)."""

HOPPER_MIN_UNITS_PER_SM = {True: 0.5, False: 4.0}
"""Causal or not -> the fewest units of work (:func:`hopper_units`) per SM for which
``flash_attention`` launches the persistent grid where :func:`hopper_form` would; a smaller
problem gets one program per tile. With fewer units than SMs a persistent program walks one
unit, the slower way to run one (the walk's extra code), and with the causal mask below half
as many units as SMs the pairs only halve the programs. Timed on an H200 (132 SMs, CUDA-graph
replays, one run): with the mask, one program per tile was 1.08-1.31x faster at 8 to 64 units
and the persistent grid 1.05-1.37x faster from 128 units on (head dims 64 and 128, B * H = 8 to
128, L = 256 to 2048); without it at head dim 64, one program per tile was 1.03-1.14x faster
at 1 to 256 units but one (0.97x at 256), level at 512 units (0.99x), and 0.90x against 0.99x
cuDNN at L = 1024 with 4096 units (``attention_d64_nvidia_h200`` and
``attention_persistent_nvidia_h200``). At 64 units (B * L = 2048 tokens, H = 8, L = 512-2048,
causal; ``attention_small_nvidia_h200``) one program per tile (128-key blocks) reads at
0.96-1.07x cuDNN, where the persistent forms read 0.70-0.95x."""

HOPPER_MAX_REGISTERS = 168
"""Registers a thread at launch (``maxnreg``): 12 warps x 32 threads x 168 fit the SM's 65,536.
The partitions then move them (``setmaxnreg``): 232 for each consumer warpgroup, 40 for the
loader's."""


@gluon.jit
def softmax_block(s, m_i, l_i, qk_scale, MASKED: gl.constexpr, first_row, first_key,
                  ROWS: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """One key block's online-softmax step on raw scores ``s`` ``(ROWS, BLOCK_N)``: the weights
    ``p`` (float32), the new running maximum and sum (log2 units), and ``alpha``, the factor
    that rescales the accumulator. ``MASKED`` applies the causal mask (key ``first_key + c`` is
    kept for query ``first_row + r`` where it is not later)."""
    if MASKED:
        rows = first_row + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
        cols = first_key + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def handover_barriers(STAGES: gl.constexpr, OWN: gl.constexpr = 2):
    """The barriers of a kernel with one loader and two consumer warpgroups: ``ready`` and
    ``empty`` for each of the ``STAGES`` buffers of the ring (the copy completes ``ready[i]``;
    ``empty[i]`` is released once both consumers have arrived), and ``OWN`` barriers for the
    tiles the consumers load for themselves (one each by default)."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    own = gl.allocate_shared_memory(gl.int64, [OWN, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # released once both consumers are done
    for i in gl.static_range(OWN):
        mbarrier.init(own.index(i), count=1)
    return ready, empty, own


@gluon.jit
def tile_blocks(start_m, S, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """The key blocks the query tile at ``start_m`` reads, and the first that crosses the causal
    diagonal (``n_blocks`` without the mask): keys after the tile's last query are never read."""
    if CAUSAL:
        n_blocks = gl.minimum(gl.cdiv(start_m + BLOCK_M, BLOCK_N), S // BLOCK_N)
        masked_from = start_m // BLOCK_N
    else:
        n_blocks = S // BLOCK_N
        masked_from = n_blocks
    return n_blocks, masked_from


@gluon.constexpr_function
def diagonal_first(block_n, block_m):
    """Whether the kernel walks a tile's key blocks from its last back to its first (the one the
    causal mask may cross comes first, and the key loop needs no test of the mask): in the wide
    form, key blocks wider than the query tile. With 128-key blocks and the overlap the loop
    with the test read faster, so those blocks come in order."""
    return block_n > block_m


@gluon.jit
def load_key_blocks(k_desc, v_desc, k_smem, v_smem, ready, empty, kv_row, n_blocks, it,
                    STAGES: gl.constexpr, BLOCK_M: gl.constexpr):
    """The loader's work for one tile: its ``n_blocks`` key and value blocks of rows
    ``kv_row ..`` into the ring, from its position ``it`` on (stage ``it % STAGES``), each once
    both consumers have released its buffer: block 0 first, or with :func:`diagonal_first`
    block ``n_blocks - 1`` first and back to 0. A fresh barrier counts as having completed the
    phase before its first, so the first round of waits on ``empty`` passes at once."""
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    for j in range(n_blocks):
        stage = (it + j) % STAGES
        if diagonal_first(BLOCK_N, BLOCK_M):
            row = kv_row + (n_blocks - 1 - j) * BLOCK_N
        else:
            row = kv_row + j * BLOCK_N
        mbarrier.wait(empty.index(stage), (((it + j) // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(stage), 2 * k_desc.block_type.nbytes)
        TMA_LOAD(k_desc, [row, 0], ready.index(stage), k_smem.index(stage))
        TMA_LOAD(v_desc, [row, 0], ready.index(stage), v_smem.index(stage))


@gluon.jit
def attend_tile(q_buf, q_bar, q_phase, k_smem, v_smem, ready, empty, it, first_row, n_blocks,
                masked_from, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                OVERLAP: gl.constexpr):
    """One consumer warpgroup's query rows ``first_row ..`` (in ``q_buf``, whose copy completes
    ``q_bar``'s phase ``q_phase``) against ``n_blocks`` key blocks, the ring's blocks ``it ..``
    (its position: stage ``it % STAGES``); key blocks from ``masked_from`` on cross the causal
    diagonal. In block order the loop tests each block for the mask; diagonal first
    (:func:`diagonal_first`) the ring's first block is the only one that may need it, masked
    before the loop, and the loop's steps are all alike. Returns the unnormalised output
    ``acc`` and the running maximum and sum (log2 units); each block's buffers are released as
    soon as its last product is done."""
    ROWS: gl.constexpr = q_buf.type.shape[0]
    HEAD_DIM: gl.constexpr = q_buf.type.shape[1]
    BLOCK_N: gl.constexpr = k_smem.type.shape[1]
    DIAGONAL_FIRST: gl.constexpr = diagonal_first(BLOCK_N, 2 * ROWS)
    dtype: gl.constexpr = q_buf.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    m_i = gl.full([ROWS], -1.0e38, gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)

    # the ring's first block (key block 0, or diagonal first the last): its scores, waited for,
    # and its softmax
    mbarrier.wait(q_bar, q_phase)
    mbarrier.wait(ready.index(it % STAGES), (it // STAGES) & 1)
    s = warpgroup_mma(q_buf, k_smem.index(it % STAGES).permute((1, 0)), s_zero, use_acc=False,
                      is_async=True)
    s = warpgroup_mma_wait(0, deps=[s])
    if DIAGONAL_FIRST:  # the one block the mask may cross
        p, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, CAUSAL, first_row,
                                           (n_blocks - 1) * BLOCK_N, ROWS, BLOCK_N, s_layout)
    elif masked_from <= 0:
        p, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, True, first_row, 0,
                                           ROWS, BLOCK_N, s_layout)
    else:
        p, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, False, first_row, 0,
                                           ROWS, BLOCK_N, s_layout)

    # step j: p_j v_j, and the scores and softmax of the ring's block j + 1
    for j in range(n_blocks - 1):
        stage = (it + j) % STAGES
        nxt = it + j + 1
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        mbarrier.wait(ready.index(nxt % STAGES), (nxt // STAGES) & 1)
        k_next = k_smem.index(nxt % STAGES).permute((1, 0))
        if OVERLAP:  # both products in flight; wait for the scores only
            s = warpgroup_mma(q_buf, k_next, s_zero, use_acc=False, is_async=True)
            acc = warpgroup_mma(p16, v_smem.index(stage), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=[s])
        else:  # each product waited for where it is issued
            acc = warpgroup_mma(p16, v_smem.index(stage), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[acc])
            s = warpgroup_mma(q_buf, k_next, s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=[s])
        # its softmax: with OVERLAP it runs while p_j v_j is on the tensor cores
        if DIAGONAL_FIRST:  # below the diagonal: no mask, no test
            p, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, False, first_row, 0,
                                               ROWS, BLOCK_N, s_layout)
        elif j + 1 >= masked_from:
            p, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, True, first_row,
                                               (j + 1) * BLOCK_N, ROWS, BLOCK_N, s_layout)
        else:
            p, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, False, first_row,
                                               (j + 1) * BLOCK_N, ROWS, BLOCK_N, s_layout)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(empty.index(stage), count=1)  # done with block j's buffers
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]

    last = (it + n_blocks - 1) % STAGES
    p16 = gl.convert_layout(p.to(dtype), p_layout)
    acc = warpgroup_mma(p16, v_smem.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    mbarrier.arrive(empty.index(last), count=1)
    return acc, m_i, l_i


@gluon.jit
def write_rows(acc, m_i, l_i, q_buf, o_desc, LSE, row0, BLOCK_N: gl.constexpr):
    """A consumer's output ``acc / l`` and lse (natural-log units) for rows ``row0 ..`` of the
    flattened ``(B * H * L, D)``: the output is staged in the query buffer, whose queries are no
    longer needed, and written with one TMA copy (not waited for)."""
    ROWS: gl.constexpr = q_buf.type.shape[0]
    HEAD_DIM: gl.constexpr = q_buf.type.shape[1]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    gl.store(LSE + row0 + rows, (m_i + gl.log2(l_i)) * LN2)
    q_buf.store(out.to(q_buf.dtype))
    fence_async_shared()
    TMA_STORE(o_desc, [row0, 0], q_buf)


@gluon.jit
def attend_rows(wg, q_desc, o_desc, LSE, q_smem, k_smem, v_smem, ready, empty, q_bars, q_row,
                start_m, n_blocks, masked_from, qk_scale, CAUSAL: gl.constexpr,
                STAGES: gl.constexpr, OVERLAP: gl.constexpr):
    """A consumer partition (one warpgroup): query rows ``start_m + 64 * wg ..`` of the
    program's tile against every key block (:func:`attend_tile`), then their output and lse
    (:func:`write_rows`)."""
    ROWS: gl.constexpr = q_desc.block_type.shape[0]
    q_buf = q_smem.index(wg)
    q_bar = q_bars.index(wg)
    row0 = q_row + wg * ROWS          # this warpgroup's first row in the flattened (B*H*L, D)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    TMA_LOAD(q_desc, [row0, 0], q_bar, q_buf)
    acc, m_i, l_i = attend_tile(q_buf, q_bar, 0, k_smem, v_smem, ready, empty, 0,
                                start_m + wg * ROWS, n_blocks, masked_from, qk_scale, CAUSAL,
                                STAGES, OVERLAP)
    write_rows(acc, m_i, l_i, q_buf, o_desc, LSE, row0, k_smem.type.shape[1])
    tma.store_wait(0)


@cached_launch
@gluon.jit
def flash_fwd_hopper_kernel(q_desc, k_desc, v_desc, o_desc, LSE, L, S, H, H_KV, qk_scale,
                            CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, STAGES: gl.constexpr):
    """Program ``(query tile, b * H + h)``: 128 rows of ``out`` and ``lse``. The descriptors
    view ``q``/``out`` as ``(B * H * L, D)`` in tiles of 64 rows and ``k``/``v`` as
    ``(B * H_KV * S, D)`` in tiles of ``BLOCK_N``; ``LSE`` is ``(B * H * L,)`` float32.
    Causal: the tiles that see the most keys start first."""
    ROWS: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    BLOCK_M: gl.constexpr = 2 * ROWS
    dtype: gl.constexpr = q_desc.dtype
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    start_m = pid_m * BLOCK_M
    q_row = bh * L + start_m
    kv_row = (b * H_KV + h // (H // H_KV)) * S
    n_blocks, masked_from = tile_blocks(start_m, S, CAUSAL, BLOCK_M, BLOCK_N)

    q_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    ready, empty, q_bars = handover_barriers(STAGES)
    gl.warp_specialize([
        # the default partition (the kernel's own 4 warps) and a second one: 64 rows each
        (attend_rows, (0, q_desc, o_desc, LSE, q_smem, k_smem, v_smem, ready, empty, q_bars,
                       q_row, start_m, n_blocks, masked_from, qk_scale, CAUSAL, STAGES,
                       OVERLAP)),
        (attend_rows, (1, q_desc, o_desc, LSE, q_smem, k_smem, v_smem, ready, empty, q_bars,
                       q_row, start_m, n_blocks, masked_from, qk_scale, CAUSAL, STAGES,
                       OVERLAP)),
        (load_key_blocks, (k_desc, v_desc, k_smem, v_smem, ready, empty, kv_row, n_blocks, 0,
                           STAGES, BLOCK_M)),
    ], [4, 1], [232, 40])


@gluon.jit
def unit_count(n_m, CAUSAL: gl.constexpr):
    """Units of work in one (batch, head) of ``n_m`` query tiles: each tile, or with the causal
    mask pairs of tiles, the ``j``-th from the end with the ``j``-th from the start (their key
    blocks add up to the same count for every pair), the middle tile alone when ``n_m`` is odd."""
    if CAUSAL:
        return (n_m + 1) // 2
    else:
        return n_m


@gluon.jit
def unit_tiles(u, U, n_m, CAUSAL: gl.constexpr):
    """How many tiles unit ``u`` holds, of ``U`` units a (batch, head): 1, or 2 for a pair."""
    if CAUSAL:
        return 2 - (2 * (u % U) == n_m - 1).to(gl.int32)
    else:
        return 1


@gluon.jit
def tile_at(u, half, U, n_m, CAUSAL: gl.constexpr):
    """The query tile index and the ``b * H + h`` of tile ``half`` of unit ``u``: of a pair, the
    one that reads more keys first. Arithmetic, not ``gl.where``: the index feeds every shared
    memory address, which should stay in uniform registers."""
    j = u % U
    if CAUSAL:
        m = j + (1 - half) * (n_m - 1 - 2 * j)
    else:
        m = j
    return m, u // U


@gluon.jit
def next_tile(u, half, U, n_m, CAUSAL: gl.constexpr):
    """The tile after tile ``half`` of unit ``u`` in this program's walk (units ``pid, pid + G,
    pid + 2G, ...`` for ``G`` programs)."""
    last = (half + 1 >= unit_tiles(u, U, n_m, CAUSAL)).to(gl.int32)
    return u + last * gl.num_programs(0), (half + 1) * (1 - last)


@gluon.jit
def program_tiles(n_units, U, n_m, CAUSAL: gl.constexpr):
    """How many tiles this program walks."""
    count = 0
    for u in range(gl.program_id(0), n_units, gl.num_programs(0)):
        count += unit_tiles(u, U, n_m, CAUSAL)
    return count


@gluon.jit
def query_row(u, half, U, n_m, L, wg, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr):
    """The first row, in the flattened ``(B * H * L, D)``, of warpgroup ``wg``'s 64 queries in
    tile ``half`` of unit ``u``."""
    m, bh = tile_at(u, half, U, n_m, CAUSAL)
    return bh * L + m * BLOCK_M + wg * (BLOCK_M // 2)


@gluon.jit
def walk_key_blocks(k_desc, v_desc, k_smem, v_smem, ready, empty, BH, n_m, S, H, H_KV,
                    CAUSAL: gl.constexpr, STAGES: gl.constexpr, BLOCK_M: gl.constexpr):
    """The loader partition of the persistent kernel (one warp): for each tile of this program's
    walk, its key and value blocks (:func:`load_key_blocks`). The ring runs on from tile to tile
    (``it`` counts every block loaded), so the next tile's first blocks are copied while the
    consumers finish the last one's."""
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    U = unit_count(n_m, CAUSAL)
    u = gl.program_id(0)
    half = 0
    it = 0
    for _ in range(program_tiles(U * BH, U, n_m, CAUSAL)):
        m, bh = tile_at(u, half, U, n_m, CAUSAL)
        u, half = next_tile(u, half, U, n_m, CAUSAL)
        kv_row = ((bh // H) * H_KV + (bh % H) // (H // H_KV)) * S
        n_blocks, _ = tile_blocks(m * BLOCK_M, S, CAUSAL, BLOCK_M, BLOCK_N)
        load_key_blocks(k_desc, v_desc, k_smem, v_smem, ready, empty, kv_row, n_blocks, it,
                        STAGES, BLOCK_M)
        it += n_blocks


@gluon.jit
def walk_rows(wg, q_desc, o_desc, LSE, q_smem, k_smem, v_smem, ready, empty, q_bars, BH, n_m,
              L, S, qk_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
              OVERLAP: gl.constexpr, Q_BUFS: gl.constexpr):
    """A consumer partition of the persistent kernel (one warpgroup): for each tile of this
    program's walk, its 64 query rows ``wg`` against every key block the tile reads
    (:func:`attend_tile`, from where the ring stands), then their output and lse
    (:func:`write_rows`). The queries of the next tile are copied ahead: with ``Q_BUFS = 2``
    into the warpgroup's other buffer while this tile runs, with 1 into the same buffer once
    this tile's output has left it. The copy is predicated, not branched around, so that the
    ring's indices stay in uniform registers."""
    ROWS: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_smem.type.shape[1]
    BLOCK_M: gl.constexpr = 2 * ROWS
    U = unit_count(n_m, CAUSAL)
    count = program_tiles(U * BH, U, n_m, CAUSAL)
    u = gl.program_id(0)
    half = 0
    mbarrier.expect(q_bars.index(wg * Q_BUFS), q_desc.block_type.nbytes)
    TMA_LOAD(q_desc, [query_row(u, half, U, n_m, L, wg, CAUSAL, BLOCK_M), 0],
             q_bars.index(wg * Q_BUFS), q_smem.index(wg * Q_BUFS))
    it = 0  # key blocks consumed so far: the ring's position
    for t in range(count):
        m, bh = tile_at(u, half, U, n_m, CAUSAL)
        u, half = next_tile(u, half, U, n_m, CAUSAL)
        more = t + 1 < count
        first_row = m * BLOCK_M + wg * ROWS  # this warpgroup's first query in the sequence
        n_blocks, masked_from = tile_blocks(m * BLOCK_M, S, CAUSAL, BLOCK_M, BLOCK_N)
        buf = wg * Q_BUFS + t % Q_BUFS
        q_buf = q_smem.index(buf)
        if Q_BUFS == 2:  # the next tile's queries into the other buffer, once its output left
            other = wg * Q_BUFS + (t + 1) % Q_BUFS
            tma.store_wait(0)
            mbarrier.expect(q_bars.index(other), q_desc.block_type.nbytes, pred=more)
            TMA_LOAD(q_desc, [query_row(u, half, U, n_m, L, wg, CAUSAL, BLOCK_M), 0],
                     q_bars.index(other), q_smem.index(other), pred=more)
        acc, m_i, l_i = attend_tile(q_buf, q_bars.index(buf), (t // Q_BUFS) & 1, k_smem,
                                    v_smem, ready, empty, it, first_row, n_blocks, masked_from,
                                    qk_scale, CAUSAL, STAGES, OVERLAP)
        it += n_blocks
        write_rows(acc, m_i, l_i, q_buf, o_desc, LSE, bh * L + first_row, BLOCK_N)
        if Q_BUFS == 1:  # the next tile's queries, once this output has left the buffer
            tma.store_wait(0)
            mbarrier.expect(q_bars.index(buf), q_desc.block_type.nbytes, pred=more)
            TMA_LOAD(q_desc, [query_row(u, half, U, n_m, L, wg, CAUSAL, BLOCK_M), 0],
                     q_bars.index(buf), q_buf, pred=more)
    tma.store_wait(0)


@cached_launch
@gluon.jit
def flash_fwd_hopper_persistent_kernel(q_desc, k_desc, v_desc, o_desc, LSE, L, S, H, H_KV, BH,
                                       qk_scale, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
                                       STAGES: gl.constexpr, Q_BUFS: gl.constexpr):
    """:func:`flash_fwd_hopper_kernel`'s work on a persistent grid, one program per SM (fewer
    where the problem has fewer units): a program walks units of work (:func:`unit_count`),
    ``pid, pid + G, ...`` of the ``BH * U`` of the problem for ``G`` programs, and its ring and
    query buffers run on from tile to tile. A tile is 128 rows of ``out`` and ``lse`` of one
    ``b * H + h`` (``BH = B * H``), read through the same descriptors; ``Q_BUFS`` query buffers
    per consumer (1 or 2)."""
    ROWS: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    BLOCK_M: gl.constexpr = 2 * ROWS
    dtype: gl.constexpr = q_desc.dtype
    n_m = L // BLOCK_M

    q_smem = gl.allocate_shared_memory(dtype, [2 * Q_BUFS, ROWS, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    ready, empty, q_bars = handover_barriers(STAGES, 2 * Q_BUFS)
    gl.warp_specialize([
        # the default partition (the kernel's own 4 warps) and a second one: 64 rows each
        (walk_rows, (0, q_desc, o_desc, LSE, q_smem, k_smem, v_smem, ready, empty, q_bars,
                       BH, n_m, L, S, qk_scale, CAUSAL, STAGES, OVERLAP, Q_BUFS)),
        (walk_rows, (1, q_desc, o_desc, LSE, q_smem, k_smem, v_smem, ready, empty, q_bars,
                       BH, n_m, L, S, qk_scale, CAUSAL, STAGES, OVERLAP, Q_BUFS)),
        (walk_key_blocks, (k_desc, v_desc, k_smem, v_smem, ready, empty, BH, n_m, S, H, H_KV,
                           CAUSAL, STAGES, BLOCK_M)),
    ], [4, 1], [232, 40])


def walk_schedule(n_m: int, BH: int, programs: int, causal: bool) -> list[list[tuple[int, int]]]:
    """The tiles each program of :func:`flash_fwd_hopper_persistent_kernel` walks, in order:
    for each of ``programs`` programs, ``(b * H + h, query tile)`` pairs, for ``n_m`` query
    tiles a sequence and ``BH`` sequences. The kernel's own arithmetic (:func:`unit_count`,
    :func:`unit_tiles`, :func:`tile_at`, :func:`next_tile`) in Python, to read or plot.

    Examples
    --------
    >>> walk_schedule(4, 1, 2, causal=True)  # pairs: tiles 3 and 0, then 2 and 1
    [[(0, 3), (0, 0)], [(0, 2), (0, 1)]]
    >>> walk_schedule(3, 2, 4, causal=False)[0]  # units 0 and 4 of six
    [(0, 0), (1, 1)]
    """
    units_per_seq = hopper_units(n_m * HOPPER_ROWS, 1, causal)
    walks = []
    for pid in range(programs):
        walk = []
        for u in range(pid, units_per_seq * BH, programs):
            j = u % units_per_seq
            pair = (n_m - 1 - j, j) if causal and 2 * j != n_m - 1 else (j,)
            walk += [(u // units_per_seq, m) for m in pair]
        walks.append(walk)
    return walks


def key_block_order(L: int, S: int, block_n: int, causal: bool) -> list[list[int]]:
    """The key blocks each query tile reads, in the order :func:`load_key_blocks` copies them:
    for each of the ``L // HOPPER_ROWS`` tiles of one sequence, block indices (block ``j``
    holds keys ``j * block_n ..``), from the last back to 0 where :func:`diagonal_first` says
    so, else from 0. The kernel's :func:`tile_blocks` and loader in Python, to read or plot.

    Examples
    --------
    >>> key_block_order(512, 512, 256, causal=True)  # the wide form: diagonal first
    [[0], [0], [1, 0], [1, 0]]
    >>> key_block_order(512, 512, 128, causal=True)[2]  # 128-key blocks: in order
    [0, 1, 2]
    """
    orders = []
    for start_m in range(0, L, HOPPER_ROWS):
        n_blocks = S // block_n
        if causal:
            n_blocks = min(-(-(start_m + HOPPER_ROWS) // block_n), n_blocks)
        blocks = list(range(n_blocks))
        orders.append(blocks[::-1] if diagonal_first(block_n, HOPPER_ROWS) else blocks)
    return orders


def hopper_device() -> bool:
    """Whether this process runs compiled kernels on a GPU of compute capability 9.x, the one
    :func:`flash_fwd_hopper_kernel` compiles for (the current CUDA device).

    Examples
    --------
    >>> hopper_device() in (True, False)
    True
    """
    return not INTERPRETED and torch.cuda.is_available() and (
        torch.cuda.get_device_capability()[0] == 9)


def hopper_ready(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 block_n: int | None = None) -> bool:
    """Whether :func:`flash_attention_hopper` takes these (checked) inputs: compiled on a GPU of
    compute capability 9.x, float16 or bfloat16, head dim in :data:`HOPPER_HEAD_DIMS`, ``L`` a
    multiple of :data:`HOPPER_ROWS`, ``S`` a positive multiple of the key block ``block_n``
    (default the head dim's first in :data:`HOPPER_KEY_BLOCKS`), and tensors that start at
    16-byte aligned addresses (TMA copies them).

    Examples
    --------
    >>> q = torch.zeros(1, 2, 128, 64, dtype=torch.float16)  # on the CPU
    >>> hopper_ready(q, q, q)
    False
    """
    return _not_ready_reason(q, k, v, block_n) is None



def hopper_units(L: int, sequences: int, causal: bool) -> int:
    """Units of work of a problem of ``sequences`` (``B * H``) sequences of ``L`` queries (a
    multiple of :data:`HOPPER_ROWS`): its query tiles, or with the causal mask its pairs of
    tiles (:func:`unit_count`, the middle tile alone when a sequence has an odd number).

    Examples
    --------
    >>> hopper_units(1024, 32, causal=False), hopper_units(1024, 32, causal=True)
    (256, 128)
    """
    tiles = L // HOPPER_ROWS
    return ((tiles + 1) // 2 if causal else tiles) * sequences


def hopper_form(head_dim: int, L: int, S: int, causal: bool, sequences: int | None = None,
                sms: int | None = None) -> HopperForm | None:
    """The form in which :func:`~teachkit.kernels.flash.flash_attention` runs a problem of these
    sizes with this kernel, or ``None`` where it runs the Triton kernel. Sizes only;
    :func:`hopper_preferred` checks the tensors too. Measured on an H200
    (``python -m teachkit.bench attention``, the ``teachkit hopper`` providers):

    * head dim 128: 128-key blocks with the overlap; persistent with the causal mask, where the
      pairs of tiles even out the work (0.95x cuDNN at L = 1024 against 0.91x), one program per
      tile without it (1.05x against 1.01x at L = 4096);
    * head dim 64: 256-key blocks without the overlap, once a query tile reads
      :data:`HOPPER_MIN_KEYS` keys; persistent, with the mask or without (without it the walk
      read 1.00-1.11x one program per tile at L = S = 2048 to 16384,
      ``attention_d64_walk_nvidia_h200``, and 1.00-1.06x at six shapes with L != S, from
      L = 512 against S = 16384 to L = 8192 against S = 4096, in an interleaved run).

    Given ``sequences`` (``B * H``) and the GPU's ``sms``, a problem with fewer units of work
    (:func:`hopper_units`) per SM than :data:`HOPPER_MIN_UNITS_PER_SM` runs one program per
    tile instead of persistent; without them the problem is taken to be large.

    Examples
    --------
    >>> hopper_form(128, 1024, 1024, causal=True)
    HopperForm(block_n=128, overlap=True, persistent=True)
    >>> hopper_form(64, 1024, 1024, causal=False).persistent, hopper_form(64, 512, 512, False)
    (True, None)
    >>> hopper_form(64, 512, 8192, causal=False).block_n, hopper_form(64, 512, 8192, causal=True)
    (256, None)
    >>> hopper_form(128, 1024, 1024, True, sequences=8, sms=132).persistent  # 32 units
    False
    """
    if head_dim not in HOPPER_PREFERRED_HEAD_DIMS:
        return None
    keys = min(L, S) if causal else S
    if keys < HOPPER_MIN_KEYS.get(head_dim, 0):
        return None
    if head_dim == 128:
        form = HopperForm(128, True, persistent=causal)
    else:
        form = HopperForm(256, False, persistent=True)
    if form.persistent and sequences is not None and sms is not None and (
            hopper_units(L, sequences, causal) < HOPPER_MIN_UNITS_PER_SM[causal] * sms):
        form = form._replace(persistent=False)
    return form


def hopper_preferred(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     causal: bool = False) -> bool:
    """Whether :func:`~teachkit.kernels.flash.flash_attention` runs these (checked) inputs'
    forward pass (``causal`` or not) with this kernel: :func:`hopper_form` gives the sizes a
    form, :func:`hopper_ready` accepts them with its ``block_n``, and ``q``, ``k`` and ``v`` are
    contiguous (the Triton kernel reads any strides without a copy).

    Examples
    --------
    >>> q = torch.zeros(1, 2, 128, 128, dtype=torch.float16)  # on the CPU
    >>> hopper_preferred(q, q, q)
    False
    """
    form = hopper_form(q.shape[-1], q.shape[-2], k.shape[-2], causal)
    return (form is not None and q.is_contiguous()
            and k.is_contiguous() and v.is_contiguous()
            and _not_ready_reason(q, k, v, form.block_n) is None)


def flash_attention_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           causal: bool = False, scale: float | None = None,
                           return_lse: bool = False, *, overlap: bool = True,
                           block_n: int | None = None, persistent: bool = False,
                           ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The forward pass of :func:`~teachkit.kernels.flash.flash_attention` by
    :func:`flash_fwd_hopper_kernel`, for inputs :func:`hopper_ready` accepts.

    Parameters
    ----------
    q, k, v, causal, scale, return_lse
        As :func:`~teachkit.kernels.flash.flash_attention` (grouped-query heads included).
    overlap : bool
        Run the softmax of the next key block under the current ``p v`` product (the default);
        ``False`` waits for each product where it is issued, for comparison.
    block_n : int, optional
        Keys per block, one of the head dim's :data:`HOPPER_KEY_BLOCKS` (default its first,
        128). 256 at head dim 64 is for ``overlap=False``: with the overlap it runs, slowly.

    Returns
    -------
    torch.Tensor or tuple of torch.Tensor
        ``out`` ``(B, H, L, D)``, and the lse ``(B, H, L)`` float32 with ``return_lse``. No
        autograd: use ``flash_attention`` for gradients (it runs this kernel where
        :func:`hopper_preferred` says so).

    Raises
    ------
    TypeError, ValueError
        For a ``block_n`` that is not one of the head dim's; for inputs :func:`hopper_ready`
        rejects (the message says which condition fails).
    """
    check_inputs(q, k, v)
    causal = require_bool(causal, "causal")
    require_bool(return_lse, "return_lse")
    overlap = require_bool(overlap, "overlap")
    persistent = require_bool(persistent, "persistent")
    D = q.shape[-1]
    blocks = HOPPER_KEY_BLOCKS.get(D)  # None for a head dim refused below
    if block_n is not None and (type(block_n) is not int
                                or (blocks is not None and block_n not in blocks)):
        error = TypeError if type(block_n) is not int else ValueError
        raise error(f"block_n must be one of {blocks or HOPPER_KEY_BLOCKS} at head dim {D} "
                    f"(keys per block), or None for the default; got {block_n!r}")
    reason = _not_ready_reason(q, k, v, block_n)
    if reason is not None:
        raise ValueError(reason)
    scale = resolve_scale(scale, q.shape[-1])
    if scale < 0:  # softmax(s q k^T) = softmax(|s| (-q) k^T)
        q, scale = -q, -scale
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    launch_hopper(q, k, v, out, lse, causal, scale, overlap, block_n, persistent)
    return (out, lse) if return_lse else out


def launch_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, causal: bool, scale: float, overlap: bool = True,
                  block_n: int | None = None, persistent: bool = False) -> None:
    """Launch :func:`flash_fwd_hopper_kernel` (one program per tile), or with ``persistent``
    :func:`flash_fwd_hopper_persistent_kernel` (no more programs than the GPU has SMs), on
    checked, contiguous inputs that :func:`hopper_ready` accepts (with ``block_n`` keys a block,
    default the head dim's :data:`HOPPER_TILES`), with ``scale >= 0``, writing the contiguous
    ``out`` and ``lse``. No
    checks: :func:`flash_attention_hopper` is the entry point, and
    :func:`~teachkit.kernels.flash.flash_attention` calls this where it picks the kernel."""
    if on_other_gpu(q):
        with torch.cuda.device(q.device):
            return launch_hopper(q, k, v, out, lse, causal, scale, overlap, block_n, persistent)
    kernel, grid, args, options = hopper_launch_arguments(q, k, v, out, lse, causal, scale,
                                                          overlap, block_n, persistent)
    kernel[grid](*args, **options)
    return None


def hopper_launch_arguments(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float,
                            overlap: bool = True, block_n: int | None = None,
                            persistent: bool = False) -> tuple[Any, tuple, tuple, dict]:
    """The kernel :func:`launch_hopper` launches (:func:`flash_fwd_hopper_kernel`, or
    :func:`flash_fwd_hopper_persistent_kernel` with ``persistent``), its grid, its arguments
    (the TMA descriptors of :func:`hopper_descriptors`, the lse, the sizes and the scale in
    log2 units) and its options."""
    B, H, L, D = q.shape
    H_kv, S = k.shape[1], k.shape[2]
    descriptors = hopper_descriptors(q, k, v, out, block_n)
    if not persistent:
        return (flash_fwd_hopper_kernel, (L // HOPPER_ROWS, B * H),
                (*descriptors, lse, L, S, H, H_kv, scale * LOG2E),
                dict(CAUSAL=causal, OVERLAP=overlap, STAGES=HOPPER_TILES[D][1], num_warps=4,
                     maxnreg=HOPPER_MAX_REGISTERS))
    units = hopper_units(L, B * H, causal)
    return (flash_fwd_hopper_persistent_kernel, (min(units, multiprocessors(q.device)),),
            (*descriptors, lse, L, S, H, H_kv, B * H, scale * LOG2E),
            dict(CAUSAL=causal, OVERLAP=overlap, STAGES=HOPPER_TILES[D][1],
                 Q_BUFS=HOPPER_QUERY_BUFFERS[D], num_warps=4, maxnreg=HOPPER_MAX_REGISTERS))


@functools.cache
def tile_layout(rows: int, columns: int, dtype: torch.dtype) -> gl.NVMMASharedLayout:
    """The shared-memory layout (swizzle) in which ``warpgroup_mma`` reads a ``(rows, columns)``
    tile of ``dtype`` (float16, bfloat16 or float32), worked out once per tile (it is pure
    Python, and a call should not pay for it)."""
    element = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16,
               torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, columns], element)


def tile_descriptor(t: torch.Tensor, rows: int, columns: int | None = None) -> TensorDescriptor:
    """A TMA descriptor over the contiguous ``t`` viewed as ``(numel / D, D)`` (``D`` its last
    axis), in tiles of ``rows`` x ``columns`` (default ``D``) with the shared-memory layout
    (swizzle) ``warpgroup_mma`` reads: how the Gluon kernels of the course see their tensors.

    Built without ``TensorDescriptor``'s own checks (16-byte aligned start and row stride, a
    last stride of 1, positive sizes), which took about 3 of the 5 µs a descriptor cost on the
    host: the callers hold tensors that meet them (:func:`hopper_ready` and the backward's
    ``dkdv_hopper_ready`` check the inputs; the outputs are fresh contiguous tensors), and a
    call builds four to seven.

    Examples
    --------
    >>> d = tile_descriptor(torch.zeros(2, 3, 256, 64, dtype=torch.float16), 64)
    >>> d.shape, d.strides, d.block_shape
    ([1536, 64], [64, 1], [64, 64])
    """
    D = t.shape[-1]
    columns = D if columns is None else columns
    descriptor = object.__new__(TensorDescriptor)  # the dataclass's fields, set directly
    descriptor.base, descriptor.shape, descriptor.strides = t, [t.numel() // D, D], [D, 1]
    descriptor.block_shape = [rows, columns]
    descriptor.layout = tile_layout(rows, columns, t.dtype)
    descriptor.padding = "zero"
    return descriptor


def hopper_descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       block_n: int | None = None) -> tuple[TensorDescriptor, ...]:
    """The TMA descriptors :func:`flash_fwd_hopper_kernel` takes, over contiguous tensors
    (:func:`tile_descriptor`): ``q`` and ``out`` in tiles of 64 rows (one consumer's), ``k``
    and ``v`` in tiles of ``block_n`` keys (default the key block of :data:`HOPPER_TILES`)."""
    block_n = HOPPER_TILES[q.shape[-1]][0] if block_n is None else block_n
    return (tile_descriptor(q, HOPPER_ROWS // 2), tile_descriptor(k, block_n),
            tile_descriptor(v, block_n), tile_descriptor(out, HOPPER_ROWS // 2))


def _not_ready_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      block_n: int | None = None) -> str | None:
    """Why :func:`flash_attention_hopper` does not take these inputs in key blocks of
    ``block_n`` (default the head dim's :data:`HOPPER_TILES`), and what to do instead; ``None``
    when it does (the one place that lists its conditions)."""
    D, L, S = q.shape[-1], q.shape[-2], k.shape[-2]
    if INTERPRETED or not q.is_cuda or compute_capability(q.device)[0] != 9:
        why = "needs a Hopper GPU (compute capability 9.x) and compiled Triton"
    elif q.dtype not in (torch.float16, torch.bfloat16):
        why = f"takes float16 or bfloat16, got {q.dtype}"
    elif D not in HOPPER_TILES:
        why = f"takes head dims {HOPPER_HEAD_DIMS}, got {D}"
    elif L % HOPPER_ROWS:
        why = f"needs L a multiple of {HOPPER_ROWS}, got {L}"
    elif S == 0 or S % (block_n := block_n or HOPPER_TILES[D][0]):
        why = f"needs S a positive multiple of {block_n} (the key block), got {S}"
    elif q.data_ptr() % 16 or k.data_ptr() % 16 or v.data_ptr() % 16:
        why = "needs q, k and v to start at 16-byte aligned addresses (TMA copies them)"
    else:
        return None
    return f"flash_attention_hopper {why}; flash_attention takes any of these inputs"
