r"""Split-KV decoding (flash-decoding) in Triton, from a contiguous or a paged KV cache.

:mod:`teachkit.kernels.decode_simple` is the same idea with nothing else (a contiguous cache, one
query per sequence, one query head per cache head, every sequence full); read it first.

Decoding asks for one new token (or a few) of every sequence, against a cache of ``S`` keys and
values. FlashAttention's grid, one program per block of queries and per (batch, head), then
holds ``B * H`` programs: 32 for one sequence of a 32-head model, on a GPU with 132 SMs. Each
program walks all ``S`` keys alone and most of the GPU waits.

Split-KV cuts the keys of every (sequence, head) into ``num_splits`` ranges and gives each range
its own program. Every program folds its keys with the online ``(m, l, acc)`` of
:mod:`teachkit.kernels.flash` and writes a *partial* result: the output normalised over its own
keys and their log-sum-exp. A second, tiny kernel merges the partials of a row with the rule of
notebook 04 (:func:`teachkit.attention.merge_partials`, for any number of parts)::

    lse = log(sum_s exp(lse_s)),      out = sum_s exp(lse_s - lse) * out_s.

A split whose range lies past its sequence's length saw no key: it writes ``lse = -inf`` and
weighs nothing in the merge.

**Queries.** ``q`` is ``(B, H, Lq, D)``: ``Lq`` new tokens per sequence (1 for plain decoding,
a few for speculative decoding). They are the *last* ``Lq`` tokens of the sequence: with the
sequence's length ``n`` (its ``cache_seqlens`` entry), query ``i`` sits at position
``n - Lq + i`` and sees keys ``j <= n - Lq + i`` (the causal mask aligned to the bottom-right
corner, the decoding convention). With ``Lq = 1`` that is every key of the sequence. A query
that sees no key (``n = 0``, or ``n < Lq`` for the first rows) gives zeros and ``lse = -inf``,
as ``scaled_dot_product_attention`` does for a fully masked row. :func:`decode_mask` builds the
same mask for ``scaled_dot_product_attention``.

**Grouped-query attention.** The cache may hold fewer heads than ``q``: ``H = G * H_kv``. One
program serves the ``G`` query heads (times ``Lq`` tokens) that share a cache head, so every key
and value is read once per cache head, not once per query head.

**Paged cache.** With a ``block_table``, ``k_cache`` and ``v_cache`` are pools of pages
``(num_pages, page_size, H_kv, D)``, the layout of vLLM and of ``flash_attn_with_kvcache``: one
page holds ``page_size`` consecutive tokens of one sequence, all heads, so growing a sequence by
one page serves every head. Row ``b`` of the table lists the physical pages of sequence ``b`` in
order: its token ``t`` lives in page ``block_table[b, t // page_size]`` at slot
``t % page_size``. The kernel translates every key row through the table; a row of one head is
``D`` contiguous values (256 bytes for ``D = 128`` in fp16), so the reads stay coalesced. Where
a tile holds several pages and the grid few programs an SM, its rows interleave the pages so that
each thread's rows share one table entry (:data:`INTERLEAVE_PAGES_PER_SM`).

:func:`decode_attention` validates, picks a configuration (:func:`decode_config`) and the number
of splits (:func:`choose_num_splits`) and launches :func:`decode_split_kernel`, then
:func:`decode_merge_kernel`; ``num_splits=1`` runs the split kernel alone, writing the final
output: the plain, unsplit forward pass. With ``DecodeConfig(one_launch=True)`` there is no
second kernel: every split counts itself done on an atomic counter of its rows, and the one that
counts last merges the partials (:func:`merge_splits`), which saves a launch and its host time.
This is the default for calls launched from Python (``DecodeConfig.one_launch`` is ``True``
unless set): it saves the host a launch, which a loop of back-to-back calls pays in full. A grid
of many programs an SM that splits only to fill its last wave (:func:`fullest_wave_plan`) takes
the merge kernel too: such a call lasts long enough to hide the second launch. A call
being captured into a CUDA graph gets the merge kernel instead (:func:`decode_config` with
``captured``): a replay launches without the host, and there one launch costs the GPU more than
a second kernel does: the graph repeats the zero-fill of the captured call's fresh counters at
every replay (:func:`merge_counters`), and the fence, the count and the last split's reads of
the partials cost the rest (``teachkit/benchmarks/decode_nvidia_h100.json`` and
``..._cudagraph.json`` time both; notebook 09 prints the ratios). On sm_90 that merge kernel
is a programmatic dependent launch, set up while the split kernel finishes
(:data:`DEPENDENT_MERGE`). The compile check of ``python -m teachkit.kernels``
(:mod:`teachkit.kernels.compile_check`) proves every configuration fits the GPUs learners use.

The plan's rules are the module's constants, each with its measurement in its docstring, most of
them tables keyed by the GPU class where they were measured (``90`` for sm_90): the tiles
(:data:`STAGE_BYTES`, :data:`PIPELINE_STAGES`, :data:`WIDE_TILES`, :data:`SPLIT_RANGE_TILES`,
:data:`FULLEST_WAVE_TILES`, ...), when to split (:data:`LAST_WAVE_GRID`, :data:`PAGED_ENTRY_WAVES`,
...) and how a paged call reads its table (:data:`HELD_TABLE_PAGES`,
:data:`INTERLEAVE_PAGES_PER_SM`). To tune for another GPU, add its class to a table and call
:func:`forget_plans`, so that the next call plans again.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, TypeVar

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from ..device import (
    INTERPRETED,
    ON_GPU,
    compute_capability,
    current_gpu,
    multiprocessors,
    on_other_gpu,
)
from ..gpus import gpu_class
from ..validation import (
    KERNEL_DTYPES,
    plain_attention_inputs,
    require_bool,
    require_float_tensor,
    require_int,
    require_kernel_world,
    require_kv_heads,
    require_no_grad,
    require_positive_int,
    require_power_of_two,
    require_real,
    resolve_scale,
)
from .flash import HEAD_DIMS, LN2, LOG2E
from .grid_math import cdiv, next_power_of_2
from .launch_cache import (
    LaunchReplay,
    cached_launch,
    keep,
    launch_replay,
    launch_settings,
    replay_table,
    tensor_key,
)
from .scratch import contiguous_like, stream_id, stream_scratch

__all__ = [
    "HEAD_DIMS",
    "HELD_TABLE_PAGES",
    "INTERLEAVE_PAGES_PER_SM",
    "MAX_SPLITS",
    # the launch plan's measured rules (forget_plans after changing one)
    "DEPENDENT_MERGE",
    "ENTRIES_FILL_ONE_WAVE",
    "ENTRY_GRID",
    "ENTRY_GRID_HEAD_DIMS",
    "ENTRY_SPLIT_CAPTURED_FROM",
    "FULLEST_WAVE_TILES",
    "HELD_SPLIT_WAVES",
    "LAST_WAVE_FEWEST_KEYS",
    "LAST_WAVE_GRID",
    "LAST_WAVE_MOST_SPLITS",
    "NEARLY_FULL_GRID",
    "NEARLY_FULL_HEAD_DIMS",
    "NEARLY_FULL_MIN_BLOCKS",
    "NEARLY_FULL_MOST_KEYS",
    "PAGED_ENTRY_WAVES",
    "PAGED_MIN_BLOCKS",
    "PAGED_SPLIT_WAVES",
    "PIPELINE_STAGES",
    "SHORT_CACHE_TILES",
    "SHORT_ROW_SPLITS",
    "SHORT_ROW_TILES",
    "SPLIT_RANGE_MIN_BLOCKS",
    "SPLIT_RANGE_TILES",
    "STAGE_BYTES",
    "TAIL_LOOP_STAGES",
    "TAIL_MOST_PER_SM",
    "UNEVEN_WAVE_TILES",
    "WAVE_RULE_HEAD_DIMS",
    "WAVE_RULE_ROWS",
    "WAVE_SPLIT_GAIN",
    "WIDE_PROGRAMS",
    "WIDE_TILES",
    "DECODE_REPLAYS",
    "DecodeConfig",
    "DecodeReplay",
    "choose_num_splits",
    "last_wave_fill",
    "last_wave_splits",
    "entry_grid_splits",
    "decode_attention",
    "decode_config",
    "decode_mask",
    "default_config",
    "default_launch",
    "paged_range_tiles",
    "unsplit_from",
    "decode_merge_kernel",
    "decode_split_kernel",
    "fold_key_block",
    "forget_plans",
    "fullest_wave_plan",
    "fullest_wave_tiles",
    "held_table_pages",
    "interleave_pages_per_sm",
    "max_rows",
    "merge_counters",
    "merge_splits",
    "replay_key",
    "sm_count",
    "uneven_wave",
]

MAX_SPLITS = 128
"""Most splits of one row's keys (the merge kernel holds every partial of a row at once)."""
INTERPRETER_SMS = 4
"""The SMs :func:`sm_count` pretends to have under the interpreter: a few splits, fast tests."""
_INDEX_DTYPES = (torch.int32, torch.int64)
_DEVICE_TYPE = "cuda" if ON_GPU else "cpu"
_REFERENCE = ("the torch reference torch.nn.functional.scaled_dot_product_attention with "
              "attn_mask=decode_mask(cache_seqlens, Lq, S)")
_MAX_GRID_YZ = 65535
"""CUDA's limit on the second and third grid axes."""


# ---------------------------------------------------------------------------------------------
# The split kernel
# ---------------------------------------------------------------------------------------------
@triton.jit
def fold_key_block(acc, l_i, m_i, q, K, V, table_row, pages, start_n, offs_n, offs_d, seqlen,
                   row_pos, stride_kp, stride_kn, stride_kd, stride_vp, stride_vn, stride_vd,
                   qk_scale, MASKED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                   TABLE_TILE: tl.constexpr, INTERLEAVE_PAGES: tl.constexpr,
                   PRECISION: tl.constexpr, DOT_FP32: tl.constexpr):
    """Fold the keys ``start_n .. start_n + BLOCK_N - 1`` into ``(acc, l, m)`` (``m`` in log2
    units). Contiguous cache (``PAGE_SIZE == 0``): key ``j`` is row ``j`` of ``K``. Paged: row
    ``j % PAGE_SIZE`` of page ``table_row[j // PAGE_SIZE]``, taken from ``pages``, the row's
    first ``TABLE_TILE`` entries the program holds, where ``TABLE_TILE > 0``
    (:data:`HELD_TABLE_PAGES`). With ``INTERLEAVE_PAGES`` (a tile of ``n > 1`` whole pages) tile
    row ``i`` holds slot ``i // n`` of the tile's page ``i % n`` instead of key ``i``: the order
    of a tile's keys does not change the result, and the rows one thread loads, a fixed number
    of rows apart, then lie in one page (:data:`INTERLEAVE_PAGES_PER_SM`). ``MASKED`` blocks
    drop keys past the sequence and keys later than a query's position ``row_pos``.

    Shapes: ``q`` and ``acc`` ``(BLOCK_M, HEAD_DIM)``, ``l_i``, ``m_i`` and ``row_pos``
    ``(BLOCK_M,)``, ``offs_n`` ``(BLOCK_N,)``, ``offs_d`` ``(HEAD_DIM,)``; the key and value
    tiles are ``(BLOCK_N, HEAD_DIM)``, the scores ``(BLOCK_M, BLOCK_N)``."""
    if INTERLEAVE_PAGES and PAGE_SIZE > 0 and BLOCK_N > PAGE_SIZE and BLOCK_N % PAGE_SIZE == 0:
        N_PAGES: tl.constexpr = BLOCK_N // PAGE_SIZE
        entry = start_n // PAGE_SIZE + offs_n % N_PAGES  # a thread's rows: one entry
        slot = offs_n // N_PAGES
        cols = entry * PAGE_SIZE + slot
    else:  # key order: tile row i holds key start_n + i
        cols = start_n + offs_n
        entry = cols // PAGE_SIZE if PAGE_SIZE > 0 else cols  # (a contiguous cache reads
        slot = cols % PAGE_SIZE if PAGE_SIZE > 0 else cols  # neither)
    in_seq = cols < seqlen
    if PAGE_SIZE > 0 and PAGE_SIZE % BLOCK_N == 0 and TABLE_TILE == 0:  # one page: one entry
        page = tl.load(table_row + start_n // PAGE_SIZE).to(tl.int64)
        slot = (start_n % PAGE_SIZE + offs_n).to(tl.int64)
        k_rows = page * stride_kp + slot * stride_kn
        v_rows = page * stride_vp + slot * stride_vn
    elif PAGE_SIZE > 0:  # an entry per key (per thread, interleaved): held row or table
        if TABLE_TILE > 0:
            page = tl.gather(pages, tl.minimum(entry, TABLE_TILE - 1), 0)
        elif MASKED:
            page = tl.load(table_row + entry, mask=in_seq, other=0)
        else:
            page = tl.load(table_row + entry)
        page = page.to(tl.int64)
        k_rows = page * stride_kp + slot * stride_kn
        v_rows = page * stride_vp + slot * stride_vn
    else:
        k_rows = cols.to(tl.int64) * stride_kn
        v_rows = cols.to(tl.int64) * stride_vn
    k_ptrs = K + k_rows[:, None] + offs_d[None, :] * stride_kd
    v_ptrs = V + v_rows[:, None] + offs_d[None, :] * stride_vd
    if MASKED:
        k = tl.load(k_ptrs, mask=in_seq[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=in_seq[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    v_dtype = v.dtype
    if DOT_FP32:  # the interpreter multiplies bfloat16 tiles wrongly: multiply in float32
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
    if MASKED:  # row_pos <= seqlen - 1, so this also drops the keys past the sequence
        qk = tl.where(cols[None, :] <= row_pos[:, None], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet: no NaN
    alpha = tl.exp2(m_i - safe)
    p = tl.exp2(qk - safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(v_dtype).to(v.dtype)  # p rounded to the cache's dtype, as the tensor cores take it
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
    return acc, l_i, m_new


@cached_launch
@triton.jit
def decode_split_kernel(
    Q, K, V, SEQLENS, TABLE, O, LSE, COUNTERS, OUT, LSE_OUT,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_tb,
    H_KV, Lq, qk_scale, n_pages,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr, TABLE_TILE: tl.constexpr, INTERLEAVE_PAGES: tl.constexpr,
    PRECISION: tl.constexpr, DOT_FP32: tl.constexpr, ONE_LAUNCH: tl.constexpr,
    TAIL_STAGES: tl.constexpr,
):
    """Program ``(split, b * H_KV + kv_head, row block)``: the rows ``(query head, query token)``
    that share one cache head, against one range of its keys. Writes the rows' output normalised
    over the range (``O``, float32 partials or the final output) and their natural-log lse.

    Shapes: ``Q`` ``(B, H, Lq, HEAD_DIM)``; ``K`` and ``V`` ``(B, H_KV, S, HEAD_DIM)``, or page
    pools ``(num_pages, PAGE_SIZE, H_KV, HEAD_DIM)`` with ``TABLE`` ``(B, n_pages)``, whose
    row a program reads whole at its start where ``TABLE_TILE`` (a power of two, at least
    ``n_pages``) is not 0;
    ``SEQLENS`` ``(B,)``; ``O`` ``(num_splits, B, H, Lq, HEAD_DIM)`` and ``LSE``
    ``(num_splits, B, H, Lq)``, contiguous (buffers the call allocated, so their strides follow
    from the sizes and are not passed). The program holds ``BLOCK_M`` rows: ``q`` and ``acc``
    ``(BLOCK_M, HEAD_DIM)``, ``m`` and ``l`` ``(BLOCK_M,)``.

    With ``ONE_LAUNCH``, the last split of a row block to finish also merges (:func:`merge_splits`)
    into ``OUT`` ``(B, H, Lq, HEAD_DIM)`` and ``LSE_OUT`` ``(B, H, Lq)``, contiguous too,
    counting the finished splits in ``COUNTERS`` ``(B * H_KV, row blocks)`` int32, zeros
    between calls."""
    split = tl.program_id(0)
    num_splits = tl.num_programs(0)
    b = tl.program_id(1) // H_KV
    kv_head = tl.program_id(1) % H_KV
    seqlen = tl.load(SEQLENS + b)

    # This split's keys: the sequence's key blocks shared out evenly, whole blocks per split.
    n_blocks = tl.cdiv(seqlen, BLOCK_N)
    start = split * tl.cdiv(n_blocks, num_splits) * BLOCK_N
    end = tl.minimum(start + tl.cdiv(n_blocks, num_splits) * BLOCK_N, seqlen)

    # Rows: r = g * Lq + i is query token i of query head kv_head * GROUP + g.
    offs_r = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_r < GROUP * Lq
    head = (kv_head * GROUP + offs_r // Lq).to(tl.int64)
    tok = offs_r % Lq
    row_pos = seqlen - Lq + tok  # the query's position: it sees keys 0 .. row_pos
    # In the contiguous outputs, row (b, head, tok) is row (b * H + head) * Lq + tok, and split
    # s's partials lie s * n_rows rows further on (n_rows = B * H * Lq).
    n_rows = (tl.num_programs(1) // H_KV).to(tl.int64) * (H_KV * GROUP) * Lq
    out_row = (b.to(tl.int64) * (H_KV * GROUP) + head) * Lq + tok
    q = tl.load(Q + b.to(tl.int64) * stride_qb + head[:, None] * stride_qh
                + tok[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    if PAGE_SIZE > 0:  # K and V are page pools; the table row says where each page lives
        k_base = K + kv_head.to(tl.int64) * stride_kh
        v_base = V + kv_head.to(tl.int64) * stride_vh
        table_row = TABLE + b.to(tl.int64) * stride_tb
        if TABLE_TILE > 0:  # the whole row, read beside seqlen instead of after it
            entry = tl.arange(0, TABLE_TILE)
            pages = tl.load(table_row + entry, mask=entry < n_pages, other=0)
        else:
            pages = table_row  # not read
    else:
        k_base = K + b.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
        v_base = V + b.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
        table_row = TABLE
        pages = TABLE  # not read
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = qk_scale * LOG2E

    # Keys below seqlen - Lq + 1 are seen by every query: whole blocks of them need no mask.
    last_shared = tl.minimum(end, seqlen - Lq + 1)
    full_end = tl.maximum(start, start + ((last_shared - start) // BLOCK_N) * BLOCK_N)
    for start_n in range(start, full_end, BLOCK_N):
        acc, l_i, m_i = fold_key_block(acc, l_i, m_i, q, k_base, v_base, table_row, pages,
                                       start_n, offs_n, offs_d, seqlen, row_pos,
                                       stride_kb, stride_kn, stride_kd,
                                       stride_vb, stride_vn, stride_vd, qk_scale,
                                       False, PAGE_SIZE, BLOCK_N, TABLE_TILE,
                                       INTERLEAVE_PAGES, PRECISION, DOT_FP32)
    # The masked blocks, at most a few; on a grid of few programs an SM not pipelined
    # (TAIL_LOOP_STAGES)
    for start_n in tl.range(full_end, end, BLOCK_N, num_stages=TAIL_STAGES):
        acc, l_i, m_i = fold_key_block(acc, l_i, m_i, q, k_base, v_base, table_row, pages,
                                       start_n, offs_n, offs_d, seqlen, row_pos,
                                       stride_kb, stride_kn, stride_kd,
                                       stride_vb, stride_vn, stride_vd, qk_scale,
                                       True, PAGE_SIZE, BLOCK_N, TABLE_TILE,
                                       INTERLEAVE_PAGES, PRECISION, DOT_FP32)

    # No key seen (an empty split, or a query before the first key): zeros and lse = -inf.
    # (l == 0, not l > 0: a NaN must reach the merge, as it reaches SDPA's output.)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]  # acc is 0 where l is
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.log2(l_safe)) * LN2)
    part_row = split * n_rows + out_row
    tl.store(O + part_row[:, None] * HEAD_DIM + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE + part_row, lse, mask=row_ok)

    if ONE_LAUNCH:  # the last of the splits of these rows to finish merges them all
        tl.debug_barrier()  # every thread's partials are written before the count
        counter = COUNTERS + tl.program_id(1) * tl.num_programs(2) + tl.program_id(2)
        # acq_rel: this program's partials become visible with its count (release), and the
        # one that counts last sees every other split's partials (acquire)
        finished = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
        if finished == num_splits - 1:
            tl.store(counter, 0)  # zero again for the next call (every split has counted)
            merge_splits(O, LSE, OUT, LSE_OUT, out_row, row_ok, offs_d, num_splits, n_rows,
                         BLOCK_M, HEAD_DIM)


@triton.jit
def merge_splits(O, LSE, OUT, LSE_OUT, out_row, row_ok, offs_d, num_splits, n_rows,
                 BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Merge the ``num_splits`` partials of ``BLOCK_M`` rows by their lse, the rule of
    :func:`decode_merge_kernel`, inside the split kernel: one pass over the splits' lse for
    the maximum, one over their outputs for the weighted sum. The partials were written by
    other programs, so they are loaded ``volatile`` (from L2, past this SM's L1 cache).

    Shapes: ``out_row`` (the rows' index in ``OUT`` and ``LSE_OUT``, and in split 0's
    partials; split ``s``'s lie ``s * n_rows`` rows further on) and ``row_ok`` ``(BLOCK_M,)``;
    ``offs_d`` ``(HEAD_DIM,)``; each split's partial output ``(BLOCK_M, HEAD_DIM)`` and lse
    ``(BLOCK_M,)``."""
    lse_rows = LSE + out_row
    o_rows = O + out_row[:, None] * HEAD_DIM + offs_d[None, :]
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for s in range(0, num_splits):
        lse_s = tl.load(lse_rows + s * n_rows, mask=row_ok, other=float("-inf"),
                        volatile=True)
        m = tl.maximum(m, lse_s)
    safe = tl.where(m == float("-inf"), 0.0, m)  # every split empty: weights 0, not NaN
    total = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for s in range(0, num_splits):
        lse_s = tl.load(lse_rows + s * n_rows, mask=row_ok, other=float("-inf"),
                        volatile=True)
        w = tl.exp2((lse_s - safe) * LOG2E)  # exp(lse_s - max): at most 1
        part = tl.load(o_rows + s * n_rows * HEAD_DIM, mask=row_ok[:, None], other=0.0,
                       volatile=True)
        total += w
        acc += w[:, None] * part
    t_safe = tl.where(total == 0.0, 1.0, total)
    out = acc / t_safe[:, None]  # acc is 0 where total is
    lse = tl.where(total == 0.0, float("-inf"), safe + tl.log2(t_safe) * LN2)
    tl.store(OUT + out_row[:, None] * HEAD_DIM + offs_d[None, :], out.to(OUT.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE_OUT + out_row, lse, mask=row_ok)


# ---------------------------------------------------------------------------------------------
# The merge kernel
# ---------------------------------------------------------------------------------------------
@cached_launch
@triton.jit
def decode_merge_kernel(
    O_PART, LSE_PART, O, LSE, n_rows, num_splits,
    HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr, PDL: tl.constexpr,
):
    """Program ``row``: merge the ``num_splits`` partial results of one (sequence, head, query
    token) by their lse, the rule of :func:`teachkit.attention.merge_partials` for many parts.

    Shapes: ``O_PART`` ``(num_splits, n_rows, HEAD_DIM)`` and ``LSE_PART``
    ``(num_splits, n_rows)`` float32; ``O`` ``(n_rows, HEAD_DIM)``; ``LSE`` ``(n_rows,)``, all
    contiguous (``n_rows = B * H * Lq``: the call's buffers ``(num_splits, B, H, Lq, ...)`` seen
    as rows). A row loads ``(SPLITS, HEAD_DIM)`` partials and ``(SPLITS,)`` lse.

    With ``PDL`` the kernel is launched as a programmatic dependent launch (``launch_pdl``,
    sm_90 and later: :data:`DEPENDENT_MERGE`): the GPU may start it before the split kernel
    before it on the stream has finished, so every program first waits, at
    ``griddepcontrol.wait``, until that grid is done and its partials are visible."""
    if PDL:  # launched early: wait for the split kernel's grid and its writes
        gdc_wait()
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, SPLITS)
    offs_d = tl.arange(0, HEAD_DIM)
    used = offs_s < num_splits
    part_row = offs_s.to(tl.int64) * n_rows + row  # (SPLITS,): this row in every split
    lse = tl.load(LSE_PART + part_row, mask=used, other=float("-inf"))
    m = tl.max(lse, 0)
    safe = tl.where(m == float("-inf"), 0.0, m)  # every split empty: weights 0, not NaN
    w = tl.exp2((lse - safe) * LOG2E)  # exp(lse_s - max): at most 1, never overflows
    total = tl.sum(w, 0)
    part = tl.load(O_PART + part_row[:, None] * HEAD_DIM + offs_d[None, :], mask=used[:, None],
                   other=0.0)
    out = tl.sum(w[:, None] * part, 0)
    t_safe = tl.where(total == 0.0, 1.0, total)
    out = out / t_safe  # out is 0 where total is
    lse_out = tl.where(total == 0.0, float("-inf"), safe + tl.log2(t_safe) * LN2)
    tl.store(O + row * HEAD_DIM + offs_d, out.to(O.dtype.element_ty))
    tl.store(LSE + row, lse_out)


# ---------------------------------------------------------------------------------------------
# Configurations and the number of splits
# ---------------------------------------------------------------------------------------------
class DecodeConfig(NamedTuple):
    """One launch of the split kernel: keys per iteration, warps, pipeline depth, and whether
    the last split of a row block merges the partials itself (``one_launch``) instead of a
    second kernel doing it."""

    block_n: int
    num_warps: int
    num_stages: int
    one_launch: bool = True


_INTERPRETER_CONFIG = DecodeConfig(16, 4, 1)
"""Under the interpreter: small key blocks, so tests on tiny caches stay fast."""

STAGE_BYTES = 32 * 1024
"""Bytes of K and V one iteration loads on a GPU (``2 * BLOCK_N * D * element size``): large
contiguous tiles, several in flight (``num_stages``) to keep the memory system busy."""
PIPELINE_STAGES = {75: 2, 80: 3, 89: 2, 90: 2}
"""Pipeline depth per GPU class (:func:`teachkit.gpus.gpu_class`): 3 x 32 KB on sm_80, 2 x 32 KB
on sm_89 and sm_90, 2 x 16 KB on a T4. On an H100, 2 x 32 KB (three programs fit an SM) read the
cache of 16 sequences at 3047-3098 GB/s where 3 x 32 KB (two fit) read it at 2763-2806, and the
two were equal at batch 1 and 8 (``gpu_checks/decode_gpu.py --sweep-at``)."""


TAIL_LOOP_STAGES = {90: 1}
"""Pipeline depth of the split kernel's loop over masked key blocks (``TAIL_STAGES``, its own
``tl.range(..., num_stages=...)``) per GPU class, where measured, for a grid of at most
:data:`TAIL_MOST_PER_SM` programs an SM: 1, not pipelined. Elsewhere ``None``: pipelined as deep
as the unmasked loop (the kernel's ``num_stages``), as Triton does a loop that says nothing.
That loop runs a few blocks at most, and none for one new token against a full cache; not
pipelined, it loads its tiles into registers, without copies to shared memory, commit groups and
waits of its own (``python -m teachkit.kernels --tail-loop-evidence``). On an H200 (contiguous
calls at ``D = 128``, one to sixteen sequences, 1k-64k tokens, and at ``D = 64``, one to eight,
1k and 4k, H = 32 fp16, interleaved, best of three; ``gpu_checks/decode_gpu.py
--tail-loop-sweep``, records ``decode_tail_loop_nvidia_h200`` and ``..._cudagraph``) every call
read faster so: 1.003-1.038x on CUDA-graph replays of up to 4k tokens, 1.001-1.011x on longer
caches, paged calls at eight sequences 1.003-1.032x, and 1.001-1.064x launched plainly.
Replayed, one sequence of 1k tokens at ``D = 128`` then reads at 1.01x cuDNN (0.97x pipelined)
and four sequences at 0.99x (0.96x)."""

TAIL_MOST_PER_SM = 2
"""The most programs an SM a grid has for its masked loop to go unpipelined
(:data:`TAIL_LOOP_STAGES`). Its tiles then live in registers: compiled with Triton 3.6, a thread of
the 64-key tiles takes up to 128 registers where pipelined it took 96, so five such programs no
longer fit an SM, and the rules that count programs an SM (:data:`PAGED_ENTRY_WAVES`,
:data:`FULLEST_WAVE_TILES`, :data:`SHORT_ROW_SPLITS`) were measured with the loop pipelined; every
tile still fits two (``compile_check``'s residency functions). Grids of more programs keep it
pipelined: on the H200's replays sixteen sequences at ``D = 128`` (3.9 programs an SM) read
1.001-1.009x faster not pipelined, and one sequence at ``D = 64`` split for four programs an SM
1.016-1.021x, which they forgo."""

WIDE_TILES = {90: (64 * 1024, 2)}
"""Bytes of K and V one iteration loads, and pipeline stages, for an unsplit grid of one or two
programs an SM (:data:`WIDE_PROGRAMS`), where measured. With so few programs an SM, each must
keep more bytes in flight to keep the memory busy; with more, the programs themselves do. On an
H200 (132 SMs, H = 32, D = 128 fp16, 1k-64k tokens, CUDA-graph replays, one run each):

* contiguous caches against cuDNN (``gpu_checks/decode_gpu.py --contiguous-sweep``, record
  ``decode_contiguous_nvidia_h200``): 64 KB in 2 stages (128 keys) read at 0.93-0.99x at batch
  5 and 0.98-1.00x at batch 8 (1.2 and 1.9 programs an SM), where the usual tiles (32 KB,
  2 stages) read at 0.74-0.83x and 0.93-0.98x (from 4k tokens batch 5 now splits to fill its
  last wave, :data:`LAST_WAVE_GRID`). With more programs the record is mixed: at batch
  12 (2.9 an SM) the usual tiles read at 1.04-1.05x and the wide ones at 0.95-0.96x, at batch 24
  (5.8) at 0.92-0.95x and 0.99-1.01x, at batches 16 and 32 both at 0.99-1.02x, as full as
  each tile leaves the grid's last wave (:data:`FULLEST_WAVE_TILES` picks by that);
* paged caches (the block table adds a wait to every load) against the contiguous default
  (``gpu_checks/decode_gpu.py --paged-sweep``, record ``decode_paged_nvidia_h200``): at batch 8
  64 KB in 2 stages read at 99-100 % where the contiguous tiles read at 90-99 % and 3 stages
  of 64 KB at 95-100 % (from 16k tokens such a call now splits, :data:`PAGED_ENTRY_WAVES`,
  and reads at 98 % at 16k tokens, the record's one such problem); at batch 16 (3.9 programs
  an SM) the contiguous tiles read at 99-100 %, 64 KB in 2 stages at 87-90 % and in 3 stages at
  86-100 %."""

SHORT_ROW_TILES = {90: (32 * 1024, 3)}
"""Bytes of K and V one iteration loads, and pipeline stages, where :data:`WIDE_TILES` or
:data:`SPLIT_RANGE_TILES` would load 64 KB but a contiguous call's rows of K and V are 128 bytes
(``D = 64`` in 16 bits), where measured; paged calls that read their table entry by entry keep those
(a paged call whose programs hold the row takes these, :data:`HELD_TABLE_PAGES`). There 64 KB
would be 256 keys, past a tile's 128, so those tiles leave 32 KB in 2 stages, the same as many
programs take; a third stage keeps more in flight instead. On an H200 (H = 32, D = 64 fp16,
CUDA-graph replays, ``gpu_checks/decode_gpu.py --head-dim-sweep``, record
``decode_head_dims_nvidia_h200``):

* unsplit, batches 5 and 8 (1.2 and 1.9 programs an SM, 1k-16k tokens): the default with these
  tiles reads at 0.93-0.99x cuDNN, where 2 stages read at 0.75-0.94x and 256-key tiles in 2
  stages at 0.89-0.99x;
* split into ranges of 512 keys or more (one and two sequences, 4k-64k tokens, the merge
  kernel): the default with these tiles reads at 0.94-0.98x cuDNN, where 2 stages read at
  0.92-0.94x and 256-key tiles in 2 stages at 0.90-0.99x. A captured split call now aims for
  more programs with smaller tiles instead (:data:`SHORT_ROW_SPLITS`); merging in one launch
  keeps these."""

SHORT_CACHE_TILES = {90: (32 * 1024, 3)}
"""Bytes of K and V one iteration loads, and pipeline stages, for a grid that
:data:`LAST_WAVE_GRID` would cut into ranges but whose cache is shorter than
:data:`LAST_WAVE_FEWEST_KEYS`, where measured: it runs unsplit, with these tiles in place of
:data:`WIDE_TILES`. A short cache is over before a few deep iterations have overlapped; twice
as many of half the bytes keep as much in flight. On an H200 (H = 32, D = 128 fp16, five
sequences: 1.2 programs an SM): 32 KB in 3 stages read at 0.96x cuDNN at 1k tokens where
64 KB in 2 stages read at 0.93x (graph replays, ``gpu_checks/decode_gpu.py
--contiguous-sweep``, record ``decode_contiguous_nvidia_h200``). Side by side
(``gpu_checks/decode_gpu.py --short-rows-sweep``, records ``decode_short_rows_nvidia_h200``
and ``..._cudagraph``, interleaved, best of three) these tiles read at 1.04x the 64 KB tiles at
1k tokens replayed and 1.02x launched plainly, and 1.02x at 2k: 0.96-0.97x cuDNN, where the
64 KB tiles read at 0.93-0.95x. With more programs an SM the two read alike (six to eight
sequences, 1.5-1.9 an SM: within 1.5 % either way in an earlier scratch run, the 64 KB tiles
ahead from seven), and such grids keep the 64 KB tiles (0.98-1.02x cuDNN in those records)."""

SHORT_ROW_SPLITS = {90: (4, 32 * 1024, 2)}
"""Programs an SM a contiguous 16-bit call with rows of K and V of 128 bytes (``D = 64``) aims
for where it splits the keys and merges them with the merge kernel (being captured into a CUDA
graph), and the bytes of K and V one iteration loads and its stages, with half the bytes where
a range would hold fewer than :data:`SPLIT_RANGE_MIN_BLOCKS` such iterations; where measured. Such a
program keeps half the bytes of a ``D = 128`` one in flight for each key, so twice the
programs keep the memory as busy, and these tiles hold them: compiled as launched with Triton
3.6, 64 keys in 2 stages take 122 registers a thread (four programs an SM) and 128 keys 96
(five; ``python -m teachkit.kernels --short-rows-residency``), where 128 keys in 3 stages take
70 KB of shared memory (three). On an H200 (one and two sequences, H = 32, D = 64 fp16,
1k-64k tokens, graph replays, interleaved, best of three; ``gpu_checks/decode_gpu.py
--short-rows-sweep``, record ``decode_short_rows_nvidia_h200_cudagraph``): four programs an SM
with these tiles read at 0.93-0.99x cuDNN and 1.01-1.06x the two of the default before (128
keys in 2 stages for short ranges, in 3 for long, :data:`SHORT_ROW_TILES`), which read at
0.92-0.98x; the most gained by short caches (one sequence of 4k tokens: 0.94x to 0.99x; two of
1k: 0.94x to 0.99x; one of 1k, a 12 µs replay: 0.92x to 0.93x). Merging in one launch
(plain launches) the last split of a row reads every partial of the row, twice as many with
twice the splits: there four programs an SM read at 0.95-0.99x the two from 4k tokens (record
``decode_short_rows_nvidia_h200``: 0.91-0.97x cuDNN), and such a call keeps two."""

DEPENDENT_MERGE = frozenset({90})
"""GPU classes (:func:`~teachkit.gpus.gpu_class`) on which a call that merges with
:func:`decode_merge_kernel` launches it as a programmatic dependent launch (Triton's
``launch_pdl``; sm_90 and later), where measured. A kernel launched after another on a stream
normally starts once that one has finished and its writes are flushed; launched so, the GPU
may set it up while the split kernel's last programs still run, and its programs wait at
``griddepcontrol.wait`` (``PDL``) for that grid to be done and its partials visible (``python
-m teachkit.kernels --dependent-merge-evidence`` shows the instruction on sm_90 and none on
the other classes). The split kernel does not signal its dependents before it ends
(``griddepcontrol.launch_dependents``), so merge programs never wait on an SM a split program
could use. On an H200's graph replays (one and two sequences at ``D = 64`` and ``128``, H = 32
fp16, 1k-64k tokens, interleaved, best of three; ``gpu_checks/decode_gpu.py
--dependent-merge-sweep``, record ``decode_dependent_merge_nvidia_h200``) captured split calls
read at 1.00-1.02x the merge kernel launched after the split kernel, the most on the
shortest caches (1.01-1.02x at 1k-4k tokens at ``D = 64``, 0.2-0.3 µs of a 12-31 µs replay),
against 1.00x where four sequences do not split (no merge kernel: the timing's noise)."""

WIDE_PROGRAMS = (1, 2)
"""Programs of the unsplit grid per SM, from and to (both inclusive), for which a call takes
:data:`WIDE_TILES`: fewer than one means the call splits the keys (but see
:data:`NEARLY_FULL_GRID`)."""

NEARLY_FULL_GRID = {90: (0.7, 64 * 1024, 3)}
"""Where measured: the fewest programs an SM (below one) from which an unsplit grid of a
contiguous float16 or bfloat16 call is full enough not to split the keys, and the bytes of K and
V one iteration then loads and its pipeline stages (:func:`unsplit_from`). Splitting such a grid
in two fills every SM twice, but every program writes a partial result and a second launch (or
the last split) merges them; one program an SM with three 64 KB stages in flight keeps the
memory as busy without that. On an H200 (132 SMs, H = 32, D = 128 fp16, 1k-64k tokens,
CUDA-graph replays, ``gpu_checks/decode_gpu.py --contiguous-sweep``, record
``decode_contiguous_nvidia_h200``), batches 3 and 4 (0.73 and 0.97 programs an SM) unsplit with
these tiles read at 0.96-1.03x cuDNN where two splits read at 0.90-1.00x, the least at 1k
tokens; at batch 2 (0.48 an SM) the unsplit grid leaves half the GPU idle and reads at
0.73-0.98x, the least on the longest caches, where the default's four splits read at
0.97-1.00x. At D = 256 (64 keys a tile) batches 3 and 4 read at 1.12-1.51x cuDNN unsplit, at
1.00-1.08x the rate of two splits (``--head-dim-sweep``, record
``decode_head_dims_nvidia_h200``). At D = 64 (256 keys a tile, :data:`NEARLY_FULL_MOST_KEYS`)
they read at 0.98-1.21x, at 1.01-1.10x two splits but at batch 3 from 16k tokens, where two
splits (with :data:`SHORT_ROW_TILES`) read 1-6 % faster. Paged calls that read their table
entry by entry keep splitting (from one program an SM on as well, :data:`PAGED_ENTRY_WAVES`):
with one program an SM nothing hides the wait for each entry (a
paged call whose programs hold the row does not, :data:`HELD_TABLE_PAGES`). So do float32 calls,
which their ieee products bound rather than the memory, and head dims other than
:data:`NEARLY_FULL_HEAD_DIMS`."""

NEARLY_FULL_HEAD_DIMS = (64, 128, 256)
"""The head dims at which :data:`NEARLY_FULL_GRID` was measured."""

NEARLY_FULL_MOST_KEYS = 256
"""Most keys a tile of :data:`NEARLY_FULL_GRID` holds (other tiles hold at most 128): at
``D = 64`` in 16 bits a 64 KB stage is 256 keys. Capped at 128 keys (32 KB a stage), batches
3 and 4 read at 0.99-1.06x cuDNN where 256 keys read at 0.98-1.21x, the most on the longest
caches (record ``decode_head_dims_nvidia_h200``, ``contiguous unsplit 32 KB x 3`` and ``64 KB
x 3``); on caches shorter than :data:`NEARLY_FULL_MIN_BLOCKS` such tiles 128 keys read
faster."""

NEARLY_FULL_MIN_BLOCKS = 8
"""The fewest iterations of :data:`NEARLY_FULL_MOST_KEYS` keys a cache must hold for an
unsplit nearly full grid (:data:`NEARLY_FULL_GRID`) to take tiles of that many keys; a shorter
cache takes at most 128 keys a tile, as other tiles do: with only a few iterations the loop is
over before three deep stages have overlapped, and twice as many of half the keys keep as much
in flight. On an H200 (three and four sequences at ``D = 64``, 0.73 and 0.97 programs an SM,
H = 32 fp16, CUDA-graph replays, interleaved, best of three; ``gpu_checks/decode_gpu.py
--nearly-full-sweep``, records ``decode_nearly_full_nvidia_h200`` and ``..._cudagraph``): on
1k tokens (four iterations of 256 keys) 128-key tiles in 3 stages read at 0.97-1.00x cuDNN,
1.007-1.015x the 256-key tiles (0.97-0.99x), and the default with them at 0.99-1.00x; at 1.5k the
two are within 3 % either way (256 keys ahead at three sequences, 128 at four); from 2k
tokens on, 256-key tiles read at 1.04-1.21x cuDNN and at 1.00-1.21x the 128-key ones, the
most on the longest caches. Launched plainly, the host's time shows on caches of up to 2k
tokens (cuDNN's plain times there are 1.4-2.6x its replayed ones), so the replays decide."""

LAST_WAVE_GRID = {90: (4 / 3, 2)}
"""Where measured: the most programs an SM (from one) of an unsplit contiguous float16 or
bfloat16 grid that splits its keys so that its last wave of programs is nearly full, and how
many programs of its tiles an SM holds at once (:func:`last_wave_splits`). Such a grid gives
some SMs two programs and the rest one, and the call lasts as long as the SMs with two. Split
into ranges, the programs queue for the places that free up, and the call ends with a last
wave as full as the count of ranges makes it. At ``D = 128`` the tiles of those ranges
(:data:`SPLIT_RANGE_TILES`: 128 keys in 2 stages) take 244 registers a thread with the merge kernel
and 254 merging in one launch, compiled for sm_90 as a launch of one new token with one query
head a cache head specialises them (``python -m teachkit.kernels --last-wave-residency``,
Triton 3.6), so two fit an SM. (Triton 3.9 compiles them to 146 and 108 registers, three an SM,
where the fullest last wave is another count; the rule and its figures are Triton 3.6's, not
measured with 3.9.) On
an H200 (132 SMs, ``D = 128`` fp16, grids of 136 to 192 programs: 34
sequences of 4 cache heads, 19 and 22 of 8, 5 of 32 and 24 of 8; ``gpu_checks/decode_gpu.py
--last-wave-sweep``, records ``decode_last_wave_nvidia_h200`` and ``..._cudagraph``, plain
launches and graph replays alike) the ranges this picks (5, 5, 3 and 3 for 136, 152, 160 and
176 programs) read at 1.04-1.22x the unsplit grid from 16k tokens and 0.98-1.04x at 4k (the
least at 1.33 an SM), and at 0.98-1.09x cuDNN from 16k tokens where unsplit they read at
0.82-1.03x. Ranges whose grid spills just past a whole wave lose: two ranges of 136 programs
(272 places for 264) read at 0.84-0.86x the unsplit grid. At 1.45 programs an SM (192) four
ranges gained 1-2 % from 16k tokens and lost 3-7 % below, so such a grid stays unsplit; and
at 2k tokens, below :data:`LAST_WAVE_FEWEST_KEYS`, the best split count lost 0-5 %. A
paged call that holds its table row splits alike, with the usual tiles (32 KB in 2 stages) as
any split paged call: five sequences of 4k tokens read at 100-102 % of the contiguous default,
against 94-96 % unsplit (in a scratch run 128-key tiles read at 0.89x the contiguous default
there)."""

WAVE_RULE_HEAD_DIMS = (128,)
"""The head dims at which :data:`LAST_WAVE_GRID` and :data:`FULLEST_WAVE_TILES` were
measured: at ``D = 64`` (128 keys in 3 stages) last-wave splits gained at 16k tokens and lost at
4k on the same grids in a scratch run."""

LAST_WAVE_FEWEST_KEYS = 4096
"""The fewest keys a cache needs for :data:`LAST_WAVE_GRID` to split it."""

WAVE_RULE_ROWS = 16
"""The most query rows a program holds (``BLOCK_M``) for :data:`LAST_WAVE_GRID` to split its
grid or :data:`FULLEST_WAVE_TILES` to pick its tiles: the residency they count on was
compiled, and the grids timed, with 16 (up to 16 query heads a cache head, one new token each);
more rows take more registers a thread."""

LAST_WAVE_MOST_SPLITS = 5
"""The most ranges :func:`last_wave_splits` cuts a row into (the most measured)."""

FULLEST_WAVE_TILES = {90: {False: ((32 * 1024, 2, 4), (64 * 1024, 2, 2), (32 * 1024, 3, 3)),
                             True: ((32 * 1024, 2, 5), (64 * 1024, 2, 3), (32 * 1024, 3, 3))}}
"""Where measured: the tiles an unsplit float16 or bfloat16 grid of more than two programs an SM
(past :data:`WIDE_PROGRAMS`) chooses from, contiguous (``False``) and paged (``True``), as
``(bytes of K and V an iteration loads, pipeline stages, programs of those tiles an SM holds at
once)``, the usual tiles first (:func:`fullest_wave_tiles`). Such a grid runs in waves of as
many programs as the SMs hold, and the call waits for its last wave, full or not: the usual
tiles keep theirs while the grid fits in one wave of them, and otherwise the grid takes the
tiles whose last wave is the fullest, the first of these on a tie. The programs an SM are what
the kernels compiled to on an H200 with Triton 3.6 (``D = 128``, one query head a cache head;
the record below keeps each launched kernel's ``n_regs`` and ``metadata.shared``): contiguous,
128 registers a thread and 38 KB of shared memory (four an SM by registers), 244 and 72 KB
(two), 96 and 70 KB (three by shared memory); paged, holding the table row or not, 96 and 38 KB
(five), 138-168 and 72 KB (three) and 96-159 and 38-70 KB (three). (``python -m teachkit.kernels
--wave-tiles-residency`` compiles the same tiles without a GPU, as a launch of one new token
with one query head a cache head specialises them, to the same registers and shared memory, tile
for tile; the rule and its figures are Triton 3.6's.) On an H200 (132 SMs, H = 32, ``D = 128``
fp16, 12 to 48 sequences: 2.9 to 11.6 programs an SM, 4k and 16k tokens, pages of 16, CUDA-graph
replays, ``gpu_checks/decode_gpu.py --wave-tiles-sweep``, record
``decode_wave_tiles_nvidia_h200``) the contiguous tiles this picks unsplit read at 0.89-1.05x
cuDNN where the usual tiles alone read at 0.76-1.05x, and at 1.06-1.17x the usual tiles where
they differ (18-24, 36 and 40 sequences). The paged tiles it picks read at 0.88-1.02x cuDNN
where the usual ones read at 0.77-1.02x, at 1.01-1.27x the usual ones where they differ (22
sequences on). Some grids no tile fills: at 26 sequences every contiguous tile's last wave is at
most four fifths full, and the pick reads at 0.96x cuDNN at 16k tokens; paged, the picks at
26-32 and 44 sequences leave last waves 70-89 % full and read at 0.88-0.98x. Those grids cut
their keys into ranges instead (:func:`fullest_wave_plan`, :data:`WAVE_SPLIT_GAIN`).
Grouped-query paged calls keep the usual tiles: their residency was not measured."""

WAVE_SPLIT_GAIN = 0.03
"""How much fuller (a share of the last wave's places) the last wave of a grid of more than two
programs an SM must come out cut into ranges, 2 to :data:`LAST_WAVE_MOST_SPLITS` of them with
any of :data:`FULLEST_WAVE_TILES`, than it does unsplit with the tiles
:func:`fullest_wave_tiles` picks, for the call to split (:func:`fullest_wave_plan`), from
:data:`LAST_WAVE_FEWEST_KEYS` keys. Tiles alone leave some grids with no full last wave: at 18
sequences of 32 heads (576 programs) the fullest contiguous one is 0.73 full, at 26 (832) 0.79,
and paged 0.70. Ranges multiply the programs, so some count of them fills the last wave of some
tiles: 18 sequences in 5 ranges of 128 keys in 2 stages fill 0.99 of theirs. Each range writes
a partial result that the merge kernel reads back, a few MB against GBs of cache, and the fill
is a model, so a call splits only where its last wave gains more than this. The ranges merge
with the merge kernel, launched or replayed: a call this long (a hundred microseconds or more)
hides the host's second launch, and merging in one launch would leave the same programs an SM
(compiled as launched it takes 0-18 registers a thread more) and read the same (below).

In the record of :data:`FULLEST_WAVE_TILES` (H200, graph replays, which times each tile also in
the ranges that fill its last wave the most) the default reads contiguous caches at 0.98-1.05x
cuDNN and paged ones at 0.96-1.02x, and paged at 96.9-99.9 % of the contiguous default. Where it
splits, it reads at 1.02-1.14x the unsplit tiles of :func:`fullest_wave_tiles` contiguous at 18,
20 and 26 sequences and at 16k tokens at 28 and 44, and within 1.5 % of them (0.99-1.01x) at 22
sequences and at 4k tokens at 28 and 44; paged at 1.00-1.11x (22, 26, 28, 32 and 44 sequences;
26 sequences of 16k tokens from 0.88x cuDNN to 0.97x). An earlier run of the sweep the same day,
on another H200, read the contiguous splits at 0.99-1.15x the unsplit tiles and the paged ones
at 1.03-1.13x. Launched plainly (a scratch run, 18, 26 and 28 sequences, 4k and 16k tokens) the
split plans read at 1.01-1.08x cuDNN where the unsplit tiles read at 0.92-1.00x, and merging in
one launch instead read the same (within 0.3 %). Where the gain is at most this, splitting did
not pay in a scratch run before the record: 32 sequences contiguous (0.97 full unsplit, 0.99 in
5 ranges of 64 keys in 3 stages) read at 0.98-1.00x cuDNN split against 1.00x unsplit."""

UNEVEN_WAVE_TILES = {90: (64 * 1024, 2)}
"""Where measured: the tiles (bytes of K and V an iteration loads, pipeline stages) of an
unsplit contiguous float16 or bfloat16 grid that fits in one wave of the usual tiles of
:data:`FULLEST_WAVE_TILES` unevenly: more programs than the SMs hold one fewer each, fewer than
they hold (on sm_90, between three and four programs an SM of the usual four: 13 to 16
sequences of 32 heads on 132 SMs). Some SMs then hold one program more than the rest. Where it
fits one wave and every SM holds at most one program fewer than it could, the usual tiles stay;
paged calls keep :func:`fullest_wave_plan` (their other tiles read slower there). On an H100
(H = 32, ``D = 128`` fp16, 4k, 16k and 64k tokens, plain launches and CUDA-graph replays,
interleaved, best of three; ``gpu_checks/decode_gpu.py --uneven-wave-sweep``, records
``decode_uneven_wave_nvidia_h100`` and ``..._cudagraph``) the default so planned reads at
1.040-1.052x the usual 64 keys in 2 stages at 13 sequences (3.15 programs an SM), 1.013-1.021x
at 14, 1.007-1.016x at 15 and 1.004-1.005x at 16 (0.997-1.000x cuDNN), where 128 keys in 2
stages (two programs an SM, two waves) read 1.6-2.4 % slower than the usual tiles at 12 (2.91
an SM: every SM three programs or fewer). In the record of :data:`FULLEST_WAVE_TILES` on an
H200 (4k and 16k tokens) they read faster at 14 and 16 sequences by 0.2-0.8 % and slower at 12
by 8 %. The rule holds at every cache length; below 4k tokens it was timed at sixteen sequences
of 1k only (a scratch run: 0.994 / 0.995x cuDNN plain / replayed against the usual tiles' 0.992
/ 0.997x). What makes the uneven wave slower was not profiled."""

ENTRIES_FILL_ONE_WAVE = True
"""Whether a paged call that reads its table entry by entry, whose unsplit grid of more than two
and a half programs an SM fits in one wave of the usual paged tiles (five an SM on sm_90, up to
20 sequences of 32 heads), is planned by how full that one wave is (:func:`fullest_wave_plan`
without ``one_wave``), as a grid of several waves is, where a contiguous call, or a paged one
holding its table row, keeps the usual tiles unsplit. With fewer programs than places a wave of
the usual tiles leaves each SM fewer programs to hide the wait for every entry; tiles of three
an SM that the grid fills, or ranges that fill them, keep more of each SM at work. In a scratch
run on an H200 (H = 32, ``D = 128`` fp16, pages of 16, 8k, 16k and 64k tokens, graph replays,
against the contiguous default of the same run) 11 and 12 sequences so planned (128 keys in 2
stages, unsplit) read pages at 95-97 % of contiguous where the usual tiles read at 93-95 %, 14
sequences (the same tiles in 5 ranges) at 98-101 % against 98-99 %, 18 (in 2 ranges) at 97-98 %
against 94-97 %, and 16 (in 3 ranges) at 98-99 % as before; at 20 sequences the usual tiles'
wave is 0.97 full and the plan keeps them. In the record of :data:`FULLEST_WAVE_TILES` (16k
tokens) 12, 14, 16 and 18 sequences so planned read pages at 96.9-99.9 % of the contiguous
default, where the usual tiles read at 94.2-98.8 %."""

PAGED_SPLIT_WAVES = {90: 4}
"""Programs per SM that a split call over a paged cache aims for (:func:`choose_num_splits`'s
``waves``) where it merges with the merge kernel (a call captured into a CUDA graph), where
measured; elsewhere 2, as contiguous. A call whose programs hold their table row aims for
:data:`HELD_SPLIT_WAVES` instead. More programs in flight hide the table's extra wait: on an
H200 at batches 1, 2 and 4 (CUDA-graph replays, the merge kernel; ``gpu_checks/decode_gpu.py
--paged-sweep``, record ``decode_paged_nvidia_h200``), the contiguous tiles with 4 programs an SM
read pages at 96-99 % of the contiguous default from 2k tokens on, against 81-99 % for 3 stages of
64 KB with 2 (the least on the shortest caches). A call that merges in one launch aims for 2, as
contiguous: its last split of a row reads every partial of the row, twice as many with twice the
splits. Where such a call keeps the 32 KB tiles (one sequence of 1k or 2k tokens, two of 1k), the
GPU's time of that launch on graph replays read at 83 / 84 / 88 % of the contiguous default with 2
programs an SM, against 74 / 82 / 88 % with 4 (``--split-sweep``, record
``decode_split_nvidia_h200_cudagraph``, ``paged ..., one launch``). A 16-bit call reading its
table entry by entry at ``D = 64`` or 128 splits by :data:`ENTRY_GRID` instead where it can."""

HELD_SPLIT_WAVES = {90: 2}
"""Programs per SM that a split call over a paged cache aims for where it holds its table row
(:data:`HELD_TABLE_PAGES`) and merges with the merge kernel, where measured, in place of
:data:`PAGED_SPLIT_WAVES`. Those extra programs were there to hide each key's wait for its
table entry; a program holding its row has no such wait, and twice the ranges leave each one
half the keys: at one sequence of 1k tokens a range of 64 keys, one iteration (halved tiles,
:data:`PAGED_MIN_BLOCKS`), where two programs an SM keep two iterations of 64 keys that
overlap. On an H100 (H = 32, pages of 16 shuffled, CUDA-graph replays, interleaved, best of
three; ``gpu_checks/decode_gpu.py --held-split-sweep``, record
``decode_held_split_nvidia_h100``, one and two sequences of 1k, 2k and 4k tokens, against the
contiguous default of the same run) two programs an SM read pages at 96.3-100.5 % of contiguous
at ``D = 128`` and 95.7-100.0 % at ``D = 64``, where four read at 93.6-97.9 % and 92.0-99.5 %:
1.005-1.061x as fast on each of the twelve problems. In the paged sweeps (``--paged-sweep``,
``D = 128``, records ``decode_paged_nvidia_h100`` and ``..._h200``) the 32 KB tiles aiming for
two programs an SM read one sequence of 1k / 2k / 4k tokens at 97.7 / 99.6 / 99.3 % of the
contiguous default on the H100 (four an SM: 93.7 / 94.5 / 96.2 %) and 99.8 / 102.4 / 98.7 % on
the H200 (97.0 / 98.1 / 98.6 %); two sequences at 100.1 / 100.5 / 99.8 % on the H100 (95.5 /
96.7 / 98.0 %) and 104.6 / 99.1 / 98.7 % on the H200 (101.2 / 99.1 / 99.9 %). Longer tables
are read entry by entry and keep :data:`PAGED_SPLIT_WAVES`: at 16k and 64k tokens two an SM
read one and two sequences at 90.5-92.3 % on the H200 against its 98.1-99.2 %. Timed in float16 at
``D = 64`` and 128; like :data:`PAGED_SPLIT_WAVES` it applies at every head dim and dtype: a held
row leaves no table wait to hide at any of them."""

PAGED_ENTRY_WAVES = {90: 5}
"""Programs per SM that a paged call reading its table entry by entry aims for where its unsplit
grid already gives every SM a program (one to two and a half an SM; below one it aims for
:data:`PAGED_SPLIT_WAVES`, or 2 in one launch, unless it splits by :data:`ENTRY_GRID`), where
measured. A contiguous grid that full
keeps the memory busy unsplit (it splits only to fill its last wave, :data:`LAST_WAVE_GRID`),
but one or two paged programs an SM leave each key's wait for its table entry in the open: such
a call splits its keys into the most ranges whose grid stays within this many programs an SM,
with the usual tiles (32 KB in 2 stages), merging as any split call does. Those tiles, compiled
for sm_90 as a launch of one new token with one query head a cache head specialises them, take
96 registers a thread at ``D = 64`` and ``D = 128``, merging either way (``python -m
teachkit.kernels --paged-residency``, Triton 3.6), so five such programs fit an SM's 65536
registers: the aim. (Compiled with eight query heads a cache head and the query length an
argument, they took up to 153.) In a scratch run the aim of five read as well in one launch,
launched plainly, as with the merge kernel. On an H200 (H = 32, fp16, pages of 16 shuffled, 16k
and 64k tokens, CUDA-graph replays, ``gpu_checks/decode_gpu.py --entry-waves-sweep``, record
``decode_entry_waves_nvidia_h200``, against the contiguous default of the same run), for five to
ten sequences (1.2-2.4 programs an SM unsplit) the unsplit grid read pages at 66-91 % of
contiguous at ``D = 64`` and 86-98 % at ``D = 128``; split this way (four, three, two, two, two,
two ranges for five to ten sequences) at 96-105 % and 97-102 %. At twelve sequences (2.9 an SM,
one range) no split gained: 2 ranges read at 74-77 %, 3 at 93-96 % against the unsplit 94-95 %.
A 16-bit grid of 1.45 to 2 programs an SM (six to eight sequences) no longer splits on an H100:
it runs unsplit with 64 KB tiles (:data:`ENTRY_GRID`). Calls that hold their table row
(:data:`HELD_TABLE_PAGES`) are planned as contiguous ones instead."""

ENTRY_GRID = {90: (1.45, 2.0, 64 * 1024, 2)}
"""Where measured: the programs an SM (from and to, both inclusive) of an unsplit grid of a paged
float16 or bfloat16 call reading its table entry by entry that runs unsplit instead of splitting up
to :data:`PAGED_ENTRY_WAVES` (a grid of fewer splits into that window, below), and the bytes of K
and V one iteration then loads (at most 256 keys) and its pipeline stages: 64 KB tiles, 128 keys at
``D = 128`` and 256 at ``D = 64``, in two stages.
Compiled as such a grid launches them, they take 252-255 registers a thread and 72-74 KB of shared
memory, so two programs of four warps fill an SM's 65536 registers
(``python -m teachkit.kernels --paged-residency``, Triton 3.6; the launched kernels report the
same): a grid of 1.45 to 2 programs an SM runs in one wave, with no partial results to write and
merge, and each program has a 64 KB iteration in flight while the next one waits for its table
entries, where the split had more programs waiting. That this is what hides the wait, and why it
pays from 1.45 and not at 1.2 programs an SM, was not profiled. On an H100 (H = 32, fp16, pages of
16 shuffled, CUDA-graph replays, interleaved, best of three;
``gpu_checks/decode_gpu.py --entry-tiles-sweep``, record
``decode_entry_tiles_nvidia_h100_with_rule``, against the contiguous default of the same run) six
to eight sequences (1.45-1.94 programs an SM) of 16k to 128k tokens so planned read pages at
97.6-102.3 % of contiguous at ``D = 128`` and 97.3-103.0 % at ``D = 64``, 0.7-3.1 and 2.8-6.2
points above the split those grids took before (two or three ranges of the usual tiles). At
``D = 128`` three stages read six and eight sequences at most 0.4 points faster and seven 1.8-2.3
slower; at ``D = 64`` 128 keys in three stages, the rule's first form (from 1.9 an SM; record
``decode_entry_tiles_nvidia_h100``, before any rule), read them 2.4-8.3 points slower. At five
sequences (1.2 an SM) the split reads as fast or faster: 100.6 and 94.3 % against the best unsplit
tiles' 99.7 and 93.8 %. Timed in float16 at ``D = 64`` and 128 (:data:`ENTRY_GRID_HEAD_DIMS`),
one query head a cache head. Grouped-query calls count their cache heads: the tiles compiled with
two or eight query heads a cache head take the same shared memory and registers within a few
(``entry_grid_residency(group=...)`` of :mod:`teachkit.kernels.compile_check`), so two still fit
an SM; their speed was not timed.

A grid of fewer programs an SM gets there by splitting (:func:`entry_grid_splits`): into the most
ranges of these tiles that keep it within two an SM, where that brings it to 1.45 or more (one to
four sequences of 32 heads on 132 SMs: 8, 4, 2 and 2 ranges), merged by the merge kernel when
captured and in one launch otherwise (that form: 255 registers, no spills, two an SM). On an H100
(H = 32, fp16, pages of 16 shuffled, 16k and 64k tokens, interleaved, best of three;
``--entry-ranges-sweep``, records ``decode_entry_ranges_nvidia_h100`` and ``..._cudagraph``,
against the contiguous default of the same run) one to four sequences so planned read pages on
CUDA-graph replays at 93.1-101.3 % of contiguous at ``D = 64`` and 97.0-104.5 % at ``D = 128``,
-0.2 to +3.3 points on the sixteen, eight, five and four ranges of the usual tiles they took before
(+1.1 to +3.3 at ``D = 64``); launched plainly, at ``D = 64`` -0.9 to +7.1 points on their two to
eight ranges of 128 keys (+5.6 and +7.1 at three sequences, 1.45 an SM), and at ``D = 128`` the
plan they had already. Five sequences (1.21 an SM) would need 2.4 and keep theirs. On an H200
(the same sweep, records ``decode_entry_ranges_nvidia_h200`` and ``..._cudagraph``) launched
plainly at ``D = 64`` the split gains 2.4-15.8 points (89.4-95.1 %; three sequences +13.1 and
+15.8), and at ``D = 128`` the plan is again the one before; replayed, it reads within a point of
the plan before at one, two and four sequences (1.94 an SM), but three (1.45 an SM) read 4.2-7.0
points slower than their five ranges of the usual tiles (3.64 an SM): a captured call splits into
the window only where it lands at :data:`ENTRY_SPLIT_CAPTURED_FROM` or more."""

ENTRY_SPLIT_CAPTURED_FROM = {90: 1.9}
"""Where measured: the programs an SM from which a call captured into a CUDA graph (merged by
the merge kernel) splits into :data:`ENTRY_GRID`'s window (:func:`entry_grid_splits`); below it,
such a call splits as before that rule. A call launched plainly splits into the window from the
window's own 1.45. Replayed, three sequences of 32 heads (96 programs, split in two: 1.45 an SM)
read pages against contiguous on an H200 at 91.9-93.7 % at ``D = 64`` and 92.3-92.4 % at
``D = 128`` so split, and at 96.6-100.7 % in the five ranges of the usual tiles they take
without it (3.64 an SM); on an H100 the split read 2.6-3.1 points above those five ranges at
``D = 64`` (98.7-101.3 %) and -0.2 to +1.0 at ``D = 128``. One, two and four sequences land at
1.94 an SM: on the H200 within a point of the plan before (-0.7 to +0.9), on the H100 -0.0 to
+3.3 points above it (records ``decode_entry_ranges_nvidia_h100_cudagraph`` and
``decode_entry_ranges_nvidia_h200_cudagraph``, 16k and 64k tokens, pages of 16 shuffled). No
grid landing between 1.45 and 1.94 an SM was timed; the bound lies between them."""

ENTRY_GRID_HEAD_DIMS = (64, 128)
"""The head dims at which :data:`ENTRY_GRID` was measured."""

PAGED_MIN_BLOCKS = {90: 2}
"""The fewest iterations each range of a paged call that merges with the merge kernel should
hold, where measured: where its ranges would hold fewer, its tiles take half the keys (at least
16), with the same splits. With one iteration a range nothing overlaps the table's wait and the
loads; at batch 1 and 1k tokens on an H200 (16 ranges of 64 keys, graph replays), 32-key tiles read
pages at 97 % and 96 % of the contiguous default where 64-key tiles read at 93 % and 91 %
(records ``decode_paged_nvidia_h200`` and ``decode_split_nvidia_h200_cudagraph``). Such a call,
its table row held, now aims for two programs an SM (:data:`HELD_SPLIT_WAVES`): 8 ranges of 128
keys, two iterations each; ranges of one iteration remain for shorter caches (512 tokens)."""

HELD_TABLE_PAGES = {90: 256}
"""GPU class -> the widest block table (pages a sequence) whose row each program of a paged call
reads whole at its start, beside its sequence's length, where measured. Each key's page number
then comes from the held row (``tl.gather``) instead of a load that waits for the length (which
places the program's range) and holds the key's own load behind it; a program whose range is
one or two iterations, as on short caches, has nothing to overlap that wait with. Wider tables,
and other GPU classes, read the entries as the keys need them: a longer range's pipeline hides
the wait, and a held row costs registers (its entries shared among ``32 * num_warps`` threads:
two a thread for 256 entries and 4 warps). Compiled for a T4 (sm_75, Triton 3.6) the paged
kernel spilled 612 bytes a thread at D = 128 with a held row of 256 entries, and none without.
256 pages of 16 tokens are caches of up to 4k tokens. The interpreter holds rows as sm_90
does, so the CPU tests run that path.

With its row held a paged call no longer waits on the table inside its loop, so where it does
not split the keys it is planned as the contiguous call of the same problem (``_launch_plan``):
from :func:`unsplit_from` programs an SM it runs unsplit with that call's tiles, and at
``D = 64`` it takes :data:`SHORT_ROW_TILES`. Split calls keep the paged plan, which read at
1.00-1.08x the contiguous one there (a scratch run: one and two sequences of 1k-4k tokens,
D = 64 and 128, graph replays). On an H200 (CUDA-graph replays, pages of 16
shuffled, ``gpu_checks/decode_gpu.py --held-table-sweep``, record
``decode_held_table_nvidia_h200``, against the contiguous default of the same run), held
against entry by entry:

* one and two sequences (split): D = 128 at 96-100 % of contiguous against 93-99 %, the most
  gained at one sequence of 1k tokens (96 % against 93 %); D = 64 at 97-103 % against
  93-98 %;
* three and four sequences (unsplit held, split entry by entry): D = 128 at 100-102 % against
  92-96 %; D = 64 at 100-101 % against 85-95 % (its tiles' pages interleaved,
  :data:`INTERLEAVE_PAGES_PER_SM`);
* five and eight sequences (unsplit held, split entry by entry, :data:`PAGED_ENTRY_WAVES`):
  D = 64 at 98-100 % against 92-98 % (three stages of 128 keys); D = 128 at 99-101 % against
  94-101 %, five sequences of 4k tokens split as the contiguous call is
  (:data:`LAST_WAVE_GRID`).

Where the row is not held the contiguous plan is slower: in a scratch run at 8k and 16k tokens
(512 and 1024 pages), three and four sequences unsplit read at 58-75 % of contiguous against
95-100 % split."""


_Setting = TypeVar("_Setting")


def _paged_rule(table: dict[int, _Setting], capability: tuple[int, int] | None) -> _Setting | int:
    """``table``'s value (GPU class -> a paged rule's setting: a count, a bound in programs an
    SM, a pair of bounds) for a GPU of ``capability``, 0 where not measured; the interpreter
    (``None``) takes sm_90's, so the CPU tests run the paths an sm_90 GPU takes."""
    return table.get(gpu_class(capability) if capability else 90, 0)


def held_table_pages(capability: tuple[int, int] | None) -> int:
    """The widest block table a paged program holds whole on a GPU of ``capability``
    (:data:`HELD_TABLE_PAGES`, 0 where none is held); ``None``: the interpreter's, sm_90's.

    Examples
    --------
    >>> held_table_pages((9, 0)), held_table_pages((7, 5)), held_table_pages(None)
    (256, 0, 256)
    """
    return _paged_rule(HELD_TABLE_PAGES, capability)


INTERLEAVE_PAGES_PER_SM = {90: 2}
"""GPU class -> the most programs an SM of a paged call whose tiles hold several whole pages
(``BLOCK_N`` a multiple of the page size, larger) at which its tiles interleave their pages
(``INTERLEAVE_PAGES`` of :func:`fold_key_block`), where measured; the interpreter's is sm_90's.

Triton shares a ``(BLOCK_N, HEAD_DIM)`` load out among threads so that one thread loads rows a
fixed number apart (16 rows at ``D = 64`` and 8 at ``D = 128``, for 16-bit elements and 4
warps), and in key order those rows lie in as many pages, each a table entry to look up and an
address to form. Interleaved, tile row ``i`` holds slot ``i // n`` of the tile's page ``i % n``
(``n`` pages a tile), so a thread's rows lie in one page: compiled for sm_90 (bf16, pages of 16,
held row) the ``D = 64`` kernel of 256-key tiles went from 4096 instructions to 2680 (the
contiguous kernel has 3208), and the ``D = 128`` one of 128-key tiles from 3456 to 2512. The
compiler keeps each thread's row offsets in registers across the loop, though: 107 -> 141
registers at ``D = 64`` and 128-key tiles, 120 -> 128 and a spill at ``D = 128`` and 64-key
tiles. Where a program's latency is the time (one or two programs an SM) interleaving gains;
where the SM needs four resident programs (an unsplit grid of 16 sequences of 32 heads, or a
split call aiming at :data:`PAGED_SPLIT_WAVES`) the registers cost one of them. On an H200
(CUDA-graph replays, pages of 16 shuffled, D = 64 and 128, 1-16 sequences of 1k-16k tokens,
``gpu_checks/decode_gpu.py --interleave-sweep``, record ``decode_interleave_nvidia_h200``),
interleaved tiles read 1.01-1.11x as fast as key order on every problem whose grid has at most
two programs an SM (1.04-1.11x at three to five sequences of D = 64), and 0.79-0.97x on most
of those with about four or more (1.02-1.03x on four short ones)."""


def interleave_pages_per_sm(capability: tuple[int, int] | None) -> int:
    """The most programs an SM at which a paged call interleaves the pages of its tiles, on a GPU
    of ``capability`` (:data:`INTERLEAVE_PAGES_PER_SM`, 0 where never); ``None``: the
    interpreter's, sm_90's.

    Examples
    --------
    >>> interleave_pages_per_sm((9, 0)), interleave_pages_per_sm((7, 5))
    (2, 0)
    """
    return _paged_rule(INTERLEAVE_PAGES_PER_SM, capability)


SPLIT_RANGE_TILES = {90: (64 * 1024, 2)}
"""Bytes of K and V one iteration loads, and pipeline stages, for a call that splits the keys
into ranges of at least :data:`SPLIT_RANGE_MIN_BLOCKS` such iterations, where measured: contiguous,
or paged and merging in one launch (such a call then aims for two programs an SM, as a
contiguous one does). On an H200 (one, two or four sequences, H = 32, D = 128 fp16, 1k-64k
tokens, each call after the L2 cache is cleared, three interleaved rounds,
``gpu_checks/decode_gpu.py --split-sweep``, records ``decode_split_nvidia_h200`` and
``..._cudagraph``):

* contiguous, where the ranges are that long (from 512 keys): 64 KB in 2 stages read at
  1.01-1.07x the 32 KB tiles on graph replays (the merge kernel) and at 0.97-1.06x launched
  plainly (one launch), the most at 64k tokens, the least at four sequences of 1k tokens
  launched plainly; where the ranges are shorter the pipeline has too little to overlap, and
  64 KB read at 0.98-1.01x replayed and 0.97x plainly (one sequence of 1k or 2k tokens and two
  of 1k, ranges of 128-256 keys);
* paged (pages of 16), merging in one launch: 64 KB with two programs an SM read at
  0.99-1.14x the 32 KB tiles with four (the last split of a row reads every partial of the row,
  twice as many with twice the splits); on graph replays, with the merge kernel, at
  0.96-1.02x, so a captured paged call keeps the 32 KB tiles.

The plain figures leave out three problems of the fifteen (one sequence of 2k and 4k tokens,
four of 2k) where cuDNN's plain time was over 1.3x its replayed one: there the host's time
showed in that run, as notebook 09 prints.

Calls that do not split (8 sequences or more) keep the tiles for their programs an SM
(:data:`WIDE_TILES`)."""

SPLIT_RANGE_MIN_BLOCKS = 4
"""The fewest iterations of :data:`SPLIT_RANGE_TILES` each range of a split call must hold for the
call to take those tiles."""

def decode_config(head_dim: int, dtype: torch.dtype,
                  capability: tuple[int, int] | None = None, paged: bool = False,
                  captured: bool = False, programs_per_sm: float | None = None,
                  keys_per_split: int | None = None,
                  cache_keys: int | None = None) -> DecodeConfig:
    """The launch configuration :func:`decode_attention` uses unless given one.

    ``BLOCK_N`` is chosen so one iteration loads 32 KB of keys and values (16 KB on sm_75),
    between 16 and 128 keys. On sm_90 three kinds of call load 64 KB: an unsplit grid of one or
    two programs an SM (:data:`WIDE_TILES`); a contiguous float16 or bfloat16 grid nearly that
    full, which then does not split the keys, in 3 stages and up to 256 keys
    (:data:`NEARLY_FULL_GRID`, :data:`NEARLY_FULL_MOST_KEYS`, 128 keys on a cache shorter
    than :data:`NEARLY_FULL_MIN_BLOCKS` such tiles); and a call whose split ranges
    hold at least :data:`SPLIT_RANGE_MIN_BLOCKS` such iterations, unless it is paged and captured
    (:data:`SPLIT_RANGE_TILES`). Where a contiguous call's rows are 128 bytes (``D = 64`` in 16
    bits), the first and last of these load 32 KB in 3 stages instead (:data:`SHORT_ROW_TILES`).
    :func:`decode_attention` also narrows the tiles of a captured paged call whose ranges would
    hold a single iteration (:func:`paged_range_tiles`), and gives an unsplit grid of more than
    two programs an SM the tiles whose last wave is the fullest (:func:`fullest_wave_tiles`), or
    cuts its keys into the ranges and tiles that fill it fuller (:func:`fullest_wave_plan`), or,
    contiguous and within one uneven wave, the larger tiles of :data:`UNEVEN_WAVE_TILES`;
    it gives a grid of one to four thirds programs an SM on a cache too short to split 32 KB
    tiles in 3 stages (:data:`SHORT_CACHE_TILES`), and a captured split call at ``D = 64``
    four programs an SM (:data:`SHORT_ROW_SPLITS`).

    The split kernel merges by itself (``one_launch``) unless the call is being captured into a
    CUDA graph, or its ranges come from :func:`fullest_wave_plan` (:data:`WAVE_SPLIT_GAIN`). A
    replay launches without the host, so the launch that one-launch merging saves costs nothing
    there, while one launch costs the GPU more: a captured call makes its counters fresh, so
    every replay repeats their zero-fill, and every split fences its stores and counts on an
    atomic before the last one reads the partials back. On an H200's replays (one, two or four
    sequences, H = 32, D = 128 fp16, 1k-64k tokens, 32 KB tiles, ``gpu_checks/decode_gpu.py
    --split-sweep``) one launch read at 0.90-1.00x the merge kernel, the least at one sequence
    of 1k tokens, and at 0.97-1.03x with its counters zeroed before the capture.

    Parameters
    ----------
    head_dim : int
        One of :data:`HEAD_DIMS`.
    dtype : torch.dtype
        float16, bfloat16 or float32.
    capability : tuple of int, optional
        ``(major, minor)`` of the GPU; ``None`` means the interpreter's small fixed config.
    paged : bool
        Whether the keys come through a block table whose entries the loop waits for.
        :func:`decode_attention` passes False for an unsplit paged call whose programs hold
        their table row (:data:`HELD_TABLE_PAGES`): its keys read as contiguous ones.
    captured : bool
        Whether the call splits the keys and is being captured into a CUDA graph (the merge
        kernel).
    programs_per_sm : float, optional
        Programs of the unsplit grid per SM (:data:`WIDE_PROGRAMS` picks
        :data:`WIDE_TILES`, from :func:`unsplit_from` to one :data:`NEARLY_FULL_GRID`'s
        tiles where the call does not split); ``None``: as for many.
    keys_per_split : int, optional
        Keys in each range of a call that splits them (:data:`SPLIT_RANGE_MIN_BLOCKS` picks
        :data:`SPLIT_RANGE_TILES`); ``None``: the call does not split.
    cache_keys : int, optional
        Keys of the cache (its capacity): a nearly full grid's cache shorter than
        :data:`NEARLY_FULL_MIN_BLOCKS` tiles of :data:`NEARLY_FULL_MOST_KEYS` keys takes at
        most 128 keys a tile; ``None``: as for a long cache.

    Examples
    --------
    >>> decode_config(128, torch.float16, (9, 0))
    DecodeConfig(block_n=64, num_warps=4, num_stages=2, one_launch=True)
    >>> decode_config(128, torch.float16, (9, 0), programs_per_sm=1.9).block_n
    128
    >>> decode_config(128, torch.float16, (9, 0), programs_per_sm=0.97)  # 4 sequences, unsplit
    DecodeConfig(block_n=128, num_warps=4, num_stages=3, one_launch=True)
    >>> decode_config(64, torch.float16, (9, 0), programs_per_sm=0.97).block_n  # 64 KB at D = 64
    256
    >>> decode_config(64, torch.float16, (9, 0), programs_per_sm=0.97, cache_keys=1024).block_n
    128
    >>> decode_config(128, torch.float16, (9, 0), keys_per_split=512)  # 4 x 128 keys
    DecodeConfig(block_n=128, num_warps=4, num_stages=2, one_launch=True)
    >>> decode_config(128, torch.float16, (9, 0), captured=True, keys_per_split=128)
    DecodeConfig(block_n=64, num_warps=4, num_stages=2, one_launch=False)
    """
    if capability is None:
        return _INTERPRETER_CONFIG._replace(one_launch=not captured)
    cls = gpu_class(capability)
    size = 4 if dtype == torch.float32 else 2
    stage_bytes = STAGE_BYTES // 2 if cls == 75 else STAGE_BYTES
    stages = PIPELINE_STAGES[cls]
    low, high = WIDE_PROGRAMS
    most_keys = 128
    if (programs_per_sm is not None and keys_per_split is None
            and unsplit_from(capability, dtype, head_dim, paged) <= programs_per_sm < low):
        _, stage_bytes, stages = NEARLY_FULL_GRID[cls]
        if cache_keys is None or cache_keys >= NEARLY_FULL_MIN_BLOCKS * NEARLY_FULL_MOST_KEYS:
            most_keys = NEARLY_FULL_MOST_KEYS  # else a short cache: at most 128 keys a tile
    elif programs_per_sm is not None and low <= programs_per_sm <= high:
        stage_bytes, stages = WIDE_TILES.get(cls, (stage_bytes, stages))
        stage_bytes, stages = _short_row_tiles(stage_bytes, stages, head_dim, size, paged, cls)
    elif keys_per_split is not None and not (paged and captured) and cls in SPLIT_RANGE_TILES:
        split_bytes, split_stages = _short_row_tiles(*SPLIT_RANGE_TILES[cls], head_dim, size, paged,
                                                     cls)
        if keys_per_split >= SPLIT_RANGE_MIN_BLOCKS * _keys_per_block(split_bytes, head_dim, size):
            stage_bytes, stages = split_bytes, split_stages
    return DecodeConfig(_keys_per_block(stage_bytes, head_dim, size, most_keys), 4, stages,
                        one_launch=not captured)


def _short_rows(head_dim: int, size: int, paged: bool) -> bool:
    """Whether a call reads contiguous 16-bit rows of K and V of 128 bytes (``D = 64``), the
    rows :data:`SHORT_ROW_TILES` and :data:`SHORT_ROW_SPLITS` were measured on."""
    return head_dim * size == 128 and size == 2 and not paged


def _short_row_tiles(stage_bytes: int, stages: int, head_dim: int, size: int, paged: bool,
                     cls: int) -> tuple[int, int]:
    """``(stage_bytes, stages)``, or :data:`SHORT_ROW_TILES` in their place where a contiguous
    16-bit call's rows of K and V are 128 bytes and the 128-key cap of a tile would leave it
    fewer bytes than ``stage_bytes`` (64 KB of such rows is 256 keys), on a GPU class
    measured."""
    capped = 2 * head_dim * size * _keys_per_block(stage_bytes, head_dim, size) < stage_bytes
    if capped and _short_rows(head_dim, size, paged):
        return SHORT_ROW_TILES.get(cls, (stage_bytes, stages))
    return stage_bytes, stages


def _keys_per_block(stage_bytes: int, head_dim: int, size: int, most: int = 128) -> int:
    """``BLOCK_N`` for iterations of ``stage_bytes`` of K and V: 16 to ``most`` keys."""
    return max(16, min(most, stage_bytes // (2 * head_dim * size)))


def _entry_grid_keys(stage_bytes: int, head_dim: int, size: int) -> int:
    """``BLOCK_N`` of the tiles :data:`ENTRY_GRID` runs with: ``stage_bytes`` of K and
    V an iteration, up to 256 keys (64 KB is 256 keys at ``D = 64``)."""
    return _keys_per_block(stage_bytes, head_dim, size, 256)


def entry_grid_splits(programs: int, sms: int, grid: tuple[float, float, int, int],
                      most: int, split_from: float = 0.0) -> int:
    """The ranges a paged 16-bit call reading its table entry by entry cuts its keys into under
    :data:`ENTRY_GRID` (``grid``: from and to how many programs an SM, tile bytes,
    stages): 1 where its unsplit grid of ``programs`` on ``sms`` SMs already holds from-to
    programs an SM; below one, the most ranges that keep the grid within ``to`` programs an SM
    and number no more than ``most`` (the key blocks of the rule's tiles over
    :data:`PAGED_MIN_BLOCKS`; :func:`choose_num_splits` aiming for ``to``), where they bring it
    to ``from`` programs an SM or more, and to ``split_from`` (a captured call's
    :data:`ENTRY_SPLIT_CAPTURED_FROM`); 0 where the rule does not apply (the grid is fuller, or
    no split lands in the window).

    Examples
    --------
    >>> grid = (1.45, 2.0, 64 * 1024, 2)  # an H100's 132 SMs, 32 heads a sequence:
    >>> [entry_grid_splits(32 * B, 132, grid, most=32) for B in (1, 2, 3, 4, 5, 6, 8, 9)]
    [8, 4, 2, 2, 0, 1, 1, 0]
    >>> entry_grid_splits(32, 132, grid, most=4)  # too short a cache for 8 ranges
    0
    >>> [entry_grid_splits(32 * B, 132, grid, most=32, split_from=1.9) for B in (1, 2, 3, 4)]
    [8, 4, 0, 2]
    """
    programs, sms = require_int(programs, "programs", 1), require_int(sms, "sms", 1)
    most, split_from = require_int(most, "most", 1), require_real(split_from, "split_from")
    if not (isinstance(grid, tuple) and len(grid) == 4
            and all(isinstance(g, (int, float)) and not isinstance(g, bool) for g in grid)
            and 0 < grid[0] <= grid[1]):
        raise ValueError(f"grid must be (from, to, tile bytes, stages) with 0 < from <= to "
                         f"programs an SM, as ENTRY_GRID's values, got {grid!r}")
    low, high = grid[0] * sms, grid[1] * sms
    if low <= programs <= high:
        return 1
    ranges = choose_num_splits(programs, most, sms, grid[1])  # 1 from a program an SM
    return ranges if ranges > 1 and ranges * programs >= max(low, split_from * sms) else 0


def unsplit_from(capability: tuple[int, int] | None, dtype: torch.dtype, head_dim: int,
                 paged: bool = False) -> float:
    """Programs of the unsplit grid per SM from which :func:`decode_attention` does not split the
    keys by default: below one for contiguous float16 and bfloat16 calls of a head dim in
    :data:`NEARLY_FULL_HEAD_DIMS` on a GPU class in :data:`NEARLY_FULL_GRID` (which then load
    bigger tiles, :func:`decode_config`), else one (:func:`choose_num_splits`: every SM has a
    program). ``paged`` means the keys wait for each entry of a block table; a paged call whose
    programs hold their table row (:data:`HELD_TABLE_PAGES`) is asked as a contiguous one.

    Examples
    --------
    >>> unsplit_from((9, 0), torch.float16, 128), unsplit_from((9, 0), torch.float16, 32)
    (0.7, 1.0)
    >>> unsplit_from((9, 0), torch.bfloat16, 128, paged=True)
    1.0
    >>> unsplit_from((8, 0), torch.bfloat16, 128), unsplit_from((9, 0), torch.float32, 128)
    (1.0, 1.0)
    """
    nearly_full = NEARLY_FULL_GRID.get(gpu_class(capability)) if capability else None
    if (nearly_full is None or paged or dtype == torch.float32
            or head_dim not in NEARLY_FULL_HEAD_DIMS):
        return 1.0
    return nearly_full[0]


def paged_range_tiles(config: DecodeConfig, keys_per_split: int,
                      capability: tuple[int, int] | None) -> DecodeConfig:
    """``config`` for a paged call that merges with the merge kernel and whose ranges hold
    ``keys_per_split`` keys: with half the keys a tile (at least 16) where a range would hold
    fewer than :data:`PAGED_MIN_BLOCKS` iterations on a GPU class measured, else unchanged.

    Examples
    --------
    >>> config = DecodeConfig(64, 4, 2, one_launch=False)
    >>> paged_range_tiles(config, 64, (9, 0)).block_n  # 8 ranges of 512 tokens
    32
    >>> paged_range_tiles(config, 128, (9, 0)).block_n, paged_range_tiles(config, 64, (8, 0))[0]
    (64, 64)
    """
    min_blocks = PAGED_MIN_BLOCKS.get(gpu_class(capability)) if capability else None
    if min_blocks and keys_per_split < min_blocks * config.block_n and config.block_n >= 32:
        return config._replace(block_n=config.block_n // 2)
    return config


def default_launch(batch: int, heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                   device: torch.device | str | None = None, *, kv_heads: int | None = None,
                   q_len: int = 1, page_size: int | None = None, captured: bool = False,
                   ) -> tuple[DecodeConfig, int]:
    """The configuration and ``num_splits`` :func:`decode_attention` launches with when given
    neither, for ``batch`` sequences of ``q_len`` queries in ``heads`` heads of ``head_dim``,
    against caches of ``capacity`` keys in ``kv_heads`` heads (default ``heads``), contiguous or,
    given ``page_size``, paged (``capacity`` is then ``block_table.shape[1] * page_size``), on
    ``device`` (default the current one), being ``captured`` into a CUDA graph or not. Passed
    back to :func:`decode_attention` they launch the same kernels; several rules choose the
    splits with the tiles (:func:`fullest_wave_plan`, :data:`SHORT_ROW_SPLITS`), so the config
    alone may not. The config is :func:`decode_config`'s tiles for the programs an SM and, where
    the call splits the keys, for its ranges, merging in one launch unless ``captured`` (a grid
    of many programs an SM cut into ranges to fill its last wave merges with the merge kernel
    either way); unsplit, its ``one_launch`` is what a split of such a call would do. Pass it
    with ``one_launch`` replaced to time the other merge with the same tiles and splits.

    Examples
    --------
    >>> config, splits = default_launch(1, 32, 128, 4096, torch.float16)
    >>> config.one_launch, splits >= 1
    (True, True)
    >>> default_launch(1, 32, 128, 4096, torch.float16, captured=True)[0].one_launch  # a graph's
    False
    """
    device = torch.device(_DEVICE_TYPE if device is None else device)
    kv_heads = heads if kv_heads is None else kv_heads
    for name, value in (("batch", batch), ("heads", heads), ("head_dim", head_dim),
                        ("capacity", capacity), ("q_len", q_len)):
        require_positive_int(value, name)
    if page_size is not None:
        require_positive_int(page_size, "page_size")
        if capacity % page_size:
            raise ValueError(f"capacity = {capacity} is not a whole number of pages of "
                             f"{page_size} tokens; pass block_table.shape[1] * page_size")
    require_kv_heads(kv_heads, heads)
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim = {head_dim} is not one the kernels take; pass one of "
                         f"{HEAD_DIMS}")
    if dtype not in KERNEL_DTYPES:
        raise TypeError(f"dtype must be one of {KERNEL_DTYPES}, got {dtype}")
    plan = _launch_plan(batch, heads, q_len, head_dim, kv_heads, dtype, device, capacity, None,
                        None, page_size or 0, captured)
    if plan.num_splits > 1:  # how this call merges
        return plan.config, plan.num_splits
    return plan.config._replace(one_launch=not captured), 1  # what a split of such a call does


def default_config(batch: int, heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
                   device: torch.device | str | None = None, *, kv_heads: int | None = None,
                   q_len: int = 1, page_size: int | None = None, captured: bool = False,
                   ) -> DecodeConfig:
    """The configuration :func:`decode_attention` launches without a ``config``: the first of
    :func:`default_launch` (same arguments), whose second is the call's ``num_splits``.

    Examples
    --------
    >>> default_config(1, 32, 128, 4096, torch.float16).one_launch
    True
    """
    return default_launch(batch, heads, head_dim, capacity, dtype, device, kv_heads=kv_heads,
                          q_len=q_len, page_size=page_size, captured=captured)[0]


def max_rows(head_dim: int, dtype: torch.dtype) -> int:
    """Most query rows (``(H / H_kv) * Lq``) one program holds: 64, or 32 when a row takes more
    than 256 bytes (``D = 256`` in fp16, ``D >= 128`` in float32), to fit a T4's shared memory.
    More rows take several programs (the grid's third axis).

    Examples
    --------
    >>> max_rows(128, torch.float16), max_rows(256, torch.bfloat16)
    (64, 32)
    """
    return 64 if head_dim * (4 if dtype == torch.float32 else 2) <= 256 else 32


def sm_count(device: torch.device | str | None = None) -> int:
    """Streaming multiprocessors of the GPU (132 on an H100 SXM); :data:`INTERPRETER_SMS` on CPU.

    Examples
    --------
    >>> sm_count() >= 1
    True
    """
    if INTERPRETED:
        return INTERPRETER_SMS
    return multiprocessors(device)


def choose_num_splits(programs: int, key_blocks: int, sms: int, waves: float = 2,
                      full_from: float = 1.0) -> int:
    """How many ranges to cut every row's keys into, so the grid fills the GPU in one wave.

    1 when the unsplit grid already gives every SM a program: splitting then only adds the
    partial results' traffic and a second launch (measured on an H100 at B = 8, H = 32: the
    unsplit kernel reads the cache at 3022-3116 GB/s, two splits at 2746-2806). Some calls count
    as full a little earlier (``full_from`` programs an SM, :func:`unsplit_from`). Otherwise the
    most splits whose grid still fits in ``waves`` programs per SM, but no more splits than
    there are key blocks (a split holds at least one block) nor :data:`MAX_SPLITS`.

    Rounding down matters: a grid a little larger than a wave leaves a second, nearly empty
    wave, and the whole call waits for it. On an H100 (132 SMs, two programs per SM) at B = 1,
    H = 32, S = 16k, 8 splits (256 programs) read the cache at 2513 GB/s and 9 splits (288
    programs) at 2262, timed on CUDA-graph replays with 128-key tiles and the merge kernel (record
    ``decode_splits_nvidia_h100``). Fewer splits, one program per SM, were 1-2 % slower there.

    Parameters
    ----------
    programs : int
        Programs of the unsplit grid: ``B * H_kv`` (times row blocks).
    key_blocks : int
        Key blocks of the longest sequence, ``ceil(S / BLOCK_N)``.
    sms : int
        The GPU's SMs (:func:`sm_count`).
    waves : float
        Programs per SM to aim for: more than one hides one program's stalls behind another's.
    full_from : float
        Programs of the unsplit grid per SM from which it is full enough not to split: 1, every
        SM has a program, unless a call's own tiles keep the memory busy with fewer
        (:func:`unsplit_from`).

    Examples
    --------
    >>> choose_num_splits(programs=32, key_blocks=2048, sms=132)  # B = 1, H = 32, S = 128k
    8
    >>> choose_num_splits(programs=256, key_blocks=2048, sms=132)  # B = 8: full already
    1
    >>> choose_num_splits(programs=32, key_blocks=3, sms=132)  # a short cache: 3 blocks
    3
    >>> choose_num_splits(programs=128, key_blocks=32, sms=132, full_from=0.7)  # B = 4
    1
    """
    programs, key_blocks = require_int(programs, "programs"), require_int(key_blocks, "key_blocks")
    sms = require_int(sms, "sms", 1)
    waves, full_from = require_real(waves, "waves"), require_real(full_from, "full_from")
    if programs >= full_from * sms:
        return 1
    fit = int(waves * sms // max(programs, 1))  # the most splits in one wave
    return max(1, min(fit, key_blocks, MAX_SPLITS))


def last_wave_splits(programs: int, sms: int, resident: int,
                     most: int = LAST_WAVE_MOST_SPLITS) -> int:
    """How many ranges (2 to ``most``) to cut every row's keys into so the grid's last wave is
    the fullest: ``programs`` of the unsplit grid, ``sms`` SMs each holding ``resident``
    programs at once. A grid of ``n`` waves (``programs * splits / (resident * sms)``) runs
    ``ceil(n)`` of them, the last one partly empty; this picks the splits with the largest
    ``n / ceil(n)`` (:func:`last_wave_fill`), the fewest where two tie (:data:`LAST_WAVE_GRID`).

    Examples
    --------
    >>> last_wave_splits(160, 132, 2)  # 5 sequences of 32 heads: 480 programs, 1.8 waves
    3
    >>> last_wave_splits(136, 132, 2)  # 680 programs: 2.6 waves (3 ranges: 1.5)
    5
    >>> last_wave_splits(176, 132, 2)  # 528 programs: 2 whole waves
    3
    """
    programs, sms = require_int(programs, "programs", 1), require_int(sms, "sms", 1)
    resident, most = require_int(resident, "resident", 1), require_int(most, "most", 2)
    return max(range(2, most + 1),
               key=lambda splits: (last_wave_fill(programs * splits, resident * sms), -splits))


def last_wave_fill(programs: int, places: int) -> float:
    """How fully a grid of ``programs`` fills the waves it runs in, ``places`` programs a wave
    (the SMs times the programs each holds at once): the grid runs ``ceil(programs / places)``
    waves and uses ``programs`` of their places, ``n / ceil(n)`` for ``n`` waves: 1 when the
    waves come out whole. Only the last wave can be short of full, and it lasts as long as a full
    one, so this is the last wave's loss spread over the whole grid: the share of the grid's time
    the places are busy, what the grid's speed follows (for 1.45 waves 0.73, where the last wave
    alone is 0.45 full). Worked out as one division of whole numbers, so grids that fill their
    waves alike read alike.

    Examples
    --------
    >>> last_wave_fill(480, 264)  # 5 sequences of 32 heads in 3 ranges, two programs an SM
    0.9090909090909091
    >>> last_wave_fill(528, 264), last_wave_fill(132, 264)
    (1.0, 0.5)
    """
    programs, places = require_int(programs, "programs", 1), require_int(places, "places", 1)
    return programs / (places * -(-programs // places))


def _require_tiles(tiles: object) -> None:
    """Raise ``ValueError`` unless ``tiles`` is a non-empty tuple of ``(stage bytes, stages,
    programs an SM)`` triples of positive ints (as :data:`FULLEST_WAVE_TILES` holds them)."""
    if not (isinstance(tiles, tuple) and tiles and all(
            isinstance(t, tuple) and len(t) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in t)
            for t in tiles)):
        raise ValueError(f"tiles must be a non-empty tuple of (stage bytes, stages, programs an "
                         f"SM) triples of positive ints, as FULLEST_WAVE_TILES's values, got "
                         f"{tiles!r}")


def fullest_wave_tiles(programs: int, sms: int, tiles: tuple[tuple[int, int, int], ...],
                       ) -> tuple[int, int, int]:
    """The tiles, of ``tiles`` (``(stage bytes, stages, programs an SM)``, the usual ones first),
    that an unsplit grid of ``programs`` on ``sms`` SMs runs: the usual tiles while the grid fits
    in one wave of them, else those whose last wave is the fullest (:func:`last_wave_fill`), the
    first on a tie (:data:`FULLEST_WAVE_TILES`).

    Examples
    --------
    >>> tiles = ((32 * 1024, 2, 4), (64 * 1024, 2, 2), (32 * 1024, 3, 3))
    >>> fullest_wave_tiles(512, 132, tiles)  # 16 sequences of 32 heads: one wave of four an SM
    (32768, 2, 4)
    >>> fullest_wave_tiles(768, 132, tiles)  # 24: 1.45 waves of four, 2.91 of two
    (65536, 2, 2)
    >>> fullest_wave_tiles(1152, 132, tiles)  # 36: 2.18 of four, 4.36 of two, 2.91 of three
    (32768, 3, 3)
    """
    programs, sms = require_int(programs, "programs", 1), require_int(sms, "sms", 1)
    _require_tiles(tiles)
    if programs <= tiles[0][2] * sms:
        return tiles[0]
    return max(tiles, key=lambda t: last_wave_fill(programs, t[2] * sms))


def uneven_wave(programs: int, sms: int, resident: int) -> bool:
    """Whether a grid of ``programs`` fits in one wave on ``sms`` SMs that hold ``resident``
    programs each, yet unevenly: more than ``resident - 1`` programs an SM, fewer than
    ``resident`` (some SMs hold one program more than the rest; :data:`UNEVEN_WAVE_TILES`).

    Examples
    --------
    >>> [uneven_wave(32 * b, 132, 4) for b in (12, 13, 16)]  # 2.91, 3.15 and 3.88 an SM
    [False, True, True]
    >>> uneven_wave(528, 132, 4)  # four programs on every SM: one whole wave
    False
    """
    programs, sms = require_int(programs, "programs"), require_int(sms, "sms", 1)
    resident = require_int(resident, "resident", 1)
    return (resident - 1) * sms < programs < resident * sms


def fullest_wave_plan(programs: int, sms: int, tiles: tuple[tuple[int, int, int], ...],
                      most: int = LAST_WAVE_MOST_SPLITS, gain: float = WAVE_SPLIT_GAIN,
                      one_wave: bool = True) -> tuple[tuple[int, int, int], int]:
    """The tiles, of ``tiles`` (as :func:`fullest_wave_tiles` takes them), and the ranges of
    every row's keys (1 to ``most``) that a grid of ``programs`` unsplit on ``sms`` SMs runs
    with: :func:`fullest_wave_tiles`'s tiles unsplit, unless some tiles cut into 2 to ``most``
    ranges (``programs * ranges`` programs) fill their last wave (:func:`last_wave_fill`) more
    than ``gain`` fuller; then those of the fullest last wave, the fewest ranges and then the
    first tiles on a tie (:data:`WAVE_SPLIT_GAIN`). With ``one_wave`` a grid that fits in one
    wave of the usual tiles keeps them unsplit; without it such a grid is weighed as any other,
    its one wave's fill against the tiles and ranges (:data:`ENTRIES_FILL_ONE_WAVE`).

    Examples
    --------
    >>> tiles = ((32 * 1024, 2, 4), (64 * 1024, 2, 2), (32 * 1024, 3, 3))
    >>> fullest_wave_plan(768, 132, tiles)  # 24 sequences of 32 heads: 0.97 full unsplit
    ((65536, 2, 2), 1)
    >>> fullest_wave_plan(576, 132, tiles)  # 18: 0.73 unsplit, 0.99 in 5 ranges of 128 keys
    ((65536, 2, 2), 5)
    >>> fullest_wave_plan(576, 132, tiles, most=1)  # ranges not allowed
    ((65536, 2, 2), 1)
    >>> paged = ((32 * 1024, 2, 5), (64 * 1024, 2, 3), (32 * 1024, 3, 3))
    >>> fullest_wave_plan(384, 132, paged), fullest_wave_plan(384, 132, paged, one_wave=False)
    (((32768, 2, 5), 1), ((65536, 2, 3), 1))
    """
    programs, sms = require_int(programs, "programs", 1), require_int(sms, "sms", 1)
    most, gain = require_int(most, "most", 1), require_real(gain, "gain")
    one_wave = require_bool(one_wave, "one_wave")
    _require_tiles(tiles)
    if one_wave:
        unsplit = fullest_wave_tiles(programs, sms, tiles)
        if programs <= tiles[0][2] * sms:
            return unsplit, 1
    else:
        unsplit = max(tiles, key=lambda t: last_wave_fill(programs, t[2] * sms))
    kept = last_wave_fill(programs, unsplit[2] * sms)
    fill, fewest, first = max(((last_wave_fill(programs * ranges, t[2] * sms), -ranges, -i)
                               for ranges in range(2, most + 1) for i, t in enumerate(tiles)),
                              default=(0.0, -1, 0))
    if fill <= kept + gain:
        return unsplit, 1
    return tiles[-first], -fewest


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------
def _require_index_tensor(t: object, name: str, shape: tuple[int, ...], device: torch.device,
                          what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of int32 or int64, got "
                        f"{type(t).__name__}; e.g. torch.tensor({name}, dtype=torch.int32)")
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{name} must hold int32 or int64 {what}, got {t.dtype}; convert it, "
                        f"e.g. {name}.to(torch.int32)")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape} ({what}), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}; move it, e.g. "
                         f"{name}.to(q.device)")
    return t


def _validate(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              paged: bool) -> tuple[int, int, int, int, int]:
    """Check q and the caches; return ``(B, H, Lq, D, H_kv)``."""
    if plain_attention_inputs(q, k_cache, v_cache, HEAD_DIMS, kv_heads_axis=2 if paged else 1,
                              batch_axis=None if paged else 0):  # the common case, in few reads
        B, H, Lq, D = q.shape
        return B, H, Lq, D, k_cache.shape[2] if paged else k_cache.shape[1]
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        require_float_tensor(t, name)
        if t.dim() != 4:
            layout = ("(batch, heads, new tokens, head_dim)" if name == "q" else
                      "(num_pages, page_size, kv_heads, head_dim) with a block_table" if paged
                      else "(batch, kv_heads, cache length, head_dim)")
            raise ValueError(f"{name} must have 4 dimensions {layout}, got shape "
                             f"{tuple(t.shape)}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise TypeError(f"q, k_cache and v_cache must share one dtype, got {q.dtype}, "
                        f"{k_cache.dtype}, {v_cache.dtype}; convert them, e.g. "
                        "k_cache.to(q.dtype)")
    if q.dtype not in KERNEL_DTYPES:
        raise TypeError(f"decode_attention takes float16, bfloat16 or float32 tensors, got "
                        f"{q.dtype}; use {_REFERENCE} (float64 too), or convert with q.float()")
    if not (q.device == k_cache.device == v_cache.device):
        raise ValueError(f"q, k_cache and v_cache must be on one device, got {q.device}, "
                         f"{k_cache.device}, {v_cache.device}; move them, e.g. "
                         "k_cache.to(q.device)")
    if q.device.type != _DEVICE_TYPE:
        raise ValueError(
            f"q and the caches are on {q.device} but the kernel runs on the GPU; move them "
            "first: q.cuda()" if ON_GPU else
            f"q and the caches are on {q.device}; without a GPU, the kernel takes CPU tensors")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} "
                         f"and {tuple(v_cache.shape)}")
    B, H, Lq, D = q.shape
    H_kv = k_cache.shape[2] if paged else k_cache.shape[1]
    if k_cache.shape[-1] != D:
        raise ValueError(f"q and the caches must have one head dim (last axis), got {D} and "
                         f"{k_cache.shape[-1]}")
    if D not in HEAD_DIMS:
        raise ValueError(f"head dim {D} is not supported; pass one of {HEAD_DIMS} (pad the "
                         "head dim with zeros up to the next one if needed)")
    if H_kv == 0 or H % H_kv != 0:
        axis = "axis 2 of a page pool" if paged else "axis 1"
        raise ValueError(f"q's {H} heads must be a multiple of the caches' {H_kv} heads ({axis}); "
                         "grouped-query attention shares each cache head among H / H_kv query "
                         "heads" + ("" if paged else "; a paged cache needs a block_table"))
    if not paged and k_cache.shape[0] != B:
        raise ValueError(f"k_cache must hold one cache per sequence of q: batch {B}, got "
                         f"{k_cache.shape[0]} (shape {tuple(k_cache.shape)}); for a page pool "
                         "(num_pages, page_size, kv_heads, head_dim) pass a block_table")
    return B, H, Lq, D, H_kv


def _check_values(seqlens: torch.Tensor, table: torch.Tensor | None, capacity: int,
                  page_size: int, num_pages: int) -> None:
    """Host-side checks of the index tensors' values (one synchronisation with the GPU), before
    they are cast to the kernel's int32."""
    lo, hi = int(seqlens.min()), int(seqlens.max())
    if lo < 0:
        raise ValueError(f"cache_seqlens must be >= 0, got a minimum of {lo}")
    if hi >= 2**31:
        raise ValueError(f"cache_seqlens must be below 2**31 (the kernel counts keys in int32), "
                         f"got {hi}; pass the number of tokens in the cache")
    if table is None:
        if hi > capacity:
            raise ValueError(f"cache_seqlens must be at most the cache length {capacity}, got "
                             f"{hi}")
        return
    if hi > capacity:
        raise ValueError(
            f"a sequence of {hi} tokens needs {-(-hi // page_size)} pages of {page_size}, but "
            f"the block_table has {table.shape[1]} columns ({capacity} tokens); widen the "
            "table or shorten cache_seqlens")
    pages_used = (seqlens.to(torch.int64) + page_size - 1) // page_size
    used = torch.arange(table.shape[1], device=table.device) < pages_used[:, None]
    bad = used & ((table < 0) | (table >= num_pages))
    if bool(bad.any()):
        b, p = (int(x) for x in torch.nonzero(bad)[0])
        raise ValueError(
            f"block_table[{b}, {p}] = {int(table[b, p])} points outside the pool of {num_pages} "
            f"pages (valid: 0 .. {num_pages - 1}); sequence {b} uses its first "
            f"{int(pages_used[b])} entries")


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------
_COUNTERS: dict[tuple[torch.device, object], torch.Tensor] = {}


def merge_counters(n: int, device: torch.device) -> torch.Tensor:
    """``n`` int32 zeros for the split kernel's ``ONE_LAUNCH`` merge, kept per device and per
    CUDA stream (calls on one stream run one after another; calls on two streams may overlap,
    so they get a set each; :func:`~teachkit.kernels.scratch.stream_id`) and grown when a call
    needs more. Each merge sets its counter back to zero, so the next call finds zeros without
    a fill. While a stream is captured into a CUDA graph the zeros are made fresh, for the graph
    to keep; the graph then repeats their zero-fill at every replay (one reason a captured call
    takes the merge kernel: :func:`decode_config` with ``captured``)."""
    if type(device) is not torch.device:
        device = torch.device(device)
    stream = stream_id(device)
    if stream is None and device.type == "cuda":  # being captured
        return torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    have = _COUNTERS.get((device, stream))
    if have is None or have.numel() < n:
        have = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _COUNTERS[device, stream] = have
    return have


_FULL_LENGTHS: dict[tuple[int, int, torch.device], torch.Tensor] = {}
"""The lengths :func:`_full_lengths` made outside a graph capture, by ``(B, S, device)``: never
dropped, as a graph that captured a call reads them at every replay (4 bytes a sequence; at
most :data:`MAX_FULL_LENGTHS` shapes kept)."""
MAX_FULL_LENGTHS = 1024
"""Shapes whose full lengths are kept; past them, a new shape's lengths are made per call."""


def _full_lengths(B: int, S: int, device: torch.device, capturing: bool) -> torch.Tensor:
    """``(B,)`` int32 lengths ``S`` for a call without ``cache_seqlens``: made once per shape
    outside a graph capture and kept (a decoding loop calls every step). A call being captured
    reads the kept ones where an earlier call made them, so the graph replays the attention
    kernel alone; else the graph fills its own (a fill kernel at every replay, about a µs of a
    short cache's 20: warm a captured shape up with a plain call first, as capturing does
    anyway). Made during a capture, they are the graph's and are not kept."""
    key = (B, S, device)
    kept = _FULL_LENGTHS.get(key)
    if kept is not None:
        return kept
    made = torch.full((B,), S, dtype=torch.int32, device=device)
    if not capturing and len(_FULL_LENGTHS) < MAX_FULL_LENGTHS:
        _FULL_LENGTHS[key] = made
    return made


def decode_mask(cache_seqlens: torch.Tensor, Lq: int, S: int) -> torch.Tensor:
    """Boolean ``(B, 1, Lq, S)`` mask of decoding: query ``i`` sees key ``j`` iff
    ``j <= n - Lq + i``, with ``n`` the sequence's length (bottom-right aligned).

    Pass it as ``attn_mask`` to ``scaled_dot_product_attention`` to compute what
    :func:`decode_attention` computes (rows with no ``True`` give zeros there too).

    Parameters
    ----------
    cache_seqlens : torch.Tensor
        ``(B,)`` integer lengths, each at most ``S``.
    Lq : int
        New tokens per sequence.
    S : int
        Keys in the (contiguous) cache.

    Examples
    --------
    >>> decode_mask(torch.tensor([5, 2]), Lq=2, S=6).int()[:, 0]
    tensor([[[1, 1, 1, 1, 0, 0],
             [1, 1, 1, 1, 1, 0]],
    <BLANKLINE>
            [[1, 0, 0, 0, 0, 0],
             [1, 1, 0, 0, 0, 0]]], dtype=torch.int32)
    """
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype not in _INDEX_DTYPES:
        got = (cache_seqlens.dtype if isinstance(cache_seqlens, torch.Tensor)
               else type(cache_seqlens).__name__)
        raise TypeError(f"cache_seqlens must be an int32 or int64 tensor of lengths, got {got}")
    for name, value in (("Lq", Lq), ("S", S)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    n = cache_seqlens.to(torch.int64).reshape(-1, 1, 1, 1)
    i = torch.arange(Lq, device=cache_seqlens.device).reshape(1, 1, -1, 1)
    j = torch.arange(S, device=cache_seqlens.device).reshape(1, 1, 1, -1)
    return j <= n - Lq + i


def decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor | None = None, block_table: torch.Tensor | None = None,
    scale: float | None = None, num_splits: int | None = None, return_lse: bool = False,
    config: DecodeConfig | None = None, check_values: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Attention of a few new tokens against a KV cache, by split-KV decoding.

    Parameters
    ----------
    q : torch.Tensor
        ``(B, H, Lq, D)``: the last ``Lq`` tokens of every sequence (``Lq = 1`` for plain
        decoding); float16, bfloat16 or float32; ``D`` one of :data:`HEAD_DIMS`.
    k_cache, v_cache : torch.Tensor
        Without ``block_table``: ``(B, H_kv, S, D)``, sequence ``b``'s keys in
        ``k_cache[b, :, :n]``. With it: page pools ``(num_pages, page_size, H_kv, D)``.
        ``H`` must be a multiple of ``H_kv`` (grouped-query attention). Any strides; q's dtype
        and device. (At ``D = 64`` pools stored head by head, ``paging.head_major``, read
        faster: notebook 09.)
    cache_seqlens : torch.Tensor, optional
        ``(B,)`` int32 or int64: the number ``n`` of valid keys of each sequence, at most the
        cache's length (or the table's ``max_pages * page_size``); default ``S`` for a
        contiguous cache, required with a ``block_table``. Query ``i`` sees keys
        ``j <= n - Lq + i`` (see :func:`decode_mask`).
    block_table : torch.Tensor, optional
        ``(B, max_pages)`` int32 or int64: ``block_table[b, p]`` is the pool page holding tokens
        ``p * page_size .. (p + 1) * page_size - 1`` of sequence ``b``. Entries past a
        sequence's ``ceil(n / page_size)`` pages are never read (-1 is fine).
    scale : float, optional
        Multiplies the scores; defaults to ``1/sqrt(D)``.
    num_splits : int, optional
        Ranges to cut every sequence's keys into; default :func:`choose_num_splits` for this GPU
        (1 from :func:`unsplit_from` programs an SM).
        1 runs the split kernel alone, writing the final output (the unsplit forward pass).
    return_lse : bool
        Also return the log-sum-exp of every query's scaled scores.
    config : DecodeConfig, optional
        Tile size, warps, stages and whether the split kernel merges (``one_launch``) or a merge
        kernel does; default :func:`decode_config` (with ``paged`` when a ``block_table`` is
        given, ``keys_per_split`` when the call splits the keys, and ``captured`` when it does
        so while the current CUDA stream is being captured into a graph).
    check_values : bool
        Check ``cache_seqlens`` and ``block_table`` values on the host (one synchronisation).
        Pass ``False`` in a decoding loop once they are known to be good: an entry outside the
        pool then reads memory it should not.

    Returns
    -------
    out : torch.Tensor
        ``(B, H, Lq, D)`` in q's dtype; zeros for a query that sees no key.
    lse : torch.Tensor
        Only with ``return_lse``: ``(B, H, Lq)`` float32, natural log; ``-inf`` where no key.

    Notes
    -----
    Scores, softmax statistics, partial outputs and the merge are float32. float32 inputs
    multiply with ``input_precision="ieee"`` (no tf32). The splits share each sequence's key
    blocks evenly, so shorter sequences get shorter ranges; splits past the end are empty.

    A call costs host time before the GPU starts: the checks, the output buffer and the Triton
    launch. On an H100 machine a loop of back-to-back calls for one sequence of 256 tokens
    takes 18.5 µs a call, 1.09x ``scaled_dot_product_attention``'s (record ``host_nvidia_h100``);
    timed one call at a time after clearing the L2 cache, it hides (18 µs a call at 1k tokens,
    17 for the GPU alone: records ``decode_nvidia_h100`` and ``..._cudagraph``). The
    partial results, and the lse unless ``return_lse``, live in buffers kept per CUDA stream
    between calls (:mod:`teachkit.kernels.scratch`). A call of a kind met before (the same
    dtypes, shapes, strides, alignment and other arguments: :func:`replay_key`) skips the
    checks, the plan and the launch cache's keys, and makes the first call's launches again
    with its own tensors (:class:`DecodeReplay`); the values of ``cache_seqlens`` and
    ``block_table`` are still checked unless ``check_values=False``. A decoding loop should
    capture its step in a CUDA graph (``torch.cuda.graph``) and replay it, as serving engines
    do; pass ``check_values=False`` there, since the value checks synchronise with the GPU, which a
    capture forbids. Without a ``config``, a call being captured takes the merge kernel where it
    splits the keys (:func:`decode_config` with ``captured``): on an H100's replays that read one
    sequence's cache at 1.00-1.04x cuDNN, where one launch read it at 0.90-0.99x (record
    ``decode_nvidia_h100_cudagraph``). Captured after a plain call of its kind, a call without
    ``cache_seqlens`` reads the lengths that call made, so the graph holds no fill of its own.

    Examples
    --------
    >>> import torch, teachkit
    >>> from teachkit.kernels.decode import decode_attention, decode_mask
    >>> q = torch.randn(2, 4, 1, 16, device=teachkit.DEVICE)
    >>> k, v = (torch.randn(2, 2, 50, 16, device=teachkit.DEVICE) for _ in range(2))
    >>> lens = torch.tensor([50, 21], device=teachkit.DEVICE)
    >>> out = decode_attention(q, k, v, cache_seqlens=lens, num_splits=3)
    >>> mask = decode_mask(lens, 1, 50)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(
    ...     q, k, v, attn_mask=mask, enable_gqa=True)
    >>> teachkit.relative_error(out, ref) < 1e-5
    True
    """
    key = replay_key(q, k_cache, v_cache, cache_seqlens, block_table, scale, num_splits,
                     return_lse, config, check_values)
    replay = DECODE_REPLAYS.get(key)
    if replay is not None:  # a kind of call met before: its launches, made again
        return replay(q, k_cache, v_cache, cache_seqlens, block_table, return_lse)
    paged = block_table is not None
    B, H, Lq, D, H_kv = _validate(q, k_cache, v_cache, paged)
    if on_other_gpu(q):  # as torch's ops do: launch on q's GPU, whichever device is current
        with torch.cuda.device(q.device):
            return decode_attention(q, k_cache, v_cache, cache_seqlens, block_table, scale,
                                    num_splits, return_lse, config, check_values)
    if torch.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad
                                    or v_cache.requires_grad):
        require_no_grad(("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                        kernel="decode_attention", reference=_REFERENCE)
    require_kernel_world()
    scale = resolve_scale(scale, D)
    if type(return_lse) is not bool or type(check_values) is not bool:
        for flag, value in (("return_lse", return_lse), ("check_values", check_values)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be True or False, got {type(value).__name__}")
    device = q.device
    if paged:
        if isinstance(block_table, torch.Tensor) and block_table.dim() != 2:
            raise ValueError(f"block_table must have 2 dimensions (batch, max_pages), got "
                             f"shape {tuple(block_table.shape)}")
        max_pages = block_table.shape[1] if isinstance(block_table, torch.Tensor) else 0
        block_table = _require_index_tensor(block_table, "block_table", (B, max_pages),
                                            device, "page indices, one row per sequence")
        num_pages, page_size = k_cache.shape[0], k_cache.shape[1]
        if page_size == 0:
            raise ValueError("the page pools hold pages of 0 tokens (axis 1); pass pools "
                             "(num_pages, page_size, kv_heads, head_dim) with page_size >= 1")
        capacity = block_table.shape[1] * page_size
    else:
        num_pages, page_size = 0, 0
        capacity = k_cache.shape[2]
    if cache_seqlens is None and paged:
        raise ValueError("a paged cache has no length of its own: pass cache_seqlens (B,) with "
                         "the block_table, the number of tokens of every sequence")
    # a call captured into a CUDA graph gets the configuration for replays (decode_config)
    capturing = ON_GPU and torch.cuda.is_current_stream_capturing()
    if cache_seqlens is None:
        seqlens = _full_lengths(B, capacity, device, capturing)
    else:
        seqlens = _require_index_tensor(cache_seqlens, "cache_seqlens", (B,), device,
                                        "lengths (one per sequence)")
    if check_values and B > 0 and (cache_seqlens is not None or paged):
        # On the values as given: an int64 length of 2**31 or more would wrap in int32.
        _check_values(seqlens, block_table, capacity, page_size, num_pages)
    # The kernels read both with unit strides, as int32: make them so (kept when they are).
    seqlens = _as_int32_rows(seqlens)
    if paged:
        block_table = _as_int32_rows(block_table)
    if num_splits is not None and (isinstance(num_splits, bool) or
                                   not isinstance(num_splits, int)):
        raise TypeError(f"num_splits must be an int in 1 .. {MAX_SPLITS} or None, got "
                        f"{type(num_splits).__name__} {num_splits!r}")
    if num_splits is not None and not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be an int in 1 .. {MAX_SPLITS} or None, got "
                         f"{num_splits!r}")
    if config is not None and not isinstance(config, DecodeConfig):
        raise TypeError(f"config must be a DecodeConfig or None, got {type(config).__name__}")
    if config is not None:
        require_power_of_two(config.block_n, "config.block_n", 16)
        require_power_of_two(config.num_warps, "config.num_warps")
        require_positive_int(config.num_stages, "config.num_stages")
        require_bool(config.one_launch, "config.one_launch")
    if B * H_kv > _MAX_GRID_YZ:
        raise ValueError(f"batch * kv heads must be at most {_MAX_GRID_YZ}, got {B * H_kv}; "
                         "split the batch into several calls")

    if q.numel() == 0 or capacity == 0:
        out = contiguous_like(q)
        lse = torch.empty((B, H, Lq), dtype=torch.float32, device=device)
        if out.numel():  # no keys at all: zeros and -inf, as scaled_dot_product_attention gives
            out.zero_()
            lse.fill_(float("-inf"))
        return (out, lse) if return_lse else out

    plan = _launch_plan(B, H, Lq, D, H_kv, q.dtype, device, capacity, num_splits, config,
                        page_size, config is None and capturing)
    table = block_table if paged else seqlens  # not read without pages: any int32 tensor
    tensors = _call_tensors(plan, q, seqlens, return_lse, capturing)
    split = _split_launch(plan, (q, k_cache, v_cache, seqlens, table, *tensors), page_size,
                          H_kv, scale)
    decode_split_kernel[split[0]](*split[1], **split[2])
    merge = _merge_launch(plan, tensors)
    if merge is not None:
        decode_merge_kernel[merge[0]](*merge[1], **merge[2])
    if key is not None:
        lengths = seqlens if cache_seqlens is None and not capturing else None
        checks = ((capacity, page_size, num_pages) if check_values
                  and (cache_seqlens is not None or paged) else None)
        _remember(key, DecodeReplay(plan, None, None, lengths, checks, capturing), split, merge)
    out, lse = tensors[3], tensors[4]
    return (out, lse) if return_lse else out


def _call_tensors(plan: _DecodePlan, q: torch.Tensor, seqlens: torch.Tensor, return_lse: bool,
                  capturing: bool) -> tuple[torch.Tensor, ...]:
    """The tensors a call of ``plan`` writes, in the split kernel's order: the splits'
    partial outputs and lse, the merge's counters, the output and its lse. The caller gets the
    output (contiguous, q's dtype) and, with ``return_lse``, an lse of its own; the rest are
    kept per CUDA stream (:func:`~teachkit.kernels.scratch.stream_scratch`). Unsplit, the
    partials are the output and its lse; without the one-launch merge, the counters are
    ``seqlens`` (not read)."""
    device = q.device
    out = contiguous_like(q)
    o_part, lse_part, lse, counters = stream_scratch(
        (plan.buffers, return_lse), lambda: _decode_buffers(plan, return_lse, device), device,
        capturing)
    if return_lse:
        lse = torch.empty(plan.out_shape[:3], dtype=torch.float32, device=device)
    if plan.num_splits == 1:  # the unsplit forward pass: final output and lse directly
        o_part, lse_part = out, lse
    if not plan.one_launch:
        counters = seqlens  # not read: any int32 tensor
    return o_part, lse_part, counters, out, lse


def _split_launch(plan: _DecodePlan, tensors: tuple[torch.Tensor, ...], page_size: int,
                  H_kv: int, scale: float) -> tuple[tuple, tuple, dict]:
    """:func:`decode_split_kernel`'s grid, arguments and keywords for ``tensors``: q, the
    caches, the int32 lengths and table (the lengths again for a contiguous cache), then
    :func:`_call_tensors`."""
    q, k_cache, v_cache, _, table = tensors[:5]
    B, H, Lq, D = plan.out_shape
    config = plan.config
    if page_size:  # pool strides: page, head, slot, dim (the kernel's "batch" axis is the page)
        (kp, ks, kh, kd), (vp, vs, vh, vd) = k_cache.stride(), v_cache.stride()
        k_strides, v_strides = (kp, kh, ks, kd), (vp, vh, vs, vd)
        stride_tb, n_pages = table.stride(0), table.shape[1]
    else:
        k_strides, v_strides = k_cache.stride(), v_cache.stride()
        stride_tb, n_pages = 0, 0
    return ((plan.num_splits, B * H_kv, plan.row_blocks),
            (*tensors, *q.stride(), *k_strides, *v_strides, stride_tb, H_kv, Lq, scale, n_pages),
            {"GROUP": H // H_kv, "HEAD_DIM": D, "BLOCK_M": plan.block_m,
             "BLOCK_N": config.block_n, "PAGE_SIZE": page_size, "TABLE_TILE": plan.table_tile,
             "INTERLEAVE_PAGES": plan.interleave_pages,
             "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",
             "DOT_FP32": INTERPRETED and q.dtype == torch.bfloat16,
             "ONE_LAUNCH": plan.one_launch, "TAIL_STAGES": plan.tail_stages,
             "num_warps": config.num_warps, "num_stages": config.num_stages})


def _merge_launch(plan: _DecodePlan, tensors: tuple[torch.Tensor, ...],
                  ) -> tuple[tuple, tuple, dict] | None:
    """:func:`decode_merge_kernel`'s grid, arguments and keywords for :func:`_call_tensors`'s
    ``tensors``; ``None`` where the call needs no merge kernel (unsplit, or merged in one
    launch)."""
    if plan.num_splits == 1 or plan.one_launch:
        return None
    o_part, lse_part, _, out, lse = tensors
    B, H, Lq, D = plan.out_shape
    rows = B * H * Lq
    return ((rows,), (o_part, lse_part, out, lse, rows, plan.num_splits),
            {"HEAD_DIM": D, "SPLITS": next_power_of_2(plan.num_splits),
             "PDL": plan.dependent_merge, "num_warps": 4, "launch_pdl": plan.dependent_merge})


class _DecodePlan(NamedTuple):
    """What a call launches with, worked out from its sizes: the output's shape
    ``(B, H, Lq, D)``, the configuration, ``BLOCK_M``, the row blocks, the splits, whether the
    split kernel merges, its counters, the key of the buffers the call keeps
    (:func:`_decode_buffers`), whether the merge kernel is a programmatic dependent launch
    (:data:`DEPENDENT_MERGE`), the pipeline depth of the split kernel's masked loop
    (:data:`TAIL_LOOP_STAGES`; ``None``: the kernel's), and for a paged call whose programs hold
    their table row the row's width in the kernel (``TABLE_TILE``, a power of two; 0: the
    entries are read as the keys need them, :func:`held_table_pages`). The kernels address the
    buffers a call allocates (``out`` ``(B, H, Lq, D)``, its lse ``(B, H, Lq)``, the partials
    ``(num_splits, B, H, Lq, D)`` and ``(num_splits, B, H, Lq)``) as contiguous, from these
    sizes."""

    out_shape: tuple[int, int, int, int]
    config: DecodeConfig
    block_m: int
    row_blocks: int
    num_splits: int
    one_launch: bool
    counters: int
    buffers: str
    table_tile: int = 0
    interleave_pages: bool = False
    dependent_merge: bool = False
    tail_stages: int | None = None


def replay_key(q: object, k_cache: object, v_cache: object, cache_seqlens: object,
               block_table: object, scale: object, num_splits: object, return_lse: object,
               config: object, check_values: object) -> tuple | None:
    """What decides :func:`decode_attention`'s launches for these arguments, besides the
    tensors' addresses and the index tensors' values: each tensor's dtype, shape, strides,
    16-byte alignment and GPU, the other arguments, the current GPU, whether the current stream
    is being captured into a CUDA graph, and Triton's
    :func:`~teachkit.kernels.launch_cache.launch_settings`. ``None`` for a call that is not
    kept (:data:`DECODE_REPLAYS`): q not on the kernels' device, a tensor subclass, a
    ``config`` whose fields are not of ``DecodeConfig``'s types, a ``scale`` that is not a
    Python number, a call that autograd would record (it raises). Under Triton's interpreter
    a call has a key but nothing is kept: there is no launcher to call again
    (:func:`~teachkit.kernels.launch_cache.launch_replay`)."""
    tensors = (q, k_cache, v_cache)
    if not (type(q) is torch.Tensor and type(k_cache) is torch.Tensor
            and type(v_cache) is torch.Tensor and q.is_cuda == ON_GPU
            and (config is None or type(config) is DecodeConfig
                 and tuple(map(type, config)) == (int, int, int, bool))
            and type(return_lse) is bool and type(check_values) is bool
            and (scale is None or type(scale) is float or type(scale) is int)
            and (num_splits is None or type(num_splits) is int)):
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad
                                    or v_cache.requires_grad):
        return None
    indices = []
    for t in (cache_seqlens, block_table):
        if t is None:
            indices.append(None)
        elif type(t) is torch.Tensor:
            indices.append(tensor_key(t))
        else:
            return None
    gpu = (current_gpu(), torch.cuda.is_current_stream_capturing()) if ON_GPU else ()
    return (*map(tensor_key, tensors), *indices, scale, num_splits, return_lse, check_values,
            config, *gpu, launch_settings())


class DecodeReplay(NamedTuple):
    """What :func:`decode_attention` needs to make one kind of call's launches again
    (:func:`replay_key`): the call's plan, the launcher calls of its split kernel and of its
    merge kernel (``None``: it has none), the lengths it made itself (a call without
    ``cache_seqlens``; ``None`` when it was captured, and a captured replay takes the kept ones
    or makes them in the capture, :func:`_full_lengths`), the sizes its values are checked
    against (``capacity``, ``page_size``, ``num_pages``; ``None``: not checked) and whether it
    was captured into a CUDA graph."""

    plan: _DecodePlan
    split: LaunchReplay | None
    merge: LaunchReplay | None
    lengths: torch.Tensor | None
    checks: tuple[int, int, int] | None
    captured: bool

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 cache_seqlens: torch.Tensor | None, block_table: torch.Tensor | None,
                 return_lse: bool) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """:func:`decode_attention` of these tensors, of the kind this replay was kept for."""
        if self.checks is not None:
            _check_values(cache_seqlens, block_table, *self.checks)
        if cache_seqlens is not None:
            seqlens = _as_int32_rows(cache_seqlens)
        elif self.lengths is not None:
            seqlens = self.lengths
        else:  # a captured call's lengths: kept ones, or made in this capture
            seqlens = _full_lengths(q.shape[0], k_cache.shape[2], q.device, self.captured)
        table = seqlens if block_table is None else _as_int32_rows(block_table)
        tensors = _call_tensors(self.plan, q, seqlens, return_lse, self.captured)
        device = q.get_device()
        self.split(device, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                   seqlens.data_ptr(), table.data_ptr(), *[t.data_ptr() for t in tensors])
        o_part, lse_part, _, out, lse = tensors
        if self.merge is not None:
            self.merge(device, o_part.data_ptr(), lse_part.data_ptr(), out.data_ptr(),
                       lse.data_ptr())
        return (out, lse) if return_lse else out


DECODE_REPLAYS: dict[tuple, DecodeReplay] = replay_table()
"""For each kind of call of :func:`decode_attention` that launched (:func:`replay_key`), its
:class:`DecodeReplay`: the next call of that kind skips the checks, the plan and the launch
cache's keys, and pays the host little more than its output's allocation and Triton's
launcher (``python -m teachkit.bench host``). At most
:data:`~teachkit.kernels.launch_cache.MAX_KEYS` kinds; the next one empties it."""


def forget_plans() -> None:
    """Forget what :func:`decode_attention` worked out for every kind of call it met: the plans
    and the kept launches (:data:`DECODE_REPLAYS`). Call it after changing one of this module's
    tables (such as :data:`HELD_TABLE_PAGES`), so that the next call plans with the new one."""
    _launch_plan.cache_clear()
    DECODE_REPLAYS.clear()


def _remember(key: tuple, replay: DecodeReplay, split: tuple[tuple, tuple, dict],
              merge: tuple[tuple, tuple, dict] | None) -> None:
    """Keep ``replay`` in :data:`DECODE_REPLAYS` under ``key``, with the launcher calls of the
    ``split`` and ``merge`` launches just made, where both can be made again
    (:func:`~teachkit.kernels.launch_cache.launch_replay`)."""
    split_replay = launch_replay(decode_split_kernel, *split)
    merge_replay = None if merge is None else launch_replay(decode_merge_kernel, *merge)
    if split_replay is None or (merge is not None and merge_replay is None):
        return
    keep(DECODE_REPLAYS, key, replay._replace(split=split_replay, merge=merge_replay))


@functools.lru_cache(maxsize=256)
def _launch_plan(B: int, H: int, Lq: int, D: int, H_kv: int, dtype: torch.dtype,
                 device: torch.device, capacity: int, num_splits: int | None,
                 config: DecodeConfig | None, page_size: int, captured: bool = False,
                 ) -> _DecodePlan:
    """The :class:`_DecodePlan` of a call, with the defaults of :func:`decode_config` and
    :func:`choose_num_splits` where not given. A call that splits the keys gets
    :func:`decode_config`'s tiles for ranges of that many keys (``keys_per_split``) and, being
    ``captured`` into a CUDA graph, the merge kernel, with the splits chosen again for those
    tiles. A paged call that merges with the merge kernel aims for :data:`PAGED_SPLIT_WAVES`
    programs an SM (:data:`HELD_SPLIT_WAVES` where it holds its table row), and halves its
    tiles where its ranges would hold too few iterations (:func:`paged_range_tiles`); one that
    reads its table entry by entry and whose unsplit grid already gives every SM a program
    still splits, with the usual tiles, up to :data:`PAGED_ENTRY_WAVES` programs an SM, but
    where that grid has 1.45 to 2 programs an SM (:data:`ENTRY_GRID`), which runs unsplit
    with 64 KB tiles, and a 16-bit one whose grid has fewer splits into the ranges of those
    tiles that bring it there (:func:`entry_grid_splits`; captured, only where that lands at
    :data:`ENTRY_SPLIT_CAPTURED_FROM`); a contiguous one whose unsplit grid
    gives some SMs two programs and the rest one (:data:`LAST_WAVE_GRID`) splits into the
    ranges that fill its last wave (:func:`last_wave_splits`), as does a paged one holding its
    row, and where its
    cache is too short for that runs unsplit with :data:`SHORT_CACHE_TILES`. An unsplit
    16-bit grid of more than two programs an SM takes the tiles whose last wave is the fullest
    (:func:`fullest_wave_tiles`, :data:`FULLEST_WAVE_TILES`), or, from
    :data:`LAST_WAVE_FEWEST_KEYS` keys, the ranges and tiles that fill it fuller by more than
    :data:`WAVE_SPLIT_GAIN`, merged by the merge kernel (:func:`fullest_wave_plan`); a
    contiguous one that fits in one wave of the usual tiles unevenly (:func:`uneven_wave`) takes
    :data:`UNEVEN_WAVE_TILES` instead. A contiguous 16-bit call at ``D = 64`` that splits and
    is captured aims for four programs an SM, its tiles by how long a range is
    (:data:`SHORT_ROW_SPLITS`). A paged call
    (``page_size`` tokens a page; 0: contiguous) holds its table row where the table is narrow
    enough (:func:`held_table_pages`), and then reads as a contiguous call does: where it does not
    split the keys it takes the contiguous call's tiles, and splits where that call would.
    Worked out once per kind of call (a decoding loop makes the same call every step)."""
    capability = None if INTERPRETED else compute_capability(device)
    per_sm = B * H_kv * _row_blocks((H // H_kv) * Lq, D, dtype)[1] / sm_count(device)
    paged = page_size > 0
    pages = capacity // page_size if paged else 0
    table_tile = next_power_of_2(pages) if 0 < pages <= held_table_pages(capability) else 0
    held_waves = _paged_rule(HELD_SPLIT_WAVES, capability) if table_tile else 0
    paged_waves = held_waves or (PAGED_SPLIT_WAVES.get(gpu_class(capability), 2) if capability
                                 else 2)
    if config is not None:
        plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, num_splits, config,
                         paged_waves if paged and not config.one_launch else 2)
        return _finished_plan(plan, table_tile, page_size, B * H_kv, capability, device)
    entries = paged and not table_tile  # every key waits for its table entry
    full_from = unsplit_from(capability, dtype, D, entries)  # full enough not to split
    base = decode_config(D, dtype, capability, entries, programs_per_sm=per_sm,
                         cache_keys=capacity)
    plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, num_splits, base,
                     full_from=full_from)
    # where the wave rules were measured: 16-bit, their head dims, programs of few rows
    wave_measured = (dtype != torch.float32 and D in WAVE_RULE_HEAD_DIMS
                     and plan.block_m <= WAVE_RULE_ROWS)
    last_wave = LAST_WAVE_GRID.get(gpu_class(capability)) if capability else None
    short_cache = SHORT_CACHE_TILES.get(gpu_class(capability)) if capability else None
    last_wave_grid = (last_wave and wave_measured and not entries and num_splits is None
                      and plan.num_splits == 1 and 1 <= per_sm <= last_wave[0])
    if last_wave_grid and short_cache and capacity < LAST_WAVE_FEWEST_KEYS:
        # the same grid with too short a cache to split: half the bytes, one more stage
        tiles = base._replace(block_n=_keys_per_block(short_cache[0], D, dtype.itemsize),
                              num_stages=short_cache[1])
        plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, 1, tiles)
        return _finished_plan(plan, table_tile, page_size, B * H_kv, capability, device)
    if last_wave_grid and capacity >= LAST_WAVE_FEWEST_KEYS:
        # some SMs hold two programs, the rest one: ranges that fill the last wave
        splits = last_wave_splits(B * H_kv * plan.row_blocks, sm_count(device), last_wave[1])
        tiles = (decode_config(D, dtype, capability, paged, captured) if paged else
                 decode_config(D, dtype, capability, False, captured,
                               keys_per_split=cdiv(capacity, splits)))
        plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, splits, tiles)
        return _finished_plan(plan, table_tile, page_size, B * H_kv, capability, device)
    entry_waves = _paged_rule(PAGED_ENTRY_WAVES, capability)
    entry_grid = _paged_rule(ENTRY_GRID, capability)
    if (entries and num_splits is None and entry_grid and dtype != torch.float32
            and D in ENTRY_GRID_HEAD_DIMS):
        # 1.45 to 2 programs an SM of 64 KB tiles (two fit), unsplit or split to get there
        block_n = _entry_grid_keys(entry_grid[2], D, dtype.itemsize)
        min_blocks = max(1, _paged_rule(PAGED_MIN_BLOCKS, capability))
        ranges = entry_grid_splits(
            B * H_kv * plan.row_blocks, sm_count(device), entry_grid,
            cdiv(capacity, block_n) // min_blocks,
            _paged_rule(ENTRY_SPLIT_CAPTURED_FROM, capability) if captured else 0.0)
        if ranges:
            tiles = decode_config(D, dtype, capability, paged, captured)._replace(
                block_n=block_n, num_stages=entry_grid[3])
            plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, ranges, tiles)
            return _finished_plan(plan, table_tile, page_size, B * H_kv, capability, device)
    if entries and num_splits is None and plan.num_splits == 1 and entry_waves:
        # a grid of one or more programs an SM waiting on every entry: more programs
        tiles = decode_config(D, dtype, capability, paged, captured)
        more = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, None, tiles, entry_waves,
                         entry_waves)
        if more.num_splits > 1:
            return _finished_plan(more, table_tile, page_size, B * H_kv, capability, device)
    wave_tiles = FULLEST_WAVE_TILES.get(gpu_class(capability), {}) if capability else {}
    if (paged in wave_tiles and wave_measured and (not paged or H == H_kv)
            and plan.num_splits == 1 and per_sm > WIDE_PROGRAMS[1]):
        # many programs an SM: the tiles, and ranges, whose last wave is the fullest
        most = (LAST_WAVE_MOST_SPLITS if num_splits is None
                and capacity >= LAST_WAVE_FEWEST_KEYS else 1)
        programs, sms = B * H_kv * plan.row_blocks, sm_count(device)
        uneven = UNEVEN_WAVE_TILES.get(gpu_class(capability))
        if uneven and not paged and uneven_wave(programs, sms, wave_tiles[paged][0][2]):
            (stage_bytes, stages), splits = uneven, 1
        else:
            (stage_bytes, stages, _), splits = fullest_wave_plan(
                programs, sms, wave_tiles[paged], most,
                one_wave=not (entries and ENTRIES_FILL_ONE_WAVE))
        tiles = base._replace(block_n=_keys_per_block(stage_bytes, D, dtype.itemsize),
                              num_stages=stages, one_launch=base.one_launch and splits == 1)
        plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, splits, tiles)
        return _finished_plan(plan, table_tile, page_size, B * H_kv, capability, device)
    short_rows = SHORT_ROW_SPLITS.get(gpu_class(capability)) if capability else None
    if (short_rows and captured and plan.num_splits > 1
            and _short_rows(D, dtype.itemsize, paged)):
        # rows of 128 bytes: more programs an SM, tiles by how long a range is
        waves, stage_bytes, stages = short_rows
        block_n = _keys_per_block(stage_bytes, D, dtype.itemsize)
        fine = base._replace(block_n=block_n // 2, num_stages=stages, one_launch=False)
        plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, num_splits, fine, waves,
                         full_from)
        if cdiv(capacity, plan.num_splits) >= SPLIT_RANGE_MIN_BLOCKS * block_n:
            plan = plan._replace(config=fine._replace(block_n=block_n))
        return _finished_plan(plan, table_tile, page_size, B * H_kv, capability, device)
    if plan.num_splits > 1:  # the tiles, merge and splits of a call that splits the keys
        split = decode_config(D, dtype, capability, paged, captured, per_sm,
                              keys_per_split=cdiv(capacity, plan.num_splits))
        merge_kernel_paged = paged and not split.one_launch
        waves = paged_waves if merge_kernel_paged else 2
        plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, num_splits, split, waves,
                         full_from)
        if merge_kernel_paged:  # the ranges those programs leave: enough iterations each?
            short = paged_range_tiles(split, cdiv(capacity, plan.num_splits), capability)
            if short != split:
                plan = _plan_for(B, H, Lq, D, H_kv, dtype, device, capacity, plan.num_splits,
                                 short)
    return _finished_plan(plan, table_tile, page_size, B * H_kv, capability, device)


def _finished_plan(plan: _DecodePlan, table_tile: int, page_size: int, heads: int,
                   capability: tuple[int, int] | None, device: torch.device) -> _DecodePlan:
    """``plan`` finished with the choices that depend on its whole grid. How its programs read
    pages of ``page_size`` tokens (0: contiguous): the table row held (``table_tile``), and the
    tiles' pages interleaved where they hold several whole pages and the grid (``heads`` cache
    heads of all sequences) has at most :func:`interleave_pages_per_sm` programs an SM; and the
    pipeline depth of its masked loop (:data:`TAIL_LOOP_STAGES`, for a grid of at most
    :data:`TAIL_MOST_PER_SM` programs an SM)."""
    block_n = plan.config.block_n
    programs = plan.num_splits * heads * plan.row_blocks
    interleave = (0 < page_size < block_n and block_n % page_size == 0
                  and programs <= interleave_pages_per_sm(capability) * sm_count(device))
    few = programs <= TAIL_MOST_PER_SM * sm_count(device)
    tail_stages = TAIL_LOOP_STAGES.get(gpu_class(capability)) if capability and few else None
    return plan._replace(table_tile=table_tile, interleave_pages=interleave,
                         tail_stages=tail_stages)


def _plan_for(B: int, H: int, Lq: int, D: int, H_kv: int, dtype: torch.dtype,
              device: torch.device, capacity: int, num_splits: int | None,
              config: DecodeConfig, waves: int = 2, full_from: float = 1.0) -> _DecodePlan:
    """:func:`_launch_plan` for a given ``config``, with splits chosen for ``waves`` programs
    per SM, unsplit from ``full_from`` (:func:`choose_num_splits`), unless given."""
    group = H // H_kv
    block_m, row_blocks = _row_blocks(group * Lq, D, dtype)
    if row_blocks > _MAX_GRID_YZ:
        raise ValueError(f"(H / H_kv) * Lq = {group * Lq} query rows per cache head is too many; "
                         "split q into several calls")
    if num_splits is None:
        num_splits = choose_num_splits(B * H_kv * row_blocks,
                                       cdiv(capacity, config.block_n), sm_count(device), waves,
                                       full_from)
    one_launch = config.one_launch and num_splits > 1
    counters = B * H_kv * row_blocks  # one per (sequence, cache head, row block) for the merge
    buffers = (f"decode buffers: out {B}x{H}x{Lq}x{D}, {num_splits} splits, "
               f"{counters if one_launch else 0} counters")
    dependent = (num_splits > 1 and not one_launch and not INTERPRETED
                 and gpu_class(compute_capability(device)) in DEPENDENT_MERGE)
    return _DecodePlan((B, H, Lq, D), config, block_m, row_blocks, num_splits, one_launch,
                       counters, buffers, dependent_merge=dependent)


def _row_blocks(rows: int, D: int, dtype: torch.dtype) -> tuple[int, int]:
    """``BLOCK_M`` and the row blocks for ``rows`` query rows (``(H / H_kv) * Lq``) a cache
    head: a power of two from 16 to :func:`max_rows`."""
    block_m = max(16, min(max_rows(D, dtype), next_power_of_2(rows)))
    return block_m, cdiv(rows, block_m)


def _decode_buffers(plan: _DecodePlan, return_lse: bool, device: torch.device,
                    ) -> tuple[torch.Tensor | None, ...]:
    """The buffers a decoding call writes and reads itself: float32 partial outputs and lse of
    the splits (none unsplit), the lse unless the caller asked for it (then it is the caller's,
    made per call), and the merge's counters (:func:`merge_counters`) when the split kernel
    merges."""
    B, H, Lq, D = plan.out_shape
    split = plan.num_splits > 1
    shape = (plan.num_splits, B, H, Lq)
    return (torch.empty((*shape, D), dtype=torch.float32, device=device) if split else None,
            torch.empty(shape, dtype=torch.float32, device=device) if split else None,
            None if return_lse else torch.empty((B, H, Lq), dtype=torch.float32, device=device),
            merge_counters(plan.counters, device) if plan.one_launch else None)


def _as_int32_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as int32 with unit last stride: itself when it already is (the common case)."""
    if t.dtype != torch.int32:
        t = t.to(torch.int32)
    return t if t.is_contiguous() else t.contiguous()

