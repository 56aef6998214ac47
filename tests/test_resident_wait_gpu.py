"""``gpu_checks/resident_wait_gpu.py`` without a GPU: every way of waiting it times gives the
softmax under Triton's interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import teachkit

SCRIPT = Path(__file__).resolve().parents[1] / "gpu_checks" / "resident_wait_gpu.py"


@pytest.mark.skipif(teachkit.ON_GPU, reason="on a GPU the script measures")
def test_every_way_of_waiting_matches_float64_under_the_interpreter():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timing nothing" in done.stdout
    checked = [line for line in done.stdout.splitlines() if "max error" in line]
    assert len(checked) == 10
