"""``python -m teachkit.kernels``: compile every kernel configuration for sm_75, 80, 89 and 90
(no GPU needed) and check that each fits the shared memory of those GPUs; ``--capabilities 75``
checks the T4's alone.

``python -m teachkit.kernels --dot-evidence`` instead compiles notebook 08's FlashAttention
forward configuration (D = 64, float16) for each of those GPUs and prints how many tensor-core
(``mma.sync``, ``wgmma.mma_async``) and scalar FMA (``fma.rn.f32``) instructions its PTX holds:
which unit ``tl.dot`` runs on, per GPU, with the installed Triton. ``--page-interleave``
compiles notebook 09's paged decode kernel for sm_90 with its tiles' pages in key order and
interleaved, and counts its PTX instructions, table entries and row addresses.
``--paged-residency`` compiles it for sm_90 with the tiles a paged call that reads its table entry
by entry splits with, as a launch of one new token with one query head a cache head specialises it
(``compile_check.AS_LAUNCHED``), and prints the registers a thread and the programs an SM they
leave, then the same for the tiles such a call runs with in a grid of 1.45 to 2 programs an SM,
unsplit or split to get there, merged by the merge kernel or in one launch (``decode.ENTRY_GRID``),
with their shared memory; ``--last-wave-residency`` does the same for a contiguous call at
``D = 128`` that splits to fill its last wave, and ``--wave-tiles-residency`` for the tiles an
unsplit grid of more than two programs an SM chooses from, contiguous and paged, with their shared
memory; ``--short-rows-residency`` for the tiles a captured call at ``D = 64`` splits with.
``--dependent-merge-evidence`` compiles the decode merge kernel for each GPU class and
prints its grid dependency control: ``griddepcontrol.wait`` before its first load where it is a
programmatic dependent launch (sm_90), none elsewhere. ``--tail-loop-evidence`` compiles the
decode split kernel for sm_90 with its loop over masked key blocks not pipelined, as a grid of
few programs an SM launches it, and pipelined, and counts the copies to shared memory, their
waits and the loads into registers of each.
``--wgmma-operands`` compiles notebook 08's configuration for sm_90 and counts its ``wgmma``
instructions by where their A operand comes from: shared memory or registers.
``--wgmma-overlap`` lists that kernel's key loop on sm_90 as
its products, their commits and waits, and its ``ex2`` instructions, in PTX order: whether the
softmax runs while a product is in flight; with ``--qk-ahead`` it lists the loop of notebook 08's
ladder kernel at its last step and with the next key block's scores issued before this block's
softmax (:data:`~teachkit.kernels.flash_ladder.QK_AHEAD`); with ``--gluon``, the loop of the Gluon
kernel for Hopper (:mod:`teachkit.kernels.flash_hopper`) with its overlap on and off (at
``--head-dim 64`` also its wide form, 256-key blocks without the overlap), and with
``--gluon --backward`` the query loop of the backward's Gluon dK/dV kernel
(:mod:`teachkit.kernels.flash_backward_hopper`).

``python -m teachkit.kernels --layout-evidence`` compiles that kernel with ``D = 128`` for one GPU
(``--arch``, default sm_90) beside notebook 06's blog softmax kernel, and prints how each reduces
a row: the layout line of the reduced tile from the compiled IR and the butterfly shuffles of the
PTX. ``--register-sweep`` prints the registers and spills ``ptxas`` reports for the fused softmax
kernel, one row per program, against the row length, per GPU, and what one program of the
blog and of the per-slot online kernel does on a row of 1024 (sm_90).

All compile in worker processes (:mod:`teachkit.kernels.compile_check`); a SIGTERM stops them
with the check.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m teachkit.kernels",
        description="Compile the course's kernels for sm_75, sm_80, sm_89 and sm_90 (no GPU "
                    "needed): check every configuration fits, or show which instructions "
                    "multiply the flash kernel's tiles, how its rows are reduced, or the fused "
                    "softmax and backward kernels' registers and spills.")
    parser.add_argument("--dot-evidence", action="store_true",
                        help="count mma.sync / wgmma.mma_async / fma.rn.f32 in the PTX of "
                             "notebook 08's flash forward kernel, per GPU")
    parser.add_argument("--page-interleave", action="store_true",
                        help="count the instructions, table entries and row addresses in the "
                             "PTX of notebook 09's paged decode kernel (sm_90, D = 64, 256-key "
                             "tiles of 16-token pages) in key order and with the pages "
                             "interleaved")
    parser.add_argument("--paged-residency", action="store_true",
                        help="registers a thread (ptxas -v) of the tiles notebook 09's paged "
                             "decode kernel splits with where it reads its block table entry by "
                             "entry (sm_90, D = 64 and 128), and of those it runs with where its "
                             "grid holds, or is split to hold, 1.45 to 2 programs an SM, and the "
                             "programs an SM they leave")
    parser.add_argument("--last-wave-residency", action="store_true",
                        help="registers a thread (ptxas -v) of the tiles notebook 09's contiguous "
                             "decode kernel splits with where its grid holds one to four thirds "
                             "programs an SM (sm_90, D = 128), and the programs an SM they leave")
    parser.add_argument("--wave-tiles-residency", action="store_true",
                        help="registers a thread (ptxas -v) and shared memory of the tiles "
                             "notebook 09's contiguous decode kernel chooses from where its "
                             "unsplit grid holds more than two programs an SM (sm_90, D = 128), "
                             "and the programs an SM they leave")
    parser.add_argument("--short-rows-residency", action="store_true",
                        help="registers a thread (ptxas -v) and shared memory of the tiles "
                             "notebook 09's contiguous decode kernel splits with at D = 64 when "
                             "captured into a CUDA graph (sm_90), and the programs an SM they "
                             "leave")
    parser.add_argument("--wgmma-operands", action="store_true",
                        help="count the sm_90 wgmma instructions of notebook 08's flash forward "
                             "kernel by where their A operand comes from")
    parser.add_argument("--wgmma-overlap", action="store_true",
                        help="the sm_90 key loop of notebook 08's flash forward kernel in PTX "
                             "order: when its wgmma products are waited for, and whether any "
                             "ex2 of the softmax runs while one is in flight")
    parser.add_argument("--gluon", action="store_true",
                        help="with --wgmma-overlap: the loop of the Gluon kernel for Hopper "
                             "(teachkit.kernels.flash_hopper), with its overlap on and off, and "
                             "at --head-dim 64 its wide form")
    parser.add_argument("--backward", action="store_true",
                        help="with --wgmma-overlap --gluon: the query loop of the backward's "
                             "Gluon dK/dV kernel (teachkit.kernels.flash_backward_hopper)")
    parser.add_argument("--qk-ahead", action="store_true",
                        help="with --wgmma-overlap: the ladder kernel's loop at its last step "
                             "and with the next block's q k^T issued before this block's softmax")
    parser.add_argument("--layout-evidence", action="store_true",
                        help="show the layout of the tiles the flash forward kernel reduces and "
                             "the butterfly shuffles of its PTX, beside the blog softmax kernel's")
    parser.add_argument("--merge-evidence", action="store_true",
                        help="the PTX lines that order the one-launch decoding merge: barriers, "
                             "the atomic count, volatile loads of the partials (--arch)")
    parser.add_argument("--dependent-merge-evidence", action="store_true",
                        help="the decode merge kernel's grid dependency control in PTX, per GPU "
                             "class: griddepcontrol.wait where it is a programmatic dependent "
                             "launch")
    parser.add_argument("--tail-loop-evidence", action="store_true",
                        help="the decode split kernel's PTX with its masked loop not pipelined "
                             "(as launched) and pipelined: copies to shared memory, their "
                             "waits, loads into registers (sm_90)")
    parser.add_argument("--exchange-evidence", action="store_true",
                        help="the resident softmax's exchange of (m, d) in sm_90 SASS: memory "
                             "barriers and atomics, as an arrival counter and as one 64-bit word")
    parser.add_argument("--resident-registers", action="store_true",
                        help="registers of the resident softmax kernel as its program count is "
                             "read and as launched, uncapped and capped (sm_90)")
    parser.add_argument("--resident-conversions", action="store_true",
                        help="exponentials and conversions to bfloat16 in the SASS of the "
                             "resident words kernel, converting element by element and a word "
                             "at a time (sm_80 or later)")
    parser.add_argument("--tma-words-instructions", action="store_true",
                        help="instructions in the sm_90 SASS of the TMA words kernel, step by "
                             "step to fewer an element (Hopper)")
    parser.add_argument("--register-sweep", action="store_true",
                        help="registers and spills (ptxas -v) of the fused softmax kernel, one "
                             "row of 4096 to 65536 float32 per program, per GPU; and the two-pass "
                             "kernels' work per program")
    parser.add_argument("--backward-registers", action="store_true",
                        help="registers and spills (ptxas -v) of the sm_90 backward kernels at "
                             "D = 128: the table's tiles, smaller dK/dV tiles, and the "
                             "warp-specialised Triton and Gluon dK/dV kernels")
    from ..gpus import SHARED_MEMORY_LIMIT
    from .decode import HEAD_DIMS  # already loaded: the package's __init__ imports it

    parser.add_argument("--head-dim", type=int, default=None, choices=HEAD_DIMS, metavar="D",
                        help="head dim of the flash configuration (default 64 for "
                             "--dot-evidence, 128 for --layout-evidence), one of "
                             + ", ".join(map(str, HEAD_DIMS)))
    parser.add_argument("--arch", type=int, default=90, choices=tuple(SHARED_MEMORY_LIMIT),
                        metavar="CC", help="compute capability of --layout-evidence and "
                                           "--merge-evidence (default "
                                           "90), one of "
                                           + ", ".join(map(str, SHARED_MEMORY_LIMIT)))
    parser.add_argument("--capabilities", type=int, nargs="+", default=None,
                        choices=tuple(SHARED_MEMORY_LIMIT), metavar="CC",
                        help="the compile check for these GPUs only (default all: "
                             + ", ".join(map(str, SHARED_MEMORY_LIMIT)) + ")")
    parser.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), default="fp16",
                        help="element type of the flash configuration (--dot-evidence, "
                             "--layout-evidence)")
    parser.add_argument("--causal", action="store_true",
                        help="the causal flash configuration (--dot-evidence, "
                             "--layout-evidence)")
    return parser.parse_args(argv)


def _overlap_line(label: str, found: dict) -> str:
    """One line of ``--wgmma-overlap``: the loop, the ex2 under a product, the waits."""
    return (f"{label}: loop {' -> '.join(found['loop'])}; ex2 with a product in flight: "
            f"{found['ex2 in flight']} of {found['ex2']}; wgmma.wait_group "
            + ", ".join(map(str, found["waits"])))


def _residency_line(used: dict[str, int], merge: str) -> str:
    """One line of ``--paged-residency``, ``--last-wave-residency``, ``--wave-tiles-residency``
    or ``--short-rows-residency``: a decode split kernel's tiles, how it merges (``merge``), the
    registers ``ptxas -v`` reports, its shared memory and the programs an SM they leave."""
    return (f"{used['block_n']:>3}-key tiles in {used['stages']} stages, {merge:12}  "
            f"{used['registers']:>3} registers a thread, {used['spilled']} bytes spilled, "
            f"{used['shared']} bytes shared: {used['programs_an_sm']} programs an SM")


def _merge_name(one_launch: bool) -> str:
    """How a split decode call merges, as :func:`_residency_line` prints it."""
    return "one launch" if one_launch else "merge kernel"


def _run_compiled(argv: list[str]) -> int:
    """Run ``python -m teachkit.kernels argv`` again with ``TRITON_INTERPRET=0`` and return its
    exit status. A SIGTERM to this process is passed on to it, which stops its compile workers
    (:mod:`teachkit.kernels.compile_check`); if this process stops waiting for any other reason
    (Ctrl-C), it terminates the child before it returns."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    child = subprocess.Popen([sys.executable, "-m", "teachkit.kernels", *argv], env=env)

    def forward(signum: int, frame: object) -> None:
        child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if child.poll() is None:
            child.terminate()
            child.wait()


def main(argv: list[str] | None = None) -> int:
    """Run the compile check (exit status 1 if any configuration fails or does not fit), or
    print the ``--dot-evidence``, ``--layout-evidence`` or ``--register-sweep`` findings."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    if os.environ.get("TRITON_INTERPRET") != "0":  # the compiler needs real @triton.jit functions
        return _run_compiled(argv)
    from ..gpus import SHARED_MEMORY_LIMIT
    from . import compile_check as cc

    if args.paged_residency:
        print("paged decode split kernel on sm_90, bf16, pages of 16 read entry by entry, "
              "the usual tiles, compiled as launched for one new token and one query head a "
              "cache head (ptxas -v):")
        for (head_dim, one_launch), used in cc.paged_entry_residency().items():
            print(f"  D={head_dim:<4} {_residency_line(used, _merge_name(one_launch))}")
        print("and with the tiles of decode.ENTRY_GRID, unsplit or split (metadata.shared too):")
        for (head_dim, one_launch), used in cc.entry_grid_residency().items():
            merge = "one launch" if one_launch else "unsplit"
            print(f"  D={head_dim:<4} {_residency_line(used, merge)}")
        return 0
    if args.last_wave_residency:
        from . import decode

        print("contiguous decode split kernel on sm_90, bf16, D=128, the tiles of ranges of "
              f"{decode.LAST_WAVE_FEWEST_KEYS // decode.LAST_WAVE_MOST_SPLITS} keys or more, "
              "compiled as launched for one new token and one query head a cache head "
              "(ptxas -v):")
        for one_launch, used in cc.last_wave_residency().items():
            print(f"  {_residency_line(used, _merge_name(one_launch))}")
        return 0
    if args.wave_tiles_residency:
        print("decode split kernel on sm_90, bf16, D=128, unsplit, the tiles a grid of more "
              "than two programs an SM chooses from, compiled as launched for one new token "
              "and one query head a cache head (ptxas -v, metadata.shared):")
        for name, tiles in cc.wave_tiles_residency().items():
            for used in tiles:
                print(f"  {name:22} {_residency_line(used, 'unsplit')}")
        return 0
    if args.short_rows_residency:
        from . import decode

        print("contiguous decode split kernel on sm_90, bf16, D=64, the tiles of a captured "
              f"call aiming for {decode.SHORT_ROW_SPLITS[90][0]} programs an SM, compiled as "
              "launched for one new token and one query head a cache head (ptxas -v, "
              "metadata.shared):")
        for used in cc.short_rows_residency():
            print(f"  {_residency_line(used, _merge_name(False))}")
        return 0
    if args.page_interleave:
        found = cc.page_interleave_evidence()
        print("paged decode split kernel on sm_90, D=64 bf16, 256-key tiles, pages of 16, "
              "table row held (PTX counts):")
        for name in cc.PAGE_INSTRUCTIONS:
            print(f"  {name:30} key order {found[False][name]:5}   interleaved "
                  f"{found[True][name]:5}")
        return 0
    if args.wgmma_operands:
        head_dim = args.head_dim or 64
        counts = cc.wgmma_operands(cc.flash_forward_config(90, head_dim, args.dtype, args.causal))
        print(f"flash forward on sm_90, D={head_dim} {args.dtype}, causal={args.causal}: "
              + ", ".join(f"{n} wgmma with {where}" for where, n in counts.items()))
        return 0
    if args.wgmma_overlap and args.gluon and args.backward:
        head_dim = args.head_dim or 128
        for fused_dq in (False, True):
            ptx = cc.hopper_dkdv_compiled(head_dim, args.dtype, args.causal, fused_dq).asm["ptx"]
            name = "dK/dV with dQ fused in" if fused_dq else "dK/dV"
            print(_overlap_line(f"Gluon {name} on sm_90, D={head_dim} {args.dtype}, "
                                f"causal={args.causal}", cc.loop_overlap(ptx)))
            if fused_dq:
                print(f"dQ added by TMA: {cc.tma_reduce_adds(ptx)} cp.reduce.async.bulk.tensor "
                      "... .add instruction(s) in the PTX")
        return 0
    if args.wgmma_overlap and args.gluon:
        from .flash_hopper import HOPPER_KEY_BLOCKS

        head_dim = args.head_dim or 128
        if head_dim not in HOPPER_KEY_BLOCKS:
            print(f"--gluon takes --head-dim {' or '.join(map(str, HOPPER_KEY_BLOCKS))} (the "
                  f"Gluon kernel's head dims), got {head_dim}", file=sys.stderr)
            return 2
        blocks = HOPPER_KEY_BLOCKS[head_dim]
        forms = [(blocks[0], True), (blocks[0], False)] + [(b, False) for b in blocks[1:]]
        for block_n, overlap in forms:
            found = cc.hopper_overlap(head_dim, args.dtype, args.causal, overlap, block_n)
            print(_overlap_line(f"Gluon forward on sm_90, D={head_dim} {args.dtype}, "
                                f"causal={args.causal}, {block_n} keys, overlap={overlap}",
                                found))
        return 0
    if args.wgmma_overlap:
        head_dim = args.head_dim or 64
        if not args.qk_ahead:
            found = cc.wgmma_overlap(cc.flash_forward_config(90, head_dim, args.dtype,
                                                             args.causal))
            print(_overlap_line(f"flash forward on sm_90, D={head_dim} {args.dtype}, "
                                f"causal={args.causal}", found))
            return 0
        from .flash_ladder import LADDER, QK_AHEAD

        for name, step in (("heavy first", LADDER["heavy first"]), ("qk ahead", QK_AHEAD)):
            found = cc.wgmma_overlap(cc.ladder_config(step, head_dim, causal=args.causal))
            print(_overlap_line(f"ladder {name!r} on sm_90, D={head_dim} bf16, "
                                f"causal={args.causal}", found))
        return 0
    if args.dot_evidence:
        head_dim = args.head_dim or 64
        evidence = cc.dot_evidence(head_dim=head_dim, dtype=args.dtype, causal=args.causal)
        print(cc.format_dot_evidence(evidence, head_dim, args.dtype, args.causal))
        return 0
    if args.layout_evidence:
        evidence = cc.layout_evidence(args.arch, args.head_dim or 128, args.dtype, args.causal)
        print(cc.format_layout_evidence(evidence, args.arch))
        return 0
    if args.merge_evidence:
        print("\n".join(cc.merge_evidence(args.arch)))
        return 0
    if args.dependent_merge_evidence:
        print("\n".join(cc.dependent_merge_evidence()))
        return 0
    if args.tail_loop_evidence:
        print("\n".join(cc.tail_loop_evidence()))
        return 0
    if args.resident_registers:
        print("\n".join(cc.resident_register_evidence(args.arch)))
        return 0
    if args.resident_conversions:
        print("\n".join(cc.resident_conversion_evidence(args.arch)))
        return 0
    if args.tma_words_instructions:
        print("\n".join(cc.tma_words_instruction_evidence()))
        return 0
    if args.exchange_evidence:
        print("\n".join(cc.exchange_evidence(args.arch)))
        return 0
    if args.backward_registers:
        print(cc.format_backward_registers(cc.backward_registers()))
        print()
        print(cc.format_warp_specialized_registers(cc.warp_specialized_registers()))
        print()
        print(cc.format_hopper_dkdv_registers(cc.hopper_dkdv_registers()))
        print(cc.format_hopper_dkdv_registers(cc.hopper_dkdv_registers(fused_dq=True),
                                              fused_dq=True))
        return 0
    if args.register_sweep:
        print(cc.format_register_sweep(cc.fused_register_sweep()))
        print()
        print(cc.format_two_pass_evidence(cc.two_pass_evidence()))
        return 0
    capabilities = tuple(args.capabilities or SHARED_MEMORY_LIMIT)
    problems = cc.check_all(capabilities)
    caps = ", ".join(f"sm_{c}" for c in capabilities)
    print("\n".join(problems) if problems else
          f"{len(cc.all_launch_configs())} kernel configurations compile and fit {caps}"
          + ("" if args.capabilities is None else
             f" ({len(cc.check_jobs(capabilities))} compilations for these GPUs)"))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
