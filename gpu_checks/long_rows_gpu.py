"""Rows longer than the chip holds (notebook 06): two ways to take the second read of the split
kernels from on-chip memory or L2 instead of HBM, checked and timed on a CUDA GPU beside the
split kernels, the entry point and a copy of the same bytes. Run from the repository root:
`python gpu_checks/long_rows_gpu.py [--json PATH]`.

A row of more than 4.3M float32 columns (8.7M in float16 or bfloat16) no longer fits in the
registers of a whole H100 or H200 (`resident_fits`), so `teachkit.kernels.softmax` reads it twice
(split rows) and is held to 2/3 of the copy rate. The two alternatives timed here:

- **held + streamed** (`held_streamed_kernel`): a persistent grid of programs, all on the GPU
  at once, takes one row at a time. Each program streams its chunks of the row but the last,
  keeps the last in registers, publishes its ``(m, d)`` as the resident kernel does
  (`pack_pair`, `row_pair`), then writes the kept chunk and reads its streamed chunks again in
  the reverse order, the most recently read first, while they may still be in L2 (loaded with
  ``evict_last``, the results stored with ``.cs``, L2's evict-first).
- **row bands** (`bands`): the split kernels launched a band of rows at a time (at most
  `BAND_BYTES`), the second pass over the band in the reverse order of the first, with the same
  cache hints: no wait between programs, a launch boundary instead.

Every provider is timed on CUDA-graph replays, each after the L2 cache is cleared, so that the
host's launches do not count (the bands make two launches a band). GB/s = 2 x tensor bytes /
time. With `--json` the figures are saved as a record (`softmax_long_rows_<device>.json`).
Without a GPU the kernels are checked under Triton's interpreter on small rows, and nothing is
timed. Exits 1 if a result is wrong.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import teachkit  # noqa: E402  (first: it decides whether Triton interprets)

# isort: split
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from teachkit.kernels import softmax_kernels as sk  # noqa: E402
from teachkit.kernels.grid_math import cdiv, next_power_of_2  # noqa: E402
from teachkit.kernels.softmax_kernels import (  # noqa: E402
    LOG2E,
    merge_combine,
    online_update_tile,
    pack_pair,
    row_pair,
)

SHAPES = [(4, 1 << 24), (8, 1 << 23), (16, 1 << 22)]
"""Rows of 16M, 8M and 4M columns (64M, 64M and 64M elements)."""
BAND_BYTES = 24 << 20
"""Most bytes of input a band of rows holds (at least one row): under half the L2 of an H100
(50 MB) or an H200 (60 MB), so a band's first pass can still be there for its second."""
HELD_CONFIGS = {"held + streamed, 4 warps x 4 an SM": (8192, 4, 4, 120),
                "held + streamed, 8 warps x 2 an SM": (16384, 8, 2, 128)}
"""Provider name: ``(chunk, num_warps, programs an SM, registers a thread)`` of
:func:`held_streamed`: two of the candidates of the resident kernel's sweep
(``gpu_checks/resident_sweep.py``), with one chunk a program held as float32 weights."""


@triton.jit
def held_streamed_kernel(X, Y, SLOTS, n_rows, n_cols, stride_x, stride_y,
                         P: tl.constexpr, P_POW2: tl.constexpr, CHUNK: tl.constexpr,
                         LANES: tl.constexpr, DEPTH: tl.constexpr, MAX_SPIN: tl.constexpr,
                         FALLBACK_LANES: tl.constexpr):
    """``P`` programs, all on the GPU at once, take the rows of ``X`` one after another; program
    ``p`` owns chunks ``p, p + P, p + 2P, ...`` (``CHUNK`` columns each) of every row. It streams
    its chunks but the last through ``LANES`` lanes of running ``(m, d)`` in ``(DEPTH, LANES)``
    tiles, keeps the last as ``e = exp(x - m_c)`` in registers, publishes its merged pair to its
    slot of ``SLOTS`` (``(n_rows * P,)`` int64, :data:`~teachkit.kernels.softmax_kernels.EMPTY_SLOT`
    at launch) and waits for the row's ``P`` pairs (:func:`row_pair`); then writes the kept
    chunk and reads its streamed chunks again, the last read first."""
    pid = tl.program_id(0)
    offs = tl.arange(0, CHUNK)
    tile = tl.arange(0, DEPTH)[:, None] * LANES + tl.arange(0, LANES)[None, :]
    n_chunks = (n_cols + CHUNK - 1) // CHUNK
    streamed = tl.maximum((n_chunks - 1 - pid + P) // P - 1, 0)  # this program's chunks but one
    x_row = X
    y_row = Y
    slots = SLOTS
    for _ in range(n_rows):
        m_l = tl.full([LANES], float("-inf"), tl.float32)
        d_l = tl.zeros([LANES], tl.float32)
        for k in range(0, streamed):
            base = (pid + k * P) * CHUNK
            for start in range(0, CHUNK, DEPTH * LANES):
                cols = base + start + tile
                x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"),
                            eviction_policy="evict_last").to(tl.float32)
                m_l, d_l = online_update_tile(m_l, d_l, x)
        m_s, d_s = tl.reduce((m_l, d_l), 0, merge_combine)
        cols = (pid + streamed * P) * CHUNK + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        m_c = tl.max(x, axis=0)
        safe = tl.where(m_c == float("-inf"), 0.0, m_c)
        e = tl.exp2((x - safe) * LOG2E)
        m_p, d_p = merge_combine(m_s, d_s, m_c, tl.sum(e, axis=0))
        tl.atomic_xchg(slots + pid, pack_pair(m_p, d_p), sem="relaxed")
        m_row, d_row = row_pair(slots, x_row, n_cols, P, P_POW2, MAX_SPIN, FALLBACK_LANES)
        inv_d = 1.0 / d_row
        y = e * (tl.exp2((m_c - m_row) * LOG2E) * inv_d)
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols,
                 cache_modifier=".cs")
        for j in range(0, streamed):
            cols = (pid + (streamed - 1 - j) * P) * CHUNK + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"),
                        eviction_policy="evict_first").to(tl.float32)
            y = tl.exp2((x - m_row) * LOG2E) * inv_d
            tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols,
                     cache_modifier=".cs")
        x_row += stride_x
        y_row += stride_y
        slots += P


def held_streamed(x: torch.Tensor, programs: int, chunk: int = 8192, num_warps: int = 4,
                  max_registers: int = 120, lanes: int = 512, depth: int = 16) -> torch.Tensor:
    """The softmax of the rows of ``x`` (2-D, contiguous rows) by :func:`held_streamed_kernel`
    on ``programs`` programs, which must all fit on the GPU at once to wait for each other (else
    each reads its row itself after its polls: right, and slow)."""
    return launch_held_streamed(x, programs, chunk, num_warps, max_registers, lanes, depth)[0]


def launch_held_streamed(x: torch.Tensor, programs: int, chunk: int, num_warps: int,
                         max_registers: int, lanes: int, depth: int) -> tuple:
    """:func:`held_streamed`'s output and the launch's compiled kernel (on a GPU, its
    ``n_regs`` and ``n_spills`` say whether the kept chunk stayed in registers).

    The streamed tiles are ``(depth, lanes)``: 512 lanes give each thread of four warps four
    adjacent elements a row, 8-byte loads in bfloat16 (256 lanes give 4-byte loads), and a depth
    of 16 keeps 8192 elements of a program in flight. On an H200 a depth of 4 read 4 x 16M
    bfloat16 at 21 % of the copy and a depth of 16 at 47 % (float32: 63 % and 66 %). At eight
    warps the same 512 lanes give a thread two adjacent elements a row, 4-byte bfloat16 loads:
    the record's eight-warp configuration was timed so."""
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    slots = torch.full((n_rows * programs,), sk.EMPTY_SLOT.value, dtype=torch.int64,
                       device=x.device)
    options = {"num_warps": num_warps}
    if x.is_cuda:
        options["maxnreg"] = max_registers
    # the lanes of the fallback (a row read again, after the polls ran out) stay few: they are
    # compiled in beside the kept chunk, and 1024 of them spill it
    compiled = held_streamed_kernel[(programs,)](
        x, y, slots, n_rows, n_cols, x.stride(0), y.stride(0), P=programs,
        P_POW2=next_power_of_2(programs), CHUNK=chunk, LANES=lanes, DEPTH=depth,
        MAX_SPIN=sk.MAX_SPIN, FALLBACK_LANES=128, **options)
    return y, compiled


@triton.jit
def band_stats_kernel(X, M, D, n_cols, stride_x, n_chunks, CHUNK: tl.constexpr,
                      LANES: tl.constexpr, DEPTH: tl.constexpr):
    """:func:`~teachkit.kernels.softmax_kernels.split_stats_kernel` with its loads kept in L2
    (``evict_last``) for the second pass."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    m = tl.full([LANES], float("-inf"), tl.float32)
    d = tl.zeros([LANES], tl.float32)
    tile = tl.arange(0, DEPTH)[:, None] * LANES + tl.arange(0, LANES)[None, :]
    for start in range(chunk * CHUNK, chunk * CHUNK + CHUNK, LANES * DEPTH):
        cols = start + tile
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"),
                    eviction_policy="evict_last").to(tl.float32)
        m, d = online_update_tile(m, d, x)
    m_c, d_c = tl.reduce((m, d), 0, merge_combine)
    tl.store(M + row * n_chunks + chunk, m_c)
    tl.store(D + row * n_chunks + chunk, d_c)


@triton.jit
def band_normalize_kernel(X, Y, M, D, n_cols, stride_x, stride_y, n_chunks,
                          CHUNK: tl.constexpr, LANES: tl.constexpr, LANES_P: tl.constexpr):
    """:func:`~teachkit.kernels.softmax_kernels.split_normalize_kernel` over the band in the
    reverse order of :func:`band_stats_kernel`'s programs (the last chunk read first), its loads
    evict-first and its stores streaming (``.cs``)."""
    row = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)
    chunk = n_chunks - 1 - tl.program_id(1)
    m = tl.full([LANES_P], float("-inf"), tl.float32)
    d = tl.zeros([LANES_P], tl.float32)
    for start in range(0, n_chunks, LANES_P):
        idx = start + tl.arange(0, LANES_P)
        m_p = tl.load(M + row * n_chunks + idx, mask=idx < n_chunks, other=float("-inf"))
        d_p = tl.load(D + row * n_chunks + idx, mask=idx < n_chunks, other=0.0)
        m, d = merge_combine(m, d, m_p, d_p)
    m_row, d_row = tl.reduce((m, d), 0, merge_combine)
    inv_d = 1.0 / d_row
    for start in range(chunk * CHUNK, chunk * CHUNK + CHUNK, LANES):
        cols = start + tl.arange(0, LANES)
        x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        y = tl.exp2((x - m_row) * LOG2E) * inv_d
        tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols,
                 cache_modifier=".cs")


def bands(x: torch.Tensor, band_bytes: int = BAND_BYTES, chunk: int = sk.SPLIT_CHUNK,
          lanes: int = 2048) -> torch.Tensor:
    """The softmax of the rows of ``x`` (2-D, contiguous rows) by the split kernels' two passes
    launched band by band (:func:`band_stats_kernel`, :func:`band_normalize_kernel`), each band
    at most ``band_bytes`` of input or one row."""
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    n_chunks = cdiv(n_cols, chunk)
    m = torch.empty(n_rows, n_chunks, dtype=torch.float32, device=x.device)
    d = torch.empty_like(m)
    band = max(1, band_bytes // (n_cols * x.element_size()))
    lanes_p = min(1024, next_power_of_2(n_chunks))
    depth = sk.split_depth(chunk, lanes)
    for r in range(0, n_rows, band):
        xs, ys, ms, ds = (t[r:r + band] for t in (x, y, m, d))
        grid = (xs.shape[0], n_chunks)
        band_stats_kernel[grid](xs, ms, ds, n_cols, x.stride(0), n_chunks, CHUNK=chunk,
                                LANES=lanes, DEPTH=depth, num_warps=8)
        band_normalize_kernel[grid](xs, ys, ms, ds, n_cols, x.stride(0), y.stride(0), n_chunks,
                                    CHUNK=chunk, LANES=lanes, LANES_P=lanes_p, num_warps=8)
    return y


def check_small() -> bool:
    """Both ways against float64 on small rows (``-inf`` entries, rows that end mid-chunk);
    under the interpreter the held programs read their rows themselves after zero polls."""
    ok = True
    for rows, cols, programs in [(3, 1000, 4), (2, 64, 4), (1, 300, 2)]:
        x = torch.randn(rows, cols, device=teachkit.DEVICE) * 4
        x[0, 5] = float("-inf")
        want = torch.softmax(x.double(), -1)
        for name, y in (("held + streamed", held_streamed(x, programs, chunk=32, lanes=8,
                                                           depth=2)),
                        ("row bands", bands(x, band_bytes=2 * cols * 4, chunk=64, lanes=16))):
            err = (y.double() - want).abs().max().item()
            print(f"{rows}x{cols} {name}: max error {err:.1e}")
            ok &= err < 1e-6
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None, help="save the figures as a record here")
    args = parser.parse_args(argv)
    if not teachkit.ON_GPU:
        print("no CUDA GPU: checking the kernels under Triton's interpreter, timing nothing")
        return 0 if check_small() else 1
    from teachkit.bench import copy_bandwidth
    from teachkit.bench.core import save_results, timing_description
    from teachkit.bench.softmax import SAME_BYTES_COPY, time_softmax_providers
    from teachkit.kernels import softmax

    print(teachkit.describe())
    props = torch.cuda.get_device_properties(0)
    copy = copy_bandwidth()
    print(f"copy bandwidth: {copy:.0f} GB/s, L2 {props.L2_cache_size / 2**20:.0f} MiB")
    providers = {"split rows": sk.softmax_split, "teachkit.kernels.softmax": softmax,
                 "row bands": bands, SAME_BYTES_COPY: torch.clone}
    compiled = {}
    for name, (chunk, warps, per_sm, registers) in HELD_CONFIGS.items():
        providers[name] = (lambda x, c=chunk, w=warps, p=per_sm * props.multi_processor_count,
                           r=registers: held_streamed(x, p, c, w, r))
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(4, 1 << 20, device="cuda", dtype=dtype)
            kernel = launch_held_streamed(x, per_sm * props.multi_processor_count, chunk,
                                          warps, registers, 512, 16)[1]
            compiled[name, str(dtype)[6:]] = {"registers": kernel.n_regs,
                                              "spills": kernel.n_spills}
            print(f"{name}, {str(dtype)[6:]}: {kernel.n_regs} registers, "
                  f"{kernel.n_spills} spilled")
    results, ok = [], True
    for dtype in ("fp32", "bf16"):
        for rows, cols in SHAPES:
            x = torch.randn(rows, cols, device="cuda",
                            dtype=torch.float32 if dtype == "fp32" else torch.bfloat16)
            found, report, right = time_softmax_providers(providers, x, dtype, copy, graph=True,
                                                          tolerance=1e-2)
            results += found
            ok &= right
            print(f"{rows}x{cols} {dtype}:{report}", flush=True)
    if args.json:
        held = [{"provider": name, "dtype": dtype, **found}
                for (name, dtype), found in compiled.items()]
        path = save_results(args.json, results, {"held_compiled": held},
                            timing=timing_description(graph=True), copy_gbps=copy)
        print(f"results: {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
