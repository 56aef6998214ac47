"""``gpu_checks/power_gpu.py``'s pieces that need no GPU: the summary of nvidia-smi samples and
the refusal to run without a GPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import teachkit

SCRIPT = Path(__file__).resolve().parents[1] / "gpu_checks" / "power_gpu.py"


def _module():
    spec = importlib.util.spec_from_file_location("power_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summary_means_and_power_capped_share():
    power_gpu = _module()
    samples = [(0.0, 1980.0, 300.0, 0x0), (0.05, 1600.0, 700.0, 0x4),
               (0.10, 1500.0, 698.0, 0x4 | 0x1)]
    found = power_gpu.summary(samples)
    assert found == {"sm_mhz": 1693.3, "watts": 566.0, "power_capped": 0.667, "samples": 3}
    assert power_gpu.summary([])["samples"] == 0


@pytest.mark.skipif(teachkit.ON_GPU, reason="on a GPU the script measures")
def test_refuses_to_run_without_a_gpu():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA GPU" in done.stdout
