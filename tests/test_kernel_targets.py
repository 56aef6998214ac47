"""Every kernel configuration compiles for the GPUs learners use and fits their shared memory."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

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


# --- which unit multiplies the tiles: counted in the PTX the compiler writes -----------------

DOT_ROW = re.compile(r"^(sm_\d+)\s+.*? stages(?:, TMA)?\s+(\d+)\s+(\d+)\s+(\d+)\s+(.+)$")


def test_flash_forward_config_is_notebook_08s_per_gpu():
    from teachkit.kernels import flash, targets

    for cap in targets.SHARED_MEMORY_LIMIT:
        config = targets.flash_forward_config(cap)  # D = 64, float16, no mask
        chosen = flash.flash_config(64, torch.float16, divmod(cap, 10))
        c = config.constexprs
        assert (c["BLOCK_M"], c["BLOCK_N"], config.num_warps, config.num_stages) == chosen[:4]
        assert c["HEAD_DIM"] == 64 and c["CAUSAL"] is False and cap in config.capabilities
        assert {config.signature[n] for n in "QKVO"} == {"*fp16"} and "fp16" in config.name
    tma = targets.flash_forward_config(90, head_dim=128, dtype="bf16")
    assert tma.constexprs["USE_TMA"] and tma.signature["K"] == "tensordesc<bf16[1, 1, 128, 128]>"
    assert targets.flash_forward_config(75, dtype="fp32").signature["Q"] == "*fp32"
    with pytest.raises(ValueError, match="capability must be one of"):
        targets.flash_forward_config(86)
    with pytest.raises(ValueError, match="no flash configuration"):
        targets.flash_forward_config(80, head_dim=48)


def test_dot_path_reads_the_counts():
    from teachkit.kernels.targets import dot_path

    assert dot_path({"mma.sync": 128, "wgmma.mma_async": 0, "fma.rn.f32": 36}) == "mma"
    assert dot_path({"mma.sync": 0, "wgmma.mma_async": 16, "fma.rn.f32": 36}) == "wgmma"
    assert dot_path({"mma.sync": 0, "wgmma.mma_async": 0, "fma.rn.f32": 16480}) == "fma"


def test_dot_evidence_flash_forward_per_gpu():
    """``--dot-evidence`` compiles notebook 08's flash forward (D = 64, fp16) for each GPU.

    Measured with Triton 3.9.0 (this repository's CI) and 3.6.0 (Colab's): sm_80 and sm_89
    multiply on the tensor cores with ``mma.sync``, sm_90 with ``wgmma.mma_async``, and sm_75
    (a T4) has no matrix instruction at all, only some 16,000 scalar ``fma.rn.f32``: Triton
    compiles ``tl.dot`` to the FMA units there. Each GPU's ``triton_dot`` in
    :mod:`teachkit.gpus` records this; a Triton that changes it fails here.
    """
    from teachkit.gpus import by_capability

    done = subprocess.run([sys.executable, "-m", "teachkit.kernels", "--dot-evidence"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("flash forward, D=64 fp16, causal=False, Triton ")
    assert all(name in lines[1] for name in ("mma.sync", "wgmma.mma_async", "fma.rn.f32"))
    rows = {}
    for line in lines[2:]:
        match = DOT_ROW.match(line)
        assert match, line
        sm, mma, wgmma, fma, unit = match.groups()
        rows[sm] = (int(mma), int(wgmma), int(fma), unit)
    assert list(rows) == ["sm_75", "sm_80", "sm_89", "sm_90"]
    assert rows["sm_80"][0] > 0 and rows["sm_80"][1] == 0  # tensor cores, warp-level mma
    assert rows["sm_89"][0] > 0 and rows["sm_89"][1] == 0
    assert rows["sm_90"][1] > 0  # Hopper: warpgroup mma
    mma, wgmma, fma = rows["sm_75"][:3]
    assert mma == wgmma == 0 and fma > 10_000  # the T4: every multiply-add a scalar FMA
    for sm, (mma, wgmma, _, unit) in rows.items():
        gpu = by_capability(divmod(int(sm[3:]), 10))
        measured = "wgmma" if wgmma else "mma" if mma else "fma"
        assert measured == gpu.triton_dot, (sm, unit)
