"""``python -m teachkit.kernels``: compile every kernel configuration for sm_75, 80, 89 and 90
(no GPU needed) and check that each fits the shared memory of those GPUs.

``python -m teachkit.kernels --dot-evidence`` instead compiles notebook 08's FlashAttention
forward configuration (D = 64, float16) for each of those GPUs and prints how many tensor-core
(``mma.sync``, ``wgmma.mma_async``) and scalar FMA (``fma.rn.f32``) instructions its PTX holds:
which unit ``tl.dot`` runs on, per GPU, with the installed Triton. ``--wgmma-operands`` compiles
that configuration for sm_90 and counts its ``wgmma`` instructions by where their A operand comes
from: shared memory or registers.

Both compile in worker processes (:mod:`teachkit.kernels.compile_check`); a SIGTERM stops them
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
                    "multiply the flash kernel's tiles.")
    parser.add_argument("--dot-evidence", action="store_true",
                        help="count mma.sync / wgmma.mma_async / fma.rn.f32 in the PTX of "
                             "notebook 08's flash forward kernel, per GPU")
    parser.add_argument("--wgmma-operands", action="store_true",
                        help="count the sm_90 wgmma instructions of notebook 08's flash forward "
                             "kernel by where their A operand comes from")
    from .decode import HEAD_DIMS  # already loaded: the package's __init__ imports it

    parser.add_argument("--head-dim", type=int, default=64, choices=HEAD_DIMS, metavar="D",
                        help="head dim of the flash configuration (--dot-evidence; default 64), "
                             "one of " + ", ".join(map(str, HEAD_DIMS)))
    parser.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), default="fp16",
                        help="element type of the flash configuration (--dot-evidence)")
    parser.add_argument("--causal", action="store_true",
                        help="the causal flash configuration (--dot-evidence)")
    return parser.parse_args(argv)


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
    print the ``--dot-evidence`` table."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    if os.environ.get("TRITON_INTERPRET") != "0":  # the compiler needs real @triton.jit functions
        return _run_compiled(argv)
    from ..gpus import SHARED_MEMORY_LIMIT
    from .compile_check import (
        all_launch_configs,
        check_all,
        dot_evidence,
        flash_forward_config,
        format_dot_evidence,
        wgmma_operands,
    )

    if args.wgmma_operands:
        counts = wgmma_operands(flash_forward_config(90, args.head_dim, args.dtype, args.causal))
        print(f"flash forward on sm_90, D={args.head_dim} {args.dtype}, causal={args.causal}: "
              + ", ".join(f"{n} wgmma with {where}" for where, n in counts.items()))
        return 0
    if args.dot_evidence:
        evidence = dot_evidence(head_dim=args.head_dim, dtype=args.dtype, causal=args.causal)
        print(format_dot_evidence(evidence, args.head_dim, args.dtype, args.causal))
        return 0
    problems = check_all()
    caps = ", ".join(f"sm_{c}" for c in SHARED_MEMORY_LIMIT)
    print("\n".join(problems) if problems else
          f"{len(all_launch_configs())} kernel configurations compile and fit {caps}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
