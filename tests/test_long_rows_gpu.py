"""``gpu_checks/long_rows_gpu.py`` without a GPU: its two ways past the chip (held + streamed
chunks, row bands with the second pass reversed) match float64 under Triton's interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import teachkit

SCRIPT = Path(__file__).resolve().parents[1] / "gpu_checks" / "long_rows_gpu.py"


@pytest.mark.skipif(teachkit.ON_GPU, reason="on a GPU the script measures")
def test_both_ways_match_float64_under_the_interpreter():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timing nothing" in done.stdout
    checked = [line for line in done.stdout.splitlines() if "max error" in line]
    assert len(checked) == 6 and all("held + streamed" in line or "row bands" in line
                                     for line in checked)
