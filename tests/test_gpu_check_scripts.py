"""The ``gpu_checks`` scripts that check their kernels under Triton's interpreter when there is
no GPU: each runs, times nothing, and every kernel or configuration it checks matches float64."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import teachkit

GPU_CHECKS = Path(__file__).resolve().parents[1] / "gpu_checks"

CHECKED = {
    "long_rows_gpu.py": (6, ("held + streamed", "row bands")),
    "resident_wait_gpu.py": (14, ("idle", "L2 prefetch", "pauses", "both", "bell", "shipped")),
}
"""Script: how many ``max error`` lines it prints, and the providers one of which each names."""


@pytest.mark.skipif(teachkit.ON_GPU, reason="on a GPU the scripts measure")
@pytest.mark.parametrize("script", sorted(CHECKED))
def test_script_matches_float64_under_the_interpreter(script):
    done = subprocess.run([sys.executable, str(GPU_CHECKS / script)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timing nothing" in done.stdout
    checked = [line for line in done.stdout.splitlines() if "max error" in line]
    count, providers = CHECKED[script]
    assert len(checked) == count
    assert all(any(p in line for p in providers) for line in checked)


def test_the_stash_kernel_compiles_for_hopper_within_its_shared_memory():
    """``resident_stash_gpu.py --compiled`` (no GPU needed): the kernel that holds part of each
    chunk in shared memory compiles for sm_90 as launched, in float32 and 16 bits, plainly and
    overlapped: the 192 KB stash and at most a kilobyte more under the 227 KB a block may take,
    within 128 registers a thread and at most 48 bytes of stack (a few scalars ptxas spills,
    not the chunk). Its TMA copies: 24 boxes a fetch, the first item's and the next's, where the
    overlapped form copies the first item's 24 and then one box at a time in two loops, as each
    box is read out."""
    done = subprocess.run([sys.executable, str(GPU_CHECKS / "resident_stash_gpu.py"),
                           "--compiled"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRITON_INTERPRET="0"))
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.findall(r"(, overlapped)?: stashed (\d+) bytes, shared memory (\d+) bytes, "
                       r"registers (\d+), stack (\d+) bytes, TMA copies (\d+)", done.stdout)
    assert len(found) == 4, done.stdout
    for overlapped, *numbers in found:
        stashed, shared, registers, stack, copies = map(int, numbers)
        assert stashed == 192 * 1024
        assert stashed <= shared <= stashed + 1024 <= 227 * 1024
        assert registers <= 128 and stack <= 48
        assert copies == (24 + 2 if overlapped else 2 * 24)
