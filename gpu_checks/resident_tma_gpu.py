"""The resident softmax with its next chunk arriving by TMA (notebook 06), checked and timed on a
Hopper GPU beside the Triton resident kernel. Run from the repository root:
`python gpu_checks/resident_tma_gpu.py [--rounds N] [--json PATH] [--whole-rows]
[--keep-weights] [--one-per-sm] [--two-in-flight] [--round-chunks] [--write-behind]
[--fewer-instructions] [--unexchanged] [--settle]`.

`teachkit.kernels.softmax_tma.resident_tma_kernel` (Gluon) holds each program's chunk in
registers as the Triton resident kernel does, and copies the program's next chunk into shared
memory by TMA while the row waits for its pairs and writes. First it is checked against
`torch.softmax` in each configuration and dtype on awkward rows: one chunk, chunks running past
the row's end, more rows than a round of programs takes, rows of `-inf`, with `+inf` or NaN,
and huge values; then each shape is timed by:

- **split rows**, the two-read split kernels;
- **Triton, table**, `RESIDENT_CONFIGS` for the dtype, and **Triton, long rows**,
  `LONG_ROW_CONFIGS` (what `softmax` runs);
- **TMA 4k**, **TMA 8k** and **TMA 16k, pauses**: the kernel with chunks of 4096 columns (two
  warps, eight programs a multiprocessor), 8192 (`TMA_CONFIGS`: four warps, four an SM) and
  16384 (`TMA_LONG_ROW_CONFIGS`: eight warps, two an SM, pausing between polls);
- on 16-bit rows, **TMA words 16k** and **TMA words 32k, pauses**: its form that holds the
  chunk as the input's own 32-bit words, two elements each, in the same registers as 8192 and
  16384 float32 columns (four warps, four an SM; eight warps, two an SM, pausing), each result
  rounded two to an instruction and each element read from its word with one (`cvt_x2`,
  `prmt`);
- from 2M columns, **TMA 8k, pauses** and **TMA words 16k, pauses**: the four-warp
  configurations pausing between polls, as the long-row ones do;
- **entry point**, `softmax`, which picks;
- with `--whole-rows`, the rule's configurations launching only the most whole rows' chunks
  that fit (`TmaConfig.fill_grid` off: a row's programs all in one round, as the Triton
  kernel's configurations launch), on the rows where that grid is smaller;
- with `--keep-weights`, the words configurations keeping the weights `exp(x - m_chunk)` as
  bfloat16 words through the wait (`TmaConfig.keep_weights`: no exponential after it), on
  bfloat16 rows, their largest error in bfloat16's last place printed beside the words'.
- with `--one-per-sm`, **TMA 32k, one an SM** and, on 16-bit rows, **TMA words 64k, one an
  SM**: one program of sixteen warps a multiprocessor, chunks twice the long-row ones'
  (`ONE_PER_SM`), so a row of the same length spans half the programs;
- with `--two-in-flight`, **TMA 8k, 3 an SM, two in flight** (and **TMA words 16k, 3 an SM,
  two in flight** on 16-bit rows), with and without pauses: three programs of four warps a
  multiprocessor, each with two chunks in flight in two buffers of shared memory
  (`TmaConfig.depth`), so that the copies of its next two items run while it waits, beside
  **TMA 8k, 3 an SM, pauses** (**TMA words 16k, 3 an SM, pauses**), the same programs with one
  chunk in flight (`TWO_IN_FLIGHT`): three programs because four of 64 KB of buffers do not fit
  in a multiprocessor's 228 KB. On an H100 two in flight gained nothing over one, 0 to 0.6
  points less with pauses on 2M and 3M float32 and 4M bfloat16
  (`teachkit/benchmarks/softmax_resident_tma_two_in_flight_nvidia_h100.json`, notebook 06);
- with `--round-chunks`, **TMA 10k, pauses**, **TMA 12k, pauses** and **TMA 14k, pauses**: the
  long-row configuration's two programs of eight warps a multiprocessor, pausing between
  polls, with chunks of 5 TMA boxes of 8 lines, 3 of 16 and 7 of 8 (`TmaConfig.boxes`: 10240,
  12288 and 14336 float32 columns, held in the registers of 16384), so that rows of 2.5M, 3M
  and 3.5M columns take 256 chunks each, a row a round of the 264 programs an H100 holds,
  where chunks of 16384 give them 160, 192 and 224 and rows straddle rounds; and each of them
  with **whole rows** (`fill_grid` off: 256 programs, one row a round, none waiting for the
  next) (`ROUND_CHUNKS`). On an H100 neither beat chunks of 16384 (3M: 83.9 and 83.2 % of the
  copy against 84.1; 2.5M: 81.4 and 80.4 against 81.6), and chunks of 14336 read at 73-77 %
  (`teachkit/benchmarks/softmax_resident_tma_round_chunks_nvidia_h100.json`, notebook 06);
- with `--write-behind`, **TMA 4k, behind** (with and without pauses), **TMA 8k, 8 warps,
  behind** (with and without pauses) beside **TMA 8k, 8 warps**, and **TMA 16k, one an SM,
  behind, pauses**: programs that publish each chunk's pair before they wait for the row of the
  chunk before and write it (`TmaConfig.write_behind`), so a row's wait overlaps the next
  chunk's work; two chunks in registers, so half the chunk of the same registers; and **TMA
  16k, behind from L2, pauses**, the long-row configuration writing behind with one chunk in
  registers, reading the chunk written behind again (`TmaConfig.reread`, from L2 if it is still
  there), which holds rows of up to 4M float32 columns, and on 16-bit rows **TMA words 16k,
  behind from L2** and **TMA words 32k, behind from L2, pauses**, the words configurations
  writing behind that way (`WRITE_BEHIND`). On an H100 writing
  behind read float32 rows of 32k to 2M columns at 95.0-96.4 % of the copy in chunks of 8192
  (`teachkit/benchmarks/softmax_resident_tma_write_behind_nvidia_h100.json`); reading again
  read float32 rows of 2.5M-4M columns and bfloat16 rows of 4M at 57.9-65.6 %, about the
  two-read bound (`teachkit/benchmarks/softmax_resident_tma_reread_nvidia_h100.json`); and
  **TMA 8k, 4 warps x3, pair from buffer**, **TMA 8k, 8 warps x3, pair from buffer** (with
  and without pauses): three programs a multiprocessor writing behind that take each chunk's
  pair from its buffer in shared memory and load it into registers only after writing the
  chunk before (`TmaConfig.pair_from_buffer`, two buffers each), so they hold float32 rows of
  up to 3.2M columns: on an H100 four warps read rows of 2.5M / 3M at 94.0 / 93.4 %, where the
  rule then read them at 79.9 / 84.3 %, and eight warps at 85.5-87.2 %
  (`teachkit/benchmarks/softmax_resident_tma_pair_from_buffer_nvidia_h100.json`; the rule
  takes the first since); and on 16-bit rows **TMA words 16k, 4 warps x3, pair from buffer**
  and **TMA words 16k, 4 warps x4, pair from buffer** (with and without pauses), the same as
  words (`PAIR_FROM_BUFFER_WORDS_CONFIGS`), which read bfloat16 rows of 4M / 8M at 78.4-79.1 /
  69.4-70.4 %, under the rule
  (`teachkit/benchmarks/softmax_resident_tma_words_pair_from_buffer_nvidia_h100.json`); no way
  of writing behind read bfloat16 rows of 256k or 1M faster than the rule's configurations
  (`teachkit/benchmarks/softmax_resident_tma_bf16_behind_nvidia_h100.json`);
- with `--fewer-instructions`, the two words configurations **F2F** (rounding each result with
  an instruction of their own, as the rule did before), **F2FP** (`cvt_x2` alone) and **PRMT,
  log2 d** (the division by the row's sum folded into the exponent too, `log2_d`): bfloat16
  rows of 4M / 8M at 82.1 / 77.1 % as F2F and 83.2 / 79.1 % as F2FP, against the rule's 84.2 /
  80.2 % on an H100, and no gain from `log2_d`
  (`teachkit/benchmarks/softmax_resident_tma_fewer_instructions_nvidia_h100.json`, timed
  before the rule took `prmt`, where the rule's forms are named **PRMT**);
- with `--unexchanged`, the rule's configurations (`RULE_CONFIGS`) **cut to chunks**: run on
  the same tensor viewed as rows of one chunk each, so that each program reads, holds and
  writes the same bytes but waits for no other program (`time_cut_to_chunks`): the gap to the
  configuration's figure on the long rows is what the exchange costs. Checked against a
  softmax of each chunk.

Rows of 32k to 4M columns in float32 and bfloat16 (and 8M in bfloat16, which only the Triton
kernel holds), checked against `torch.softmax`, then timed in ``--rounds`` rounds (default 3)
in an order that reverses each round; plain launches, each after the L2 cache is cleared; a
measurement is the median of its rounds. GB/s = 2 x tensor bytes / time, printed as a share of
the copy bandwidth. About ten minutes on an H100 (a minute for the edge checks, then 30-40
seconds a shape): run it in parts with `--shapes` where a time limit is shorter. With `--json`
the figures are saved as a record (`softmax_resident_tma_<device>.json`). Exits 1 if a result
is wrong, 2 without a Hopper GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import teachkit  # noqa: E402  (first: it decides whether Triton interprets)

# isort: split
import torch  # noqa: E402

from teachkit.bench.softmax import add_shape_arguments, agrees_with_torch  # noqa: E402
from teachkit.kernels import softmax_kernels as sk  # noqa: E402
from teachkit.kernels import softmax_tma as st  # noqa: E402
from teachkit.kernels.grid_math import cdiv, resident_grid  # noqa: E402

SHAPES = {"fp32": [(4096, 1 << 15), (1024, 1 << 16), (256, 1 << 18), (64, 1 << 20),
                   (52, 5 << 18), (48, 3 << 19), (32, 1 << 21), (24, 3 << 20), (16, 1 << 22)],
          "bf16": [(4096, 1 << 15), (1024, 1 << 16), (256, 1 << 18), (64, 1 << 20),
                   (52, 5 << 18), (32, 1 << 21), (16, 1 << 22), (8, 1 << 23)]}
"""Rows the resident kernels take: from 32k columns (past the fused kernel's 16k) to 4M in
float32 (1.25M, 1.5M and 3M among them) and 8M in bfloat16."""
TMA_PROVIDERS = {"TMA 4k": st.TmaConfig(16, 2, 8), "TMA 8k": st.TMA_CONFIGS[4],
                 "TMA 8k, pauses": st.TMA_CONFIGS[4]._replace(backoff=True),
                 "TMA 16k, pauses": st.TMA_LONG_ROW_CONFIGS[4],
                 "TMA words 16k": st.TMA_WORDS_CONFIGS[2],
                 "TMA words 16k, pauses": st.TMA_WORDS_CONFIGS[2]._replace(backoff=True),
                 "TMA words 32k, pauses": st.TMA_LONG_ROW_CONFIGS[2]}
"""Name: configuration of the TMA kernel timed (those with ``words`` on 16-bit rows only, and
those with pauses in chunks of 8192 or 16384 columns on the rows of many chunks only,
:data:`PAUSES_FROM`)."""
PAUSES_FROM = 1 << 21
"""The columns from which the configurations with pauses that the rule does not take (``TMA 8k,
pauses`` and ``TMA words 16k, pauses``) are timed: rows of 256 chunks or more."""
WHOLE_ROWS = {f"{name}, whole rows": TMA_PROVIDERS[name]._replace(fill_grid=False)
              for name in ("TMA 8k", "TMA 16k, pauses", "TMA words 16k", "TMA words 32k, pauses")}
"""With ``--whole-rows``: the rule's configurations launching only the most whole rows' chunks
that fit (``fill_grid`` off), a row's programs all in one round, timed where that grid differs
from every program that fits."""
WEIGHTS_KEPT = {f"{name}, weights kept": TMA_PROVIDERS[name]._replace(keep_weights=True)
                for name in ("TMA words 16k", "TMA words 32k, pauses")}
"""With ``--keep-weights``: the words configurations keeping the weights ``exp(x - m_chunk)``
as bfloat16 words through the wait (``keep_weights``), on bfloat16 rows; the edge checks print
their largest error in units of the last place of bfloat16, beside the words that keep the
input."""

RULE_CONFIGS = frozenset(config for table in (st.TMA_CONFIGS, st.TMA_BEHIND_CONFIGS,
                                               st.TMA_PAIR_FROM_BUFFER_CONFIGS,
                                               st.TMA_WORDS_CONFIGS, st.TMA_LONG_ROW_CONFIGS)
                         for config in table.values())
"""The configurations :func:`~teachkit.kernels.softmax_tma.tma_config` takes, read from its
tables."""
ONE_PER_SM = {"TMA 32k, one an SM": st.TmaConfig(128, 16, 1, backoff=True),
              "TMA words 64k, one an SM": st.TmaConfig(128, 16, 1, backoff=True, words=True)}
"""With ``--one-per-sm``: one program of sixteen warps a multiprocessor, its chunk 32768
float32 columns (65536 16-bit ones as words) and a buffer of 128 KB, pausing between polls: the
rows the long-row configurations hold, in half the programs, so a row waits for half the
pairs."""

TWO_IN_FLIGHT = {
    "TMA 8k, 3 an SM, pauses": st.TmaConfig(32, 4, 3, backoff=True),
    "TMA 8k, 3 an SM, two in flight": st.TmaConfig(32, 4, 3, depth=2),
    "TMA 8k, 3 an SM, two in flight, pauses": st.TmaConfig(32, 4, 3, backoff=True, depth=2),
    "TMA words 16k, 3 an SM, pauses": st.TmaConfig(32, 4, 3, backoff=True, words=True),
    "TMA words 16k, 3 an SM, two in flight": st.TmaConfig(32, 4, 3, words=True, depth=2),
    "TMA words 16k, 3 an SM, two in flight, pauses": st.TmaConfig(32, 4, 3, backoff=True,
                                                                  words=True, depth=2)}
"""With ``--two-in-flight``: :data:`~teachkit.kernels.softmax_tma.TMA_CONFIGS`' chunks (and
:data:`~teachkit.kernels.softmax_tma.TMA_WORDS_CONFIGS`') in three programs a multiprocessor,
two chunks in flight each (``depth=2``: 64 KB of buffers a program), beside the same three with
one: float32 rows of up to 3.2M columns on an H100, 16-bit rows of 6.5M."""


BOXED = {"TMA 10k, pauses": st.TmaConfig(8, 8, 2, backoff=True, boxes=5),
         "TMA 12k, pauses": st.TmaConfig(16, 8, 2, backoff=True, boxes=3),
         "TMA 14k, pauses": st.TmaConfig(8, 8, 2, backoff=True, boxes=7)}
ROUND_CHUNKS = BOXED | {f"{name}, whole rows": config._replace(fill_grid=False)
                        for name, config in BOXED.items()}
"""With ``--round-chunks``: :data:`~teachkit.kernels.softmax_tma.TMA_LONG_ROW_CONFIGS`'
programs with chunks that are not a power of two (``boxes``), 256 to a row of 2.5M, 3M and
3.5M float32 columns, on every program that fits and on whole rows a round (256 programs, none
waiting for the next round; ``teachkit.plots.resident_rounds``): does a row that fills its
round read faster than one that straddles two?"""


WRITE_BEHIND = {
    "TMA 4k, behind": st.TmaConfig(16, 4, 4, write_behind=True),
    "TMA 4k, behind, pauses": st.TmaConfig(16, 4, 4, backoff=True, write_behind=True),
    "TMA 8k, 8 warps": st.TmaConfig(32, 8, 2),
    "TMA 8k, 8 warps, behind": st.TmaConfig(32, 8, 2, write_behind=True),
    "TMA 8k, 8 warps, behind, pauses": st.TmaConfig(32, 8, 2, backoff=True, write_behind=True),
    "TMA 16k, one an SM, behind, pauses": st.TmaConfig(64, 16, 1, backoff=True,
                                                       write_behind=True),
    "TMA 16k, behind from L2, pauses": st.TmaConfig(64, 8, 2, backoff=True, write_behind=True,
                                                    reread=True),
    "TMA words 16k, behind from L2": st.TmaConfig(32, 4, 4, words=True, write_behind=True,
                                                  reread=True),
    "TMA words 32k, behind from L2, pauses": st.TmaConfig(64, 8, 2, backoff=True, words=True,
                                                          write_behind=True, reread=True),
    "TMA 8k, 4 warps x3, pair from buffer": st.PAIR_FROM_BUFFER_CONFIGS[0],
    "TMA 8k, 8 warps x3, pair from buffer": st.PAIR_FROM_BUFFER_CONFIGS[1],
    "TMA 8k, 8 warps x3, pair from buffer, pauses":
        st.PAIR_FROM_BUFFER_CONFIGS[1]._replace(backoff=True),
    "TMA words 16k, 4 warps x3, pair from buffer": st.PAIR_FROM_BUFFER_WORDS_CONFIGS[0],
    "TMA words 16k, 4 warps x4, pair from buffer": st.PAIR_FROM_BUFFER_WORDS_CONFIGS[1],
    "TMA words 16k, 4 warps x4, pair from buffer, pauses":
        st.PAIR_FROM_BUFFER_WORDS_CONFIGS[1]._replace(backoff=True)}
"""With ``--write-behind``: programs that publish each chunk's pair before they wait for the
row of the chunk before and write it (``write_behind``), two chunks in registers, so half the
chunk of the same registers: chunks of 4096 columns in four programs of four warps a
multiprocessor, 8192 in two of eight warps (and the same two without writing behind, to tell
the warps from the order), and 16384 in one of sixteen, with and without pauses; and 16384 in
the long-row configuration's two programs of eight warps reading the chunk written behind again
(``reread``: one chunk in registers, so rows of up to 4M float32 columns), and on 16-bit rows the
words configurations (:data:`~teachkit.kernels.softmax_tma.TMA_WORDS_CONFIGS` and
:data:`~teachkit.kernels.softmax_tma.TMA_LONG_ROW_CONFIGS`) writing behind that way: rows of up
to 8M columns; and :data:`~teachkit.kernels.softmax_tma.PAIR_FROM_BUFFER_CONFIGS`, three
programs of 8192 columns a multiprocessor that take each chunk's pair from its buffer and hold
only the chunk written behind in registers (``pair_from_buffer``), two buffers each: float32
rows of up to 3.2M columns written behind, and on 16-bit rows the same as words
(:data:`~teachkit.kernels.softmax_tma.PAIR_FROM_BUFFER_WORDS_CONFIGS`): three programs with two
buffers each (rows of up to 6.5M columns), or four with one (8.6M), with and without pauses."""


FEWER_INSTRUCTIONS = {
    f"{name}{suffix}": TMA_PROVIDERS[name]._replace(cvt_x2=cvt_x2, prmt=prmt, log2_d=log2_d)
    for name in ("TMA words 16k", "TMA words 32k, pauses")
    for suffix, cvt_x2, prmt, log2_d in ((", F2F", False, False, False),
                                         (", F2FP", True, False, False),
                                         (", PRMT, log2 d", True, True, True))}
"""With ``--fewer-instructions``: the words configurations of the rule (which round two results
with one instruction, ``cvt_x2``, and read each element from its word with one ``PRMT``,
``prmt``) as they were before, rounding each result with an ``F2F``, with ``cvt_x2`` alone, and
with the division by the row's sum folded into the exponent too (``log2_d``). The record
``softmax_resident_tma_fewer_instructions_nvidia_h100`` was timed before the rule took them:
its ``TMA words 16k`` and ``TMA words 32k, pauses`` are the ``F2F`` forms, and its ``, PRMT``
forms the rule's now."""


def extra_configs(whole_rows: bool = False, keep_weights: bool = False,
                  one_per_sm: bool = False, two_in_flight: bool = False,
                  round_chunks: bool = False, write_behind: bool = False,
                  fewer_instructions: bool = False) -> dict[str, object]:
    """:data:`WHOLE_ROWS`, :data:`WEIGHTS_KEPT`, :data:`ONE_PER_SM`, :data:`TWO_IN_FLIGHT`,
    :data:`ROUND_CHUNKS`, :data:`WRITE_BEHIND` and :data:`FEWER_INSTRUCTIONS`, as asked for."""
    return ((WHOLE_ROWS if whole_rows else {}) | (WEIGHTS_KEPT if keep_weights else {})
            | (ONE_PER_SM if one_per_sm else {}) | (TWO_IN_FLIGHT if two_in_flight else {})
            | (ROUND_CHUNKS if round_chunks else {}) | (WRITE_BEHIND if write_behind else {})
            | (FEWER_INSTRUCTIONS if fewer_instructions else {}))


def unexchanged(x: torch.Tensor) -> dict[str, object]:
    """Name: configuration, of the ``--unexchanged`` providers for the rows ``x``: the TMA
    configurations the rule takes (:data:`RULE_CONFIGS`) that hold ``x``'s rows and whose chunk
    divides them, to be run on ``x`` cut to rows of one chunk."""
    cols, device = x.shape[1], x.device.index or 0
    return {f"{name}, cut to chunks": config for name, config in TMA_PROVIDERS.items()
            if config in RULE_CONFIGS and (not config.words or x.element_size() == 2)
            and cols % config.chunk == 0 and st.tma_fits(cols, config, x.dtype, device)}


def providers(dtype: torch.dtype, extra: dict[str, object]) -> dict[str, object]:
    """Name: a function of the rows, for every provider of the module docstring and the
    configurations of ``extra`` (:func:`extra_configs`) that take ``dtype``."""
    size = dtype.itemsize
    timed = TMA_PROVIDERS | {name: config for name, config in extra.items()
                             if not config.keep_weights or dtype == torch.bfloat16}
    found = {"split rows": sk.softmax_split,
             "Triton, table": lambda x: sk.softmax_resident(x, config=sk.RESIDENT_CONFIGS[size]),
             "Triton, long rows": lambda x: sk.softmax_resident(
                 x, config=sk.LONG_ROW_CONFIGS[size])}
    found |= {name: (lambda x, c=config: sk.softmax_resident_tma(x, config=c))
              for name, config in timed.items() if not config.words or size == 2}
    return found | {"entry point": sk.softmax}


def fits(name: str, x: torch.Tensor) -> bool:
    """Whether the provider ``name`` holds the rows of ``x`` on this GPU (and, for the
    configurations with pauses the rule does not take, whether the rows are long enough to time
    them, :data:`PAUSES_FROM`)."""
    cols, device = x.shape[1], x.device.index or 0
    if name in ("TMA 8k, pauses", "TMA words 16k, pauses") and cols < PAUSES_FROM:
        return False
    if name in WHOLE_ROWS:
        config = WHOLE_ROWS[name]
        g = cdiv(cols, config.chunk)
        fit = st.tma_programs(config, x.dtype, device)
        whole = resident_grid(fit, g, x.shape[0])
        return 0 < whole != resident_grid(fit, g, x.shape[0], fill_grid=True)
    configs = (TMA_PROVIDERS | WEIGHTS_KEPT | ONE_PER_SM | TWO_IN_FLIGHT | ROUND_CHUNKS
               | WRITE_BEHIND | FEWER_INSTRUCTIONS)
    if name in configs:
        return st.tma_fits(cols, configs[name], x.dtype, device)
    if name.startswith("Triton"):
        table = name.endswith("table")
        config = (sk.RESIDENT_CONFIGS if table else sk.LONG_ROW_CONFIGS)[x.element_size()]
        return sk.resident_fits(cols, x.dtype, device, config)
    return True


def awkward_rows(chunk: int, dtype: torch.dtype, width: int) -> list[torch.Tensor]:
    """Rows that test the kernel's edges for chunks of ``chunk`` columns, rows a multiple of
    ``width``: one chunk, chunks running past the row (a multiple of ``width`` that is not one
    of ``chunk``), more rows than a round takes, rows of ``-inf``, with ``+inf``, with NaN,
    values near 1e4, and rows of ``width`` alone."""
    make = dict(device="cuda", dtype=dtype)
    tail = torch.randn(5, 2 * chunk + width, **make)
    special = torch.randn(4, 3 * chunk, **make)
    special[0] = float("-inf")
    special[1, 7] = float("inf")
    special[2, 11] = float("nan")
    special[3, ::5] = float("-inf")
    return [torch.randn(3, chunk, **make), tail, torch.randn(1200, 4 * chunk, **make) * 30,
            special, torch.randn(2, 5 * chunk, **make) * 1e4, torch.randn(7, width, **make)]


def bf16_ulps(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest ``|got - want|`` in units of the last place of bfloat16 at ``want`` (float32
    tensors, finite ``want`` only)."""
    finite = torch.isfinite(want) & (want != 0)
    place = torch.exp2(torch.floor(torch.log2(want[finite].abs())) - 7)
    return ((got[finite] - want[finite]).abs() / place).max().item()


def check_edges(extra: dict[str, object]) -> bool:
    """:func:`awkward_rows` through every TMA configuration and those of ``extra``
    (:func:`extra_configs`) in float32, float16 and bfloat16 as they take them (and a
    non-contiguous input and ``dim=0``), against ``torch.softmax``; prints each failure, and
    the largest error of the words in bfloat16 in units of its last place."""
    ok = True
    for name, config in (TMA_PROVIDERS | extra).items():
        if config.words:
            x = torch.randn(8, 4 * config.chunk, device="cuda", dtype=torch.bfloat16) * 4
            ulps = bf16_ulps(sk.softmax_resident_tma(x, config=config).float(),
                             torch.softmax(x.float(), -1))
            print(f"{name}: bfloat16 error at most {ulps:.2f} units in the last place")
        for dtype in (torch.bfloat16,) if config.keep_weights else (
                (torch.float16, torch.bfloat16) if config.words else (
                torch.float32, torch.float16, torch.bfloat16)):
            width = st.TMA_WIDTH * (2 if config.words else 1)
            for x in awkward_rows(config.chunk, dtype, width):
                if not agrees_with_torch(sk.softmax_resident_tma(x, config=config), x):
                    ok = False
                    print(f"WRONG: {name} {dtype} rows {tuple(x.shape)}")
    x = torch.randn(4 * TMA_PROVIDERS["TMA 8k"].chunk, 6, device="cuda")
    for got, want in ((sk.softmax_resident_tma(x, dim=0), torch.softmax(x, 0)),
                      (sk.softmax_resident_tma(x.t()), torch.softmax(x.t(), -1))):
        if not torch.allclose(got, want, atol=1e-6, rtol=1e-4):
            ok = False
            print("WRONG: a column softmax (dim=0, or rows of a transposed tensor)")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_shape_arguments(parser, "fp32:48x1572864 bf16:8x8388608")
    parser.add_argument("--whole-rows", action="store_true",
                        help="also time the rule's configurations launching whole rows a round")
    parser.add_argument("--keep-weights", action="store_true",
                        help="also time the words configurations keeping bfloat16 weights")
    parser.add_argument("--one-per-sm", action="store_true",
                        help="also time one program of sixteen warps a multiprocessor")
    parser.add_argument("--two-in-flight", action="store_true",
                        help="also time three programs a multiprocessor with two chunks in "
                             "flight each")
    parser.add_argument("--round-chunks", action="store_true",
                        help="also time chunks of 10k, 12k and 14k columns (TMA boxes of 8 "
                             "or 16 lines), 256 to rows of 2.5M, 3M and 3.5M")
    parser.add_argument("--write-behind", action="store_true",
                        help="also time programs that write each chunk after publishing the "
                             "next one's pair")
    parser.add_argument("--fewer-instructions", action="store_true",
                        help="also time the words configurations with fewer instructions an "
                             "element, and as they rounded before")
    parser.add_argument("--unexchanged", action="store_true",
                        help="also the rule's configurations on the rows cut to one chunk each, "
                             "which wait for no other program")
    args = parser.parse_args(argv)
    if not teachkit.ON_GPU or torch.cuda.get_device_capability()[0] != 9:
        print("no Hopper GPU: this script checks and times the TMA resident softmax on one")
        return 2
    from teachkit.bench.core import announce_copy_bandwidth, finish
    from teachkit.bench.softmax import (
        cut_timers,
        dtype_shape_jobs,
        provider_timers,
        time_shapes,
    )

    copy = announce_copy_bandwidth()
    extra = extra_configs(args.whole_rows, args.keep_weights, args.one_per_sm,
                          args.two_in_flight, args.round_chunks, args.write_behind,
                          args.fewer_instructions)
    ok = check_edges(extra)
    print(f"edge cases: {'all right' if ok else 'WRONG (above)'}", flush=True)

    def timers_for(x, dt):
        timed = {name: fn for name, fn in providers(x.dtype, extra).items() if fits(name, x)}
        timers = provider_timers(timed, x, dt, settle_ms=args.settle_ms)
        if args.unexchanged:
            timers |= cut_timers(unexchanged(x), sk.softmax_resident_tma, x, dt)
        return timers

    results, right = time_shapes(dtype_shape_jobs(SHAPES, args.shapes), timers_for, args.rounds,
                                 copy)
    ok &= right
    finish(args, results, copy_gbps=copy)  # --json: the record
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
