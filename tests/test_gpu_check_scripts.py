"""The ``gpu_checks`` scripts that check their kernels under Triton's interpreter when there is
no GPU: each runs, times nothing, and every kernel or configuration it checks matches float64."""

from __future__ import annotations

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
