"""``python -m teachkit.kernels``: compile every kernel configuration for sm_75, 80, 89 and 90
(no GPU needed) and check that each fits the shared memory of those GPUs."""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Run the compile check; exit status 1 if any configuration fails or does not fit."""
    if os.environ.get("TRITON_INTERPRET") != "0":  # the compiler needs real @triton.jit functions
        env = dict(os.environ, TRITON_INTERPRET="0")
        return os.spawnve(os.P_WAIT, sys.executable, [sys.executable, "-m", "teachkit.kernels"],
                          env)
    from .targets import SHARED_MEMORY_LIMIT, all_launch_configs, check_all

    problems = check_all()
    caps = ", ".join(f"sm_{c}" for c in SHARED_MEMORY_LIMIT)
    print("\n".join(problems) if problems else
          f"{len(all_launch_configs())} kernel configurations compile and fit {caps}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
