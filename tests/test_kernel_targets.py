"""Every kernel configuration compiles for the GPUs learners use and fits their shared memory."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("triton")


def test_every_config_compiles_and_fits_t4_a100_l4_h100():
    done = subprocess.run([sys.executable, "-m", "teachkit.kernels"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compile and fit sm_75, sm_80, sm_89, sm_90" in done.stdout
