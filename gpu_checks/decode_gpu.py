"""GPU check of split-KV / paged decoding (notebook 09): correctness at real sizes, then timings.

Run from the repository root on a CUDA machine:  python gpu_checks/decode_gpu.py [--splits-only]
Prints a compact report; exits 1 if any correctness check fails. Budget: under 3 minutes.

1. correctness: decode_attention against a float64 (or chunked float32) reference: fp16/bf16/fp32,
   D = 64/128/256, GQA, Lq = 1..16, odd lengths, lengths varying per sequence down to 0, empty
   splits, paged (pages 16 and 64, shuffled) against float64 and, launched with the same tiles and
   splits and in key order, equal to contiguous bit for bit, S = 128k;
2. timings: B in 1, 8; S in 4k, 16k, 64k, 128k; split-KV vs unsplit vs paged vs SDPA flash/cuDNN,
   GB/s of K and V and % of the copy bandwidth;
3. a small sweep of BLOCK_N / warps / stages and of num_splits for split-KV (and paged), to tune
   decode_config / choose_num_splits;
4. with --split-sweep, the merge (one launch or the merge kernel) and tiles of split calls
   beside cuDNN, plain and on CUDA-graph replays, saved as records (decode_config's captured
   and keys_per_split);
5. with --paged-sweep, a paged cache's tiles and splits against the contiguous default on
   CUDA-graph replays, batches 1 to 16, saved as a record (decode_config's paged tiles);
6. with --contiguous-sweep, the tiles of unsplit contiguous calls (batches 2 to 32) beside
   cuDNN on CUDA-graph replays, saved as a record (decode_config's wide tiles);
7. with --head-dim-sweep, the default, two splits and unsplit and split tiles at D = 64
   (batches 1 to 16) and D = 256 (batches 2 to 5) beside cuDNN on CUDA-graph replays, saved as
   a record (decode.unsplit_from's head dims, the keys of a 64 KB tile at D = 64);
8. with --held-table-sweep, a paged cache read by the default (each program holding its table
   row where the table is narrow enough) and by the same call reading the entries as the keys
   need them, beside the contiguous default on CUDA-graph replays, batches 1 to 8, 1k-4k
   tokens, D = 64 and 128, saved as a record (decode.HELD_TABLE_PAGES);
9. with --interleave-sweep, a paged cache read by the default, with its tiles' pages never
   interleaved and always, beside the contiguous default on CUDA-graph replays, batches 1 to 16,
   1k-16k tokens, D = 64 and 128, saved as a record (decode.INTERLEAVE_PAGES_PER_SM);
10. with --entry-waves-sweep, a paged cache too long for a program to hold its table row, read
   by the default, unsplit and in 2, 3 and 4 ranges, beside the contiguous default on CUDA-graph
   replays, batches 5 to 12 (1.2-2.9 programs an SM unsplit), 16k and 64k tokens, D = 64 and
   128, saved as a record (decode.PAGED_ENTRY_WAVES);
11. with --last-wave-sweep, contiguous grids of 1.0-1.45 programs an SM (D = 128, H = 32,
   grouped-query heads) by the default, unsplit and in 2 to 5 ranges beside cuDNN, 2k-64k
   tokens, and paged with the table row held, plain and on CUDA-graph replays, saved as records
   (decode.LAST_WAVE_GRID);
12. with --wave-tiles-sweep, grids of 2.9-11.6 programs an SM unsplit (D = 128, H = 32),
   contiguous and in pages of 16, by the default and by each tile they choose from, unsplit and
   in the ranges that fill its last wave the most, beside cuDNN, 4k and 16k tokens, on
   CUDA-graph replays, with what each kernel compiled to, saved as a record
   (decode.FULLEST_WAVE_TILES, decode.WAVE_SPLIT_GAIN);
13. with --short-rows-sweep, split calls at D = 64 and short caches of 1.2-1.9 programs an SM
   at D = 128 by the default and the plan before their rules, beside cuDNN, plain and on
   CUDA-graph replays, saved as records (decode.SHORT_ROW_SPLITS, decode.SHORT_CACHE_TILES);
14. with --dependent-merge-sweep, captured split calls at D = 64 and 128 (one to four
   sequences, 1k-64k tokens) by the default, whose merge kernel is a programmatic dependent
   launch on sm_90, and with the merge kernel launched after the split kernel, beside cuDNN on
   CUDA-graph replays, saved as a record (decode.DEPENDENT_MERGE);
15. with --nearly-full-sweep, unsplit grids of nearly one program an SM at D = 64 (three and
   four sequences, 1k-64k tokens) by the default and by its two tiles (256 and 128 keys in 3
   stages), beside cuDNN, plain and on CUDA-graph replays, saved as records
   (decode.NEARLY_FULL_MIN_BLOCKS);
16. with --tail-loop-sweep, contiguous calls at D = 128 (one to sixteen sequences, 1k-64k
   tokens) and D = 64 (one to eight, 1k and 4k) and paged calls at batch 8, by the default,
   whose loop over masked key blocks is not pipelined on a grid of at most two programs an SM,
   and with it pipelined, beside cuDNN, plain and on CUDA-graph replays, saved as records
   (decode.TAIL_LOOP_STAGES, decode.TAIL_MOST_PER_SM).
17. with --uneven-wave-sweep, contiguous grids of 2.9-3.9 programs an SM (D = 128, H = 32, one
   wave of the usual tiles, 4k-64k tokens) by the default, the usual tiles and 128-key tiles,
   beside cuDNN, plain and on CUDA-graph replays, saved as records (decode.UNEVEN_WAVE_TILES).
18. with --held-split-sweep, split paged calls whose programs hold their table row (one and two
   sequences, 1k-4k tokens, D = 64 and 128) by the default, which aims for two programs an SM,
   and aiming for four as a call reading entries does, beside the contiguous default on
   CUDA-graph replays, saved as a record (decode.HELD_SPLIT_WAVES);
19. with --entry-tiles-sweep, a paged cache read entry by entry (four to sixteen sequences,
   0.97-3.9 programs an SM unsplit, 16k-128k tokens, D = 64 and 128) by the default, split
   as before its rule and unsplit with 64- to 256-key tiles in 2 or 3 stages, beside the
   contiguous default on CUDA-graph replays, saved as a record (decode.ENTRY_GRID).
20. with --entry-ranges-sweep, a paged cache read entry by entry whose unsplit grid holds under
   1.45 programs an SM (one to five sequences, 16k and 64k tokens, D = 64 and 128) by the
   default, split as before its rule and in ranges of the rule's 64 KB tiles, beside the
   contiguous default, plain and on CUDA-graph replays, saved as records (decode.ENTRY_GRID).
21. with --page-layout-sweep, where a paged cache's cost against contiguous comes from (one to
   eight sequences, 16k and 64k tokens, D = 64 and 128): the default on pages of 16 shuffled,
   the same pages with each head's rows stored together, the same pages in order, and pages
   of 64 shuffled, beside the contiguous default on CUDA-graph replays, saved as a record.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import teachkit  # noqa: E402

T0 = time.time()
FAILURES: list[str] = []


def say(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits-only", action="store_true",
                        help="only the num_splits x BLOCK_N table at batch 1 (CUDA-graph and "
                             "plain timings, host time per call)")
    parser.add_argument("--json", default=None,
                        help="where --splits-only saves its record (default "
                             "teachkit/benchmarks/decode_splits_<device>.json)")
    parser.add_argument("--profile", action="store_true",
                        help="only the host-time profile of decode_attention (cProfile)")
    parser.add_argument("--sweep-at", nargs=2, type=int, metavar=("B", "S"), default=None,
                        help="only the config and num_splits sweep at batch B, cache length S")
    parser.add_argument("--split-sweep", action="store_true",
                        help="only the merge and tiles of split calls beside cuDNN, plain and on "
                             "CUDA-graph replays, saved as teachkit/benchmarks/"
                             "decode_split_<device>.json and ..._cudagraph.json")
    parser.add_argument("--paged-sweep", action="store_true",
                        help="only the paged tiles and splits against the contiguous default, "
                             "saved as teachkit/benchmarks/decode_paged_<device>.json (or "
                             "--json)")
    parser.add_argument("--contiguous-sweep", action="store_true",
                        help="only the tiles of unsplit contiguous calls beside cuDNN, saved as "
                             "teachkit/benchmarks/decode_contiguous_<device>.json (or --json)")
    parser.add_argument("--head-dim-sweep", action="store_true",
                        help="only the default and tiles at D = 64 and 256 beside cuDNN, saved "
                             "as teachkit/benchmarks/decode_head_dims_<device>.json (or --json)")
    parser.add_argument("--held-table-sweep", action="store_true",
                        help="only a paged cache with the table row held and read entry by "
                             "entry, saved as teachkit/benchmarks/decode_held_table_<device>.json "
                             "(or --json)")
    parser.add_argument("--held-split-sweep", action="store_true",
                        help="only split paged calls holding their table row, aiming for two "
                             "programs an SM and four, saved as teachkit/benchmarks/"
                             "decode_held_split_<device>.json (or --json)")
    parser.add_argument("--interleave-sweep", action="store_true",
                        help="only a paged cache with and without its tiles' pages interleaved, "
                             "saved as teachkit/benchmarks/decode_interleave_<device>.json "
                             "(or --json)")
    parser.add_argument("--entry-waves-sweep", action="store_true",
                        help="only a paged cache read entry by entry at 1-3 programs an SM, "
                             "unsplit and split, saved as teachkit/benchmarks/"
                             "decode_entry_waves_<device>.json (or --json)")
    parser.add_argument("--entry-tiles-sweep", action="store_true",
                        help="only a paged cache read entry by entry at 1-3.9 programs an SM "
                             "by the default and unsplit with wider tiles, saved as teachkit/"
                             "benchmarks/decode_entry_tiles_<device>.json (or --json)")
    parser.add_argument("--entry-ranges-sweep", action="store_true",
                        help="only a paged cache read entry by entry at 0.24-1.2 programs an SM "
                             "unsplit by the default, as split before its rule and in ranges "
                             "of 64 KB tiles, plain and on CUDA-graph replays, saved as "
                             "teachkit/benchmarks/decode_entry_ranges_<device>(_cudagraph).json")
    parser.add_argument("--wave-tiles-sweep", action="store_true",
                        help="only contiguous and paged grids of 2.9-11.6 programs an SM by "
                             "each tile they choose from, unsplit and split, beside cuDNN, "
                             "saved as teachkit/"
                             "benchmarks/decode_wave_tiles_<device>.json (or --json)")
    parser.add_argument("--short-rows-sweep", action="store_true",
                        help="only D = 64 split calls and short caches on grids of 1.2-1.9 "
                             "programs an SM, by the default and the plan before its rules, "
                             "beside cuDNN, plain and on CUDA-graph replays, saved as "
                             "teachkit/benchmarks/decode_short_rows_<device>.json and "
                             "..._cudagraph.json")
    parser.add_argument("--dependent-merge-sweep", action="store_true",
                        help="only captured split calls at D = 64 and 128, their merge kernel a "
                             "programmatic dependent launch (the default on sm_90) and launched "
                             "after the split kernel, beside cuDNN on CUDA-graph replays, saved "
                             "as teachkit/benchmarks/decode_dependent_merge_<device>.json")
    parser.add_argument("--nearly-full-sweep", action="store_true",
                        help="only unsplit grids of nearly one program an SM at D = 64, by the "
                             "default and by 256- and 128-key tiles, beside cuDNN, plain and on "
                             "CUDA-graph replays, saved as teachkit/benchmarks/"
                             "decode_nearly_full_<device>.json and ..._cudagraph.json")
    parser.add_argument("--tail-loop-sweep", action="store_true",
                        help="only contiguous and paged calls by the default, its masked loop "
                             "not pipelined, and with it pipelined, beside cuDNN, plain and on "
                             "CUDA-graph replays, saved as teachkit/benchmarks/"
                             "decode_tail_loop_<device>.json and ..._cudagraph.json")
    parser.add_argument("--uneven-wave-sweep", action="store_true",
                        help="only contiguous grids of 2.9-3.9 programs an SM (one wave of the "
                             "usual tiles) by the default, the usual tiles and 128-key tiles, "
                             "beside cuDNN, plain and on CUDA-graph replays, saved as "
                             "teachkit/benchmarks/decode_uneven_wave_<device>.json and "
                             "..._cudagraph.json")
    parser.add_argument("--last-wave-sweep", action="store_true",
                        help="only contiguous grids of 1-1.45 programs an SM, unsplit and split, "
                             "beside cuDNN, plain and on CUDA-graph replays, saved as "
                             "teachkit/benchmarks/decode_last_wave_<device>.json and "
                             "..._cudagraph.json")
    parser.add_argument("--page-layout-sweep", action="store_true",
                        help="only paged caches of 16-token pages shuffled, stored head by "
                             "head, in order, and of 64-token pages, beside contiguous on "
                             "CUDA-graph replays, saved as "
                             "teachkit/benchmarks/decode_page_layout_<device>.json (or --json)")
    args = parser.parse_args()
    if not teachkit.ON_GPU:
        print("no CUDA GPU: this script checks the compiled kernels; run it on a GPU machine")
        return 2
    import triton

    from teachkit.bench.core import copy_bandwidth, format_table
    from teachkit.bench.decode import bench_decode, summary
    from teachkit.compare import attention_reference, relative_error
    from teachkit.kernels.decode import (
        choose_num_splits,
        decode_attention,
        decode_config,
        decode_mask,
        sm_count,
    )
    from teachkit.paging import paged_from_contiguous

    dev = teachkit.DEVICE
    cap = torch.cuda.get_device_capability()
    say(f"{teachkit.describe()}; triton {triton.__version__}; {sm_count()} SMs; "
        f"default config D=128 fp16: {decode_config(128, torch.float16, cap)}")
    if args.profile:
        host_profile()
        return 0
    if args.sweep_at:
        sweep(*args.sweep_at, copy_bandwidth())
        return 0
    if (args.split_sweep or args.last_wave_sweep or args.short_rows_sweep
            or args.nearly_full_sweep or args.tail_loop_sweep or args.uneven_wave_sweep
            or args.entry_ranges_sweep):
        copy = copy_bandwidth()
        kind, run = (("split", split_sweep) if args.split_sweep else
                     ("entry_ranges", entry_ranges_sweep) if args.entry_ranges_sweep else
                     ("last_wave", last_wave_sweep) if args.last_wave_sweep else
                     ("uneven_wave", uneven_wave_sweep) if args.uneven_wave_sweep else
                     ("short_rows", short_rows_sweep) if args.short_rows_sweep else
                     ("tail_loop", tail_loop_sweep) if args.tail_loop_sweep else
                     ("nearly_full", nearly_full_sweep))
        for rows, graph in zip(run(), (False, True), strict=True):
            save_record(kind, rows, copy, graph, suffix="_cudagraph" if graph else "")
        return failures_status()
    kinds = {"paged": args.paged_sweep, "contiguous": args.contiguous_sweep,
             "head_dims": args.head_dim_sweep, "held_table": args.held_table_sweep,
             "held_split": args.held_split_sweep,
             "interleave": args.interleave_sweep, "entry_waves": args.entry_waves_sweep,
             "entry_tiles": args.entry_tiles_sweep, "wave_tiles": args.wave_tiles_sweep,
             "dependent_merge": args.dependent_merge_sweep,
             "page_layout": args.page_layout_sweep}
    if any(kinds.values()):
        copy = copy_bandwidth()
        kind = next(name for name, asked in kinds.items() if asked)
        sweeps = {"paged": functools.partial(paged_sweep, copy), "contiguous": contiguous_sweep,
                  "head_dims": head_dim_sweep, "held_table": held_table_sweep,
                  "held_split": held_split_sweep,
                  "interleave": interleave_sweep, "entry_waves": entry_waves_sweep,
                  "entry_tiles": entry_tiles_sweep, "wave_tiles": wave_tiles_sweep,
                  "dependent_merge": dependent_merge_sweep, "page_layout": page_layout_sweep}
        save_record(kind, sweeps[kind](), copy, path=args.json)
        return failures_status()
    if args.splits_only:
        host_profile()
        copy = copy_bandwidth()
        say(f"copy bandwidth {copy:.0f} GB/s")
        rows = [m for S in (1024, 4096, 16384, 65536) for m in split_table(1, S, copy)]
        rows += split_table(2, 16384, copy)
        save_record("splits", rows, copy, path=args.json)  # split_table times graph replays
        return 0

    # ---------------------------------------------------------------- 1. correctness
    def reference(q, k, v, lens):
        """float64 on the GPU (moderate sizes)."""
        return attention_reference(q, k, v, mask=decode_mask(lens, q.shape[2], k.shape[2]))

    rtol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}

    def case(name, B, H, H_kv, Lq, S, D, dtype, lens=None, splits=None, pages=(), nan=True):
        try:
            q = torch.randn(B, H, Lq, D, device=dev, dtype=dtype)
            k = torch.randn(B, H_kv, S, D, device=dev, dtype=dtype)
            v = torch.randn(B, H_kv, S, D, device=dev, dtype=dtype)
            lens = (torch.randint(0, S + 1, (B,), device=dev) if lens is None
                    else torch.tensor(lens, device=dev))
            past = torch.arange(S, device=dev)[None, None, :, None] >= lens[:, None, None, None]
            kn = k.masked_fill(past, math.nan) if nan else k
            vn = v.masked_fill(past, math.nan) if nan else v
            out, lse = decode_attention(q, kn, vn, cache_seqlens=lens, num_splits=splits,
                                        return_lse=True)
            torch.cuda.synchronize()
            ro, rl = reference(q, k, v, lens)
            eo, el = relative_error(out, ro), relative_error(lse, rl)
            ok = eo < rtol[dtype] and el < 1e-5
            line = f"{name}: out {eo:.1e} lse {el:.1e}"
            for P in pages:
                kp, vp, table = paged_from_contiguous(k, v, lens.cpu(), P, gen=torch.Generator()
                                                      .manual_seed(P), fill=math.nan)
                # as a user calls it: its own tiles (larger on sm_90) and splits, so its sums
                # are grouped otherwise than the contiguous call's; against float64
                po, pl = decode_attention(q, kp, vp, cache_seqlens=lens, block_table=table,
                                          num_splits=splits, return_lse=True)
                eo, el = relative_error(po, ro), relative_error(pl, rl)
                ok &= eo < rtol[dtype] and el < 1e-5
                # with the same tiles and splits, in key order (no pages interleaved), only the
                # addresses differ: the same bits
                same = dict(config=decode_config(D, dtype, cap, paged=True),
                            num_splits=splits or 4, return_lse=True)
                po, pl = planned_with("INTERLEAVE_PAGES_PER_SM", {}, functools.partial(
                    decode_attention, q, kp, vp, cache_seqlens=lens, block_table=table, **same))
                co, cl = decode_attention(q, kn, vn, cache_seqlens=lens, **same)
                bitwise = torch.equal(po, co) and torch.equal(pl, cl)
                ok &= bitwise
                line += (f"; paged {P}: out {eo:.1e} lse {el:.1e}, same tiles as contiguous "
                         f"{'bit for bit' if bitwise else 'DIFFERENT'}")
            say(("ok   " if ok else "FAIL ") + line)
            if not ok:
                FAILURES.append(line)
        except Exception as err:  # noqa: BLE001 - report and go on
            FAILURES.append(f"{name}: {type(err).__name__}: {err}")
            say(f"FAIL {name}: {type(err).__name__}: {err}")
            traceback.print_exc(limit=3)

    case("fp16 B=4 H=32 D=128 S=4097 Lq=1, lengths vary (0 incl.)", 4, 32, 32, 1, 4097, 128,
         torch.float16, lens=[4097, 0, 1, 2500], pages=(16, 64))
    case("bf16 GQA 32/8 Lq=4 S=3001 5 splits", 3, 32, 8, 4, 3001, 128, torch.bfloat16,
         splits=5, pages=(16,))
    case("fp16 GQA 32/4 Lq=16 D=64 S=1000 (128 rows: 2 row blocks)", 2, 32, 4, 16, 1000, 64,
         torch.float16, pages=(64,))
    case("fp32 B=2 H=8 D=64 S=777 Lq=3", 2, 8, 8, 3, 777, 64, torch.float32, splits=7)
    case("bf16 D=256 S=2049", 2, 8, 8, 1, 2049, 256, torch.bfloat16, pages=(16,))
    case("fp16 D=128 S=100 64 splits (most empty)", 2, 32, 32, 1, 100, 128, torch.float16,
         splits=64)
    case("fp16 unsplit S=8191", 2, 32, 32, 2, 8191, 128, torch.float16, splits=1, pages=(16,))
    case("fp16 S=0", 2, 32, 32, 1, 0, 128, torch.float16, lens=[0, 0], nan=False)
    # 128k keys: float32 reference, one sequence
    try:
        q = torch.randn(1, 32, 1, 128, device=dev, dtype=torch.float16)
        k = torch.randn(1, 32, 131072, 128, device=dev, dtype=torch.float16)
        v = torch.randn_like(k)
        out = decode_attention(q, k, v)
        s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(128)
        ref = torch.softmax(s, -1) @ v.float()
        e = relative_error(out, ref)
        say(("ok   " if e < 2e-3 else "FAIL ") + f"fp16 B=1 H=32 S=128k default splits: {e:.1e}")
        if not e < 2e-3:
            FAILURES.append(f"S=128k: {e}")
        del q, k, v, out, ref, s
    except Exception as err:  # noqa: BLE001
        FAILURES.append(f"S=128k: {err}")
        say(f"FAIL S=128k: {err}")
    torch.cuda.empty_cache()

    # ---------------------------------------------------------------- 2. timings
    copy = copy_bandwidth()
    say(f"copy bandwidth {copy:.0f} GB/s")
    for B in (1, 8):
        say(f"B={B}: heuristic splits at BLOCK_N=64: "
            + ", ".join(f"S={s // 1024}k -> {choose_num_splits(B * 32, -(-s // 64), sm_count())}"
                        for s in (4096, 16384, 65536, 131072)))
    results = bench_decode(batches=(1, 8), lengths=(4096, 16384, 65536, 131072),
                           sdpa_backends=("flash", "cuDNN"), progress=False)
    print(format_table(results, ceiling=copy, baseline="SDPA cuDNN"))
    print(summary(results, copy))
    say("timings done")

    # ---------------------------------------------------------------- 3. sweeps
    for B, S in ((1, 16384), (1, 131072), (8, 16384), (8, 131072)):
        if time.time() - T0 > 150:
            say("sweep stopped: time budget")
            break
        sweep(B, S, copy)
        torch.cuda.empty_cache()

    say(f"{len(FAILURES)} correctness failure(s)" + (":\n  " + "\n  ".join(FAILURES)
                                                     if FAILURES else ""))
    return 1 if FAILURES else 0


def save_record(kind: str, rows: list, copy: float, graph: bool = True, suffix: str = "",
                path: str | None = None) -> None:
    """Save a sweep's Measurements as ``teachkit/benchmarks/decode_<kind>_<device><suffix>.json``
    (or ``path``), timed on CUDA-graph replays or, without ``graph``, launched plainly, beside
    the copy bandwidth ``copy``."""
    from teachkit.bench.core import device_slug, record_path, save_results, timing_description

    slug = device_slug(teachkit.device.device_name())
    path = path or record_path(f"decode_{kind}_{slug}{suffix}", exists=False)
    timing = timing_description(graph=graph)
    say(f"record: {save_results(path, rows, timing=timing, copy_gbps=copy)}")


def failures_status() -> int:
    """Print every check that failed in a sweep (:data:`FAILURES`); 1 if any, else 0."""
    for failure in FAILURES:
        say(f"FAILED: {failure}")
    return 1 if FAILURES else 0


def decoding_inputs(B: int, S: int, D: int = 128,
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """One new fp16 token per sequence against full caches (H = 32, head dim ``D``): ``q, k, v``
    and the bytes of K and V, the numerator of every GB/s here."""
    q = torch.randn(B, 32, 1, D, device=teachkit.DEVICE, dtype=torch.float16)
    k = torch.randn(B, 32, S, D, device=teachkit.DEVICE, dtype=torch.float16)
    v = torch.randn_like(k)
    return q, k, v, 2 * k.numel() * k.element_size()


def paged_inputs(B: int, S: int, D: int = 128, seed: int | None = None) -> tuple:
    """:func:`decoding_inputs` and the same caches scattered into pools of 16-token pages
    (:func:`paged_copy`): ``q, k, v, nbytes, lens, k_pool, v_pool, table``."""
    q, k, v, nbytes = decoding_inputs(B, S, D)
    return q, k, v, nbytes, *paged_copy(k, v, seed)


def paged_copy(k: torch.Tensor, v: torch.Tensor, seed: int | None = None) -> tuple:
    """Full caches ``k, v`` ``(B, H_kv, S, D)`` scattered into pools of 16-token pages through
    a shuffled block table (its generator seeded with ``seed``, ``B + S`` if not given):
    ``lens, k_pool, v_pool, table``."""
    from teachkit.paging import paged_from_contiguous

    B, _, S, _ = k.shape
    lens = torch.full((B,), S, device=teachkit.DEVICE, dtype=torch.int32)
    kp, vp, table = paged_from_contiguous(
        k, v, lens.cpu(), 16, gen=torch.Generator().manual_seed(B + S if seed is None else seed))
    return lens, kp, vp, table


def sweep(B: int, S: int, copy: float) -> None:
    """GB/s of split-KV (and paged: pages of 16, the benchmark's, shuffled) per config, then
    per num_splits."""
    from teachkit.bench.core import time_ms
    from teachkit.kernels.decode import (
        DecodeConfig,
        choose_num_splits,
        decode_attention,
        sm_count,
    )

    q, k, v, nbytes, lens, kp, vp, table = paged_inputs(B, S, seed=0)

    def gbps(**kw) -> float:
        if "block_table" in kw:
            def fn():
                return decode_attention(q, kp, vp, lens, check_values=False, **kw)
        else:
            def fn():
                return decode_attention(q, k, v, check_values=False, **kw)
        return nbytes / time_ms(fn, warmup=20, rep=100) / 1e6

    rows = []
    for bn, warps, stages in ((32, 4, 3), (64, 4, 2), (64, 4, 3), (64, 4, 4), (64, 8, 3),
                              (128, 4, 2), (128, 8, 2), (128, 8, 3)):
        cfg = DecodeConfig(bn, warps, stages)
        try:
            a = gbps(config=cfg)
            p = gbps(config=cfg, block_table=table)
            rows.append(f"{bn}/{warps}/{stages}: {a:.0f} ({a / copy:.0%}) paged {p:.0f} "
                        f"({p / a:.1%} of contiguous)")
        except Exception as err:  # noqa: BLE001
            rows.append(f"{bn}/{warps}/{stages}: {type(err).__name__}")
    say(f"B={B} S={S // 1024}k config sweep (BLOCK_N/warps/stages: GB/s):\n    "
        + "\n    ".join(rows))
    base = choose_num_splits(B * 32, -(-S // 64), sm_count())
    splits = sorted({1, max(1, base // 2), base, 2 * base, 4 * base, 8 * base}
                    & set(range(1, 129)))
    cells = [f"{n}: {gbps(num_splits=n):.0f}" for n in splits]
    say(f"B={B} S={S // 1024}k num_splits sweep (heuristic {base}): " + ", ".join(cells))


def cudnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``scaled_dot_product_attention`` on SDPA's cuDNN backend: the sweeps' reference rate."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, enable_gqa=k.shape[1] != q.shape[1])


SPLIT_TILES = {"32 KB x 2": 64, "64 KB x 2": 128}
"""The split sweep's tiles: name -> BLOCK_N at D = 128 fp16 (2 stages)."""
PAGED_SPLIT_TILES = {"32 KB x 2, 4 an SM": (64, 4), "32 KB x 2, 2 an SM": (64, 2),
                     "64 KB x 2, 2 an SM": (128, 2)}
"""The split sweep's paged tiles: name -> (BLOCK_N at D = 128 fp16, programs per SM that the
splits aim for)."""


def split_sweep() -> tuple[list, list]:
    """GB/s of calls that split the keys (batches 1, 2 and 4, caches of 1k to 64k tokens) beside
    cuDNN, launched plainly and on CUDA-graph replays: the default (``teachkit split-KV,
    default``) and each of :data:`SPLIT_TILES` in one launch and with the merge kernel (``split
    <tiles>, one launch`` and ``, merge kernel``), at the splits ``choose_num_splits`` picks for
    those tiles; on replays also one launch with its merge counters zeroed before the capture
    (``..., counters zeroed before the capture``). A captured call makes its counters fresh
    (``merge_counters``), so the graph holds their zero-fill and every replay repeats it; that
    way shows what the fill costs. Beside them the same cache in shuffled pages of 16: the
    default (``teachkit paged``) and each of :data:`PAGED_SPLIT_TILES` (``paged <tiles>``),
    merging as the default does for that timing (in one launch when launched plainly, with the
    merge kernel on replays), and on replays each of those in one launch too (``paged <tiles>,
    one launch``: the GPU's time of what a plain call runs, where a plain launch of a short call
    also times the host). Interleaved, best of three. Returns the plain and the graph
    Measurements."""
    from teachkit.kernels import decode
    from teachkit.kernels.decode import DecodeConfig, choose_num_splits, decode_attention, sm_count

    zeroed = torch.zeros(1 << 16, dtype=torch.int32, device=teachkit.DEVICE)  # before any capture

    def counters_zeroed_before(fn):
        def call():
            own = decode.merge_counters
            decode.merge_counters = lambda n, device: zeroed  # each merge leaves them at zero
            try:
                return fn()
            finally:
                decode.merge_counters = own
        return call

    plain, graph = [], []
    for B in (1, 2, 4):
        for S in (1024, 2048, 4096, 16384, 65536):
            q, k, v, nbytes, lens, kp, vp, table = paged_inputs(B, S)
            paged = functools.partial(decode_attention, q, kp, vp, lens, table,
                                      check_values=False)
            runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                    "teachkit split-KV, default": functools.partial(
                        decode_attention, q, k, v, check_values=False),
                    "teachkit paged": paged}
            for name, block_n in SPLIT_TILES.items():
                splits = choose_num_splits(B * 32, -(-S // block_n), sm_count())
                for one_launch in (True, False):
                    merge = "one launch" if one_launch else "merge kernel"
                    runs[f"split {name}, {merge}"] = functools.partial(
                        decode_attention, q, k, v, check_values=False, num_splits=splits,
                        config=DecodeConfig(block_n, 4, 2, one_launch))
            ratios = {}
            for timing, out in (("plain", plain), ("graph", graph)):
                for name, (block_n, waves) in PAGED_SPLIT_TILES.items():
                    runs[f"paged {name}"] = functools.partial(
                        paged, num_splits=choose_num_splits(B * 32, -(-S // block_n), sm_count(),
                                                            waves),
                        config=DecodeConfig(block_n, 4, 2, one_launch=timing == "plain"))
                if timing == "graph":
                    for name in SPLIT_TILES:
                        runs[f"split {name}, one launch, counters zeroed before the capture"] = (
                            counters_zeroed_before(runs[f"split {name}, one launch"]))
                    for name in PAGED_SPLIT_TILES:  # the GPU's time of the plain merge
                        one = runs[f"paged {name}"]
                        runs[f"paged {name}, one launch"] = functools.partial(
                            one, config=one.keywords["config"]._replace(one_launch=True))
                best = checked_best_times(runs, "SDPA cuDNN", "split sweep", B, S, nbytes, out,
                                          graph=timing == "graph", rounds=3)
                ratios[timing] = {n: best["SDPA cuDNN"] / ms for n, ms in best.items()
                                  if n != "SDPA cuDNN"}
            say(f"B={B} S={S // 1024}k, x cuDNN plain / graph: " + "; ".join(
                f"{n.removeprefix('split ')} "
                + " / ".join(f"{r[n]:.2f}" if n in r else "-" for r in ratios.values())
                for n in ratios["graph"]))
            del k, v, kp, vp
    return plain, graph


SPLIT_COUNTS = (1, 2, 4, 6, 8, 9, 12, 16, 20, 24, 32, 48, 64, 96, 128)


def split_table(B: int, S: int, copy: float) -> list:
    """GB/s of split-KV for num_splits x BLOCK_N, each way timed as decode_attention runs it by
    default: on CUDA-graph replays with the merge kernel, as a captured call merges (the GPU's
    time; returned as Measurements, provider ``splits=<n> BLOCK_N=<b>`` with those as
    ``provider_params``), and with plain launches merging in the split kernel (printed); the
    default's warps and stages. Plus the host time of one call: what choose_num_splits should
    pick."""
    from teachkit.bench import core
    from teachkit.bench.decode import decode_params, decode_problem, split_params, split_provider
    from teachkit.kernels.decode import choose_num_splits, decode_attention, decode_config, sm_count

    q, k, v, nbytes = decoding_inputs(B, S)
    base = choose_num_splits(B * 32, -(-S // 64), sm_count())
    fn = functools.partial(decode_attention, q, k, v, check_values=False)
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(100):
        fn()
    host = (time.perf_counter() - t0) / 100 * 1e6
    torch.cuda.synchronize()
    say(f"B={B} S={S // 1024}k: heuristic {base} splits; host {host:.0f} us per call")
    out = []
    default = decode_config(128, torch.float16, torch.cuda.get_device_capability())
    for bn in (32, 64, 128):
        plain = default._replace(block_n=bn, one_launch=True)
        captured = plain._replace(one_launch=False)
        cells = []
        for n in SPLIT_COUNTS:
            if n > -(-S // bn):
                break
            run = functools.partial(decode_attention, q, k, v, num_splits=n, config=captured,
                                    check_values=False)
            ms = core.time_ms(run, rep=30, graph=True)
            run = functools.partial(run, config=plain)
            p = nbytes / core.time_ms(run, warmup=5, rep=30, graph=False) / 1e6
            out.append(core.Measurement(decode_problem(B, S), "fp16", split_provider(n, bn),
                                        ms, nbytes / ms / 1e6, "GB/s", decode_params(B, S),
                                        split_params(n, bn)))
            cells.append(f"{n}:{out[-1].value:.0f}/{p:.0f}")
        say(f"  BLOCK_N={bn} splits:graph/plain GB/s  " + " ".join(cells))
    return out


def checked_best_times(runs: dict, reference: str, sweep: str, B: int, S: int, nbytes: int,
                       out: list, graph: bool = True, rounds: int = 2,
                       head_dim: int = 128) -> dict[str, float]:
    """One problem of a sweep: every run checked against ``runs[reference]`` (a failure is
    recorded in :data:`FAILURES`), then all timed on CUDA-graph replays (or, without ``graph``,
    launched plainly), interleaved, best of ``rounds``; appends a GB/s Measurement per run to
    ``out`` (labelled with ``D`` where ``head_dim`` is not 128) and returns the ms per run."""
    from teachkit.bench import core
    from teachkit.bench.decode import decode_params, decode_problem

    want = runs[reference]().float()
    for name, run in runs.items():
        err = (run().float() - want).abs().max().item()
        if not err < 1e-2:
            FAILURES.append(f"{sweep} B={B} S={S} {name}: error {err:.3g}")
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = min(best.get(name, math.inf), core.time_ms(run, graph=graph))
    problem, params = decode_problem(B, S), decode_params(B, S)
    if head_dim != 128:
        problem, params = f"D={head_dim} {problem}", {**params, "D": head_dim}
    for name, ms in best.items():
        out.append(core.Measurement(problem, "fp16", name, ms, nbytes / ms / 1e6, "GB/s", params))
    return best


PAGED_TILES = {"64 KB x 3, 2 an SM": (128, 3, 2), "64 KB x 2, 2 an SM": (128, 2, 2),
               "32 KB x 2, 2 an SM": (64, 2, 2), "32 KB x 2, 4 an SM": (64, 2, 4),
               "32 KB x 3, 4 an SM": (64, 3, 4), "32 KB x 2, 8 an SM": (64, 2, 8),
               "16 KB x 2, 4 an SM": (32, 2, 4)}
"""The paged sweep's tiles: name -> (BLOCK_N at D = 128 fp16, stages, programs per SM that a
split call aims for)."""


def paged_sweep(copy: float) -> list:
    """GB/s of a paged cache (pages of 16, shuffled) on CUDA-graph replays, by the default
    (``teachkit paged``) and by each of :data:`PAGED_TILES` (``paged <name>``, a captured
    call's merge kernel where it splits), beside the contiguous default (``teachkit split-KV,
    default``), for batches 1 to 16 and caches of 1k to 64k tokens; interleaved, best of two."""
    from teachkit.kernels.decode import DecodeConfig, choose_num_splits, decode_attention, sm_count

    out = []
    for B in (1, 2, 4, 8, 16):
        for S in (1024, 2048, 4096, 16384, 65536):
            if B * S > 16 * 16384:
                continue
            q, k, v, nbytes, lens, kp, vp, table = paged_inputs(B, S)
            runs = {"teachkit split-KV, default": functools.partial(
                        decode_attention, q, k, v, check_values=False),
                    "teachkit paged": functools.partial(
                        decode_attention, q, kp, vp, lens, table, check_values=False)}
            for name, (bn, stages, waves) in PAGED_TILES.items():
                splits = choose_num_splits(B * 32, -(-S // bn), sm_count(), waves)
                runs[f"paged {name}"] = functools.partial(
                    decode_attention, q, kp, vp, lens, table, check_values=False,
                    num_splits=splits, config=DecodeConfig(bn, 4, stages, one_launch=False))
            best = checked_best_times(runs, "teachkit split-KV, default", "paged sweep", B, S,
                                      nbytes, out)
            base = best["teachkit split-KV, default"]
            say(f"B={B} S={S // 1024}k: contiguous {nbytes / base / 1e6:.0f} GB/s; paged "
                + ", ".join(f"{n.removeprefix('paged ')} {base / ms:.0%}"
                            for n, ms in best.items() if n != "teachkit split-KV, default"))
            del k, v, kp, vp
    return out


def planned_with(setting: str, value: object, call: functools.partial) -> torch.Tensor:
    """``call()`` with the ``decode`` module's per-GPU-class table ``setting`` (such as
    ``"HELD_TABLE_PAGES"``, or ``"DEPENDENT_MERGE"``'s set of classes) replaced by ``value``
    while it runs, and the launch plans worked out again either side (a call captured into a
    CUDA graph keeps its kernel)."""
    from teachkit.kernels import decode

    kept = getattr(decode, setting)
    setattr(decode, setting, value)
    decode.forget_plans()
    try:
        return call()
    finally:
        setattr(decode, setting, kept)
        decode.forget_plans()


def entry_by_entry(call: functools.partial) -> torch.Tensor:
    """``call()`` with no paged program holding its table row (``decode.HELD_TABLE_PAGES``
    emptied while it runs). Such a call also splits and takes tiles as a paged call reading
    entries does."""
    return planned_with("HELD_TABLE_PAGES", {}, call)


def paged_problem(sweep: str, B: int, S: int, D: int, variants: dict, out: list,
                  plan_params: Callable | None = None, graph: bool = True,
                  labelled: dict[str, object] | None = None,
                  ) -> tuple[dict[str, float], float, object]:
    """One problem of a paged sweep (:func:`paged_inputs`, head dim ``D``): the contiguous
    default (``teachkit split-KV, default``), the paged default (``teachkit paged``) and
    ``variants`` (name -> a function of the paged default's call returning the run), checked
    and timed by :func:`checked_best_times` on CUDA-graph replays (without ``graph``, launched
    plainly), best of three. With ``plan_params``, the paged default's row carries
    ``plan_params(plan, programs an SM)`` of the plan it ran as its ``provider_params``, and so
    does each variant named in ``labelled`` (name -> the plan it runs). Returns the ms per run,
    the contiguous default's GB/s and the default's plan (``None`` without ``plan_params``)."""
    from teachkit.kernels import decode
    from teachkit.kernels.decode import decode_attention, sm_count

    q, k, v, nbytes, lens, kp, vp, table = paged_inputs(B, S, D)
    paged = functools.partial(decode_attention, q, kp, vp, lens, table, check_values=False)
    runs = {"teachkit split-KV, default": functools.partial(
                decode_attention, q, k, v, check_values=False),
            "teachkit paged": paged,
            **{name: make(paged) for name, make in variants.items()}}
    best = checked_best_times(runs, "teachkit split-KV, default", sweep, B, S, nbytes, out,
                              graph=graph, rounds=3, head_dim=D)
    plan = None
    if plan_params is not None:
        plan = decode._launch_plan(B, 32, 1, D, 32, q.dtype, q.device, S, None, None, 16,
                                   graph)  # what the default ran
        first = len(out) - len(runs)
        for name, ran in {"teachkit paged": plan, **(labelled or {})}.items():
            row = next(i for i in range(first, len(out)) if out[i].provider == name)
            per_sm = ran.num_splits * B * 32 * ran.row_blocks / sm_count()
            out[row] = dataclasses.replace(out[row], provider_params=plan_params(ran, per_sm))
    return best, nbytes / best["teachkit split-KV, default"] / 1e6, plan


def plan_ranges(plan: object, per_sm: float) -> dict[str, object]:
    """The ``provider_params`` of a paged sweep's row for the plan its call ran (a
    ``plan_params`` of :func:`paged_problem`): ranges, keys a tile and programs an SM."""
    return {"splits": plan.num_splits, "block_n": plan.config.block_n,
            "programs_per_sm": round(per_sm, 2)}


def held_table_sweep() -> list:
    """GB/s of a paged cache (pages of 16, shuffled) on CUDA-graph replays by the default
    (``teachkit paged``: each program holds its table row where the table is narrow enough,
    ``decode.HELD_TABLE_PAGES``) and by the same call reading the entries as the keys need them
    (``paged, entry by entry``), beside the contiguous default (``teachkit split-KV, default``),
    for batches 1 to 8, caches of 1k to 4k tokens and head dims 64 and 128; interleaved, best
    of three. Where it does not split, a call holding its row takes the contiguous call's tiles
    and splits no more than it (``decode._launch_plan``)."""
    out = []
    for D in (128, 64):
        for B in (1, 2, 3, 4, 5, 8):
            for S in (1024, 2048, 4096):
                best, gbps, _ = paged_problem(
                    "held table", B, S, D,
                    {"paged, entry by entry": lambda paged: functools.partial(entry_by_entry,
                                                                              paged)}, out)
                base = best["teachkit split-KV, default"]
                say(f"D={D} B={B} S={S // 1024}k: contiguous {gbps:.0f} GB/s; "
                    f"paged {base / best['teachkit paged']:.1%} held, "
                    f"{base / best['paged, entry by entry']:.1%} entry by entry")
    return out


def held_split_sweep() -> list:
    """GB/s of a paged cache (pages of 16, shuffled) on CUDA-graph replays by the default
    (``teachkit paged``: a split call whose programs hold their table row aims for
    ``decode.HELD_SPLIT_WAVES`` programs an SM) and aiming for ``decode.PAGED_SPLIT_WAVES`` as a
    call reading its entries does (``paged, as entry by entry``), beside the contiguous default
    (``teachkit split-KV, default``), for head dims 128 and 64, one and two sequences (split)
    and caches of 1k to 4k tokens (held rows); interleaved, best of three. The default's rows
    carry its plan's ranges and programs an SM (``provider_params``)."""
    variants = {"paged, as entry by entry": lambda paged: functools.partial(
        planned_with, "HELD_SPLIT_WAVES", {}, paged)}
    out = []
    for D in (128, 64):
        for B in (1, 2):
            for S in (1024, 2048, 4096):
                best, gbps, _ = paged_problem(
                    "held split", B, S, D, variants, out,
                    lambda plan, per_sm: {"num_splits": plan.num_splits,
                                          "block_n": plan.config.block_n,
                                          "programs_per_sm": round(per_sm, 2)})
                say(f"D={D} B={B} S={S // 1024}k: contiguous {gbps:.0f} GB/s; {shares(best)}")
    return out


def shares(best: dict[str, float]) -> str:
    """Each run of a paged problem's ``best`` ms as a share of the contiguous default's rate."""
    base = best["teachkit split-KV, default"]
    return ", ".join(f"{n} {base / ms:.1%}" for n, ms in best.items()
                     if n != "teachkit split-KV, default")


def interleave_sweep() -> list:
    """GB/s of a paged cache (pages of 16, shuffled) on CUDA-graph replays by the default
    (``teachkit paged``: tiles of several pages interleave them at up to
    ``decode.INTERLEAVE_PAGES_PER_SM`` programs an SM), never interleaving (``paged, key
    order``) and always (``paged, interleaved``), beside the contiguous default (``teachkit
    split-KV, default``), for head dims 64 and 128, batches 1 to 16 and caches of 1k to 16k
    tokens; interleaved in time, best of three. The default's rows carry its plan's programs an
    SM and whether it interleaved (``provider_params``)."""
    variants = {
        "paged, key order": lambda paged: functools.partial(
            planned_with, "INTERLEAVE_PAGES_PER_SM", {}, paged),
        "paged, interleaved": lambda paged: functools.partial(
            planned_with, "INTERLEAVE_PAGES_PER_SM", {90: math.inf}, paged)}
    out = []
    for D in (64, 128):
        for B in (1, 2, 3, 4, 5, 8, 16):
            for S in (1024, 4096, 16384):
                best, gbps, _ = paged_problem(
                    "interleave", B, S, D, variants, out,
                    lambda plan, per_sm: {"programs_per_sm": round(per_sm, 2),
                                          "interleaved": plan.interleave_pages})
                say(f"D={D} B={B} S={S // 1024}k: contiguous {gbps:.0f} GB/s; {shares(best)}")
    return out


def entry_waves_sweep() -> list:
    """GB/s of a paged cache (pages of 16, shuffled; 1024 and 4096 pages a sequence, too many
    for a program to hold its table row) on CUDA-graph replays by the default (``teachkit
    paged``: a grid of one program an SM or more that reads its entries splits up to
    ``decode.PAGED_ENTRY_WAVES`` programs an SM), unsplit (``paged, unsplit``: the plan before
    that rule) and in 2, 3 and 4 ranges with the usual tiles and the merge kernel (``paged, N
    ranges``), beside the contiguous default (``teachkit split-KV, default``), for head dims 64
    and 128, batches 5 to 12 and caches of 16k tokens (64k at batches 5 and 8); interleaved in
    time, best of three. The default's rows carry its plan's ranges and programs an SM
    (``provider_params``)."""
    from teachkit.kernels.decode import decode_config

    cap = torch.cuda.get_device_capability()
    out = []
    for D in (64, 128):
        tiles = decode_config(D, torch.float16, cap, paged=True, captured=True)
        variants = {"paged, unsplit": lambda paged: functools.partial(paged, num_splits=1),
                    **{f"paged, {n} ranges": lambda paged, n=n, tiles=tiles: functools.partial(
                        paged, num_splits=n, config=tiles) for n in (2, 3, 4)}}
        for B in (5, 6, 7, 8, 9, 10, 12):
            for S in (16384, 65536) if B in (5, 8) else (16384,):
                best, gbps, plan = paged_problem(
                    "entry waves", B, S, D, variants, out,
                    lambda plan, per_sm: {"splits": plan.num_splits,
                                          "programs_per_sm": round(per_sm, 2)})
                say(f"D={D} B={B} S={S // 1024}k: contiguous {gbps:.0f} GB/s; "
                    f"default {plan.num_splits} ranges: {shares(best)}")
    return out


ENTRY_TILES_PROBLEMS = ((4, 16384), (5, 16384), (6, 16384), (6, 65536), (7, 16384),
                        (7, 65536), (8, 16384), (8, 65536), (8, 131072), (12, 16384),
                        (16, 16384), (16, 65536))
"""The entry-tiles sweep's (sequences, cache length) of 32 heads: 0.97, 1.21, 1.45, 1.7, 1.94,
2.91 and 3.88 programs an SM unsplit on 132 SMs, caches of 1024 to 8192 pages of 16 (read entry
by entry)."""
ENTRY_TILES = {"128 keys x 2": (128, 2), "128 keys x 3": (128, 3), "64 keys x 3": (64, 3),
               "256 keys x 2": (256, 2)}
"""The entry-tiles sweep's unsplit tiles: name -> (BLOCK_N, stages); 256 keys are 64 KB at
``D = 64`` (128 KB at ``D = 128``, one program an SM)."""


def entry_tiles_sweep() -> list:
    """GB/s of a paged cache (pages of 16, shuffled; tables too wide to hold, read entry by
    entry) on CUDA-graph replays by the default (``teachkit paged``), unsplit with each of
    :data:`ENTRY_TILES` (``paged, unsplit <tiles>``) and split as such a grid splits without
    ``decode.ENTRY_GRID`` (``paged, ranges up to 5 an SM``: the most ranges of the usual
    tiles within ``decode.PAGED_ENTRY_WAVES`` programs an SM, where that is more than one),
    beside the contiguous default (``teachkit split-KV, default``), for head dims 128 and 64 and
    :data:`ENTRY_TILES_PROBLEMS`; interleaved in time, best of three. The default's rows carry
    its plan's ranges, keys a tile, stages and programs an SM (``provider_params``)."""
    from teachkit.kernels import decode
    from teachkit.kernels.decode import DecodeConfig

    unsplit = {f"paged, unsplit {name}": lambda paged, bn=bn, stages=stages: functools.partial(
                   paged, num_splits=1, config=DecodeConfig(bn, 4, stages, one_launch=False))
               for name, (bn, stages) in ENTRY_TILES.items()}
    aim = decode.PAGED_ENTRY_WAVES[90]
    out = []
    for D in (128, 64):
        usual = decode.decode_config(D, torch.float16, (9, 0), paged=True, captured=True)
        for B, S in ENTRY_TILES_PROBLEMS:
            # the split's ranges as _launch_plan chooses them for PAGED_ENTRY_WAVES
            ranges = decode.choose_num_splits(B * 32, -(-S // usual.block_n), decode.sm_count(),
                                              aim, aim)
            split = {} if ranges < 2 else {f"paged, ranges up to {aim} an SM": (
                lambda paged, n=ranges, c=usual: functools.partial(paged, num_splits=n, config=c))}
            variants = unsplit | split
            best, gbps, plan = paged_problem(
                "entry tiles", B, S, D, variants, out,
                lambda plan, per_sm: {"splits": plan.num_splits,
                                      "block_n": plan.config.block_n,
                                      "stages": plan.config.num_stages,
                                      "programs_per_sm": round(per_sm, 2)})
            say(f"D={D} B={B} S={S // 1024}k: contiguous {gbps:.0f} GB/s; default "
                f"{plan.num_splits} x {plan.config.block_n} keys: {shares(best)}")
            torch.cuda.empty_cache()
    return out


ENTRY_RANGES_PROBLEMS = tuple((B, S) for B in (1, 2, 3, 4, 5) for S in (16384, 65536))
"""The entry-ranges sweep's (sequences, cache length) of 32 heads: 0.24, 0.48, 0.73, 0.97 and
1.21 programs an SM unsplit on 132 SMs, caches of 1024 and 4096 pages of 16 (read entry by
entry)."""


def entry_ranges_sweep() -> tuple[list, list]:
    """GB/s of a paged cache (pages of 16, shuffled; tables too wide to hold, read entry by
    entry) by the default (``teachkit paged``), split as such grids were before
    ``decode.ENTRY_GRID`` took them (``paged, before the rule``: the plan made with that table
    emptied, given as ``num_splits`` and ``config``) and in each number
    of ranges of the rule's 64 KB tiles that leaves 0.9 to 2.5 programs an SM (``paged, 64 KB x
    2, N ranges``), beside the contiguous default (``teachkit split-KV, default``), for head dims
    64 and 128 and :data:`ENTRY_RANGES_PROBLEMS`; launched plainly (a split merging in one
    launch), then on CUDA-graph replays (merged by the merge kernel), interleaved, best of three.
    The rows of the default and of the plan before the rule carry their ranges, keys a tile and
    programs an SM (``provider_params``). Returns (plain rows, graph rows)."""
    from teachkit.kernels import decode
    from teachkit.kernels.decode import DecodeConfig

    sms = decode.sm_count()
    found: tuple[list, list] = ([], [])
    for graph, out in zip((False, True), found, strict=True):
        for D in (64, 128):
            tiles = DecodeConfig(decode._entry_grid_keys(decode.ENTRY_GRID[90][2], D, 2), 4, 2,
                                 one_launch=not graph)
            for B, S in ENTRY_RANGES_PROBLEMS:
                before = planned_with("ENTRY_GRID", {}, functools.partial(
                    decode._launch_plan, B, 32, 1, D, 32, torch.float16, teachkit.DEVICE, S,
                    None, None, 16, graph))  # the plan such a call took before the rule
                variants = {"paged, before the rule": lambda paged, p=before: functools.partial(
                    paged, num_splits=p.num_splits, config=p.config)}
                for n in range(1, 17):
                    if 0.9 <= B * 32 * n / sms <= 2.5:
                        variants[f"paged, 64 KB x 2, {n} ranges"] = (
                            lambda paged, n=n, c=tiles: functools.partial(
                                paged, num_splits=n, config=c))
                best, _, plan = paged_problem(
                    "entry ranges", B, S, D, variants, out, plan_ranges, graph=graph,
                    labelled={"paged, before the rule": before})
                say(f"{'graph' if graph else 'plain'} D={D} B={B} S={S // 1024}k: default "
                    f"{plan.num_splits} x {plan.config.block_n} keys: {shares(best)}")
                torch.cuda.empty_cache()
    return found


PAGE_LAYOUT_PROBLEMS = ((1, 16384), (2, 16384), (4, 16384), (8, 16384), (1, 65536),
                        (4, 65536))
"""The page-layout sweep's (sequences, cache length) of 32 heads."""


def repaged(page_size: int, seed: int | None) -> Callable:
    """A layout for :func:`page_layout_sweep`: the keys and values of page pools read back
    (``paging.gather_from_pages``) and paged again on pages of ``page_size`` tokens
    (``paging.paged_from_contiguous``), the free list shuffled by a generator seeded with
    ``seed`` (``None``: pages in order)."""
    from teachkit.paging import gather_from_pages, paged_from_contiguous

    def layout(k_pool, v_pool, lens, table):
        k, v = (gather_from_pages(pool, table, lens.cpu()) for pool in (k_pool, v_pool))
        gen = None if seed is None else torch.Generator().manual_seed(seed)
        return paged_from_contiguous(k, v, lens.cpu(), page_size, gen=gen)
    return layout


def page_layout_sweep() -> list:
    """GB/s of a paged cache by the default on pages of 16 shuffled (``teachkit paged``), the
    same pages stored head by head (``paged, head-major pages``, ``paging.head_major``), the same
    pages in order (``paged, pages in order``) and the same keys on pages of 64 shuffled
    (``paged, pages of 64``; :func:`repaged`), each by its default plan, beside the
    contiguous default (``teachkit split-KV, default``), for head dims 64 and 128 and
    :data:`PAGE_LAYOUT_PROBLEMS`, on CUDA-graph replays, interleaved, best of three: which part
    of a paged read's cost is the layout of a page's rows, which the shuffle, which the page
    size. The default's rows carry its plan (``provider_params``)."""
    from teachkit.kernels.decode import decode_attention
    from teachkit.paging import head_major

    def relaid(paged: functools.partial, layout: Callable) -> functools.partial:
        q, k_pool, v_pool, lens, table = paged.args
        k_pool, v_pool, table = layout(k_pool, v_pool, lens, table)
        return functools.partial(decode_attention, q, k_pool, v_pool, lens, table,
                                 check_values=False)

    variants = {
        "paged, head-major pages": lambda paged: relaid(
            paged, lambda k, v, lens, t: (head_major(k), head_major(v), t)),
        "paged, pages in order": lambda paged: relaid(paged, repaged(16, None)),
        "paged, pages of 64": lambda paged: relaid(paged, repaged(64, 0)),
    }
    out = []
    for D in (64, 128):
        for B, S in PAGE_LAYOUT_PROBLEMS:
            best, gbps, plan = paged_problem("page layout", B, S, D, variants, out, plan_ranges)
            say(f"D={D} B={B} S={S // 1024}k: contiguous {gbps:.0f} GB/s; default "
                f"{plan.num_splits} x {plan.config.block_n} keys: {shares(best)}")
            torch.cuda.empty_cache()
    return out


LAST_WAVE_GRIDS = ((34, 4), (19, 8), (5, 32), (22, 8), (24, 8))
"""The last-wave sweep's grids: (sequences, cache heads) of 32 query heads, 136, 152, 160,
176 and 192 programs (1.03-1.45 an SM on 132 SMs)."""
LAST_WAVE_LENGTHS = (2048, 4096, 16384, 65536)
"""The last-wave sweep's cache lengths."""


UNEVEN_WAVE_BATCHES = (12, 13, 14, 15, 16)
"""The uneven-wave sweep's batches of 32 heads: 2.91 to 3.88 programs an SM on 132 SMs, one wave
of the usual four an SM; from 13 some SMs hold four and the rest three."""


def uneven_wave_sweep() -> tuple[list, list]:
    """GB/s of contiguous calls (H = 32, ``D = 128`` fp16, :data:`UNEVEN_WAVE_BATCHES`, 4k, 16k
    and 64k tokens) whose grid fits in one wave of the usual tiles, by cuDNN (``SDPA cuDNN``),
    the default (``teachkit split-KV, default``: from more than three programs an SM 128 keys,
    ``decode.UNEVEN_WAVE_TILES``), the usual 64 keys in 2 stages (``contiguous 32 KB x 2``) and
    128 keys in 2 stages (``contiguous 64 KB x 2``), both unsplit; launched plainly, then on
    CUDA-graph replays, interleaved, best of three. Returns (plain rows, graph rows)."""
    from teachkit.kernels.decode import DecodeConfig, decode_attention, sm_count

    found: tuple[list, list] = ([], [])
    for B in UNEVEN_WAVE_BATCHES:
        for S in (4096, 16384, 65536):
            q, k, v, nbytes = decoding_inputs(B, S)
            call = functools.partial(decode_attention, q, k, v, check_values=False)
            runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                    "teachkit split-KV, default": call,
                    **{f"contiguous {keys // 2} KB x 2": functools.partial(
                        call, num_splits=1, config=DecodeConfig(keys, 4, 2, one_launch=False))
                       for keys in (64, 128)}}
            for graph, out in zip((False, True), found, strict=True):
                best = checked_best_times(runs, "SDPA cuDNN", "uneven wave", B, S, nbytes,
                                          out, graph=graph, rounds=3)
                base = best["SDPA cuDNN"]
                say(f"B={B} S={S // 1024}k ({32 * B / sm_count():.2f} an SM) "
                    f"{'graph' if graph else 'plain'}: cuDNN {nbytes / base / 1e6:.0f} GB/s; "
                    + ", ".join(f"{n} {base / ms:.3f}" for n, ms in best.items()
                                if n != "SDPA cuDNN") + " x cuDNN")
            del q, k, v
            torch.cuda.empty_cache()
    return found


def last_wave_sweep() -> tuple[list, list]:
    """GB/s of contiguous calls (H = 32, D = 128 fp16, :data:`LAST_WAVE_GRIDS`, 2k-64k tokens)
    by cuDNN (``SDPA cuDNN``), the default (``teachkit split-KV, default``: where the grid holds
    one to four thirds programs an SM, from 4k tokens, the ranges that fill the last wave,
    ``decode.LAST_WAVE_GRID``), unsplit (``teachkit 1 range``) and in 2 to 5 ranges
    (``teachkit N ranges``), and at five sequences of up to 4k tokens paged (pages of 16,
    shuffled, the table row held) by the default (``teachkit paged``) and unsplit (``paged,
    unsplit``); launched plainly, then on CUDA-graph replays, interleaved, best of two. The
    rows carry the cache heads and the default's ranges (``provider_params``). Returns (plain
    rows, graph rows)."""
    from teachkit.kernels import decode
    from teachkit.kernels.decode import decode_attention

    found: tuple[list, list] = ([], [])
    for B, H_kv in LAST_WAVE_GRIDS:
        for S in LAST_WAVE_LENGTHS:
            q = torch.randn(B, 32, 1, 128, device=teachkit.DEVICE, dtype=torch.float16)
            k = torch.randn(B, H_kv, S, 128, device=teachkit.DEVICE, dtype=torch.float16)
            v = torch.randn_like(k)
            nbytes = 2 * k.numel() * k.element_size()
            call = functools.partial(decode_attention, q, k, v, check_values=False)
            runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                    "teachkit split-KV, default": call,
                    "teachkit 1 range": functools.partial(call, num_splits=1),
                    **{f"teachkit {n} ranges": functools.partial(call, num_splits=n)
                       for n in range(2, 6)}}
            if B == 5 and S <= 4096:
                lens, kp, vp, table = paged_copy(k, v)
                paged = functools.partial(decode_attention, q, kp, vp, lens, table,
                                          check_values=False)
                runs |= {"teachkit paged": paged,
                         "paged, unsplit": functools.partial(paged, num_splits=1)}
            for graph, out in zip((False, True), found, strict=True):
                start = len(out)
                best = checked_best_times(runs, "SDPA cuDNN", "last wave", B, S, nbytes, out,
                                          graph=graph)
                plan = decode._launch_plan(B, 32, 1, 128, H_kv, torch.float16, q.device, S,
                                           None, None, 0, graph)
                for i in range(start, len(out)):
                    extra = ({"ranges": plan.num_splits}
                             if out[i].provider == "teachkit split-KV, default" else {})
                    out[i] = dataclasses.replace(
                        out[i], problem=f"B={B} H_kv={H_kv} S={S}",
                        params={**out[i].params, "H_kv": H_kv}, provider_params=extra)
                base = best["teachkit split-KV, default"]
                say(f"B={B} H_kv={H_kv} S={S // 1024}k ({B * H_kv / decode.sm_count():.2f} an "
                    f"SM) {'graph' if graph else 'plain'}: default {plan.num_splits} ranges "
                    f"{nbytes / base / 1e6:.0f} GB/s; " + ", ".join(
                        f"{n} {base / ms:.3f}" for n, ms in best.items()
                        if n != "teachkit split-KV, default"))
            del q, k, v
    return found


CONTIGUOUS_TILES = {"32 KB x 2": (64, 2), "64 KB x 2": (128, 2), "64 KB x 3": (128, 3),
                    "32 KB x 3": (64, 3)}
"""The contiguous sweep's tiles: name -> (BLOCK_N at D = 128 fp16, stages)."""


def contiguous_sweep() -> list:
    """GB/s of unsplit contiguous calls on CUDA-graph replays by the default
    (``teachkit split-KV, default``), by each of :data:`CONTIGUOUS_TILES` (``contiguous
    <name>``) and by cuDNN (``SDPA cuDNN``), for batches 2 to 32 (0.48 to 7.8 programs an SM on
    132 SMs) and caches of 1k to 64k tokens; interleaved, best of two. Below one program an SM
    the default splits the keys unless the grid is nearly full (``decode.unsplit_from``)."""
    from teachkit.kernels.decode import DecodeConfig, decode_attention, sm_count

    out = []
    for B in (2, 3, 4, 5, 8, 12, 16, 24, 32):
        for S in (1024, 4096, 16384, 65536):
            if B * S > 32 * 16384:
                continue
            q, k, v, nbytes = decoding_inputs(B, S)
            runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                    "teachkit split-KV, default": functools.partial(
                        decode_attention, q, k, v, check_values=False)}
            if B * q.shape[1] < sm_count():  # the default before unsplit_from: 2 splits
                runs["teachkit split-KV, 2 splits"] = functools.partial(
                    decode_attention, q, k, v, check_values=False, num_splits=2)
            for name, (bn, stages) in CONTIGUOUS_TILES.items():
                runs[f"contiguous {name}"] = functools.partial(
                    decode_attention, q, k, v, check_values=False, num_splits=1,
                    config=DecodeConfig(bn, 4, stages))
            best = checked_best_times(runs, "SDPA cuDNN", "contiguous sweep", B, S, nbytes, out)
            base = best["SDPA cuDNN"]
            say(f"B={B} S={S // 1024}k: cuDNN {nbytes / base / 1e6:.0f} GB/s; x cuDNN: "
                + ", ".join(f"{n} {base / ms:.2f}" for n, ms in best.items()
                            if n != "SDPA cuDNN"))
            del k, v
    return out


WAVE_TILES_BATCHES = (12, 14, 16, 18, 20, 22, 24, 26, 28, 32, 36, 40, 44, 48)
"""The wave-tiles sweep's batches of 32 heads: 2.9 to 11.6 programs an SM on 132 SMs, the last
wave of each of ``decode.FULLEST_WAVE_TILES`` from a fifth to wholly full."""


def wave_tiles_sweep() -> list:
    """GB/s of calls whose unsplit grid has more than two programs an SM on CUDA-graph replays
    (H = 32, D = 128 fp16, :data:`WAVE_TILES_BATCHES`, caches of 4k and 16k tokens, contiguous
    and in pages of 16: at 4k tokens each program holds its table row, at 16k it reads it entry
    by entry) beside cuDNN (``SDPA cuDNN``): the default (``teachkit split-KV, default`` and
    ``paged default``, ``decode.fullest_wave_plan``; contiguous at 13-16 sequences
    ``decode.UNEVEN_WAVE_TILES``) and each of ``decode.FULLEST_WAVE_TILES``
    unsplit (``contiguous <KB> KB x <stages>``, named as in :data:`CONTIGUOUS_TILES`, and
    ``paged <KB> KB x <stages>``) and cut into the 2 to 5 ranges that fill its last wave the
    most (``decode.last_wave_splits``, the count ``decode.fullest_wave_plan`` weighs for those
    tiles; ``..., <n> ranges``, with the merge kernel); interleaved, best of
    three. Each teachkit row's ``provider_params`` hold what its split kernel compiled to on
    this GPU (:func:`launched_residency`)."""
    from teachkit.kernels.decode import (
        FULLEST_WAVE_TILES,
        DecodeConfig,
        _keys_per_block,
        decode_attention,
        last_wave_splits,
        sm_count,
    )

    out = []
    for B in WAVE_TILES_BATCHES:
        for S in (4096, 16384):
            q, k, v, nbytes, lens, kp, vp, table = paged_inputs(B, S)
            paged = {"cache_seqlens": lens, "block_table": table}
            runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                    "teachkit split-KV, default": functools.partial(
                        decode_attention, q, k, v, check_values=False),
                    "paged default": functools.partial(
                        decode_attention, q, kp, vp, check_values=False, **paged)}
            for kind, inputs, extra in (("contiguous", (q, k, v), {}),
                                        ("paged", (q, kp, vp), paged)):
                for stage_bytes, stages, resident in FULLEST_WAVE_TILES[90][kind == "paged"]:
                    name = f"{kind} {stage_bytes // 1024} KB x {stages}"
                    config = DecodeConfig(_keys_per_block(stage_bytes, 128, 2), 4, stages,
                                          one_launch=False)
                    for ranges in (1, last_wave_splits(32 * B, sm_count(), resident)):
                        runs[name + (f", {ranges} ranges" if ranges > 1 else "")] = (
                            functools.partial(decode_attention, *inputs, check_values=False,
                                              num_splits=ranges, config=config, **extra))
            start = len(out)
            best = checked_best_times(runs, "SDPA cuDNN", "wave-tiles sweep", B, S, nbytes,
                                      out, rounds=3)
            compiled = {name: launched_residency(run) for name, run in runs.items()
                        if name != "SDPA cuDNN"}
            out[start:] = [dataclasses.replace(m, provider_params=compiled.get(m.provider, {}))
                           for m in out[start:]]
            base = best["SDPA cuDNN"]
            say(f"B={B} S={S // 1024}k: cuDNN {nbytes / base / 1e6:.0f} GB/s; x cuDNN: "
                + ", ".join(f"{n} {base / ms:.3f} ({compiled[n]['programs_an_sm']} an SM)"
                            for n, ms in best.items() if n != "SDPA cuDNN"))
            del q, k, v, kp, vp
    return out


def launched_residency(run: Callable[[], object]) -> dict[str, int]:
    """What the decode split kernel that ``run`` launches (an unsplit call: that kernel alone)
    compiled to on this GPU: registers a thread and spilled registers (the compiled kernel's
    ``n_regs``, ``n_spills``), shared memory (``metadata.shared``) and the programs an SM they
    leave between them (a block takes ``SHARED_RESERVED_PER_BLOCK`` of shared memory more than
    it asks for)."""
    from teachkit.kernels import decode
    from teachkit.kernels.compile_check import SHARED_RESERVED_PER_BLOCK
    from teachkit.kernels.softmax_kernels import programs_by_registers

    launched = decode.decode_split_kernel.run.compiled  # cached_launch's kernels, by key
    launched.clear()
    decode.forget_plans()  # a kept launch (DECODE_REPLAYS) would skip the launch cache
    run()
    torch.cuda.synchronize()
    (compiled, *_), = launched.values()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    shared = compiled.metadata.shared
    by_registers = programs_by_registers(compiled.n_regs, compiled.metadata.num_warps,
                                         props.regs_per_multiprocessor)
    return {"registers": compiled.n_regs, "spilled": compiled.n_spills, "shared": shared,
            "programs_an_sm": min(by_registers,
                                  props.shared_memory_per_multiprocessor
                                  // (shared + SHARED_RESERVED_PER_BLOCK))}


HEAD_DIM_SWEEP = {64: ((1, 2, 3, 4, 5, 8, 16),
                       {"64 KB x 3": (256, 3), "64 KB x 2": (256, 2), "32 KB x 3": (128, 3),
                        "32 KB x 2": (128, 2)}),
                  256: ((2, 3, 4, 5), {"64 KB x 3": (64, 3), "32 KB x 3": (32, 3)})}
"""The head-dim sweep: head dim -> (batches, tiles: name -> (BLOCK_N in fp16, stages))."""


def head_dim_sweep() -> list:
    """GB/s of contiguous calls at ``D`` = 64 and 256 on CUDA-graph replays beside cuDNN (``SDPA
    cuDNN``), for the batches of :data:`HEAD_DIM_SWEEP` and caches of 1k to 64k tokens: the
    default (``teachkit split-KV, default``); below one program an SM two splits
    (``teachkit split-KV, 2 splits``, the default of batches 3 and 4 before
    ``decode.unsplit_from`` took these head dims); each tile unsplit from two sequences on
    (``contiguous unsplit <name>``) and, for one and two sequences, split as
    ``choose_num_splits`` picks for it, merging with the merge kernel as a captured call does
    (``split <name>, merge kernel``); interleaved, best of two."""
    from teachkit.kernels.decode import (
        DecodeConfig,
        choose_num_splits,
        decode_attention,
        sm_count,
    )

    out = []
    for D, (batches, tiles) in HEAD_DIM_SWEEP.items():
        for B in batches:
            for S in (1024, 4096, 16384, 65536):
                if B * S > 16 * 16384:
                    continue
                q, k, v, nbytes = decoding_inputs(B, S, D)
                call = functools.partial(decode_attention, q, k, v, check_values=False)
                runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                        "teachkit split-KV, default": call}
                if B * q.shape[1] < sm_count():
                    runs["teachkit split-KV, 2 splits"] = functools.partial(call, num_splits=2)
                for name, (bn, stages) in tiles.items():
                    if B >= 2:
                        runs[f"contiguous unsplit {name}"] = functools.partial(
                            call, num_splits=1, config=DecodeConfig(bn, 4, stages))
                    if B <= 2:  # as a captured call merges: with the merge kernel
                        splits = choose_num_splits(B * q.shape[1], -(-S // bn), sm_count())
                        runs[f"split {name}, merge kernel"] = functools.partial(
                            call, num_splits=splits,
                            config=DecodeConfig(bn, 4, stages, one_launch=False))
                best = checked_best_times(runs, "SDPA cuDNN", "head-dim sweep", B, S, nbytes,
                                          out, head_dim=D)
                base = best["SDPA cuDNN"]
                say(f"D={D} B={B} S={S // 1024}k: cuDNN {nbytes / base / 1e6:.0f} GB/s; "
                    "x cuDNN: " + ", ".join(f"{n.replace('teachkit split-KV, ', '')} "
                                            f"{base / ms:.2f}" for n, ms in best.items()
                                            if n != "SDPA cuDNN"))
                del k, v
    return out


SHORT_ROWS_PROBLEMS = {64: ((1, (1024, 4096, 16384, 65536)), (2, (1024, 4096, 16384))),
                       128: tuple((B, (1024, 2048)) for B in (5, 6, 7, 8))}
"""The short-rows sweep: head dim -> (batch, cache lengths) of contiguous calls, H = 32 fp16:
at ``D = 64`` calls that split the keys (``decode.SHORT_ROW_SPLITS``), at ``D = 128`` unsplit
grids of 1.2 to 1.9 programs an SM on caches shorter than ``decode.LAST_WAVE_FEWEST_KEYS``
(``decode.SHORT_CACHE_TILES`` takes the first)."""


def plan_before(B: int, S: int, D: int, graph: bool) -> tuple[int, object]:
    """``(num_splits, DecodeConfig)`` a call of :data:`SHORT_ROWS_PROBLEMS` launched with before
    ``decode.SHORT_ROW_SPLITS`` and ``decode.SHORT_CACHE_TILES`` (H = 32, 132 SMs or the
    GPU's): at ``D = 64`` the splits of two programs an SM over 128-key tiles, in 3 stages
    where a range holds four of them; at ``D = 128`` unsplit 128-key tiles in 2 stages;
    merging with the merge kernel on graph replays, in one launch plainly."""
    from teachkit.kernels.decode import DecodeConfig, choose_num_splits, sm_count

    if D == 128:
        return 1, DecodeConfig(128, 4, 2, one_launch=not graph)
    splits = choose_num_splits(B * 32, -(-S // 128), sm_count())
    stages = 3 if -(-S // splits) >= 4 * 128 else 2
    return splits, DecodeConfig(128, 4, stages, one_launch=not graph)


FOUR_ONE_LAUNCH = "teachkit, four an SM, one launch"
"""The short-rows sweep's plain D = 64 provider: a captured call's splits and tiles
(``decode.SHORT_ROW_SPLITS``: four programs an SM) merging in one launch, as a plain call
would if the rule took plain calls too. Compare it with ``teachkit, before``, which passes its
splits and config too (a plain call given a config checks it: host time that can show)."""


def label_default(out: list, start: int, params: dict) -> None:
    """Give the default's Measurement among ``out[start:]`` (one problem's rows) ``params`` as
    its ``provider_params``: how the default launched."""
    for i in range(start, len(out)):
        if out[i].provider == "teachkit split-KV, default":
            out[i] = dataclasses.replace(out[i], provider_params=params)


def label_default_launch(out: list, start: int, B: int, S: int, D: int, device: torch.device,
                         graph: bool) -> tuple:
    """:func:`label_default` with the ranges and tiles the default launches with for ``B``
    sequences of ``S`` tokens at head dim ``D`` (H = 32 fp16), captured where ``graph``;
    returns ``(DecodeConfig, ranges)``."""
    from teachkit.kernels import decode

    tiles, ranges = decode.default_launch(B, 32, D, S, torch.float16, device, captured=graph)
    label_default(out, start, {"ranges": ranges, "block_n": tiles.block_n,
                               "stages": tiles.num_stages})
    return tiles, ranges


def short_rows_sweep() -> tuple[list, list]:
    """GB/s of contiguous calls (:data:`SHORT_ROWS_PROBLEMS`) by cuDNN (``SDPA cuDNN``), the
    default (``teachkit split-KV, default``) and the plan before the short-row and short-cache
    rules (``teachkit, before``, :func:`plan_before`); launched plainly, then on CUDA-graph
    replays, interleaved, best of three; plainly at D = 64 also :data:`FOUR_ONE_LAUNCH`. The
    default's rows carry its ranges and tiles (``provider_params``). Returns (plain rows, graph
    rows)."""
    from teachkit.kernels import decode
    from teachkit.kernels.decode import decode_attention

    found: tuple[list, list] = ([], [])
    for D, problems in SHORT_ROWS_PROBLEMS.items():
        for B, lengths in problems:
            for S in lengths:
                q, k, v, nbytes = decoding_inputs(B, S, D)
                call = functools.partial(decode_attention, q, k, v, check_values=False)
                for graph, out in zip((False, True), found, strict=True):
                    splits, config = plan_before(B, S, D, graph)
                    runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                            "teachkit split-KV, default": call,
                            "teachkit, before": functools.partial(call, num_splits=splits,
                                                                  config=config)}
                    if D == 64 and not graph:  # a captured call's four an SM, in one launch
                        four, four_splits = decode.default_launch(
                            B, 32, D, S, torch.float16, q.device, captured=True)
                        runs[FOUR_ONE_LAUNCH] = functools.partial(
                            call, num_splits=four_splits, config=four._replace(one_launch=True))
                    start = len(out)
                    best = checked_best_times(runs, "SDPA cuDNN", "short rows", B, S, nbytes,
                                              out, graph=graph, rounds=3, head_dim=D)
                    tiles, ranges = label_default_launch(out, start, B, S, D, q.device, graph)
                    base = best["SDPA cuDNN"]
                    say(f"D={D} B={B} S={S // 1024}k {'graph' if graph else 'plain'}: x cuDNN "
                        f"default ({ranges} ranges of {tiles.block_n}x"
                        f"{tiles.num_stages}) {base / best['teachkit split-KV, default']:.3f}"
                        f", before ({splits} of {config.block_n}x{config.num_stages}) "
                        f"{base / best['teachkit, before']:.3f}"
                        + (f", four an SM in one launch {base / best[FOUR_ONE_LAUNCH]:.3f}"
                           f" ({best['teachkit, before'] / best[FOUR_ONE_LAUNCH]:.3f}x before)"
                           if FOUR_ONE_LAUNCH in best else ""))
                del q, k, v
    return found


DEPENDENT_MERGE_PROBLEMS = {64: ((1, (1024, 4096, 16384, 65536)), (2, (1024, 4096, 16384))),
                            128: tuple((B, (1024, 4096, 16384, 65536)) for B in (1, 2, 4))}
"""The dependent-merge sweep: head dim -> (batch, cache lengths) of contiguous calls, H = 32
fp16, that split the keys when captured (and so merge with the merge kernel)."""

MERGE_AFTER = "teachkit, merge after the split kernel"
"""The dependent-merge sweep's provider whose merge kernel is launched as any kernel is, once
the split kernel before it has finished (``decode.DEPENDENT_MERGE`` emptied while it is
captured)."""


def dependent_merge_sweep() -> list:
    """GB/s on CUDA-graph replays of captured split calls (:data:`DEPENDENT_MERGE_PROBLEMS`) by
    cuDNN (``SDPA cuDNN``), the default (``teachkit split-KV, default``: on sm_90 its merge
    kernel is a programmatic dependent launch) and the same call with its merge kernel launched
    after the split kernel (:data:`MERGE_AFTER`); interleaved, best of three. The default's rows
    carry its ranges (``provider_params``)."""
    from teachkit.kernels import decode
    from teachkit.kernels.decode import decode_attention

    out: list = []
    for D, problems in DEPENDENT_MERGE_PROBLEMS.items():
        for B, lengths in problems:
            for S in lengths:
                q, k, v, nbytes = decoding_inputs(B, S, D)
                call = functools.partial(decode_attention, q, k, v, check_values=False)
                runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                        "teachkit split-KV, default": call,
                        MERGE_AFTER: functools.partial(planned_with, "DEPENDENT_MERGE",
                                                       frozenset(), call)}
                start = len(out)
                best = checked_best_times(runs, "SDPA cuDNN", "dependent merge", B, S, nbytes,
                                          out, graph=True, rounds=3, head_dim=D)
                _, ranges = decode.default_launch(B, 32, D, S, torch.float16, q.device,
                                                  captured=True)
                label_default(out, start, {"ranges": ranges})
                base = best["SDPA cuDNN"]
                say(f"D={D} B={B} S={S // 1024}k ({ranges} ranges): x cuDNN default "
                    f"{base / best['teachkit split-KV, default']:.3f}, merge after "
                    f"{base / best[MERGE_AFTER]:.3f}; default / merge after "
                    f"{best[MERGE_AFTER] / best['teachkit split-KV, default']:.3f}")
                del q, k, v
    return out


NEARLY_FULL_PROBLEMS = ((3, 4), (1024, 1536, 2048, 4096, 16384, 65536))
"""The nearly-full sweep: batches (0.73 and 0.97 programs an SM of 32 heads on 132 SMs) and
cache lengths of contiguous calls at D = 64, H = 32 fp16, which do not split the keys."""

NEARLY_FULL_TILES = {"teachkit, 256 keys x 3": 256, "teachkit, 128 keys x 3": 128}
"""The nearly-full sweep's tiles, given with one range: provider -> BLOCK_N (64 KB and 32 KB
of K and V an iteration at D = 64 fp16), in 3 stages."""


def nearly_full_sweep() -> tuple[list, list]:
    """GB/s of unsplit contiguous calls at ``D = 64`` (:data:`NEARLY_FULL_PROBLEMS`) by cuDNN
    (``SDPA cuDNN``), the default (``teachkit split-KV, default``) and each of
    :data:`NEARLY_FULL_TILES` (passed with its config: a plain call given one checks it);
    launched plainly, then on CUDA-graph replays, interleaved, best of three. The default's
    rows carry its ranges and tiles (``provider_params``). Returns (plain rows, graph rows)."""
    from teachkit.kernels.decode import DecodeConfig, decode_attention

    found: tuple[list, list] = ([], [])
    batches, lengths = NEARLY_FULL_PROBLEMS
    for B in batches:
        for S in lengths:
            q, k, v, nbytes = decoding_inputs(B, S, 64)
            call = functools.partial(decode_attention, q, k, v, check_values=False)
            for graph, out in zip((False, True), found, strict=True):
                runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                        "teachkit split-KV, default": call}
                for name, block_n in NEARLY_FULL_TILES.items():
                    runs[name] = functools.partial(call, num_splits=1,
                                                   config=DecodeConfig(block_n, 4, 3))
                start = len(out)
                best = checked_best_times(runs, "SDPA cuDNN", "nearly full", B, S, nbytes,
                                          out, graph=graph, rounds=3, head_dim=64)
                tiles, ranges = label_default_launch(out, start, B, S, 64, q.device, graph)
                base = best["SDPA cuDNN"]
                say(f"D=64 B={B} S={S / 1024:g}k {'graph' if graph else 'plain'}: x cuDNN "
                    f"default ({ranges} ranges of {tiles.block_n}x{tiles.num_stages}) "
                    f"{base / best['teachkit split-KV, default']:.3f}, "
                    + ", ".join(f"{name.split(', ')[1]} {base / best[name]:.3f}"
                                for name in NEARLY_FULL_TILES))
            del q, k, v
    return found


TAIL_LOOP_PROBLEMS = {128: ((1, (1024, 4096, 16384, 65536)), (4, (1024, 4096)),
                            (8, (1024, 4096, 16384)), (16, (1024, 4096, 16384))),
                      64: ((1, (1024, 4096)), (4, (1024, 4096)), (8, (1024, 4096)))}
"""The tail-loop sweep: head dim -> (batch, cache lengths) of contiguous calls (H = 32 fp16):
the decoding record's batches 1, 8 and 16 at ``D = 128``, and the unsplit grids of nearly one
and two programs an SM (four and eight sequences)."""

TAIL_LOOP_PAGED = ((128, 8, 1024), (128, 8, 16384), (64, 8, 1024))
"""The tail-loop sweep's paged problems (head dim, batch, cache length; pages of 16, shuffled)."""

PIPELINED_TAIL = "teachkit, masked loop pipelined"
"""The default with its masked loop pipelined as deep as its unmasked loop (``TAIL_STAGES``
``None``), as the split kernel was before ``decode.TAIL_LOOP_STAGES`` and as grids of more than
``decode.TAIL_MOST_PER_SM`` programs an SM still run it."""

PAGED_PIPELINED_TAIL = "teachkit paged, masked loop pipelined"
"""The paged default with its masked loop pipelined, as :data:`PIPELINED_TAIL`."""


def pipelined_tail(call: functools.partial) -> torch.Tensor:
    """``call()`` with the split kernel's masked loop pipelined: its launch plan, found as
    usual (and cached), with ``tail_stages`` ``None`` while it runs. Unlike
    :func:`planned_with` this works no plan out again. The kept calls
    (``decode.DECODE_REPLAYS``) are set aside while it runs, so that the call plans rather than
    making a kept default's launch again, and what it keeps is dropped: a plain launch of it
    pays the full path's host time, which a kept default call does not."""
    from teachkit.kernels import decode

    kept = decode._launch_plan
    kept_calls = dict(decode.DECODE_REPLAYS)

    def pipelined(*args, **kwargs):
        return kept(*args, **kwargs)._replace(tail_stages=None)

    decode._launch_plan = pipelined
    decode.DECODE_REPLAYS.clear()
    try:
        return call()
    finally:
        decode._launch_plan = kept
        decode.DECODE_REPLAYS.clear()
        decode.DECODE_REPLAYS.update(kept_calls)


def tail_loop_sweep() -> tuple[list, list]:
    """GB/s of contiguous calls (:data:`TAIL_LOOP_PROBLEMS`) by cuDNN (``SDPA cuDNN``), the
    default (``teachkit split-KV, default``, its masked loop not pipelined where its grid has
    few programs an SM) and the same call with it pipelined (:data:`PIPELINED_TAIL`); then of
    paged calls (:data:`TAIL_LOOP_PAGED`: ``teachkit paged`` and :data:`PAGED_PIPELINED_TAIL`,
    beside the contiguous default and cuDNN); launched plainly, then on CUDA-graph replays,
    interleaved, best of three. The default's rows carry its ranges and tiles
    (``provider_params``). Returns (plain rows, graph rows)."""
    from teachkit.kernels.decode import decode_attention

    found: tuple[list, list] = ([], [])
    problems = [(D, B, S, False) for D, rows in TAIL_LOOP_PROBLEMS.items()
                for B, lengths in rows for S in lengths]
    problems += [(D, B, S, True) for D, B, S in TAIL_LOOP_PAGED]
    for D, B, S, paged in problems:
        q, k, v, nbytes = decoding_inputs(B, S, D)
        call = functools.partial(decode_attention, q, k, v, check_values=False)
        runs = {"SDPA cuDNN": functools.partial(cudnn, q, k, v),
                "teachkit split-KV, default": call}
        if paged:
            lens, kp, vp, table = paged_copy(k, v)
            paged_call = functools.partial(decode_attention, q, kp, vp, lens, table,
                                           check_values=False)
            runs["teachkit paged"] = paged_call
            runs[PAGED_PIPELINED_TAIL] = functools.partial(pipelined_tail, paged_call)
        else:
            runs[PIPELINED_TAIL] = functools.partial(pipelined_tail, call)
        for graph, out in zip((False, True), found, strict=True):
            start = len(out)
            best = checked_best_times(runs, "SDPA cuDNN", "tail loop", B, S, nbytes, out,
                                      graph=graph, rounds=3, head_dim=D)
            if paged:  # the problem's label and parameters say so
                out[start:] = [dataclasses.replace(m, problem=f"paged {m.problem}",
                                                   params={**m.params, "page_size": 16})
                               for m in out[start:]]
            tiles, ranges = label_default_launch(out, start, B, S, D, q.device, graph)
            base = best["SDPA cuDNN"]
            say(f"D={D} B={B} S={S / 1024:g}k{' paged' if paged else ''} "
                f"{'graph' if graph else 'plain'} ({ranges} ranges of {tiles.block_n}x"
                f"{tiles.num_stages}): x cuDNN "
                + ", ".join(f"{name.removeprefix('teachkit ')} {base / ms:.3f}"
                            for name, ms in best.items() if name != "SDPA cuDNN"))
        del q, k, v
    return found


def host_profile() -> None:
    """Where the host time of one decode_attention call goes (cProfile, B=1, S=4k)."""
    import cProfile
    import pstats

    from teachkit.kernels.decode import decode_attention

    q, k, v, _ = decoding_inputs(1, 4096)
    for n in (None, 1):
        fn = functools.partial(decode_attention, q, k, v, num_splits=n, check_values=False)
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(300):
            fn()
        torch.cuda.synchronize()
        say(f"host+GPU per call (num_splits={n}): {(time.perf_counter() - t0) / 300 * 1e6:.0f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        decode_attention(q, k, v, check_values=False)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
