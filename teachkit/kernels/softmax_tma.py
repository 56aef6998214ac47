"""Resident rows whose next chunk arrives by TMA while the row waits: a Gluon kernel for sm_90.

The resident kernel of :mod:`teachkit.kernels.softmax_kernels` holds every chunk of a row in
registers while the row's programs exchange their ``(m, d)`` pairs, and the whole wait is lost:
no program reads while it waits for the slowest of its row (``gpu_checks/resident_long_gpu.py
--unexchanged`` measures that wait at 4-17 points of the copy rate on float32 rows of 1M-4M
columns). This kernel keeps the chunk in registers too, but the moment it has read it out of a
buffer in shared memory it asks the Tensor Memory Accelerator (TMA) to copy its *next* chunk into
that buffer. The copy needs no thread and no register: it runs while the program publishes its
pair, waits for the row's pairs and writes its results, so the memory is busy during the wait.
Shared memory, which the Triton kernel leaves empty, holds the chunk in flight; registers the one
being worked on.

Triton does not say where a tensor lives, so this is written in Gluon, Triton's lower-level
language (shared memory, TMA copies and ``mbarrier`` waits spelled out), for Hopper GPUs
(compute capability 9.x). The merge and the pair are the Triton kernels' own functions
(:mod:`teachkit.kernels.pairs`), called element-wise as they are; its form for 16-bit rows holds
them as words (:mod:`teachkit.kernels.words`), as the Triton kernel's does.
:func:`~teachkit.kernels.softmax_kernels.softmax` takes it on a Hopper GPU by :func:`tma_config`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ..device import INTERPRETED, compute_capability
from .gluon_names import THREAD_BARRIER, TMA_LOAD
from .grid_math import cdiv, next_power_of_2, resident_grid
from .pairs import (
    EMPTY_SLOT,
    LOG2E,
    MAX_SPIN,
    merge_combine,
    nap,
    online_update,
    pack_pair,
    unpack_pair,
)
from .words import fresh, fresh_halves, halves, pack_halves_x2, pack_results

__all__ = ["PAIR_FROM_BUFFER_CONFIGS", "PAIR_FROM_BUFFER_WORDS_CONFIGS", "PIECE_COLUMNS",
           "TMA_BEHIND_CONFIGS", "TMA_BEHIND_UNTIL", "TMA_CONFIGS", "TMA_LONG_ROW_CONFIGS",
           "TMA_LONG_ROW_FROM", "TMA_PAIR_FROM_BUFFER_CONFIGS", "TMA_PAIR_FROM_BUFFER_UNTIL",
           "TMA_WIDTH", "TMA_WORDS_CONFIGS", "TMA_WORDS_FROM", "TmaConfig", "buffer_pair",
           "chunk_columns", "chunk_descriptor", "copy_chunk", "held_lines", "launch_resident_tma",
           "load_and_refill", "next_buffer", "piece_of", "resident_tma_kernel",
           "resident_tma_words_kernel", "shared_layout", "start_chunks", "take_chunk", "tma_config",
           "tma_fits", "tma_not_ready", "tma_programs", "word_padding", "write_chunk", "write_kept",
           "write_kept_words", "write_reread", "write_words"]


@gluon.jit
def gluon_row_pair(row_slots, X_row, n_cols, G, G_POW2: gl.constexpr, MAX_SPIN: gl.constexpr,
                   BACKOFF: gl.constexpr):
    """The ``(m, d)`` of a whole row, as the Triton kernels' ``row_pair`` finds it: poll the
    row's ``G`` words at ``row_slots`` (volatile loads, past L1 to L2) until none is
    :data:`EMPTY_SLOT`, pausing between polls with ``BACKOFF``, and merge them; if ``MAX_SPIN``
    polls pass first, read the row's ``n_cols`` values at ``X_row`` instead (slower, never
    stuck). Gluon spells out where each lane lives (``layout``); the rest is the same."""
    lanes_layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    lanes = gl.arange(0, G_POW2, layout=lanes_layout)
    words = gl.load(row_slots + lanes, mask=lanes < G, other=0, volatile=True)
    missing = gl.sum((words == EMPTY_SLOT).to(gl.int32), axis=0)
    polls = 0
    while (missing > 0) & (polls < MAX_SPIN):
        if BACKOFF:
            missing = nap(missing)
        words = gl.load(row_slots + lanes, mask=lanes < G, other=0, volatile=True)
        missing = gl.sum((words == EMPTY_SLOT).to(gl.int32), axis=0)
        polls += 1
    m_p, d_p = unpack_pair(words)
    m_p = gl.where(lanes < G, m_p, float("-inf"))
    d_p = gl.where(lanes < G, d_p, 0.0)
    m_row, d_row = gl.reduce((m_p, d_p), 0, merge_combine)
    if missing > 0:  # the row's programs are not all running: read the row itself
        block: gl.constexpr = 32 * gl.num_warps()
        m = gl.full([block], float("-inf"), gl.float32, lanes_layout)
        d = gl.zeros([block], gl.float32, lanes_layout)
        for start in range(0, n_cols, block):
            cols = start + gl.arange(0, block, layout=lanes_layout)
            x = gl.load(X_row + cols, mask=cols < n_cols, other=float("-inf")).to(gl.float32)
            m, d = online_update(m, d, x)
        m_row, d_row = gl.reduce((m, d), 0, merge_combine)
    return m_row, d_row


@triton.constexpr_function
def held_lines(lines, boxes):
    """Lines of a chunk of ``boxes`` boxes of ``lines`` lines as its buffer and registers hold
    it: the next power of two, since a tensor's shape is one (``boxes`` 3: a quarter unused)."""
    return 1 << (lines * boxes - 1).bit_length()


@gluon.jit
def copy_chunk(x_desc, buffer, arrived, item, n_items, G, row_lines, BOXES: gl.constexpr = 1):
    """Have TMA copy the chunk of item ``item`` (chunk ``item % G`` of row ``item // G``, a row
    ``row_lines`` lines of ``x_desc``'s view) into ``buffer``, its bytes counted on the
    ``mbarrier`` ``arrived``; nothing past the last item (``n_items``). A chunk is ``BOXES``
    boxes of ``x_desc`` (one copy each, into the buffer's lines in turn)."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    mbarrier.expect(arrived, BOXES * x_desc.block_type.nbytes, pred=item < n_items)
    first_line = (item // G) * row_lines + (item % G) * (BOXES * R)
    for box in gl.static_range(BOXES):
        TMA_LOAD(x_desc, [first_line + box * R, 0], arrived, buffer.slice(box * R, R),
                 pred=item < n_items)


@gluon.jit
def start_chunks(x_desc, first, n_items, G, row_lines, n_programs, DEPTH: gl.constexpr,
                 BOXES: gl.constexpr = 1):
    """A program's ``DEPTH`` buffers of one chunk each in shared memory (``BOXES`` boxes of
    ``x_desc``, :func:`held_lines`) and the ``mbarrier`` each buffer's copies count their bytes
    on, with the copies of its first ``DEPTH`` items' chunks under way (:func:`copy_chunk`;
    item ``first``, then every ``n_programs``th): ``(buffers, arrived)``, for
    :func:`take_chunk` to wait on in turn (:func:`next_buffer`), each at phase 0 first."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    buffers = gl.allocate_shared_memory(x_desc.dtype, [DEPTH, held_lines(R, BOXES), W],
                                        x_desc.layout)
    arrived = gl.allocate_shared_memory(gl.int64, [DEPTH, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(DEPTH):
        mbarrier.init(arrived.index(i), count=1)
        copy_chunk(x_desc, buffers.index(i), arrived.index(i), first + i * n_programs, n_items,
                   G, row_lines, BOXES)
    return buffers, arrived


@gluon.jit
def next_buffer(b, phase, DEPTH: gl.constexpr):
    """The buffer after ``b`` of ``DEPTH`` in turn, and the phase of its ``mbarrier`` to wait
    at: ``(b, phase)``. A buffer's copies complete phases 0, 1, 0, ... of its ``mbarrier``, so
    the phase flips each time the turn comes back to buffer 0."""
    if b == DEPTH - 1:
        b = 0
        phase ^= 1
    else:
        b += 1
    return b, phase


PIECE_COLUMNS = gl.constexpr(4096)
"""The columns a program reads at a time where it reads a chunk in pieces (:func:`buffer_pair`,
:func:`write_reread`): a quarter of a chunk of 16384 float32 columns, 16 registers a thread in
eight warps."""


@gluon.jit
def take_chunk(x_desc, buffer, arrived, phase, after, n_items, G, row_lines,
               layout: gl.constexpr, BOXES: gl.constexpr = 1):
    """Wait for the chunk in ``buffer`` (the ``phase`` of ``arrived``), then
    :func:`load_and_refill`: the chunk, flat, one element (or word) of ``x_desc``'s a lane."""
    mbarrier.wait(arrived, phase)
    return load_and_refill(x_desc, buffer, arrived, after, n_items, G, row_lines, layout, BOXES)


@gluon.jit
def load_and_refill(x_desc, buffer, arrived, after, n_items, G, row_lines,
                    layout: gl.constexpr, BOXES: gl.constexpr = 1):
    """Load the chunk that has arrived in ``buffer`` into registers in ``layout``, and have TMA
    copy the chunk of item ``after`` into the buffer, not waiting for it: the chunk, flat, one
    element (or word) of ``x_desc``'s a lane (as the buffer holds it, :func:`held_lines`: past
    ``BOXES`` boxes, lines no copy wrote)."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    chunk = buffer.reshape([held_lines(R, BOXES) * W]).load(layout)
    fence_async_shared()  # these reads come before the copy's writes (another proxy)
    THREAD_BARRIER()  # and every warp has made them: the buffer may be refilled
    copy_chunk(x_desc, buffer, arrived, after, n_items, G, row_lines, BOXES)
    return chunk


@gluon.jit
def buffer_pair(buffer, col0, n_cols, CHUNK: gl.constexpr, LINES: gl.constexpr,
                HALF: gl.constexpr = None, PADDING: gl.constexpr = None):
    """The ``(m, d)`` of the chunk that has arrived in ``buffer`` (``LINES`` lines of the
    descriptor's rows), whose first column is ``col0`` of its row, read from shared memory
    :data:`PIECE_COLUMNS` columns (whole lines) at a time, so that the program holds one piece
    in registers, not the chunk: twice (the maximum, then the sum of ``exp(x - m)``). With
    ``HALF`` (float16 or bfloat16) the buffer holds words of two ``HALF`` elements, and
    ``col0``, ``n_cols`` and ``CHUNK`` count words, ``PADDING`` the word past a row's end
    (:func:`resident_tma_words_kernel`); it is then read once, each piece's pair merged into the
    running one as the online softmax does, since holding the pieces of two passes and their
    float32 halves spills (compiled for sm_90 in four warps beside a chunk of 16384 columns)."""
    W: gl.constexpr = buffer.shape[1]
    PER_LINE: gl.constexpr = W if HALF is None else 2 * W  # columns a line of the buffer holds
    PIECE_LINES: gl.constexpr = (PIECE_COLUMNS // PER_LINE if LINES * PER_LINE > PIECE_COLUMNS
                                 else LINES)
    PIECES: gl.constexpr = LINES // PIECE_LINES
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [gl.num_warps(), 1], [1, 0])
    lines = gl.arange(0, PIECE_LINES, layout=gl.SliceLayout(1, layout))
    offs = lines[:, None] * W + gl.arange(0, W, layout=gl.SliceLayout(0, layout))[None, :]
    m = float("-inf")
    d = 0.0
    if HALF is None:
        for p in gl.static_range(PIECES):
            x = piece_of(buffer, p * PIECE_LINES, PIECE_LINES, col0, offs + p * PIECE_LINES * W,
                         n_cols, CHUNK, layout)
            m = gl.maximum(m, gl.max(gl.max(x, axis=1), axis=0))
        safe = gl.where(m == float("-inf"), 0.0, m)  # a chunk of -inf: d = 0
        for p in gl.static_range(PIECES):
            x = piece_of(buffer, p * PIECE_LINES, PIECE_LINES, col0, offs + p * PIECE_LINES * W,
                         n_cols, CHUNK, layout)
            d += gl.sum(gl.sum(gl.exp2((x - safe) * LOG2E), axis=1), axis=0)
    else:
        for p in gl.static_range(PIECES):
            x = piece_of(buffer, p * PIECE_LINES, PIECE_LINES, col0, offs + p * PIECE_LINES * W,
                         n_cols, CHUNK, layout, PADDING)
            low, high = halves(x, HALF)
            m_new = gl.maximum(m, gl.max(gl.max(gl.maximum(low, high), axis=1), axis=0))
            safe = gl.where(m_new == float("-inf"), 0.0, m_new)
            e = gl.exp2((low - safe) * LOG2E) + gl.exp2((high - safe) * LOG2E)
            d = d * gl.exp2((m - safe) * LOG2E) + gl.sum(gl.sum(e, axis=1), axis=0)
            m = m_new
    return m, d


@gluon.jit
def piece_of(buffer, first, LINES: gl.constexpr, col0, offs, n_cols, CHUNK: gl.constexpr,
             layout: gl.constexpr, PADDING: gl.constexpr = None):
    """Lines ``first`` to ``first + LINES`` of the chunk in ``buffer`` in registers as float32
    in ``layout``, ``-inf`` past its row (:func:`chunk_columns`; ``offs``, their columns in the
    chunk, whose first is ``col0`` of its row); with ``PADDING``, as the buffer's words,
    ``PADDING`` past its row."""
    x = buffer.slice(first, LINES).load(layout)
    inside = chunk_columns(col0 + offs, offs, n_cols, CHUNK)
    if PADDING is None:
        x = gl.where(inside, x.to(gl.float32), float("-inf"))
    else:
        x = gl.where(inside, x, PADDING)
    return x


@gluon.jit
def chunk_columns(cols, offs, n_cols, CHUNK: gl.constexpr):
    """Which of a chunk's columns ``cols`` (its row's, held at ``offs``, an ``arange`` that may
    pad the chunk of ``CHUNK`` to a power of two, :func:`held_lines`) to read and write: those
    in the row and in the chunk. Where nothing pads it, the compiler drops the second test."""
    return (cols < n_cols) & (offs < CHUNK)


@gluon.jit
def write_chunk(e, m_c, item, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2: gl.constexpr,
                MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr, CHUNK: gl.constexpr):
    """Wait for the pairs of item ``item``'s row (:func:`gluon_row_pair`) and write its chunk's
    results, ``e * exp(m_c - m_row) / d_row``: ``e = exp(x - m_c)`` held at ``offs`` (an
    ``arange`` of the chunk, :func:`chunk_columns`), the chunk's ``CHUNK`` columns."""
    row = item // G
    cols = (item % G) * CHUNK + offs
    m_row, d_row = gluon_row_pair(SLOTS + row.to(gl.int64) * G, X + row.to(gl.int64) * n_cols,
                                  n_cols, G, G_POW2, MAX_SPIN, BACKOFF)
    y = e * (gl.exp2((m_c - m_row) * LOG2E) / d_row)
    gl.store(Y + row.to(gl.int64) * stride_y + cols, y.to(Y.dtype.element_ty),
             mask=chunk_columns(cols, offs, n_cols, CHUNK))


@gluon.jit
def write_reread(item, X, Y, SLOTS, n_cols, stride_y, G, G_POW2: gl.constexpr,
                 MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr, CHUNK: gl.constexpr,
                 HELD: gl.constexpr):
    """:func:`write_chunk` for a program that did not keep the chunk's weights: wait for the
    pairs of item ``item``'s row, then read its chunk of the contiguous rows ``X`` again (from
    L2, where it was read a turn before, if it is still there) and write
    ``exp(x - m_row) / d_row``, :data:`PIECE_COLUMNS` columns at a time (16 bytes a thread a
    load), so that the program holds one piece in registers beside the chunk it has (``HELD``
    columns)."""
    PIECE: gl.constexpr = PIECE_COLUMNS if HELD > PIECE_COLUMNS else HELD
    VECTOR: gl.constexpr = 128 // X.dtype.element_ty.primitive_bitwidth
    layout: gl.constexpr = gl.BlockedLayout([VECTOR], [32], [gl.num_warps()], [0])
    row = item // G
    m_row, d_row = gluon_row_pair(SLOTS + row.to(gl.int64) * G, X + row.to(gl.int64) * n_cols,
                                  n_cols, G, G_POW2, MAX_SPIN, BACKOFF)
    scale = 1.0 / d_row
    piece = gl.arange(0, PIECE, layout=layout)
    for p in gl.static_range(HELD // PIECE):
        offs = p * PIECE + piece
        cols = (item % G) * CHUNK + offs
        inside = chunk_columns(cols, offs, n_cols, CHUNK)
        x = gl.load(X + row.to(gl.int64) * n_cols + cols, mask=inside).to(gl.float32)
        y = gl.exp2((x - m_row) * LOG2E) * scale
        gl.store(Y + row.to(gl.int64) * stride_y + cols, y.to(Y.dtype.element_ty), mask=inside)


@gluon.jit
def write_kept(e, m_c, item, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2: gl.constexpr,
               MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr, CHUNK: gl.constexpr,
               REREAD: gl.constexpr):
    """:func:`write_chunk` of the item a program writing behind kept from its turn before
    (none before its first turn: ``item`` negative), or with ``REREAD``, which kept only the
    item, :func:`write_reread` (``e`` and ``m_c`` are then unused)."""
    if item >= 0:
        if REREAD:
            write_reread(item, X, Y, SLOTS, n_cols, stride_y, G, G_POW2, MAX_SPIN, BACKOFF,
                         CHUNK, offs.shape[0])
        else:
            write_chunk(e, m_c, item, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2,
                        MAX_SPIN, BACKOFF, CHUNK)


@gluon.jit
def write_words(words, m_c, item, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2: gl.constexpr,
                MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr, WORDS: gl.constexpr,
                KEEP_WEIGHTS: gl.constexpr, CVT_X2: gl.constexpr = False,
                PRMT: gl.constexpr = False, LOG2_D: gl.constexpr = False):
    """:func:`write_chunk` for :func:`resident_tma_words_kernel`: wait for the pairs of item
    ``item``'s row and write its chunk's results as words, from the input's own ``words``
    (``exp(x - m_row) / d_row``, the halves computed again where they are used, :func:`fresh`),
    or with ``KEEP_WEIGHTS`` from the weights kept as bfloat16 words
    (``e * exp(m_c - m_row) / d_row``); ``offs`` (an ``arange`` of the chunk) and ``WORDS``,
    the chunk, count words."""
    HALF: gl.constexpr = X.dtype.element_ty
    row = item // G
    cols = (item % G) * WORDS + offs
    m_row, d_row = gluon_row_pair(SLOTS + row.to(gl.int64) * G, X + row.to(gl.int64) * n_cols,
                                  n_cols, G, G_POW2, MAX_SPIN, BACKOFF)
    if KEEP_WEIGHTS:
        e_low, e_high = halves(fresh(words, m_row), gl.bfloat16)
        scale = gl.exp2((m_c - m_row) * LOG2E) / d_row
        y = pack_halves_x2(e_low * scale, e_high * scale, HALF)
    else:
        low, high = fresh_halves(words, m_row, HALF, PRMT)
        if LOG2_D:  # the division folded into the exponent: an FFMA, no multiplication
            log2_d = gl.log2(d_row)
            y_low = gl.exp2((low - m_row) * LOG2E - log2_d)
            y_high = gl.exp2((high - m_row) * LOG2E - log2_d)
        else:
            scale = 1.0 / d_row
            y_low = gl.exp2((low - m_row) * LOG2E) * scale
            y_high = gl.exp2((high - m_row) * LOG2E) * scale
        y = pack_results(y_low, y_high, HALF, CVT_X2)
    y_words = Y.to(gl.pointer_type(gl.int32), bitcast=True)
    gl.store(y_words + row.to(gl.int64) * (stride_y // 2) + cols, y,
             mask=chunk_columns(cols, offs, n_cols // 2, WORDS))


@gluon.jit
def write_kept_words(words, item, X, Y, SLOTS, n_cols, stride_y, G, offs,
                     G_POW2: gl.constexpr, MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr,
                     WORDS: gl.constexpr, REREAD: gl.constexpr, CVT_X2: gl.constexpr = False,
                     PRMT: gl.constexpr = False, LOG2_D: gl.constexpr = False):
    """:func:`write_kept` for :func:`resident_tma_words_kernel`: the item a program writing
    behind kept from its turn before (none before its first turn: ``item`` negative), from the
    input's own ``words`` it kept (:func:`write_words`), or with ``REREAD``, which kept only the
    item, :func:`write_reread` (``words`` is then unused); ``offs`` and ``WORDS`` count
    words."""
    if item >= 0:
        if REREAD:
            write_reread(item, X, Y, SLOTS, n_cols, stride_y, G, G_POW2, MAX_SPIN, BACKOFF,
                         2 * WORDS, 2 * offs.shape[0])
        else:
            write_words(words, 0.0, item, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2,
                        MAX_SPIN, BACKOFF, WORDS, False, CVT_X2, PRMT, LOG2_D)


@gluon.jit
def resident_tma_kernel(x_desc, X, Y, SLOTS, n_rows, n_cols, stride_y, n_programs, G,
                        G_POW2: gl.constexpr, MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr,
                        DEPTH: gl.constexpr = 1, BOXES: gl.constexpr = 1,
                        WRITE_BEHIND: gl.constexpr = False, REREAD: gl.constexpr = False,
                        PAIR_FROM_BUFFER: gl.constexpr = False):
    """A persistent grid of ``n_programs`` programs (at least ``G``, all on the GPU at once)
    takes the ``(row, chunk)`` items of ``X`` ``(n_rows, n_cols)`` in order, ``G`` chunks to a
    row, as the Triton resident kernel does; ``x_desc`` sees ``X`` as rows of ``W`` elements,
    ``R`` of them a chunk (its block), or ``BOXES`` blocks of ``R`` (a chunk that need not be a
    power of two: held as the next, :func:`chunk_columns` masking the rest). ``G`` is a launch
    argument, not a constant as in the Triton kernel, so one compilation serves every row
    length (``G_POW2``, the next power of two, sizes the poll). Each program:

    1. waits for its chunk in its shared-memory buffer (the ``mbarrier`` the TMA copy counts
       its bytes on) and loads it into registers;
    2. asks TMA to copy its next item's chunk into the same buffer (after a barrier: every warp
       has its part), and goes on without waiting; with ``DEPTH`` buffers taken in turn
       (:func:`next_buffer`), the chunk of the item ``DEPTH`` after, so that that many are in
       flight while it waits;
    3. keeps ``e = exp(x - m_chunk)`` in registers and publishes the chunk's ``(m, d)`` as one
       64-bit word (:func:`~teachkit.kernels.pairs.pack_pair`) with a relaxed exchange;
    4. waits for its row's pairs and writes ``e * exp(m_chunk - m_row) / d_row``
       (:func:`write_chunk`): one read and one write of the tensor, the next read under way all
       along. With ``WRITE_BEHIND`` it writes the item *before* this one instead, keeping this
       one's ``e`` and ``m_chunk`` for the next turn (and the last after the loop): its row's
       pairs were published a whole item earlier, so the program seldom waits, and it holds two
       chunks in registers (this one's ``x`` and the last one's ``e``); with ``REREAD`` too, it
       holds one and reads the last one's input again when it writes it
       (:func:`write_reread`: from L2, where it was read a turn before, if it is still there);
       with ``PAIR_FROM_BUFFER`` instead, it holds only the last one's ``e``: it takes this
       chunk's pair from its buffer a piece at a time (:func:`buffer_pair`), writes the last
       one, and only then loads this chunk into registers as its weights and refills the
       buffer, so its chunk sits in shared memory for the turn (``DEPTH`` 2 keeps another in
       flight meanwhile).

    A chunk that runs past its row (``n_cols`` not a multiple of the chunk) reads the next
    row's first columns, or zeros past the tensor's end; they are masked to ``-inf`` and never
    written. No row waits for ever while every program is on the GPU (the Triton kernel's
    argument: a program reaches its item ``i`` once the row of its item ``i - n_programs`` is
    complete, and ``G <= n_programs``). Writing behind keeps it: a program waits for the row of
    its item ``i - n_programs`` only after publishing item ``i``, and that row's items all come
    before ``i``.
    """
    R: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    CHUNK: gl.constexpr = BOXES * R * W
    HELD: gl.constexpr = held_lines(R, BOXES) * W
    chunk_layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    pid = gl.program_id(0)
    n_items = n_rows * G
    row_lines = n_cols // W  # rows of the descriptor's view a row of X spans
    buffers, arrived = start_chunks(x_desc, pid, n_items, G, row_lines, n_programs, DEPTH,
                                    BOXES)
    offs = gl.arange(0, HELD, layout=chunk_layout)
    b = 0
    phase = 0
    e_behind = gl.zeros([HELD], gl.float32, chunk_layout)  # WRITE_BEHIND: the last item's
    m_behind = 0.0
    item_behind = pid - n_programs
    for item in range(pid, n_items, n_programs):
        cols = (item % G) * CHUNK + offs
        if PAIR_FROM_BUFFER:  # the pair from the buffer, the weights only after the write
            mbarrier.wait(arrived.index(b), phase)
            m_c, d_c = buffer_pair(buffers.index(b), (item % G) * CHUNK, n_cols, CHUNK,
                                   held_lines(R, BOXES))
            gl.atomic_xchg(SLOTS + item, pack_pair(m_c, d_c), sem="relaxed")
            write_kept(e_behind, m_behind, item_behind, X, Y, SLOTS, n_cols, stride_y, G, offs,
                       G_POW2, MAX_SPIN, BACKOFF, CHUNK, False)
            x = load_and_refill(x_desc, buffers.index(b), arrived.index(b),
                                item + DEPTH * n_programs, n_items, G, row_lines, chunk_layout,
                                BOXES).to(gl.float32)
            b, phase = next_buffer(b, phase, DEPTH)
            x = gl.where(chunk_columns(cols, offs, n_cols, CHUNK), x, float("-inf"))
            safe = gl.where(m_c == float("-inf"), 0.0, m_c)
            e_behind = gl.exp2((x - safe) * LOG2E)
            m_behind = m_c
            item_behind = item
        else:
            x = take_chunk(x_desc, buffers.index(b), arrived.index(b), phase,
                           item + DEPTH * n_programs, n_items, G, row_lines,
                           chunk_layout, BOXES).to(gl.float32)
            b, phase = next_buffer(b, phase, DEPTH)
            inside = chunk_columns(cols, offs, n_cols, CHUNK)
            x = gl.where(inside, x, float("-inf"))
            m_c = gl.max(x, axis=0)
            safe = gl.where(m_c == float("-inf"), 0.0, m_c)  # a chunk of -inf: d = 0
            e = gl.exp2((x - safe) * LOG2E)  # kept in registers: one exponential per element
            d_c = gl.sum(e, axis=0)
            gl.atomic_xchg(SLOTS + item, pack_pair(m_c, d_c), sem="relaxed")
            if WRITE_BEHIND:
                write_kept(e_behind, m_behind, item_behind, X, Y, SLOTS, n_cols, stride_y, G, offs,
                           G_POW2, MAX_SPIN, BACKOFF, CHUNK, REREAD)
                if not REREAD:
                    e_behind = e
                m_behind = m_c
                item_behind = item
            else:
                write_chunk(e, m_c, item, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2,
                            MAX_SPIN, BACKOFF, CHUNK)
    if WRITE_BEHIND:  # the last item
        write_kept(e_behind, m_behind, item_behind, X, Y, SLOTS, n_cols, stride_y, G, offs,
                   G_POW2, MAX_SPIN, BACKOFF, CHUNK, REREAD)
    for i in gl.static_range(DEPTH):
        mbarrier.invalidate(arrived.index(i))


@gluon.jit
def resident_tma_words_kernel(x_desc, X, Y, SLOTS, n_rows, n_cols, stride_y, n_programs, G,
                              G_POW2: gl.constexpr, MAX_SPIN: gl.constexpr,
                              BACKOFF: gl.constexpr, PADDING: gl.constexpr,
                              KEEP_WEIGHTS: gl.constexpr = False, DEPTH: gl.constexpr = 1,
                              BOXES: gl.constexpr = 1, REREAD: gl.constexpr = False,
                              PAIR_FROM_BUFFER: gl.constexpr = False,
                              CVT_X2: gl.constexpr = False, PRMT: gl.constexpr = False,
                              LOG2_D: gl.constexpr = False):
    """:func:`resident_tma_kernel` for float16 and bfloat16 rows, holding its chunk as the input
    itself, two elements to a 32-bit word, as the Triton kernel's
    :func:`~teachkit.kernels.softmax_kernels.resident_words_kernel` does: twice the columns in
    the same registers (and the same bytes of shared memory), so a row spans half the programs,
    for a second exponential per element. ``x_desc`` sees ``X`` as int32 words, rows of ``W``
    words, ``R`` of them a chunk; ``Y`` is written as words too. ``PADDING`` is a word of two
    ``-inf`` in ``X``'s dtype, for the words past the row's end. The steps are
    :func:`resident_tma_kernel`'s; the float32 halves are computed from the kept words where
    they are used (:func:`~teachkit.kernels.words.fresh`), never kept.

    With ``KEEP_WEIGHTS`` (bfloat16 rows) the words kept through the wait are the weights
    ``e = exp(x - m_chunk)`` rounded to bfloat16, not the input: after the wait each element
    takes a multiplication by ``exp(m_chunk - m_row) / d_row`` instead of an exponential, as in
    the float32 form, for a second rounding (``e`` to bfloat16, then the result); the chunk's
    ``d`` sums the rounded weights, so a row's results still sum to one before their rounding.

    With ``REREAD`` it writes behind as :func:`resident_tma_kernel` does with ``WRITE_BEHIND``
    and ``REREAD``: after publishing an item's pair it writes the item before
    (:func:`write_reread`, its input read again), so it keeps no words through a wait. With
    ``PAIR_FROM_BUFFER`` it writes behind as :func:`resident_tma_kernel` does with
    ``PAIR_FROM_BUFFER``: it takes the chunk's pair from its buffer (:func:`buffer_pair`, the
    words' halves a piece at a time), writes the item before from the words it kept
    (:func:`write_kept_words`), and only then loads this chunk's words and refills the buffer, so
    it keeps one chunk of words in registers and the next in shared memory through the turn.

    ``CVT_X2``, ``PRMT`` and ``LOG2_D`` take instructions out of the work on each element
    (:class:`TmaConfig`'s ``cvt_x2``, ``prmt`` and ``log2_d``); the first two change no bit of
    the results."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    WORDS: gl.constexpr = BOXES * R * W
    HELD: gl.constexpr = held_lines(R, BOXES) * W
    HALF: gl.constexpr = X.dtype.element_ty
    chunk_layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    pid = gl.program_id(0)
    n_items = n_rows * G
    n_words = n_cols // 2
    row_lines = n_words // W
    buffers, arrived = start_chunks(x_desc, pid, n_items, G, row_lines, n_programs, DEPTH,
                                    BOXES)
    offs = gl.arange(0, HELD, layout=chunk_layout)
    b = 0
    phase = 0
    kept = gl.zeros([HELD], gl.int32, chunk_layout)  # PAIR_FROM_BUFFER: the last item's words
    item_behind = pid - n_programs  # REREAD, PAIR_FROM_BUFFER: the item to write next
    for item in range(pid, n_items, n_programs):
        cols = (item % G) * WORDS + offs
        if PAIR_FROM_BUFFER:  # the pair from the buffer, the words only after the write
            mbarrier.wait(arrived.index(b), phase)
            m_c, d_c = buffer_pair(buffers.index(b), (item % G) * WORDS, n_words, WORDS,
                                   held_lines(R, BOXES), HALF, PADDING)
            gl.atomic_xchg(SLOTS + item, pack_pair(m_c, d_c), sem="relaxed")
            write_kept_words(kept, item_behind, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2,
                             MAX_SPIN, BACKOFF, WORDS, False, CVT_X2, PRMT, LOG2_D)
            kept = load_and_refill(x_desc, buffers.index(b), arrived.index(b),
                                   item + DEPTH * n_programs, n_items, G, row_lines,
                                   chunk_layout, BOXES)
            b, phase = next_buffer(b, phase, DEPTH)
            item_behind = item
        else:
            words = take_chunk(x_desc, buffers.index(b), arrived.index(b), phase,
                               item + DEPTH * n_programs, n_items, G, row_lines, chunk_layout,
                               BOXES)
            b, phase = next_buffer(b, phase, DEPTH)
            words = gl.where(chunk_columns(cols, offs, n_words, WORDS), words, PADDING)
            low, high = halves(words, HALF)
            m_c = gl.maximum(gl.max(low, axis=0), gl.max(high, axis=0))
            safe = gl.where(m_c == float("-inf"), 0.0, m_c)
            low, high = fresh_halves(words, m_c, HALF, PRMT)
            if KEEP_WEIGHTS:  # the weights kept instead of the input, summed as kept
                words = pack_halves_x2(gl.exp2((low - safe) * LOG2E),
                                       gl.exp2((high - safe) * LOG2E), gl.bfloat16)
                e_low, e_high = halves(words, gl.bfloat16)
                d_c = gl.sum(e_low + e_high, axis=0)
            else:
                d_c = gl.sum(gl.exp2((low - safe) * LOG2E) + gl.exp2((high - safe) * LOG2E),
                             axis=0)
            gl.atomic_xchg(SLOTS + item, pack_pair(m_c, d_c), sem="relaxed")
            if REREAD:  # the item before, read again; this one's words are not kept
                write_kept_words(kept, item_behind, X, Y, SLOTS, n_cols, stride_y, G, offs,
                                 G_POW2, MAX_SPIN, BACKOFF, WORDS, True, CVT_X2, PRMT, LOG2_D)
                item_behind = item
            else:
                write_words(words, m_c, item, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2,
                            MAX_SPIN, BACKOFF, WORDS, KEEP_WEIGHTS, CVT_X2, PRMT, LOG2_D)
    if REREAD or PAIR_FROM_BUFFER:  # the last item
        write_kept_words(kept, item_behind, X, Y, SLOTS, n_cols, stride_y, G, offs, G_POW2,
                         MAX_SPIN, BACKOFF, WORDS, REREAD, CVT_X2, PRMT, LOG2_D)
    for i in gl.static_range(DEPTH):
        mbarrier.invalidate(arrived.index(i))


TMA_WIDTH = 256
"""Elements a row of the TMA descriptor's view holds (``W``): the most a TMA box takes along an
axis. A row of ``X`` must be a whole number of them (:func:`tma_not_ready`)."""


class TmaConfig(NamedTuple):
    """How :func:`resident_tma_kernel` runs: ``lines`` rows of :data:`TMA_WIDTH` elements a
    chunk (a power of two), ``num_warps``, ``per_sm`` programs wanted on each multiprocessor,
    ``backoff`` (pause between polls, :func:`~teachkit.kernels.pairs.nap`),
    ``max_registers`` a thread (what lets ``per_sm`` programs share a multiprocessor),
    ``words``: hold a float16 or bfloat16 chunk as its own 32-bit words
    (:func:`resident_tma_words_kernel`), a line then :data:`TMA_WIDTH` words, twice the
    columns, and ``fill_grid``: launch every program that fits, so that rows straddle rounds
    (on, as the record was timed), or only the most whole rows' chunks that fit, a row's
    programs all in one round, as the Triton kernel's configurations do (off), and
    ``keep_weights``: with ``words`` on bfloat16 rows, keep the weights ``exp(x - m_chunk)``
    as bfloat16 words through the wait instead of the input (``KEEP_WEIGHTS``): no exponential
    after it, for a second rounding, ``depth``: chunks a program has in flight, each in a
    buffer of its own in shared memory (``DEPTH``, 1 in the rule), and ``boxes``: TMA boxes of
    ``lines`` lines a chunk (``BOXES``, 1 in the rule), so that a chunk need not be a power of
    two: 3 boxes of 16 lines make chunks of 12288 columns, 256 to a row of 3M, held in the
    registers and buffer of 16384 (:func:`held_lines`), and ``write_behind``: publish each
    chunk's pair before waiting for the row of the chunk before and writing it
    (``WRITE_BEHIND``, :func:`resident_tma_kernel`; with ``words`` only reading again or taking
    the pair from the buffer), two
    chunks in registers, and ``reread``: with ``write_behind``, read the chunk written behind
    again when writing it (``REREAD``, :func:`write_reread`) instead of holding its weights, so
    one chunk in registers, as in the plain order, and rows as long (``gpu_checks/
    resident_tma_gpu.py --write-behind`` on an H100, ``softmax_resident_tma_reread_nvidia_h100``:
    float32 rows of 2.5M-4M columns and bfloat16 rows of 4M at 57.9-65.6 % of the copy, about
    the two-read bound, where the rule then read them at 80.4-86.1 %; not in the rule), and
    ``pair_from_buffer``: with ``write_behind``, take each chunk's pair from its buffer and load
    its weights (with ``words``, its words) only after writing the chunk before
    (``PAIR_FROM_BUFFER``, :func:`buffer_pair`), so one chunk in registers and the chunk in
    shared memory through the turn, with ``depth`` 2 a second buffer in flight: three programs
    of 8192 columns a multiprocessor (:data:`PAIR_FROM_BUFFER_CONFIGS`) hold float32 rows of up
    to 3.2M columns written behind (``softmax_resident_tma_pair_from_buffer_nvidia_h100``: rows
    of 2.5M / 3M at 94.0 / 93.4 % of the copy on an H100, where the rule read them at 79.9 /
    84.3 %; the rule takes it, :data:`TMA_PAIR_FROM_BUFFER_CONFIGS`), and, with ``words``, fewer
    instructions an element: ``cvt_x2`` rounds two results to 16 bits with one instruction
    (:func:`~teachkit.kernels.words.pack_halves_x2`, ``F2FP``) instead of one each (``F2F``),
    ``prmt`` reads each bfloat16 element's float32 from its word with one ``PRMT``
    (:func:`~teachkit.kernels.words.fresh_halves`) instead of a shift and a select, and
    ``log2_d`` folds the division by the row's sum into the exponent (an ``FFMA`` instead of an
    ``FMUL``, one rounding moved); ``python -m teachkit.kernels --tma-words-instructions``
    counts them. The rule sets ``cvt_x2`` and ``prmt`` (:data:`TMA_WORDS_CONFIGS`); ``log2_d``
    gained nothing on an H100 (``softmax_resident_tma_fewer_instructions_nvidia_h100``: 84.0
    against 84.2 % at 4M, 79.1 against 80.2 % at 8M).

    ``fill_grid`` is on, ``keep_weights`` off and ``depth`` 1 in the rule (2 taking the pair from
    the buffer). One run of
    ``gpu_checks/resident_tma_gpu.py --whole-rows --keep-weights`` on an H100 (% of the copy,
    not a record): whole rows a round read float32 rows of 1.5M / 3M / 4M columns at 87.3 /
    80.1 / 82.4 % in chunks of 8192 and 84.9 / 83.4 / 86.1 % in the long-row chunks, against
    89.6 / 80.2 / 83.8 % and 86.0 / 83.8 / 86.3 % with the grid filled; kept weights read
    bfloat16 rows of 1M / 2M / 4M / 8M columns at 89.7 / 88.9 / 82.9 / 79.6 % (the better of
    the two words configurations) against 88.0 / 86.5 / 82.5 / 77.6 %, with outputs up to 1.47
    units in bfloat16's last place from the exact softmax where the input-keeping words' are
    within 0.50 (correctly rounded). Two chunks in flight gained nothing
    (``gpu_checks/resident_tma_gpu.py --two-in-flight`` on an H100,
    ``softmax_resident_tma_two_in_flight_nvidia_h100``): three programs of four warps a
    multiprocessor, pausing between polls, read float32 rows of 2M / 3M columns at 80.5 / 82.5 %
    with ``depth=2`` and 80.5 / 83.1 % with 1, and bfloat16 rows of 4M as words at 68.3 against
    68.9 %. Nor did chunks of several boxes, 256 to a row (``gpu_checks/resident_tma_gpu.py
    --round-chunks`` on an H100, ``softmax_resident_tma_round_chunks_nvidia_h100``): float32
    rows of 3M columns in chunks of 12288 read at 83.9 % on every program that fits and 83.2 %
    in whole rows a round, against 84.1 % in chunks of 16384; rows of 2.5M in chunks of 10240 at
    81.4 and 80.4 % against 81.6 %. So ``boxes`` is 1 in the rule."""

    lines: int
    num_warps: int
    per_sm: int
    backoff: bool = False
    max_registers: int = 128
    words: bool = False
    fill_grid: bool = True
    keep_weights: bool = False
    depth: int = 1
    boxes: int = 1
    write_behind: bool = False
    reread: bool = False
    pair_from_buffer: bool = False
    cvt_x2: bool = False
    prmt: bool = False
    log2_d: bool = False

    @property
    def chunk(self) -> int:
        """Columns of a row one program holds."""
        return self.boxes * self.lines * TMA_WIDTH * (2 if self.words else 1)

    @property
    def held(self) -> int:
        """Columns its registers and buffer take: :attr:`chunk` up to a power of two."""
        return held_lines(self.lines, self.boxes) * TMA_WIDTH * (2 if self.words else 1)


TMA_CONFIGS = {4: TmaConfig(32, 4, 4), 2: TmaConfig(32, 4, 4)}
"""By element size, the configuration of rows shorter than :data:`TMA_WORDS_FROM` and
:data:`TMA_LONG_ROW_FROM` that neither :data:`TMA_BEHIND_CONFIGS` nor
:data:`TMA_PAIR_FROM_BUFFER_CONFIGS` takes (float32 rows that do not fit written behind; 16-bit
rows): chunks of 8192 columns held as
float32, four programs of four warps a multiprocessor (the Triton kernel's float32
configuration), 32 KB of float32 (16 KB of 16-bit elements) in shared memory each.
``gpu_checks/resident_tma_gpu.py`` on an H100 (``softmax_resident_tma_nvidia_h100``, % of
the copy): float32 rows of 64k to 2M columns at 89-95.6 %, where the Triton kernel reads them at
77-94 %; chunks of 4096 columns (two warps, eight an SM) read rows of 32k to 256k up to a point
faster and 1M-2M rows 3-7 points slower. Pausing between polls in these chunks gains nothing at
2M (89.2 % either way) and less than :data:`TMA_LONG_ROW_CONFIGS` at 3M (82.0 against 80.1 and
84.2)."""
TMA_BEHIND_CONFIGS = {4: TmaConfig(32, 8, 2, backoff=True, write_behind=True)}
"""By element size, the configuration of rows of at most :data:`TMA_BEHIND_UNTIL` columns where
it fits: chunks of 8192 float32 columns written behind (``write_behind``), two programs of
eight warps a multiprocessor pausing between polls, so that the registers of
:data:`TMA_CONFIGS`' four programs hold two chunks each. ``gpu_checks/resident_tma_gpu.py
--write-behind`` on an H100 (``softmax_resident_tma_write_behind_nvidia_h100``, % of the copy):
float32 rows of 32k to 2M columns at 95.0-96.4 %, where :data:`TMA_CONFIGS` read them at
89.3-95.8 % in the same runs (2M: 89.3 → 95.8); the same two programs not writing behind at
73.9-95.3 %, so the gain is the order, not the warps. Chunks of 4096 written behind (four
programs of four warps) read rows of 32k to 1M up to 0.8 points faster and 1.5M-2M rows 0.4-1.4
slower."""
TMA_BEHIND_UNTIL = {4: 1 << 21}
"""By element size, the columns up to which :func:`tma_config` takes
:data:`TMA_BEHIND_CONFIGS` where they fit: 2M float32 columns, as timed (256 chunks, two
programs on each of 128 multiprocessors; an H100's 132 hold rows of up to 2,162,688). Longer
rows do not fit (:data:`TMA_PAIR_FROM_BUFFER_CONFIGS` takes them). 16-bit rows written behind
gained nothing on an H100 (``softmax_resident_tma_bf16_behind_nvidia_h100``): bfloat16 rows of
256k / 1M columns at 89.5 / 86.0 % at best in chunks of 4096 and 88.3 / 84.1 % in this
configuration, against 91.1 / 88.1 % in the rule's configurations."""
PAIR_FROM_BUFFER_CONFIGS = (
    TmaConfig(32, 4, 3, max_registers=168, depth=2, write_behind=True, pair_from_buffer=True),
    TmaConfig(32, 8, 3, max_registers=80, depth=2, write_behind=True, pair_from_buffer=True))
"""Configurations that take each chunk's pair from its buffer (``pair_from_buffer``), for
float32 rows too long to write behind in registers: chunks of 8192 columns, two buffers of
32 KB each, three programs of four warps (168 registers a thread) or of eight (80) a
multiprocessor, compiled for sm_90 without a spill, so an H100's 396 hold rows of up to
3,244,032 columns. ``gpu_checks/resident_tma_gpu.py --write-behind`` on an H100
(``softmax_resident_tma_pair_from_buffer_nvidia_h100``, % of the copy): float32 rows of 2.5M /
3M columns at 94.0 / 93.4 % in four warps and 87.0 / 85.5 % in eight, where the rule read them
at 79.9 / 84.3 % in the same run; rows of 2M at 95.3 against the rule's 96.0 (written behind in
registers). The rule takes the first (:data:`TMA_PAIR_FROM_BUFFER_CONFIGS`)."""
PAIR_FROM_BUFFER_WORDS_CONFIGS = (
    TmaConfig(32, 4, 3, max_registers=168, depth=2, words=True, write_behind=True,
              pair_from_buffer=True),
    TmaConfig(32, 4, 4, words=True, write_behind=True, pair_from_buffer=True))
"""The words form of taking the pair from the buffer (``pair_from_buffer`` with ``words``):
16-bit rows held as their own words (:func:`resident_tma_words_kernel`), chunks of 16384
columns in buffers of 32 KB, programs of four warps: three a multiprocessor with two buffers
each, as :data:`PAIR_FROM_BUFFER_CONFIGS`' first (rows of up to 6,488,064 columns on an H100's
132 multiprocessors), or four with one each and 128 registers a thread (rows of up to
8,650,752: bfloat16 rows of 8M among them). Both compile for sm_90 without a spill, but for
the second's poll of the pairs of rows of 512 chunks (8M), which takes 24 bytes of stack. Not in
the rule: ``gpu_checks/resident_tma_gpu.py --write-behind`` on an H100
(``softmax_resident_tma_words_pair_from_buffer_nvidia_h100``, % of the copy) read bfloat16 rows
of 4M columns at 78.4-79.1 % and 8M at 69.4-70.4 %, where the rule read them at 82.0 and 77.3 %:
with the wait hidden, the words' own work holds them."""
TMA_PAIR_FROM_BUFFER_CONFIGS = {4: PAIR_FROM_BUFFER_CONFIGS[0]}
"""By element size, the configuration of rows of at most :data:`TMA_PAIR_FROM_BUFFER_UNTIL`
columns that :data:`TMA_BEHIND_CONFIGS` does not take, where they fit: chunks of 8192 float32
columns written behind with each chunk's pair taken from its buffer, three programs of four
warps a multiprocessor (:data:`PAIR_FROM_BUFFER_CONFIGS`)."""
TMA_PAIR_FROM_BUFFER_UNTIL = {4: 3 << 20}
"""By element size, the columns up to which :func:`tma_config` takes
:data:`TMA_PAIR_FROM_BUFFER_CONFIGS` where they fit: 3M float32 columns, as timed (an H100's
132 multiprocessors hold rows of up to 3,244,032). On 16-bit rows it gained nothing: held as
float32 (bfloat16 rows of 256k / 1M at 88.2 / 83.6 %) or as words
(:data:`PAIR_FROM_BUFFER_WORDS_CONFIGS`)."""
TMA_WORDS_CONFIGS = {2: TmaConfig(32, 4, 4, words=True, cvt_x2=True, prmt=True)}
"""By element size, the configuration of 16-bit rows from :data:`TMA_WORDS_FROM` columns: the
chunk as the input's own words (:func:`resident_tma_words_kernel`), 16384 columns in the
registers of 8192 float32 ones, so a row spans half the programs; two results rounded with one
instruction (``cvt_x2``) and each element read from its word with one (``prmt``): on an H100
(``gpu_checks/resident_tma_gpu.py --fewer-instructions``,
``softmax_resident_tma_fewer_instructions_nvidia_h100``, % of the copy) bfloat16 rows of 4M
columns at 84.2 %, against 83.2 % with ``cvt_x2`` alone and 82.1 % with neither, as timed
before (``TMA_WORDS_FROM`` and :data:`TMA_LONG_ROW_FROM` were chosen then)."""
TMA_WORDS_FROM = {2: 1 << 20}
"""By element size, the columns from which :func:`tma_config` takes :data:`TMA_WORDS_CONFIGS`:
1M in 16 bits. Timed on an H100 (bfloat16, % of the copy): at 256k columns the float32 form
91.0 against the words' 87.0; at 1M 85.7 against 87.8, at 2M 81.0 against 86.4 (between 256k
and 1M not timed). The words pausing between polls read 2M and 4M rows half a point slower."""
TMA_LONG_ROW_CONFIGS = {4: TmaConfig(64, 8, 2, backoff=True),
                        2: TmaConfig(64, 8, 2, backoff=True, words=True, cvt_x2=True,
                                     prmt=True)}
"""By element size, the configuration of rows from :data:`TMA_LONG_ROW_FROM` columns: chunks of
16384 float32 columns (32768 16-bit ones as words, with :data:`TMA_WORDS_CONFIGS`' fewer
instructions: bfloat16 rows of 8M columns at 80.2 % of the copy on an H100, against 79.1 % with
``cvt_x2`` alone and 77.1 % with neither, ``softmax_resident_tma_fewer_instructions_nvidia_h100``),
two programs of eight warps a multiprocessor, pausing between polls, so that a row spans half
the programs and each waits for half the pairs."""
TMA_LONG_ROW_FROM = {4: 3 << 20, 2: 1 << 23}
"""By element size, the columns from which :func:`tma_config` takes
:data:`TMA_LONG_ROW_CONFIGS` (float32 rows :data:`TMA_PAIR_FROM_BUFFER_CONFIGS` does not take):
3M in float32 (on an H100, 84.2 % of the copy against 80.1 % in
:data:`TMA_CONFIGS` at 3M, 86.3 % against 83.8 % at 4M, and 88.2 % against 89.2 % at 2M) and 8M
in 16 bits (78.0 % against 73.2 % in :data:`TMA_WORDS_CONFIGS`; at 4M 79.9 % against 82.2 %)."""


def tma_config(n_cols: int, dtype: torch.dtype, device: int | None = None,
               write_behind: bool = True) -> TmaConfig | None:
    """The configuration :func:`~teachkit.kernels.softmax_kernels.softmax` runs the TMA kernel
    in for rows of ``n_cols`` of ``dtype`` on GPU ``device`` (``None`` for a dtype it does not
    take): up to :data:`TMA_BEHIND_UNTIL` columns :data:`TMA_BEHIND_CONFIGS`, else up to
    :data:`TMA_PAIR_FROM_BUFFER_UNTIL` :data:`TMA_PAIR_FROM_BUFFER_CONFIGS`, each where it fits
    on ``device`` (:func:`tma_fits`; with no ``device``, as an H100 holds them); else from
    :data:`TMA_LONG_ROW_FROM` columns :data:`TMA_LONG_ROW_CONFIGS`, from :data:`TMA_WORDS_FROM`
    :data:`TMA_WORDS_CONFIGS`, and :data:`TMA_CONFIGS` below. With ``write_behind`` off, the
    configuration among the last three, as the rule was before it wrote rows behind (what the
    records timed before then name).

    >>> tma_config(1 << 20, torch.float32) == TMA_BEHIND_CONFIGS[4]
    True
    >>> tma_config(5 << 19, torch.float32) == TMA_PAIR_FROM_BUFFER_CONFIGS[4]
    True
    >>> tma_config(3 << 20, torch.float32, write_behind=False) == TMA_LONG_ROW_CONFIGS[4]
    True
    >>> tma_config(1 << 22, torch.float32).chunk, tma_config(1 << 21, torch.bfloat16).chunk
    (16384, 16384)
    """
    size = dtype.itemsize
    if size not in TMA_CONFIGS or dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return None
    for configs, until in ((TMA_BEHIND_CONFIGS, TMA_BEHIND_UNTIL),
                           (TMA_PAIR_FROM_BUFFER_CONFIGS, TMA_PAIR_FROM_BUFFER_UNTIL)
                           ) if write_behind else ():
        if n_cols <= until.get(size, 0) and (
                device is None or tma_fits(n_cols, configs[size], dtype, device)):
            return configs[size]
    if n_cols >= TMA_LONG_ROW_FROM[size]:
        return TMA_LONG_ROW_CONFIGS[size]
    if n_cols >= TMA_WORDS_FROM.get(size, n_cols + 1):
        return TMA_WORDS_CONFIGS[size]
    return TMA_CONFIGS[size]


def tma_not_ready(x2: torch.Tensor, y2: torch.Tensor, config: TmaConfig | None = None,
                  ) -> str | None:
    """Why :func:`resident_tma_kernel` cannot take the rows of ``x2`` into ``y2`` (2-D, unit
    column stride) in ``config``, and what to do instead; ``None`` when it can: a Hopper GPU
    with compiled Triton, float32, float16 or bfloat16, ``x2`` contiguous (the descriptor sees
    the tensor as rows of :data:`TMA_WIDTH`) and 16-byte aligned, rows a whole number of such
    lines. A configuration with ``words`` takes 16-bit rows of a whole number of lines of words
    (twice the columns), written into contiguous rows of ``y2`` at a 4-byte boundary.

    >>> tma_not_ready(torch.zeros(2, 512), torch.zeros(2, 512)) is not None  # not on a GPU
    True
    """
    n_rows, n_cols = x2.shape
    if INTERPRETED or not x2.is_cuda or compute_capability(x2.device)[0] != 9:
        return "needs a Hopper GPU (compute capability 9.x) and compiled Triton"
    if x2.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return f"takes float32, float16 or bfloat16, got {x2.dtype}"
    if n_cols % TMA_WIDTH:
        return f"needs rows of a multiple of {TMA_WIDTH} columns, got {n_cols}"
    if n_rows > 1 and x2.stride(0) != n_cols or x2.stride(1) != 1:
        return "needs contiguous rows (x.contiguous())"
    if x2.data_ptr() % 16:
        return "needs x to start at a 16-byte aligned address (TMA copies it)"
    if n_rows * n_cols // TMA_WIDTH >= 1 << 31:
        return f"takes at most {(1 << 31) * TMA_WIDTH} elements"
    if config is not None and config.words:
        if x2.element_size() != 2:
            return f"holds words of two 16-bit elements, got {x2.dtype}; pass words=False"
        if n_cols % (2 * TMA_WIDTH):
            return (f"as words needs rows of a multiple of {2 * TMA_WIDTH} columns, got "
                    f"{n_cols}; pass words=False")
        if y2.stride(1) != 1 or (n_rows > 1 and y2.stride(0) % 2) or y2.data_ptr() % 4:
            return "as words writes rows that start at 4-byte boundaries"
    if config is not None and config.reread and not config.write_behind:
        return ("reads a chunk again only to write it behind; pass write_behind=True or "
                "reread=False")
    if config is not None and config.pair_from_buffer and (
            config.reread or config.keep_weights or not config.write_behind):
        return ("takes its pair from the buffer only writing behind, keeping the chunk itself "
                "(not reading it again, not its weights as words); pass write_behind=True, "
                "reread=False and keep_weights=False, or pair_from_buffer=False")
    if config is not None and config.write_behind and config.words and not (
            config.reread or config.pair_from_buffer):
        return ("as words writes behind only reading the chunk again or taking its pair from "
                "the buffer; pass reread=True, pair_from_buffer=True or write_behind=False")
    if config is not None and config.keep_weights:
        if not config.words:
            return "keeps its weights as words only; pass words=True or keep_weights=False"
        if x2.dtype != torch.bfloat16:
            return (f"keeps its weights as bfloat16, for bfloat16 rows, got {x2.dtype}; pass "
                    "keep_weights=False")
        if config.reread:
            return "keeps nothing through the wait when it reads again; pass keep_weights=False"
    return None


@functools.cache
def tma_programs(config: TmaConfig, dtype: torch.dtype, device: int) -> int:
    """Programs of ``config`` that fit on GPU ``device`` at once: ``config.per_sm`` a
    multiprocessor, or fewer where its registers (``config.max_registers`` a thread), threads or
    shared memory (the chunk's buffer and a kilobyte for the reductions) allow fewer, times the
    multiprocessors."""
    props = torch.cuda.get_device_properties(device)
    threads = 32 * config.num_warps
    per_warp = -(-config.max_registers * 32 // 256) * 256  # allocated 256 registers at a time
    by_registers = props.regs_per_multiprocessor // (per_warp * config.num_warps)
    shared = config.depth * config.held * dtype.itemsize + 1024
    by_shared = props.shared_memory_per_multiprocessor // shared
    by_threads = props.max_threads_per_multi_processor // threads
    return max(1, min(config.per_sm, by_registers, by_shared, by_threads)) \
        * props.multi_processor_count


def tma_fits(n_cols: int, config: TmaConfig, dtype: torch.dtype, device: int) -> bool:
    """Whether rows of ``n_cols`` fit on GPU ``device`` at once in ``config``: their chunks need
    at most :func:`tma_programs` programs."""
    return cdiv(n_cols, config.chunk) <= tma_programs(config, dtype, device)


@functools.cache
def shared_layout(bits: int) -> gl.NVMMASharedLayout:
    """The buffer's layout: rows as they are in memory (no swizzle), which a TMA copy writes and
    each warp reads 16 bytes a thread without bank conflicts."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=bits, rank=2)


@functools.cache
def word_padding(dtype: torch.dtype) -> int:
    """The int32 word of two ``-inf`` of the 16-bit ``dtype``: what
    :func:`resident_tma_words_kernel` puts in the words past a row's end (``PADDING``).

    >>> [hex(word_padding(dtype) & 0xFFFFFFFF) for dtype in (torch.bfloat16, torch.float16)]
    ['0xff80ff80', '0xfc00fc00']
    """
    return torch.full((2,), float("-inf"), dtype=dtype).view(torch.int32).item()


def chunk_descriptor(x2: torch.Tensor, config: TmaConfig) -> TensorDescriptor:
    """The TMA descriptor :func:`resident_tma_kernel` (or, with ``config.words``,
    :func:`resident_tma_words_kernel`) copies ``config.lines`` lines at a time through
    (``config.boxes`` copies a chunk): the contiguous ``x2`` seen as lines of :data:`TMA_WIDTH`
    elements (or int32 words)."""
    lines = (x2.view(torch.int32) if config.words else x2).view(-1, TMA_WIDTH)
    return TensorDescriptor(lines, list(lines.shape), [TMA_WIDTH, 1], [config.lines, TMA_WIDTH],
                            shared_layout(8 * lines.element_size()))


def launch_resident_tma(x2: torch.Tensor, y2: torch.Tensor, config: TmaConfig) -> None:
    """Run :func:`resident_tma_kernel` on the rows of ``x2`` (which :func:`tma_not_ready`
    takes) into ``y2`` in ``config``: as many programs as fit (:func:`tma_programs`), at most
    the rows' chunks, so that rows may straddle two rounds, or with ``config.fill_grid`` off
    the most whole rows' chunks that fit (:func:`~teachkit.kernels.grid_math.resident_grid`).
    Raises ``ValueError`` when a row needs more programs than fit (:func:`tma_fits`)."""
    n_rows, n_cols = x2.shape
    g = cdiv(n_cols, config.chunk)
    programs = resident_grid(tma_programs(config, x2.dtype, x2.device.index or 0), g, n_rows,
                             config.fill_grid)
    if programs == 0:
        raise ValueError(f"rows of {n_cols} columns need {g} programs on chip at once, more "
                         f"than this GPU holds; use softmax, which picks")
    descriptor = chunk_descriptor(x2, config)
    slots = torch.full((n_rows * g,), EMPTY_SLOT.value, dtype=torch.int64, device=x2.device)
    kernel = resident_tma_kernel
    extra = {"WRITE_BEHIND": config.write_behind, "REREAD": config.reread,
             "PAIR_FROM_BUFFER": config.pair_from_buffer}
    if config.words:
        kernel, extra = resident_tma_words_kernel, {"PADDING": word_padding(x2.dtype),
                                                    "KEEP_WEIGHTS": config.keep_weights,
                                                    "REREAD": config.reread,
                                                    "PAIR_FROM_BUFFER": config.pair_from_buffer,
                                                    "CVT_X2": config.cvt_x2, "PRMT": config.prmt,
                                                    "LOG2_D": config.log2_d}
    kernel[(programs,)](
        descriptor, x2, y2, slots, n_rows, n_cols, y2.stride(0), programs, G=g,
        G_POW2=max(next_power_of_2(g), 32), MAX_SPIN=MAX_SPIN, BACKOFF=config.backoff,
        DEPTH=config.depth, BOXES=config.boxes, num_warps=config.num_warps,
        maxnreg=config.max_registers, **extra)
