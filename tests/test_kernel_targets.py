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


def test_compile_checks_carry_the_alignment_a_launch_finds():
    import dataclasses

    from teachkit.kernels import decode, targets

    config = next(c for c in decode.launch_configs() if c.name.startswith("decode split"))
    hints = targets.alignment_hints(config)
    names = config.kernel.arg_names
    marked = {names[i] for (i,) in hints}
    assert {"Q", "K", "V", "O", "SEQLENS", "LSE", "stride_kn", "stride_qh"} <= marked
    assert not marked & (set(targets.UNIT_HEAD_DIM_STRIDES) | {"H_KV", "Lq", "qk_scale", "BLOCK_N"})
    assert all(h == [["tt.divisibility", 16]] for h in hints.values())
    assert targets.alignment_hints(dataclasses.replace(config, aligned=False)) == {}
    for c in targets.all_launch_configs():  # head-dim strides are the constant 1, as at launch
        assert all(c.constexprs.get(n) == 1 for n in targets.UNIT_HEAD_DIM_STRIDES
                   if n in c.signature)
