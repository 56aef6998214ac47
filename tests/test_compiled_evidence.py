"""What the compiler makes of the kernels, read without a GPU from their PTX, SASS and ptxas's
reports (``python -m teachkit.kernels --...-evidence``): the instructions, registers, spills
and residency that the notebooks and the README state about compiled code. The compile check
of every configuration is ``tests/test_compile_check.py``."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from teachkit.kernels import softmax_kernels as sk
from teachkit.progress import run_command

triton = pytest.importorskip("triton")


def compiled_facts(code: str, timeout: int = 300):
    """Run ``code`` in a fresh Python with Triton's compiler (``TRITON_INTERPRET=0``: compiling
    for a GPU needs no GPU, but this process may run the interpreter) and return the Python
    literal it prints. ``code`` finds ``teachkit.kernels.compile_check`` as ``cc``."""
    done = subprocess.run(
        [sys.executable, "-c", "from teachkit.kernels import compile_check as cc; " + code],
        capture_output=True, text=True, timeout=timeout,
        env=dict(os.environ, TRITON_INTERPRET="0"))
    assert done.returncode == 0, done.stdout + done.stderr
    return ast.literal_eval(done.stdout)


def test_wgmma_takes_p_from_registers_and_q_from_shared_memory():
    """On sm_90 the flash kernel's q k^T reads q from shared memory and p v takes p from the
    registers the softmax left it in (as FlashAttention-3 feeds P): both kinds of wgmma occur."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--wgmma-operands"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    counts = {where: int(n) for n, where in
              re.findall(r"(\d+) wgmma with A from (shared memory|registers)", done.stdout)}
    assert counts["shared memory"] > 0 and counts["registers"] > 0, done.stdout


def test_layout_evidence_flash_reduces_rows_in_quads_blog_across_the_block():
    """``--layout-evidence``: notebook 08's D = 128 forward on sm_90 reduces tiles of an MMA
    layout with warps stacked along rows, by butterfly shuffles of lane offsets 2 and 1 only (a
    row lives in a quad of lanes of one warp); notebook 06's blog kernel reduces a block spread
    over 4 warps, from offset 16 down, then across warps through shared memory."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--layout-evidence"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    flash, blog = done.stdout.split("\nblog ")
    assert "tt.reduce over 128x128 #mma" in flash
    assert "nvidia_mma<{versionMajor = 3" in flash and "warpsPerCTA = [8, 1]" in flash
    shuffles = flash.strip().splitlines()[-1]
    assert re.search(r"by lane offset: 2: \d+, 1: \d+ \(", shuffles), shuffles
    assert "by lane offset: 16: " in blog


def test_register_sweep_reads_ptxas():
    """The fused kernel with 512 threads: no spill up to 16384 columns on every GPU class, and
    spills at 65536 (65536 registers / 512 threads caps a thread at 128)."""
    code = ("s = cc.fused_register_sweep(columns=(16384, 65536)); "
            "print([(c, n, r['registers'], r['spill_stores'])"
            " for c in s for n, r in s[c].items()])")
    found = compiled_facts(code)
    for cap, n, registers, spilled in found:
        assert registers <= 128, (cap, n)
        assert (spilled > 0) == (n == 65536), (cap, n, spilled)


@pytest.mark.skipif(not triton.__version__.startswith("3.6."),
                    reason="notebook 12 and the README describe Triton 3.6's registers")
def test_backward_registers_the_table_s_dkdv_spills_and_a_16_query_step_does_not():
    """``--backward-registers`` as notebook 12 and the README read it (Triton 3.6, Colab's): on
    sm_90 at D = 128 the table's dK/dV tiles spill, the dQ kernel's do not, and of the smaller
    dK/dV steps the 16-query one does not."""
    code = ("print([(r['kernel'], r['tiles'], r['note'], r['spill_stores'])"
            " for r in cc.backward_registers()])")
    found = {(kernel, tiles): (note, spilled)
             for kernel, tiles, note, spilled in compiled_facts(code)}
    assert found["dkdv", (64, 128, 8, 3)][0] == "the table's" and found["dkdv", (64, 128, 8, 3)][1]
    assert found["dq", (128, 64, 8, 3)] == ("the table's", 0)
    assert found["dkdv", (16, 128, 8, 2)] == ("", 0)


def test_page_interleave_evidence_one_table_entry_a_thread_a_tile():
    """``--page-interleave``: notebook 09's paged decode kernel (sm_90, D = 64, 256-key tiles
    of 16-token pages, row held) takes a table entry from its held row for each of a thread's
    16 rows in key order, one per tile interleaved, and forms fewer 64-bit row addresses and
    instructions in all (Triton 3.6: 64 -> 4 entries, 194 -> 2 addresses, 4103 -> 2427
    instructions)."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--page-interleave"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = {}
    for line in done.stdout.splitlines()[1:]:
        match = re.match(r"\s+(.+?)\s+key order\s+(\d+)\s+interleaved\s+(\d+)$", line)
        assert match, line
        counts[match.group(1).split(" (")[0]] = (int(match.group(2)), int(match.group(3)))
    assert set(counts) == {"ptx instructions", "table entries", "row addresses"}
    in_order, interleaved = counts["table entries"]
    assert interleaved * 8 <= in_order, counts
    assert all(after < before for before, after in counts.values()), counts


_RESIDENCY_LINE = (r"\s+(\d+)-key tiles in (\d) stages, (merge kernel|one launch|unsplit)\s+"
                   r"(\d+) registers a thread, (\d+) bytes spilled, (\d+) bytes shared: "
                   r"(\d+) programs an SM$")
"""A line of ``--paged-residency``, ``--last-wave-residency`` or ``--wave-tiles-residency``
after its prefix."""


def _residency(flag: str, prefix: str = "") -> list[dict]:
    """The indented lines of ``python -m teachkit.kernels <flag>`` (under its headings),
    parsed; each line's programs an SM checked against what its registers (a warp's allocated
    256 at a time) and shared memory (228 KB an SM, 1 KB more a block) leave between them."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", flag],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = []
    for line in done.stdout.splitlines():
        if not line.startswith(" "):
            continue  # a heading
        match = re.match(prefix + _RESIDENCY_LINE, line)
        assert match, line
        *head, block_n, stages, merge, registers, spilled, shared, programs = match.groups()
        by_shared = (228 * 1024) // (int(shared) + 1024)
        assert int(programs) == min(sk.programs_by_registers(int(registers), 4),
                                    by_shared), line
        found.append({"head": head, "block_n": int(block_n), "stages": int(stages),
                      "merge": merge, "registers": int(registers), "spilled": int(spilled),
                      "programs": int(programs)})
    return found


def test_paged_residency_reads_the_registers_of_the_tiles_a_paged_call_splits_with():
    """``--paged-residency``: the tiles a paged call reading its table entry by entry splits
    with (sm_90, D = 64 and 128, with the merge kernel and in one launch), compiled as launched,
    each line's programs an SM being what its registers and shared memory leave, at least
    three; with Triton 3.6 (Colab's, where the rule was measured) 96 registers each way, the
    five programs an SM that ``decode.PAGED_ENTRY_WAVES`` aims for. Then the tiles such a call
    runs with where its grid holds, or is split to hold, 1.45 to 2 programs an SM
    (``decode.ENTRY_GRID``: 64 KB, 256 keys at D = 64 and 128 at D = 128, in 2 stages;
    unsplit, which is also the split merged by the merge kernel, and in one launch) spill
    nothing and leave at least the two programs an SM that the rule's grid has at most."""
    from teachkit.kernels import decode

    found, grid = {}, {}
    for used in _residency("--paged-residency", r"\s+D=(\d+)"):
        D = int(used["head"][0])
        if used["block_n"] == 16384 // D:  # decode.ENTRY_GRID's 64 KB tiles
            grid[D, used["merge"]] = used
            continue
        assert used["programs"] >= 3, used
        found[D, used["merge"]] = used
    assert set(found) == {(D, m) for D in (64, 128) for m in ("merge kernel", "one launch")}
    if triton.__version__.startswith("3.6."):
        assert {u["programs"] for u in found.values()} == {decode.PAGED_ENTRY_WAVES[90]}, found
    assert set(grid) == {(D, m) for D in decode.ENTRY_GRID_HEAD_DIMS
                         for m in ("unsplit", "one launch")}, grid
    for used in grid.values():
        assert (used["stages"], used["spilled"]) == (2, 0), used
        assert used["programs"] >= decode.ENTRY_GRID[90][1], used


def test_the_entry_grid_tiles_cost_grouped_query_heads_what_they_cost_one():
    """``decode.ENTRY_GRID`` counts grouped-query heads by their cache heads, as it was timed
    with one query head a cache head: compiled with two and eight query heads a cache head
    (rows a program holds: 16 either way), the rule's tiles, unsplit and merging in one launch,
    take the shared memory they take with one, spill nothing and leave the same two programs an
    SM (their registers within a few of one's: Triton 3.9 gives the one-launch form at
    D = 128 196 with groups of two and eight, 198 with one)."""
    code = "print([cc.entry_grid_residency(group=g) for g in (1, 2, 8)])"
    one, *grouped = compiled_facts(code)
    for found in grouped:
        assert found.keys() == one.keys()
        for key, used in found.items():
            same = ("block_n", "stages", "spilled", "shared", "programs_an_sm")
            assert [used[k] for k in same] == [one[key][k] for k in same], (key, used, one[key])
            assert abs(used["registers"] - one[key]["registers"]) <= 8, (key, used, one[key])


def test_last_wave_residency_reads_the_programs_an_sm_the_rule_counts_on():
    """``--last-wave-residency``: the tiles a contiguous call at D = 128 splits with to fill its
    last wave (sm_90, 128 keys, with the merge kernel and in one launch, compiled as launched)
    spill nothing, and each line's programs an SM are what its registers and shared memory
    leave: with Triton 3.6 (Colab's, where the rule was measured) as many as
    ``decode.LAST_WAVE_GRID`` gives ``last_wave_splits`` (244 and 254 registers, two
    programs); Triton 3.9 takes 146 and 108 registers, three programs."""
    from teachkit.kernels import decode

    found = _residency("--last-wave-residency")
    assert [(u["block_n"], u["merge"], u["spilled"]) for u in found] == [
        (128, "merge kernel", 0), (128, "one launch", 0)], found
    for used in found:
        assert used["programs"] >= 2, used
        if triton.__version__.startswith("3.6."):
            assert used["programs"] == decode.LAST_WAVE_GRID[90][1], used


def test_short_rows_residency_holds_the_programs_an_sm_the_rule_aims_for():
    """``--short-rows-residency``: the tiles a captured contiguous call at D = 64 splits with
    (sm_90, 64 and 128 keys in 2 stages, the merge kernel, compiled as launched) leave at least
    the programs an SM ``decode.SHORT_ROW_SPLITS`` aims for, so its grid runs in one wave, and
    each line's programs an SM are what its registers and shared memory leave."""
    from teachkit.kernels import decode

    waves, stage_bytes, stages = decode.SHORT_ROW_SPLITS[90]
    found = _residency("--short-rows-residency")
    block_n = decode._keys_per_block(stage_bytes, 64, 2)
    assert [(u["block_n"], u["stages"], u["merge"]) for u in found] == [
        (block_n // 2, stages, "merge kernel"), (block_n, stages, "merge kernel")], found
    for used in found:
        assert used["programs"] >= waves, used


def test_wave_tiles_residency_reads_the_programs_an_sm_the_tiles_rule_counts_on():
    """``--wave-tiles-residency``: the tiles an unsplit grid at D = 128 of more than two
    programs an SM chooses from (sm_90, unsplit; contiguous, and paged with the table row held
    and read entry by entry), compiled as launched: each line's programs an SM are what its
    registers and shared memory leave. With Triton 3.6, where the rule was measured and the
    record's kernels were launched, they spill nothing, their programs an SM are as many as
    ``decode.FULLEST_WAVE_TILES`` gives ``fullest_wave_tiles`` (four, two and three; paged
    five, three and three), and the registers are, tile for tile, those the launched kernels of
    the wave-tiles record took on an H200 (contiguous and held at 4k tokens, entry by entry at
    16k)."""
    import json

    from teachkit.bench.core import record_path
    from teachkit.kernels import decode

    found = _residency("--wave-tiles-residency",
                       r"\s+(contiguous|paged, row held|paged, entry by entry)")
    reads = {"contiguous": (False, 4096), "paged, row held": (True, 4096),
             "paged, entry by entry": (True, 16384)}
    tiles = [(name, b, stages, r) for name, (paged, _) in reads.items()
             for b, stages, r in decode.FULLEST_WAVE_TILES[90][paged]]
    want = [(name, decode._keys_per_block(b, 128, 2), stages, "unsplit", 0, r)
            for name, b, stages, r in tiles]
    got = [(u["head"][0], u["block_n"], u["stages"], u["merge"], u["spilled"], u["programs"])
           for u in found]
    assert [g[:4] for g in got] == [w[:4] for w in want], found
    if not triton.__version__.startswith("3.6."):  # Triton 3.9 spills a few bytes paged
        return
    assert got == want, found
    record = json.loads(Path(record_path("decode_wave_tiles_nvidia_h200")).read_text())
    launched = {(r["provider"], r["params"]["S"]): r["provider_params"]["registers"]
                for r in record["results"] if r["provider_params"]}
    for used, (name, b, stages, _) in zip(found, tiles, strict=True):
        paged, S = reads[name]
        provider = f"{'paged' if paged else 'contiguous'} {b // 1024} KB x {stages}"
        assert used["registers"] == launched[provider, S], (name, provider, used)


def test_merge_evidence_orders_the_one_launch_merge():
    """``--merge-evidence``: the one-launch decoding kernel counts with one acq_rel atomic at
    GPU scope between two barriers, and reads the other splits' partials with volatile loads;
    without its merge it has neither."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--merge-evidence"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[1].startswith("bar.sync") and "atom.global.gpu.acq_rel.add" in lines[2]
    assert lines[-2].startswith("bar.sync")
    assert lines[-1] == "with its merge: 1 atom, 4 ld.volatile; without: 0 atom, 0 ld.volatile"


def test_the_merge_kernel_waits_for_the_split_grid_where_it_is_a_dependent_launch():
    """``--dependent-merge-evidence``: on sm_90 the decode merge kernel holds
    ``griddepcontrol.wait`` before its first load; compiled for the other classes it holds no
    grid dependency control (sm_75 and sm_80 have none)."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--dependent-merge-evidence"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(",")[0] for line in lines] == ["sm_75", "sm_80", "sm_89", "sm_90"]
    assert all(line.endswith(": no griddepcontrol") for line in lines[:3])
    assert lines[3].endswith("dependent launch: griddepcontrol.wait (before the first load)")


def test_the_decode_masked_loop_loads_into_registers_where_it_is_not_pipelined():
    """``--tail-loop-evidence``: as a grid of few programs an SM launches it on sm_90
    (``decode.TAIL_LOOP_STAGES[90]`` = 1) the split kernel's masked loop loads its tiles into
    registers; pipelined like the unmasked loop it has its own copies to shared memory, commit
    groups and waits, in the same shared memory."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--tail-loop-evidence"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    assert "not pipelined (TAIL_STAGES=1)" in lines[0] and "(TAIL_STAGES=None)" in lines[1]

    def counts(line: str) -> dict[str, int]:
        found = re.findall(r"(\d+) (cp\.async\.\w+|ld\.global|bytes of shared memory)", line)
        return {name: int(n) for n, name in found}

    plain, pipelined = counts(lines[0]), counts(lines[1])
    for op in ("cp.async.cg", "cp.async.commit_group", "cp.async.wait_group"):
        assert 0 < plain[op] < pipelined[op], (op, lines)
    assert plain["ld.global"] > pipelined["ld.global"], lines
    assert plain["bytes of shared memory"] == pipelined["bytes of shared memory"]


def test_exchange_evidence_shows_the_fence_of_the_counter_and_none_in_the_word():
    """``--exchange-evidence``: the arrival counter's release-acquire atomic compiles to a
    MEMBAR before the atomic; the 64-bit word and the shipped resident kernels (the table's,
    the long rows' and the unpaired one) have none."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--exchange-evidence"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    counter, word, *resident = done.stdout.splitlines()[1:]
    assert "arrival counter" in counter and "1 MEMBAR.ALL.GPU" in counter
    assert "ATOMG.E.ADD" in counter
    assert "64-bit word" in word and ": 0 MEMBAR;" in word and "ATOMG.E.EXCH.64" in word
    assert len(resident) == 5 and all(": 0 MEMBAR;" in line and "EXCH.64" in line
                                      for line in resident)


def test_resident_conversions_one_instruction_a_word_instead_of_an_element():
    """``--resident-conversions``: the words kernel rounds its bfloat16 results with one
    F2F.BF16.F32 an element through Triton's conversion, with one F2FP.BF16.F32.PACK_AB a word
    through pack_halves_x2, and the exponentials are the same."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--resident-conversions"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    title, single, paired = done.stdout.splitlines()
    assert "128 elements (64 words) a thread" in title
    assert single.startswith("  pack_halves:") and paired.startswith("  pack_halves_x2:")
    assert ", 128 F2F.BF16.F32, 0 F2FP.BF16.F32.PACK_AB" in single
    assert ", 0 F2F.BF16.F32, 64 F2FP.BF16.F32.PACK_AB" in paired
    assert single.split(",")[0].split(":")[1] == paired.split(",")[0].split(":")[1]


def test_tma_words_instructions_fall_step_by_step():
    """``--tma-words-instructions``: each step takes instructions out of the TMA words kernel's
    code: an F2FP for two F2F, a PRMT for the shift and select of each half, an FFMA for an
    FMUL; the exponentials stay two an element."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--tma-words-instructions"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    title, *steps = done.stdout.splitlines()
    assert "128 elements a thread" in title and len(steps) == 4
    totals = [int(step.split(": ")[1].split(" ")[0]) for step in steps]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
    counts = [dict(reversed(part.split(" ")) for part in step.split("): ")[1].split(", "))
              for step in steps]
    assert (counts[0]["F2F"], counts[1]["F2F"], counts[1]["F2FP"]) == ("128", "0", "64")
    assert int(counts[2]["SEL"]) < int(counts[1]["SEL"]) and int(counts[2]["SHF"]) < 32
    assert int(counts[3]["FMUL"]) <= int(counts[2]["FMUL"]) - 128
    assert int(counts[3]["FFMA"]) >= int(counts[2]["FFMA"]) + 128
    assert all(256 <= int(c["MUFU"]) <= 320 for c in counts)


def test_resident_registers_the_cap_holds_the_program_count_for_every_launch():
    """``--resident-registers``: uncapped, bfloat16 weights loaded a chunk ahead compiled as the
    program count is read (one program, one row, one chunk) would let two programs share a
    multiprocessor, and as launched on rows of 256 chunks only one; capped, every compilation
    holds the programs each configuration wants. The words kernel spills a tenth as much with
    ``fresh`` as without, at most."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--resident-registers"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    words, fp32, prefetch, spills = done.stdout.splitlines()[1:]

    def held(line: str, part: int) -> list[int]:
        return [int(n) for n in re.findall(r"\((\d+)\)", line.split("; ")[part])]

    assert "(words)" in words and held(words, 2) == [4, 4]
    assert "(weights)" in fp32 and held(fp32, 2) == [4, 4]
    assert "prefetch" in prefetch and held(prefetch, 1) == [2, 1]
    assert held(prefetch, 2) == [2, 2]
    with_fresh, without = map(int, re.findall(r"(\d+) B", spills))
    assert with_fresh * 10 < without


def test_wgmma_overlap_shows_no_softmax_under_a_product():
    """``--wgmma-overlap``: in the sm_90 key loop of the flash forward kernel, q k^T is waited
    for (wait_group 0) before the softmax's ex2 start, and p v is committed at the loop's end;
    no ex2 runs with a product of its warpgroup in flight."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--wgmma-overlap",
                           "--head-dim", "128"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip()
    assert "loop wgmma x8 -> commit -> wait 0 -> ex2 x66 -> wgmma x8 -> commit;" in line, line
    assert "ex2 with a product in flight: 0 of 132" in line, line


def test_the_gluon_kernel_runs_its_softmax_under_a_product():
    """``--wgmma-overlap --gluon``: the Gluon kernel for Hopper, compiled for sm_90 without a GPU,
    issues q k^T and p v, waits for one group (wait_group 1) and runs the next softmax's ex2
    while p v is in flight; with its overlap off every product is waited for (wait_group 0)."""
    out = run_command([sys.executable, "-m", "teachkit.kernels", "--wgmma-overlap", "--gluon"],
                      enabled=False, timeout=600)
    overlapped, waited = out.strip().splitlines()
    # (where the loop found starts depends on the Triton version's block layout; its step reads
    # the same in 3.6 and 3.9)
    assert "wgmma x8 -> commit -> wgmma x8 -> commit -> wait 1 -> ex2 x66" in overlapped, overlapped
    assert "with a product in flight: 132 of" in overlapped, overlapped
    assert "overlap=False" in waited and "with a product in flight: 0 of" in waited, waited
    assert "wait 1" not in waited.split(";")[0], waited


def test_the_gluon_dkdv_kernel_exponentiates_under_a_product():
    """``--wgmma-overlap --gluon --backward``: the Gluon dK/dV kernel, compiled for sm_90 without
    a GPU, issues S^T = K Q^T and dP^T = V dO^T, waits for the first only (wait_group 1), and
    computes every exponential of P^T while dP^T is on the tensor cores."""
    out = run_command([sys.executable, "-m", "teachkit.kernels", "--wgmma-overlap", "--gluon",
                       "--backward"], enabled=False, timeout=600)
    plain, fused = (line for line in out.splitlines() if line.startswith("Gluon dK/dV"))
    for line in (plain, fused):
        assert "loop wgmma x8 -> commit -> wgmma x8 -> commit -> wait 1 -> ex2 x32" in line, out
        assert "ex2 with a product in flight: 64 of 64" in line, out
    # with dQ fused in: the two dQ products (one per warpgroup's keys) join the step, and dQ
    # leaves by TMA reduce-add
    assert "wgmma x4 -> commit -> wgmma x4 -> commit -> wait 2 -> wait 0" in fused, out
    assert re.search(r"dQ added by TMA: [1-9]\d* cp\.reduce", out), out


@pytest.mark.skipif(not triton.__version__.startswith("3.6."),
                    reason="the spill figures are Triton 3.6's")
def test_the_gluon_dkdv_kernel_spills_little():
    """The Gluon dK/dV kernel compiled for sm_90 (no GPU): 168 registers at launch, and a few
    hundred bytes of spills a thread at most at D = 128 (none at D = 64), with dQ fused in or
    not, where the Triton kernel with the table's 8-warp tiles spills more than a kilobyte."""
    code = ("print([cc.hopper_dkdv_registers(d, c, f) for d in (128, 64) for c in (False, True) "
            "for f in (False, True)])")
    found = compiled_facts(code)
    assert all(r["registers"] == 168 for r in found), found
    assert all(r["spill_stores"] + r["spill_loads"] < 512 for r in found[:4]), found
    assert all(r["spill_stores"] + r["spill_loads"] == 0 for r in found[4:]), found


@pytest.mark.skipif(not triton.__version__.startswith("3.6."),
                    reason="the spill figures are Triton 3.6's")
def test_the_persistent_gluon_forward_fits_and_does_not_spill():
    """The persistent Gluon forward compiled for sm_90 (no GPU): the wide form at D = 64 and
    128-key blocks with the overlap at D = 128, with the mask and without. Two query buffers per
    consumer at D = 64 and three stages still fit in an sm_90 program's shared memory, 168
    registers at launch, and no spills (the wide causal form spilled 8 bytes a thread while its
    key blocks came in order)."""
    code = ("ks = [cc.hopper_compiled(d, 'fp16', c, o, b, persistent=True) "
            "for d, o, b in ((64, False, 256), (128, True, None)) for c in (False, True)]; "
            "print([(k.metadata.shared, cc.assembled_resources(k.asm['ptx'], 90)) for k in ks])")
    found = compiled_facts(code, timeout=600)
    from teachkit.gpus import SHARED_MEMORY_LIMIT

    assert all(shared <= SHARED_MEMORY_LIMIT[90] for shared, _ in found), found
    assert all(r["registers"] == 168 for _, r in found), found
    assert all(r["spill_stores"] + r["spill_loads"] == 0 for _, r in found), found


def test_the_wide_gluon_forward_holds_its_softmax_twice_a_consumer():
    """``--wgmma-overlap --gluon --head-dim 64 --causal``: the wide form walks a tile's key
    blocks from the diagonal back, so its consumers hold the softmax once before the loop and
    once in it (two consumers: four copies of the ``ex2`` of a step); the 128-key forms, whose
    blocks come in order, hold it masked and unmasked before the loop and in it (eight)."""
    out = run_command([sys.executable, "-m", "teachkit.kernels", "--wgmma-overlap", "--gluon",
                       "--head-dim", "64", "--causal"], enabled=False, timeout=600)
    lines = out.strip().splitlines()
    assert [line.split(", overlap=")[0].rsplit(", ", 1)[1] for line in lines] == [
        "128 keys", "128 keys", "256 keys"], out
    for line, keys, copies in zip(lines, (128, 128, 256), (8, 8, 4), strict=True):
        # a thread's ex2 a step: its share of 64 rows x keys scores over 128 threads, and the
        # alpha of its two rows (the loop's run of ex2 where the loop found shows it alone)
        per_step = 64 * keys // 128 + 2
        total = int(re.search(r"in flight: \d+ of (\d+)", line).group(1))
        assert total == copies * per_step, line


def test_scores_one_block_ahead_still_wait_before_the_softmax():
    """``--wgmma-overlap --qk-ahead``: with the next block's q k^T issued before this block's
    softmax (the ladder's QK_AHEAD), Triton still waits for that product (wait_group 0) before
    the first ex2, so the loop reads as the last ladder step's and no ex2 is in flight."""
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--wgmma-overlap",
                           "--qk-ahead"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    last, ahead = done.stdout.strip().splitlines()
    assert last.startswith("ladder 'heavy first'") and ahead.startswith("ladder 'qk ahead'")
    loop = "loop wgmma x4 -> commit -> wait 0 -> ex2 x34 -> wgmma x4 -> commit;"
    assert loop in last and loop in ahead, (last, ahead)
    assert "ex2 with a product in flight: 0 of" in ahead, ahead


def test_the_tma_resident_softmax_fits_without_spills_and_copies_by_tma():
    """The Gluon resident softmax (``softmax_tma``) compiled for sm_90 as launched (no GPU
    needed): within its registers without a spill, a buffer of one chunk in shared memory, the
    copies TMA's (``cp.async.bulk.tensor``, the first and the next chunk's), and float32
    results stored 16 bytes at a time; the same of its form that holds 16-bit rows as words,
    but for one word of stack with Triton 3.6 (none with 3.9): its SASS stores and loads one
    register around the fallback read of the row (``gluon_row_pair``'s, taken only when the
    row's programs are not all running), not in the loop over the chunk. Keeping the weights
    as bfloat16 words instead (``keep_weights``) fits without a spill too, with about half the
    exponentials (``ex2``) of the words that keep the input, none after the wait. The
    configuration that writes behind (``TMA_BEHIND_CONFIGS``), two chunks in its registers,
    fits without a spill as well, and so does the long-row configuration writing behind and
    reading the chunk it writes again (``reread``), a piece at a time (``write_reread``)."""
    code = ("import torch; from teachkit.kernels import softmax_tma as st; "
            "ks = [(d, c, cc.resident_tma_compiled(d, c, g)) for d in (torch.float32, "
            "torch.bfloat16) for c, g in ((st.TMA_CONFIGS[4], 128), "
            "(st.TMA_BEHIND_CONFIGS[4], 256), (st.TMA_LONG_ROW_CONFIGS[4], 256), "
            "(st.TMA_LONG_ROW_CONFIGS[4]._replace(write_behind=True, reread=True), 256))] + "
            "[(torch.bfloat16, c, "
            "cc.resident_tma_compiled(torch.bfloat16, c, 256)) for w in "
            "(st.TmaConfig(32, 4, 4, words=True), st.TmaConfig(64, 8, 2, True, words=True)) "
            "for c in (w, w._replace(keep_weights=True))]; "
            "print([(d.itemsize, c.chunk, c.words, c.keep_weights, c.max_registers, "
            "k.metadata.shared, cc.assembled_resources(k.asm['ptx'], 90), "
            "k.asm['ptx'].count('cp.async.bulk.tensor'), k.asm['ptx'].count('st.global.v4'), "
            "k.asm['ptx'].count('ex2.approx')) for d, c, k in ks])")
    exponentials = {}
    for (size, chunk, words, kept, cap, shared, found, copies, wide,
         ex2) in compiled_facts(code, timeout=600):
        assert found["registers"] <= cap
        assert found["stack"] <= (8 if words and not kept else 0), found
        assert chunk * size <= shared <= chunk * size + 1024
        assert copies == 2
        assert size == 2 or wide > 0
        exponentials[chunk, words, kept] = ex2
    for chunk in (16384, 32768):
        assert exponentials[chunk, True, True] < 0.6 * exponentials[chunk, True, False]


def test_the_tma_resident_softmax_with_two_chunks_in_flight_takes_two_buffers():
    """``depth=2``: three programs of 8192 float32 columns (16384 16-bit ones as words) a
    multiprocessor, each with two buffers of a chunk in shared memory (64 KB and a little, three
    to a multiprocessor's 228 KB), three TMA copies (the first two items' and, in the loop, the
    item two after), and the registers and stack of ``depth=1``, which compiles to the same
    instructions as before ``depth`` was added."""
    code = ("import torch; from teachkit.kernels import softmax_tma as st; "
            "ks = [(d, c, cc.resident_tma_compiled(d, c, 128)) for d, w in ((torch.float32, "
            "False), (torch.bfloat16, True)) for c in (st.TmaConfig(32, 4, 3, words=w), "
            "st.TmaConfig(32, 4, 3, words=w, depth=2))]; "
            "print([(d.itemsize, c.chunk, c.depth, k.metadata.shared, "
            "cc.assembled_resources(k.asm['ptx'], 90), "
            "k.asm['ptx'].count('cp.async.bulk.tensor')) for d, c, k in ks])")
    found = {}
    for size, chunk, depth, shared, resources, copies in compiled_facts(code, timeout=600):
        assert depth * chunk * size <= shared <= depth * chunk * size + 1024
        assert 3 * (shared + 1024) <= 228 * 1024
        assert copies == 1 + depth
        found[size, depth] = resources
    for size in (4, 2):
        assert found[size, 2]["registers"] <= 128
        assert found[size, 2]["stack"] == found[size, 1]["stack"], found


def test_taking_the_pair_from_the_buffer_holds_one_chunk_in_registers():
    """``pair_from_buffer`` (``PAIR_FROM_BUFFER_CONFIGS``): three programs of 8192 float32
    columns a multiprocessor writing behind, within their registers without a spill, each with
    two buffers of a chunk in shared memory (three to a multiprocessor's 228 KB); the chunk's
    pair is read from its buffer in pieces (shared-memory loads besides the one of the whole
    chunk), three TMA copies (the first two items' and, in the loop, the item two after). The
    same for its words forms (``PAIR_FROM_BUFFER_WORDS_CONFIGS``): 16384 bfloat16 columns in the
    same buffers, read once in pieces, three programs with two buffers or four with one (on rows
    of up to 256 chunks: at 512 its poll of the row's pairs takes 24 bytes of stack)."""
    code = ("import torch; from teachkit.kernels import softmax_tma as st; "
            "ks = [(c, d, cc.resident_tma_compiled(d, c, g)) for c, d, g in "
            "[(c, torch.float32, 512) for c in st.PAIR_FROM_BUFFER_CONFIGS] "
            "+ [(st.PAIR_FROM_BUFFER_WORDS_CONFIGS[0], torch.bfloat16, 512), "
            "(st.PAIR_FROM_BUFFER_WORDS_CONFIGS[1], torch.bfloat16, 256)]]; "
            "print([(c.chunk * d.itemsize, c.depth, c.per_sm, c.num_warps, c.max_registers, "
            "k.metadata.shared, cc.assembled_resources(k.asm['ptx'], 90), "
            "k.asm['ptx'].count('cp.async.bulk.tensor'), k.asm['ptx'].count('ld.shared')) "
            "for c, d, k in ks])")
    found = compiled_facts(code, timeout=600)
    assert len(found) == 4
    for chunk_bytes, depth, per_sm, warps, cap, shared, resources, copies, shared_loads in found:
        assert resources["registers"] <= cap and resources["stack"] == 0, resources
        assert per_sm * warps * 32 * cap <= 65536
        assert depth * chunk_bytes <= shared <= depth * chunk_bytes + 1024
        assert per_sm * (shared + 1024) <= 228 * 1024
        assert copies == 1 + depth
        assert shared_loads > 1


def test_the_tma_resident_softmax_takes_a_chunk_of_three_boxes():
    """``boxes=3``: chunks of 12288 float32 columns (24576 16-bit ones as words), three TMA
    copies of 16 lines each, into a buffer of the 16384 columns its registers hold (64 KB and a
    little, two to a multiprocessor), six copies in all (the first item's and, in the loop, the
    next), in the long-row configuration's two programs of eight warps without spilling."""
    code = ("import torch; from teachkit.kernels import softmax_tma as st; "
            "ks = [(d, c, cc.resident_tma_compiled(d, c, 256)) for d, c in ((torch.float32, "
            "st.TmaConfig(16, 8, 2, backoff=True, boxes=3)), (torch.bfloat16, "
            "st.TmaConfig(16, 8, 2, backoff=True, words=True, boxes=3)))]; "
            "print([(d.itemsize, c.chunk, c.held, k.metadata.shared, "
            "cc.assembled_resources(k.asm['ptx'], 90), "
            "k.asm['ptx'].count('cp.async.bulk.tensor')) for d, c, k in ks])")
    for size, chunk, held, shared, resources, copies in compiled_facts(code, timeout=600):
        assert (chunk, held) == ((12288, 16384) if size == 4 else (24576, 32768))
        assert held * size <= shared <= held * size + 1024
        assert 2 * (shared + 1024) <= 228 * 1024
        assert copies == 2 * 3
        assert resources["registers"] <= 128 and resources["spill_stores"] == 0, resources
