"""Rows past the register-resident kernels, held in registers and shared memory together: a
Gluon resident softmax for sm_90 that stashes part of each chunk in shared memory, checked and
timed on a Hopper GPU beside the entry point, the split kernels, `torch.softmax` and a copy of
the same bytes. Run from the repository root:
`python gpu_checks/resident_stash_gpu.py [--rounds N] [--shapes ...] [--json PATH] [--overlap]
[--compiled]`.

The resident kernels hold a row's chunks in registers, 128 KB a multiprocessor: 16.5 MiB on an
H100's 132, a float32 row of 4.3M columns or a 16-bit one of 8.7M. `softmax` sends longer rows to
the split kernels, which read every row twice (two thirds of the copy rate at most). A
multiprocessor also has 227 KB of shared memory, which the Triton kernels leave empty and the TMA
kernel (`teachkit.kernels.softmax_tma`) fills with the next chunk in flight. The kernel here
holds part of the row there instead: each program (one a multiprocessor, sixteen warps) keeps
``reg`` columns of its chunk in registers, as the TMA kernel keeps its whole chunk, and the next
``stashed`` columns in shared memory, where TMA copies them. 64 KB in registers and 192 KB in
shared memory a multiprocessor hold 33 MiB of a row: a float32 row of 8.6M columns, a 16-bit row
of 17.3M, read once.

What it gives up is the chunk in flight: shared memory holds the row, so no next chunk arrives
while the row waits for its pairs. What it adds is reading: the part in shared memory is read out
three times (its maximum, its sum, its results). In float32 its exponentials are written over it
as they are summed, one an element as in registers; in 16 bits they do not fit there, and each
element takes a second one after the wait, as the words in registers do.

The script first checks it against `torch.softmax` in float32, float16 and bfloat16 on awkward
rows (one chunk, chunks running past the row's end, more rows than a round takes, rows of
`-inf`, with `+inf` or NaN, huge values, rows of one box), in its configuration
(`STASH_CONFIGS`) and in eight warps with up to 255 registers a thread (`eight_warps`); then
times each shape by:

- **stash** and **stash, 8 warps**: the kernel in those two configurations;
- with `--overlap`, **stash, overlapped** and **stash, overlapped, 8 warps**: its form that
  reads the next item while it writes this one (`resident_stash_overlap_kernel`): the register
  part's results first, then the next item's register part loaded while the stashed part's
  results are written box by box, each box refilled by TMA with the next item's as soon as every
  warp has read it, an `mbarrier` a box;
- **entry point**, `softmax`, which picks (the split kernels past the registers);
- **split rows**, the two-read split kernels;
- **torch**, `torch.softmax`; and **copy, same bytes**.

Plain launches, each after the L2 cache is cleared, in ``--rounds`` rounds (default 3) in an
order that reverses each round; a figure is the median of its rounds. GB/s = 2 x tensor bytes /
time, printed as a share of the copy bandwidth. About three minutes on an H100. With `--json`
the figures are saved as a record. Exits 1 if a result is wrong, 2 without a Hopper GPU.
`--compiled` needs no GPU: it compiles the float32 and 16-bit kernels, plain and overlapped,
for sm_90 as launched and prints what each takes (registers, stack, shared memory, TMA
copies).

On an H100 it is right on every row and no faster than the split kernels but on float32 rows of
a round each (`teachkit/benchmarks/softmax_resident_stash_nvidia_h100.json`, notebook 06). The
overlapped form gains 1.4-4.2 points over it, 71 % of the copy at best (8 x 8M float32, the
split kernels 63 %), and still loses to the split kernels on rows that straddle rounds and on
8 x 10M bfloat16 (`softmax_resident_stash_overlap_nvidia_h100.json`). So `softmax` takes
neither, and they live here, beside the other measured ways past the chip
(`long_rows_gpu.py`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import teachkit  # noqa: E402  (first: it decides whether Triton interprets)

# isort: split
import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    mbarrier,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

from teachkit.bench.softmax import add_shape_arguments, agrees_with_torch  # noqa: E402
from teachkit.kernels import softmax_kernels as sk  # noqa: E402
from teachkit.kernels.gluon_names import THREAD_BARRIER, TMA_LOAD  # noqa: E402
from teachkit.kernels.grid_math import cdiv, next_power_of_2, resident_grid  # noqa: E402
from teachkit.kernels.pairs import (  # noqa: E402
    EMPTY_SLOT,
    LOG2E,
    MAX_SPIN,
    merge_combine,
    pack_pair,
)
from teachkit.kernels.softmax_tma import (  # noqa: E402
    TMA_WIDTH,
    gluon_row_pair,
    shared_layout,
    tma_not_ready,
    word_padding,
)
from teachkit.kernels.words import fresh, halves, pack_halves_x2  # noqa: E402

SHAPES = {"fp32": [(8, 1 << 23), (16, 5 << 20)], "bf16": [(4, 1 << 24), (8, 10 << 20)]}
"""Rows past the register-resident kernels that the stash kernel takes: 8M and 5M float32
columns, 16M and 10M bfloat16 ones."""


@gluon.jit
def fetch_boxes(x_desc, stash, arrived, line, live):
    """TMA copies of ``stash.shape[0]`` boxes of ``x_desc``, from line ``line`` of its view on,
    into ``stash``, counted on ``arrived`` (whose byte count the caller has set)."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    N: gl.constexpr = stash.shape[0]
    for c in gl.static_range(N):
        TMA_LOAD(x_desc, [line + c * BOX, 0], arrived, stash.index(c), pred=live)


@gluon.jit
def stash_line(item, G, row_lines, CHUNK_LINES: gl.constexpr, FIRST_LINE: gl.constexpr):
    """The line of the descriptor's view where item ``item``'s stashed part starts (chunk
    ``item % G`` of row ``item // G``, ``CHUNK_LINES`` lines a chunk, the stashed part from line
    ``FIRST_LINE`` of the chunk on)."""
    return (item // G) * row_lines + (item % G) * CHUNK_LINES + FIRST_LINE


@gluon.jit
def fetch_stash(x_desc, big, small, arrived, item, n_items, G, row_lines,
               CHUNK_LINES: gl.constexpr, FIRST_LINE: gl.constexpr):
    """Have TMA copy the stashed part of item ``item``'s chunk (chunk ``item % G`` of row
    ``item // G``, ``CHUNK_LINES`` lines of ``x_desc``'s view from line ``FIRST_LINE`` of the
    chunk on) into ``big`` and then ``small``, counted on ``arrived``; nothing past the last
    item (``n_items``). Two buffers, because a shared-memory buffer's shape is a power of two
    along each axis: 16 + 8 boxes hold 192 KB, which one buffer could not without 256."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    live = item < n_items
    mbarrier.expect(arrived, (big.shape[0] + small.shape[0]) * x_desc.block_type.nbytes,
                    pred=live)
    line = stash_line(item, G, row_lines, CHUNK_LINES, FIRST_LINE)
    fetch_boxes(x_desc, big, arrived, line, live)
    fetch_boxes(x_desc, small, arrived, line + big.shape[0] * BOX, live)


@gluon.jit
def stash_box(stash, c, layout: gl.constexpr):
    """Box ``c`` of ``stash``, flat, as float32 in ``layout``."""
    BOX: gl.constexpr = stash.shape[1] * stash.shape[2]
    return stash.index(c).reshape([BOX]).load(layout).to(gl.float32)


@gluon.jit
def box_max(stash, c, m, n_cols, col0, layout: gl.constexpr):
    """The lane-wise maximum of ``m`` and the elements of box ``c`` of ``stash`` (whose first
    column is ``col0``); columns from ``n_cols`` on do not count."""
    BOX: gl.constexpr = stash.shape[1] * stash.shape[2]
    cols = col0 + c * BOX + gl.arange(0, BOX, layout=layout)
    return gl.maximum(m, gl.where(cols < n_cols, stash_box(stash, c, layout), float("-inf")))


@gluon.jit
def stash_max(stash, m, n_cols, col0, layout: gl.constexpr):
    """The lane-wise maximum of ``m`` and ``stash``'s elements, read box by box
    (:func:`box_max`)."""
    for c in range(stash.shape[0]):
        m = box_max(stash, c, m, n_cols, col0, layout)
    return m


@gluon.jit
def stash_sum(stash, d, n_cols, col0, safe, layout: gl.constexpr, KEEP: gl.constexpr):
    """``d`` plus ``e = exp(x - safe)`` of ``stash``'s elements ``x``, lane-wise, as
    :func:`stash_max` reads them; with ``KEEP`` (float32 only) each ``e`` is written over its
    ``x``, so that the results take a multiplication, not a second exponential."""
    BOX: gl.constexpr = stash.shape[1] * stash.shape[2]
    offs = gl.arange(0, BOX, layout=layout)
    for c in range(stash.shape[0]):
        cols = col0 + c * BOX + offs
        x = gl.where(cols < n_cols, stash_box(stash, c, layout), float("-inf"))
        e = gl.exp2((x - safe) * LOG2E)
        if KEEP:
            stash.index(c).reshape([BOX]).store(e)
        d += e
    return d


@gluon.jit
def stash_sums(big, small, m, n_cols, col0, layout: gl.constexpr, KEEP: gl.constexpr):
    """The ``(m, d)`` of the stashed part (``big`` from column ``col0``, then ``small``) given
    the lane-wise maxima ``m`` of its first pass: the maximum, then the sum in a second pass
    (:func:`stash_sum`, keeping the exponentials with ``KEEP``)."""
    BOX: gl.constexpr = big.shape[1] * big.shape[2]
    m_h = gl.max(m, axis=0)
    safe = gl.where(m_h == float("-inf"), 0.0, m_h)  # nothing stashed in this chunk: d = 0
    d = gl.zeros([BOX], gl.float32, layout)
    d = stash_sum(big, d, n_cols, col0, safe, layout, KEEP)
    d = stash_sum(small, d, n_cols, col0 + big.numel, safe, layout, KEEP)
    return m_h, gl.sum(d, axis=0)


@gluon.jit
def stash_pair(big, small, n_cols, col0, layout: gl.constexpr, KEEP: gl.constexpr):
    """The ``(m, d)`` of the stashed part in two passes over shared memory, its maximum
    (:func:`stash_max`) and then its sum (:func:`stash_sums`): one exponential an element, where
    :func:`~teachkit.kernels.pairs.online_update` takes two."""
    BOX: gl.constexpr = big.shape[1] * big.shape[2]
    m = gl.full([BOX], float("-inf"), gl.float32, layout)
    m = stash_max(big, m, n_cols, col0, layout)
    m = stash_max(small, m, n_cols, col0 + big.numel, layout)
    return stash_sums(big, small, m, n_cols, col0, layout, KEEP)


@gluon.jit
def write_box(stash, c, Y_row, n_cols, col0, m, scale, layout: gl.constexpr,
              KEPT: gl.constexpr):
    """The results of box ``c`` of ``stash`` (whose first column is ``col0``) into the row at
    ``Y_row``, nothing from ``n_cols`` on: ``exp(x - m) * scale`` of the input ``x`` (``m`` the
    row's maximum, ``scale`` one over its sum), or with ``KEPT`` ``e * scale`` of the
    exponentials that :func:`stash_sum` kept (``scale`` then ``exp(m_h - m_row) / d_row``)."""
    BOX: gl.constexpr = stash.shape[1] * stash.shape[2]
    cols = col0 + c * BOX + gl.arange(0, BOX, layout=layout)
    if KEPT:
        y = stash_box(stash, c, layout) * scale
    else:
        y = gl.exp2((stash_box(stash, c, layout) - m) * LOG2E) * scale
    gl.store(Y_row + cols, y.to(Y_row.dtype.element_ty), mask=cols < n_cols)


@gluon.jit
def write_stash(stash, Y_row, n_cols, col0, m, scale, layout: gl.constexpr, KEPT: gl.constexpr):
    """``stash``'s results into the row at ``Y_row``, box by box (:func:`write_box`)."""
    for c in range(stash.shape[0]):
        write_box(stash, c, Y_row, n_cols, col0, m, scale, layout, KEPT)


@gluon.jit
def start_stash(x_desc, BIG: gl.constexpr, SMALL: gl.constexpr):
    """The two stash buffers, ``BIG`` and ``SMALL`` boxes of ``x_desc``, and the ``mbarrier``
    their copies count their bytes on: ``(big, small, arrived)``."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    big = gl.allocate_shared_memory(x_desc.dtype, [BIG, BOX, W], x_desc.layout)
    small = gl.allocate_shared_memory(x_desc.dtype, [SMALL, BOX, W], x_desc.layout)
    arrived = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(arrived, count=1)
    return big, small, arrived


@gluon.jit
def register_exponentials(x):
    """The register part's maximum ``m_r``, its exponentials ``e = exp(x - m_r)`` (kept in
    registers for after the wait: one exponential an element) and their sum:
    ``(m_r, e, d_r)``."""
    m_r = gl.max(x, axis=0)
    safe = gl.where(m_r == float("-inf"), 0.0, m_r)  # nothing but -inf: d = 0
    e = gl.exp2((x - safe) * LOG2E)
    return m_r, e, gl.sum(e, axis=0)


@gluon.jit
def words_pair(words, HALF: gl.constexpr):
    """The ``(m, d)`` of the register part held as ``words`` of two ``HALF`` elements, its
    exponentials computed from fresh halves (:func:`~teachkit.kernels.words.fresh`), not
    kept."""
    low, high = halves(words, HALF)
    m_r = gl.maximum(gl.max(low, axis=0), gl.max(high, axis=0))
    safe = gl.where(m_r == float("-inf"), 0.0, m_r)
    low, high = halves(fresh(words, m_r), HALF)
    return m_r, gl.sum(gl.exp2((low - safe) * LOG2E) + gl.exp2((high - safe) * LOG2E), axis=0)


@gluon.jit
def publish_and_wait(SLOTS, item, row, G, X, n_cols, m_r, d_r, m_h, d_h,
                     G_POW2: gl.constexpr, MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr):
    """Merge the register part's ``(m_r, d_r)`` and the stash's ``(m_h, d_h)`` into the chunk's
    pair, publish it at slot ``item`` and wait for the pairs of row ``row``
    (:func:`~teachkit.kernels.softmax_tma.gluon_row_pair`): the row's ``(m, d)``."""
    m_c, d_c = merge_combine(m_r, d_r, m_h, d_h)
    gl.atomic_xchg(SLOTS + item, pack_pair(m_c, d_c), sem="relaxed")
    return gluon_row_pair(SLOTS + row.to(gl.int64) * G, X + row.to(gl.int64) * n_cols, n_cols,
                          G, G_POW2, MAX_SPIN, BACKOFF)


@gluon.jit
def resident_stash_kernel(x_desc, X, Y, SLOTS, n_rows, n_cols, stride_y, n_programs, G,
                         REG: gl.constexpr, BIG: gl.constexpr, SMALL: gl.constexpr,
                         G_POW2: gl.constexpr, MAX_SPIN: gl.constexpr,
                         BACKOFF: gl.constexpr):
    """A persistent grid of ``n_programs`` programs (at least ``G``, all on the GPU at once)
    takes the ``(row, chunk)`` items of the float32 ``X`` ``(n_rows, n_cols)`` in order, ``G``
    chunks to a row, as :func:`~teachkit.kernels.softmax_tma.resident_tma_kernel` does. A chunk
    is ``REG`` columns held in registers and then ``BIG + SMALL`` boxes of ``x_desc`` (``X`` as
    lines of ``W`` elements, a box a few lines) stashed in shared memory. Each program:

    1. has TMA copy its first item's stashed part into shared memory (:func:`fetch_stash`);
    2. loads the part for its registers and keeps ``e = exp(x - m_r)`` of it, as the TMA
       kernel does; waits for the stashed part and finds its ``(m, d)`` (:func:`stash_pair`),
       writing its ``exp(x - m_h)`` over it;
    3. publishes the chunk's merged ``(m, d)`` and waits for its row's pairs;
    4. writes the stashed part's results from shared memory (:func:`write_stash`), has TMA copy its
       next item's stashed part into the same buffers, then writes the register part's results.

    Rows of ``n_cols`` not a multiple of the chunk read past the row's end (the next row's
    columns, or zeros past the tensor), masked to ``-inf`` and never written.
    """
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    CHUNK: gl.constexpr = REG + (BIG + SMALL) * BOX * W
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    pid = gl.program_id(0)
    n_items = n_rows * G
    row_lines = n_cols // W
    big, small, arrived = start_stash(x_desc, BIG, SMALL)
    fetch_stash(x_desc, big, small, arrived, pid, n_items, G, row_lines, CHUNK // W, REG // W)
    offs = gl.arange(0, REG, layout=layout)
    phase = 0
    for item in range(pid, n_items, n_programs):
        row = item // G
        start = (item % G) * CHUNK
        cols = start + offs
        X_row = X + row.to(gl.int64) * n_cols
        Y_row = Y + row.to(gl.int64) * stride_y
        x = gl.load(X_row + cols, mask=cols < n_cols, other=float("-inf"))
        m_r, e, d_r = register_exponentials(x)
        mbarrier.wait(arrived, phase)
        phase ^= 1
        m_h, d_h = stash_pair(big, small, n_cols, start + REG, layout, True)
        m_row, d_row = publish_and_wait(SLOTS, item, row, G, X, n_cols, m_r, d_r, m_h, d_h,
                                        G_POW2, MAX_SPIN, BACKOFF)
        inv_d = 1.0 / d_row
        scale = gl.exp2((m_h - m_row) * LOG2E) * inv_d
        write_stash(big, Y_row, n_cols, start + REG, m_row, scale, layout, True)
        write_stash(small, Y_row, n_cols, start + REG + big.numel, m_row, scale, layout, True)
        fence_async_shared()  # these reads come before the next copies' writes (another proxy)
        THREAD_BARRIER()  # and every warp has made them
        fetch_stash(x_desc, big, small, arrived, item + n_programs, n_items, G, row_lines,
                   CHUNK // W, REG // W)
        y = e * (gl.exp2((m_r - m_row) * LOG2E) * inv_d)
        gl.store(Y_row + cols, y, mask=cols < n_cols)
    mbarrier.invalidate(arrived)


@gluon.jit
def resident_stash_words_kernel(x_desc, X, Y, SLOTS, n_rows, n_cols, stride_y, n_programs, G,
                               REG: gl.constexpr, BIG: gl.constexpr, SMALL: gl.constexpr,
                               G_POW2: gl.constexpr, MAX_SPIN: gl.constexpr,
                               BACKOFF: gl.constexpr, PADDING: gl.constexpr):
    """:func:`resident_stash_kernel` for float16 and bfloat16 rows: the ``REG`` columns in
    registers are kept as the input's own 32-bit words, two elements each (``PADDING``, a word
    of two ``-inf``, past the row's end), as
    :func:`~teachkit.kernels.softmax_tma.resident_tma_words_kernel` keeps them, for a second
    exponential an element after the wait; the stashed part is the input in shared memory, as in
    the float32 form, and its results are written an element at a time."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    CHUNK: gl.constexpr = REG + (BIG + SMALL) * BOX * W
    HALF: gl.constexpr = X.dtype.element_ty
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    stash_layout: gl.constexpr = gl.BlockedLayout([8], [32], [gl.num_warps()], [0])  # 16 bytes
    pid = gl.program_id(0)
    n_items = n_rows * G
    row_lines = n_cols // W
    n_words = n_cols // 2
    x_words = X.to(gl.pointer_type(gl.int32), bitcast=True)
    y_words = Y.to(gl.pointer_type(gl.int32), bitcast=True)
    big, small, arrived = start_stash(x_desc, BIG, SMALL)
    fetch_stash(x_desc, big, small, arrived, pid, n_items, G, row_lines, CHUNK // W, REG // W)
    offs = gl.arange(0, REG // 2, layout=layout)
    phase = 0
    for item in range(pid, n_items, n_programs):
        row = item // G
        start = (item % G) * CHUNK
        wcols = start // 2 + offs
        words = gl.load(x_words + row.to(gl.int64) * n_words + wcols, mask=wcols < n_words,
                        other=PADDING)
        m_r, d_r = words_pair(words, HALF)
        mbarrier.wait(arrived, phase)
        phase ^= 1
        m_h, d_h = stash_pair(big, small, n_cols, start + REG, stash_layout, False)
        m_row, d_row = publish_and_wait(SLOTS, item, row, G, X, n_cols, m_r, d_r, m_h, d_h,
                                        G_POW2, MAX_SPIN, BACKOFF)
        inv_d = 1.0 / d_row
        Y_row = Y + row.to(gl.int64) * stride_y
        write_stash(big, Y_row, n_cols, start + REG, m_row, inv_d, stash_layout, False)
        write_stash(small, Y_row, n_cols, start + REG + big.numel, m_row, inv_d, stash_layout,
                   False)
        fence_async_shared()
        THREAD_BARRIER()
        fetch_stash(x_desc, big, small, arrived, item + n_programs, n_items, G, row_lines,
                   CHUNK // W, REG // W)
        low, high = halves(fresh(words, m_row), HALF)
        y = pack_halves_x2(gl.exp2((low - m_row) * LOG2E) * inv_d,
                           gl.exp2((high - m_row) * LOG2E) * inv_d, HALF)
        gl.store(y_words + row.to(gl.int64) * (stride_y // 2) + wcols, y,
                 mask=wcols < n_words)
    mbarrier.invalidate(arrived)


@gluon.jit
def fetch_box(x_desc, box, landed, line, live):
    """Have TMA copy one box of ``x_desc`` (from line ``line`` of its view) into ``box``,
    counted on the ``mbarrier`` ``landed``; nothing unless ``live``."""
    mbarrier.expect(landed, x_desc.block_type.nbytes, pred=live)
    TMA_LOAD(x_desc, [line, 0], landed, box, pred=live)


@gluon.jit
def fetch_each_box(x_desc, big, small, landed, line, live):
    """:func:`fetch_stash` with each box counted on an ``mbarrier`` of its own (``landed``,
    ``big``'s boxes first), so that a box can be read as soon as it has landed."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    NB: gl.constexpr = big.shape[0]
    NS: gl.constexpr = small.shape[0]
    for c in gl.static_range(NB):
        fetch_box(x_desc, big.index(c), landed.index(c), line + c * BOX, live)
    for c in gl.static_range(NS):
        fetch_box(x_desc, small.index(c), landed.index(NB + c), line + (NB + c) * BOX, live)


@gluon.jit
def stash_max_as_landed(stash, landed, FIRST: gl.constexpr, phase, m, n_cols, col0,
                        layout: gl.constexpr):
    """:func:`stash_max`, waiting for each box (its ``mbarrier``, ``landed`` from ``FIRST`` on,
    at ``phase``) just before it is read: the maximum of the first boxes is taken while the
    last are still on their way."""
    for c in range(stash.shape[0]):
        mbarrier.wait(landed.index(FIRST + c), phase)
        m = box_max(stash, c, m, n_cols, col0, layout)
    return m


@gluon.jit
def stash_pair_as_landed(big, small, landed, phase, n_cols, col0, layout: gl.constexpr,
                         KEEP: gl.constexpr):
    """:func:`stash_pair` with its first pass taken box by box as the boxes land
    (:func:`stash_max_as_landed`); the second finds them all there."""
    BOX: gl.constexpr = big.shape[1] * big.shape[2]
    m = gl.full([BOX], float("-inf"), gl.float32, layout)
    m = stash_max_as_landed(big, landed, 0, phase, m, n_cols, col0, layout)
    m = stash_max_as_landed(small, landed, big.shape[0], phase, m, n_cols, col0 + big.numel,
                            layout)
    return stash_sums(big, small, m, n_cols, col0, layout, KEEP)


@gluon.jit
def write_stash_and_refill(stash, landed, FIRST: gl.constexpr, Y_row, n_cols, col0, m, scale,
                           layout: gl.constexpr, KEPT: gl.constexpr, x_desc, line, live):
    """:func:`write_stash`, each box refilled as soon as every warp has read it: TMA copies box
    ``c`` of the next item's stashed part (from line ``line`` on, unless past the last item,
    ``live``) into it, counted on its ``mbarrier`` (``landed``, from ``FIRST`` on), while the
    later boxes' results are written. The next item's reads overlap this item's writes."""
    BOX_LINES: gl.constexpr = x_desc.block_type.shape[0]
    for c in range(stash.shape[0]):
        write_box(stash, c, Y_row, n_cols, col0, m, scale, layout, KEPT)
        fence_async_shared()  # these reads come before the copy's writes (another proxy)
        THREAD_BARRIER()  # and every warp has made them
        fetch_box(x_desc, stash.index(c), landed.index(FIRST + c), line + c * BOX_LINES, live)


@gluon.jit
def start_overlapped(x_desc, first, n_items, G, row_lines, BIG: gl.constexpr,
                     SMALL: gl.constexpr, CHUNK_LINES: gl.constexpr, FIRST_LINE: gl.constexpr):
    """The stash buffers (:func:`start_stash`'s), an ``mbarrier`` a box, and the copies of item
    ``first``'s stashed part under way (:func:`fetch_each_box`): ``(big, small, landed)``."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    big = gl.allocate_shared_memory(x_desc.dtype, [BIG, BOX, W], x_desc.layout)
    small = gl.allocate_shared_memory(x_desc.dtype, [SMALL, BOX, W], x_desc.layout)
    landed = gl.allocate_shared_memory(gl.int64, [BIG + SMALL, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(BIG + SMALL):
        mbarrier.init(landed.index(c), count=1)
    fetch_each_box(x_desc, big, small, landed,
                   stash_line(first, G, row_lines, CHUNK_LINES, FIRST_LINE), first < n_items)
    return big, small, landed


@gluon.jit
def register_part(X, item, n_items, G, n_cols, CHUNK: gl.constexpr, offs, other):
    """The first ``offs.numel`` columns of item ``item``'s chunk of ``X`` (as elements or as
    words: ``n_cols`` and ``CHUNK`` in the same unit), ``other`` past the row's end and past the
    last item: a load issued now and waited for where it is used."""
    cols = (item % G) * CHUNK + offs
    live = (cols < n_cols) & (item < n_items)
    return gl.load(X + (item // G).to(gl.int64) * n_cols + cols, mask=live, other=other)


@gluon.jit
def resident_stash_overlap_kernel(x_desc, X, Y, SLOTS, n_rows, n_cols, stride_y, n_programs,
                                  G, REG: gl.constexpr, BIG: gl.constexpr,
                                  SMALL: gl.constexpr, G_POW2: gl.constexpr,
                                  MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr):
    """:func:`resident_stash_kernel` with the next item's reads under way while this item's
    results are written. After the wait a program writes its register part's results first,
    then issues the loads of its next item's register part, then writes the stashed part's
    results box by box, each box refilled by TMA with the next item's as soon as every warp has
    read it (:func:`write_stash_and_refill`). The next item's stashed part lands box by box, an
    ``mbarrier`` each, and its maximum is taken as the boxes land
    (:func:`stash_pair_as_landed`). What stays serial is the wait for the row's pairs."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    CHUNK: gl.constexpr = REG + (BIG + SMALL) * BOX * W
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    pid = gl.program_id(0)
    n_items = n_rows * G
    row_lines = n_cols // W
    big, small, landed = start_overlapped(x_desc, pid, n_items, G, row_lines, BIG, SMALL,
                                          CHUNK // W, REG // W)
    offs = gl.arange(0, REG, layout=layout)
    x = register_part(X, pid, n_items, G, n_cols, CHUNK, offs, float("-inf"))
    phase = 0
    for item in range(pid, n_items, n_programs):
        row = item // G
        start = (item % G) * CHUNK
        m_r, e, d_r = register_exponentials(x)
        m_h, d_h = stash_pair_as_landed(big, small, landed, phase, n_cols, start + REG, layout,
                                        True)
        phase ^= 1
        m_row, d_row = publish_and_wait(SLOTS, item, row, G, X, n_cols, m_r, d_r, m_h, d_h,
                                        G_POW2, MAX_SPIN, BACKOFF)
        inv_d = 1.0 / d_row
        Y_row = Y + row.to(gl.int64) * stride_y
        cols = start + offs
        gl.store(Y_row + cols, e * (gl.exp2((m_r - m_row) * LOG2E) * inv_d),
                 mask=cols < n_cols)
        after = item + n_programs
        x = register_part(X, after, n_items, G, n_cols, CHUNK, offs, float("-inf"))
        line = stash_line(after, G, row_lines, CHUNK // W, REG // W)
        scale = gl.exp2((m_h - m_row) * LOG2E) * inv_d
        write_stash_and_refill(big, landed, 0, Y_row, n_cols, start + REG, m_row, scale,
                               layout, True, x_desc, line, after < n_items)
        write_stash_and_refill(small, landed, BIG, Y_row, n_cols, start + REG + big.numel,
                               m_row, scale, layout, True, x_desc, line + BIG * BOX,
                               after < n_items)
    for c in gl.static_range(BIG + SMALL):
        mbarrier.invalidate(landed.index(c))


@gluon.jit
def resident_stash_overlap_words_kernel(x_desc, X, Y, SLOTS, n_rows, n_cols, stride_y,
                                        n_programs, G, REG: gl.constexpr, BIG: gl.constexpr,
                                        SMALL: gl.constexpr, G_POW2: gl.constexpr,
                                        MAX_SPIN: gl.constexpr, BACKOFF: gl.constexpr,
                                        PADDING: gl.constexpr):
    """:func:`resident_stash_overlap_kernel` for float16 and bfloat16 rows, the register part
    kept as words as in :func:`resident_stash_words_kernel`. It waits for every box of the
    stashed part before its first pass: taking the maximum as the boxes land
    (:func:`stash_pair_as_landed`) makes ptxas spill 320 bytes a thread here, at 128 registers,
    and none in float32."""
    BOX: gl.constexpr = x_desc.block_type.shape[0]
    W: gl.constexpr = x_desc.block_type.shape[1]
    CHUNK: gl.constexpr = REG + (BIG + SMALL) * BOX * W
    HALF: gl.constexpr = X.dtype.element_ty
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    stash_layout: gl.constexpr = gl.BlockedLayout([8], [32], [gl.num_warps()], [0])
    pid = gl.program_id(0)
    n_items = n_rows * G
    row_lines = n_cols // W
    n_words = n_cols // 2
    x_words = X.to(gl.pointer_type(gl.int32), bitcast=True)
    y_words = Y.to(gl.pointer_type(gl.int32), bitcast=True)
    big, small, landed = start_overlapped(x_desc, pid, n_items, G, row_lines, BIG, SMALL,
                                          CHUNK // W, REG // W)
    offs = gl.arange(0, REG // 2, layout=layout)
    words = register_part(x_words, pid, n_items, G, n_words, CHUNK // 2, offs, PADDING)
    phase = 0
    for item in range(pid, n_items, n_programs):
        row = item // G
        start = (item % G) * CHUNK
        m_r, d_r = words_pair(words, HALF)
        for c in gl.static_range(BIG + SMALL):  # (waiting box by box here spills in 16 bits)
            mbarrier.wait(landed.index(c), phase)
        m_h, d_h = stash_pair(big, small, n_cols, start + REG, stash_layout, False)
        phase ^= 1
        m_row, d_row = publish_and_wait(SLOTS, item, row, G, X, n_cols, m_r, d_r, m_h, d_h,
                                        G_POW2, MAX_SPIN, BACKOFF)
        inv_d = 1.0 / d_row
        low, high = halves(fresh(words, m_row), HALF)
        y = pack_halves_x2(gl.exp2((low - m_row) * LOG2E) * inv_d,
                           gl.exp2((high - m_row) * LOG2E) * inv_d, HALF)
        wcols = start // 2 + offs
        gl.store(y_words + row.to(gl.int64) * (stride_y // 2) + wcols, y,
                 mask=wcols < n_words)
        after = item + n_programs
        words = register_part(x_words, after, n_items, G, n_words, CHUNK // 2, offs, PADDING)
        line = stash_line(after, G, row_lines, CHUNK // W, REG // W)
        Y_row = Y + row.to(gl.int64) * stride_y
        write_stash_and_refill(big, landed, 0, Y_row, n_cols, start + REG, m_row, inv_d,
                               stash_layout, False, x_desc, line, after < n_items)
        write_stash_and_refill(small, landed, BIG, Y_row, n_cols, start + REG + big.numel,
                               m_row, inv_d, stash_layout, False, x_desc, line + BIG * BOX,
                               after < n_items)
    for c in gl.static_range(BIG + SMALL):
        mbarrier.invalidate(landed.index(c))


class StashConfig(NamedTuple):
    """How :func:`resident_stash_kernel` runs: ``reg`` columns of a chunk in registers (a power
    of two; as words in 16 bits), ``big`` and ``small`` boxes (powers of two) of ``box_lines``
    lines of :data:`~teachkit.kernels.softmax_tma.TMA_WIDTH` elements stashed in shared memory,
    ``num_warps``, ``max_registers`` a thread, pausing between polls (``backoff``) and
    ``words``, the form for 16-bit rows (:func:`resident_stash_words_kernel`), and
    ``overlap``, the forms that read the next item while writing this one
    (:func:`resident_stash_overlap_kernel`). One program a multiprocessor, its shared memory
    nearly all stash. It has the fields of
    :class:`~teachkit.kernels.softmax_tma.TmaConfig` that
    :func:`~teachkit.kernels.softmax_tma.tma_not_ready` reads."""

    reg: int
    box_lines: int
    big: int
    small: int
    num_warps: int = 16
    max_registers: int = 128
    backoff: bool = True
    words: bool = False
    keep_weights: bool = False  # as TmaConfig's, for tma_not_ready: never
    overlap: bool = False

    @property
    def stashed(self) -> int:
        """Columns of a chunk stashed in shared memory."""
        return (self.big + self.small) * self.box_lines * TMA_WIDTH

    @property
    def chunk(self) -> int:
        """Columns of a row one program holds."""
        return self.reg + self.stashed


STASH_CONFIGS = {4: StashConfig(16384, 8, 16, 8), 2: StashConfig(32768, 16, 16, 8, words=True)}
"""By element size: 64 KB of a chunk in registers (16384 float32, or 32768 16-bit columns as
words) and 192 KB in shared memory, in boxes of 8 KB (16 + 8 of them), sixteen warps: chunks of
65536 float32 or 131072 16-bit columns, 256 KB a multiprocessor."""


def stash_config(dtype: torch.dtype) -> StashConfig | None:
    """The configuration of :data:`STASH_CONFIGS` for ``dtype`` (``None`` for a dtype it does
    not take).

    >>> stash_config(torch.float32).chunk, stash_config(torch.bfloat16).chunk
    (65536, 131072)
    """
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return None
    return STASH_CONFIGS[dtype.itemsize]


@functools.cache
def stash_programs(config: StashConfig, dtype: torch.dtype, device: int) -> int:
    """Programs of ``config`` that fit on GPU ``device`` at once: one a multiprocessor when its
    shared memory (the stashed part and a kilobyte for the reductions) fits, else none."""
    props = torch.cuda.get_device_properties(device)
    shared = config.stashed * dtype.itemsize + 1024
    return props.multi_processor_count if shared <= props.shared_memory_per_multiprocessor else 0


def stash_fits(n_cols: int, config: StashConfig, dtype: torch.dtype, device: int) -> bool:
    """Whether rows of ``n_cols`` fit on GPU ``device`` at once in ``config``."""
    return cdiv(n_cols, config.chunk) <= stash_programs(config, dtype, device)


def stash_descriptor(x2: torch.Tensor, config: StashConfig) -> TensorDescriptor:
    """The TMA descriptor :func:`resident_stash_kernel` copies the stashed parts through: the
    contiguous ``x2`` as lines of :data:`~teachkit.kernels.softmax_tma.TMA_WIDTH` elements,
    ``config.box_lines`` lines a box."""
    lines = x2.view(-1, TMA_WIDTH)
    return TensorDescriptor(lines, list(lines.shape), [TMA_WIDTH, 1],
                            [config.box_lines, TMA_WIDTH], shared_layout(8 * x2.element_size()))


def stash_kernel(config: StashConfig) -> object:
    """The kernel that runs ``config``: :func:`resident_stash_kernel`, its words form, or with
    ``overlap`` their overlapped forms."""
    if config.overlap:
        return resident_stash_overlap_words_kernel if config.words \
            else resident_stash_overlap_kernel
    return resident_stash_words_kernel if config.words else resident_stash_kernel


def launch_resident_stash(x2: torch.Tensor, y2: torch.Tensor, config: StashConfig) -> None:
    """Run :func:`resident_stash_kernel` (its words form for 16-bit rows) on the rows of ``x2``
    into ``y2`` in ``config``: ``x2`` as :func:`~teachkit.kernels.softmax_tma.tma_not_ready`
    takes it for ``config``, one program a multiprocessor, at most the rows' chunks. Raises
    ``ValueError`` when a row needs more programs than fit (:func:`stash_fits`)."""
    n_rows, n_cols = x2.shape
    g = cdiv(n_cols, config.chunk)
    programs = resident_grid(stash_programs(config, x2.dtype, x2.device.index or 0), g, n_rows,
                             fill_grid=True)
    if programs == 0:
        raise ValueError(f"rows of {n_cols} columns need {g} programs on chip at once, more "
                         f"than this GPU holds; use softmax, which picks")
    slots = torch.full((n_rows * g,), EMPTY_SLOT.value, dtype=torch.int64, device=x2.device)
    kernel, extra = stash_kernel(config), {}
    if config.words:
        extra = {"PADDING": word_padding(x2.dtype)}
    kernel[(programs,)](
        stash_descriptor(x2, config), x2, y2, slots, n_rows, n_cols, y2.stride(0), programs, G=g,
        REG=config.reg, BIG=config.big, SMALL=config.small, G_POW2=max(next_power_of_2(g), 32),
        MAX_SPIN=MAX_SPIN, BACKOFF=config.backoff, num_warps=config.num_warps,
        maxnreg=config.max_registers, **extra)


def softmax_stash(x: torch.Tensor, config: StashConfig) -> torch.Tensor:
    """Softmax over the last dimension of the 2-D ``x`` by :func:`resident_stash_kernel` (its
    words form for 16-bit rows) in ``config``. Raises ``ValueError`` where it cannot run
    (:func:`~teachkit.kernels.softmax_tma.tma_not_ready` says why, or a row needs more programs
    than fit)."""
    y = torch.empty_like(x)
    why = tma_not_ready(x, y, config)
    if why is not None:
        raise ValueError(f"the stash kernel {why}")
    launch_resident_stash(x, y, config)
    return y


def stash_compiled(dtype: torch.dtype, config: StashConfig | None = None,
                   chunks: int = 128) -> object:
    """:func:`resident_stash_kernel` (its words form for 16-bit ``dtype``) compiled for sm_90 as
    launched on rows of ``chunks`` chunks in ``config`` (default :func:`stash_config`'s),
    without a GPU (``TRITON_INTERPRET=0``)."""
    from teachkit.kernels.compile_check import gluon_compile

    config = stash_config(dtype) if config is None else config
    descriptor = stash_descriptor(torch.empty(1, config.chunk, dtype=dtype), config)
    pointer = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16"}[dtype]
    scalars = {"X": pointer, "Y": pointer, "SLOTS": "*i64", "n_rows": "i32", "n_cols": "i32",
               "stride_y": "i32", "n_programs": "i32", "G": "i32"}
    constexprs = {"REG": config.reg, "BIG": config.big, "SMALL": config.small,
                  "G_POW2": max(next_power_of_2(chunks), 32), "MAX_SPIN": MAX_SPIN,
                  "BACKOFF": config.backoff}
    if config.words:
        constexprs["PADDING"] = word_padding(dtype)
    return gluon_compile(stash_kernel(config), {"x_desc": descriptor}, scalars, constexprs,
                         config.max_registers, config.num_warps,
                         divisible=("n_cols", "stride_y"))


def print_compiled() -> None:
    """What :func:`stash_compiled` gives for float32 and bfloat16, in the kernel's form and its
    overlapped form, one line each."""
    from teachkit.kernels.compile_check import assembled_resources

    for dtype in (torch.float32, torch.bfloat16):
        config = stash_config(dtype)
        for form in (config, config._replace(overlap=True)):
            kernel = stash_compiled(dtype, form)
            found = assembled_resources(kernel.asm["ptx"], 90)
            print(f"{dtype}{', overlapped' if form.overlap else ''}: stashed "
                  f"{config.stashed * dtype.itemsize} bytes, shared memory "
                  f"{kernel.metadata.shared} bytes, registers {found['registers']}, stack "
                  f"{found['stack']} bytes, TMA copies "
                  f"{kernel.asm['ptx'].count('cp.async.bulk.tensor')}")


def eight_warps(overlap: bool = False) -> dict[int, object]:
    """By element size, :data:`STASH_CONFIGS` in eight warps of up to 255 registers a thread
    (the same bytes a program, twice the registers a thread), in the overlapped form with
    ``overlap``."""
    return {size: config._replace(num_warps=8, max_registers=255, overlap=overlap)
            for size, config in STASH_CONFIGS.items()}


def overlapped() -> dict[str, dict[int, object]]:
    """With ``--overlap``: the overlapped form (:func:`resident_stash_overlap_kernel`) of
    :data:`STASH_CONFIGS` and of :func:`eight_warps`, by name."""
    return {"stash, overlapped": {size: config._replace(overlap=True)
                                  for size, config in STASH_CONFIGS.items()},
            "stash, overlapped, 8 warps": eight_warps(overlap=True)}


def awkward_rows(chunk: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Rows that test the kernel's edges for chunks of ``chunk`` columns: one chunk, chunks
    running past the row, more rows than a round takes, huge values, one box's rows, a row of
    127 chunks and a bit, and rows of ``-inf``, with ``+inf``, with NaN, and partly ``-inf``
    with its maximum in the second chunk."""
    make = dict(device="cuda", dtype=dtype)
    special = torch.randn(4, 3 * chunk, **make)
    special[0] = float("-inf")
    special[1, 7] = float("inf")
    special[2, 11] = float("nan")
    special[3, ::5] = float("-inf")
    special[3, chunk + 3] = 50.0
    return [torch.randn(3, chunk, **make), torch.randn(5, 2 * chunk + 512, **make),
            torch.randn(300, 4 * chunk, **make) * 30, torch.randn(2, 5 * chunk, **make) * 1e4,
            torch.randn(7, 512, **make), torch.randn(3, 127 * chunk + 1024, **make), special]


def check_edges(configs: dict[str, dict[int, object]]) -> bool:
    """:func:`awkward_rows` through each configuration of ``configs`` (name: by element size)
    in float32, float16 and bfloat16, against ``torch.softmax``; prints each failure."""
    ok = True
    for name, by_size in configs.items():
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            config = by_size[dtype.itemsize]
            for x in awkward_rows(config.chunk, dtype):
                if not agrees_with_torch(softmax_stash(x, config), x):
                    ok = False
                    print(f"WRONG: {name} {dtype} rows {tuple(x.shape)}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_shape_arguments(parser, "fp32:8x8388608 bf16:4x16777216")
    parser.add_argument("--overlap", action="store_true",
                        help="also check and time the forms that read the next item while "
                             "writing this one")
    parser.add_argument("--compiled", action="store_true",
                        help="compile for sm_90 (no GPU needed) and print what it takes")
    args = parser.parse_args(argv)
    if args.compiled:
        print_compiled()
        return 0
    if not teachkit.ON_GPU or torch.cuda.get_device_capability()[0] != 9:
        print("no Hopper GPU: this script checks and times the stash resident softmax on one")
        return 2
    from teachkit.bench.core import announce_copy_bandwidth, finish
    from teachkit.bench.softmax import (
        SAME_BYTES_COPY,
        dtype_shape_jobs,
        provider_timers,
        time_shapes,
    )

    copy = announce_copy_bandwidth()
    configs = {"stash": STASH_CONFIGS, "stash, 8 warps": eight_warps()}
    if args.overlap:
        configs |= overlapped()
    ok = check_edges(configs)
    print(f"edge cases: {'all right' if ok else 'WRONG (above)'}", flush=True)

    def timers_for(x, dt):
        size = x.element_size()
        providers = {name: (lambda x, c=by_size[size]: softmax_stash(x, c))
                     for name, by_size in configs.items()}
        providers |= {"entry point": sk.softmax, "split rows": sk.softmax_split,
                      "torch": lambda x: torch.softmax(x, -1), SAME_BYTES_COPY: torch.clone}
        return provider_timers(providers, x, dt, settle_ms=args.settle_ms)

    results, right = time_shapes(dtype_shape_jobs(SHAPES, args.shapes), timers_for, args.rounds,
                                 copy)
    ok &= right
    finish(args, results, copy_gbps=copy)  # --json: the record
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
