"""Every kernel configuration compiles for the GPUs learners use and fits their shared memory
(``python -m teachkit.kernels``, :mod:`teachkit.kernels.compile_check`)."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from teachkit.progress import run_command

triton = pytest.importorskip("triton")


def test_every_config_compiles_and_fits_t4_a100_l4_h100():
    """``python -m teachkit.kernels``: every configuration for sm_75, 80, 89 and 90, or for the
    capabilities ``TEACHKIT_COMPILE_CAPABILITIES`` names (``"90"``): ``.ci/run`` checks the H100
    here with the newest Triton and the T4 in its learners' stage with Colab's, since the newest
    Triton takes about three minutes a GPU class on two cores, and several times that for the
    T4's ``tl.dot`` on its FMA units. A failure raises with the check's
    stderr; a timeout stops it with SIGTERM, which ends its compile workers too (run_command),
    where SIGKILL would leave them running."""
    chosen = os.environ.get("TEACHKIT_COMPILE_CAPABILITIES", "").split()
    args = ["--capabilities", *chosen] if chosen else []
    out = run_command([sys.executable, "-m", "teachkit.kernels", *args], enabled=False,
                      timeout=1200)
    names = ", ".join(f"sm_{c}" for c in chosen or ("75", "80", "89", "90"))
    assert f"compile and fit {names}" in out, out


def test_compile_checks_carry_the_alignment_a_launch_finds():
    import dataclasses

    from teachkit.kernels import compile_check as cc

    config = next(c for c in cc.decode_launch_configs() if c.name.startswith("decode split"))
    hints = cc.alignment_hints(config)
    names = config.kernel.arg_names
    marked = {names[i] for (i,) in hints}
    assert {"Q", "K", "V", "O", "SEQLENS", "LSE", "stride_kn", "stride_qh"} <= marked
    assert not marked & (set(cc.UNIT_HEAD_DIM_STRIDES) | {"H_KV", "Lq", "qk_scale", "BLOCK_N"})
    assert all(h == [["tt.divisibility", 16]] for h in hints.values())
    assert cc.alignment_hints(dataclasses.replace(config, aligned=False)) == {}
    for c in cc.all_launch_configs():  # head-dim strides are the constant 1, as at launch
        assert all(c.constexprs.get(n) == 1 for n in cc.UNIT_HEAD_DIM_STRIDES
                   if n in c.signature)


def test_every_family_is_listed_once_with_its_kernels_arguments_in_order():
    from teachkit.kernels import compile_check as cc

    configs = cc.all_launch_configs()
    assert len(configs) == 327
    names = [c.name for c in configs]
    assert len(names) == len(set(names))
    assert {c.kernel.__name__ for c in configs} == {
        "fused_kernel", "blog_kernel", "online_kernel", "split_stats_kernel",
        "split_normalize_kernel", "resident_kernel", "resident_words_kernel", "flash_fwd_kernel",
        "flash_simple_kernel",
        "ladder_kernel",
        "flash_bwd_delta_kernel", "flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel",
        "flash_bwd_dkdv_ws_kernel",
        "decode_simple_split_kernel", "decode_simple_merge_kernel", "decode_split_kernel",
        "decode_merge_kernel"}
    for c in configs:
        assert list(c.signature) == c.kernel.arg_names, c.name
        assert {n for n, ty in c.signature.items() if ty == "constexpr"} == set(c.constexprs)


def test_the_kernel_modules_import_no_compile_check():

    kernels = Path(__file__).resolve().parents[1] / "teachkit" / "kernels"
    for path in kernels.glob("*.py"):
        if path.name in ("compile_check.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "compile_check" not in (node.module or ""), path.name
                assert "compile_check" not in {a.name for a in node.names}, path.name


# --- which unit multiplies the tiles: counted in the PTX the compiler writes -----------------

DOT_ROW = re.compile(r"^(sm_\d+)\s+.*? stages(?:, TMA)?\s+(\d+)\s+(\d+)\s+(\d+)\s+(.+)$")


def test_flash_forward_config_is_notebook_08s_per_gpu():
    from teachkit.gpus import SHARED_MEMORY_LIMIT
    from teachkit.kernels import compile_check as cc
    from teachkit.kernels import flash

    for cap in SHARED_MEMORY_LIMIT:
        config = cc.flash_forward_config(cap)  # D = 64, float16, no mask
        chosen = flash.flash_config(64, torch.float16, divmod(cap, 10))
        c = config.constexprs
        assert (c["BLOCK_M"], c["BLOCK_N"], config.num_warps, config.num_stages) == chosen[:4]
        assert c["HEAD_DIM"] == 64 and c["CAUSAL"] is False and cap in config.capabilities
        assert {config.signature[n] for n in "QKVO"} == {"*fp16"} and "fp16" in config.name
    tma = cc.flash_forward_config(90, head_dim=128, dtype="bf16")
    assert tma.constexprs["USE_TMA"] and tma.signature["K"] == "tensordesc<bf16[1, 1, 128, 128]>"
    assert cc.flash_forward_config(75, dtype="fp32").signature["Q"] == "*fp32"
    with pytest.raises(ValueError, match="capability must be one of"):
        cc.flash_forward_config(86)
    with pytest.raises(ValueError, match="no flash configuration"):
        cc.flash_forward_config(80, head_dim=48)


def test_dot_path_reads_the_counts():
    from teachkit.kernels.compile_check import dot_path

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


# --- a stopped check stops its compile workers ------------------------------------------------

def _parents() -> dict[int, int]:
    """Process id to parent id of every process this machine shows in /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    return parents


def _descendants(pid: int) -> dict[int, int]:
    """The processes below ``pid``: process id to its depth (1 for a child)."""
    parents = _parents()
    found, level, depth = {}, {pid}, 0
    while level:
        depth += 1
        level = {p for p, parent in parents.items() if parent in level and p not in found}
        found.update(dict.fromkeys(level, depth))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead and waiting for its parent to reap it, does not)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_sigterm_stops_the_compile_workers(tmp_path):
    """``python -m teachkit.kernels`` runs itself again with ``TRITON_INTERPRET=0``, and that
    process compiles in a pool of workers: three generations. A SIGTERM to the first must leave
    none of them running. (An empty Triton cache: from a full one the check ends in seconds.)"""
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path))
    check = subprocess.Popen([sys.executable, "-m", "teachkit.kernels"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 120
        while max(tree.values(), default=0) < 2 and check.poll() is None:  # wait for workers
            assert time.monotonic() < deadline, "no compile worker started in 120 s"
            time.sleep(0.2)
            tree = _descendants(check.pid)
        time.sleep(2)  # compiles under way
        assert check.poll() is None, "the check ended before it could be stopped"
        tree.update(_descendants(check.pid))
        check.send_signal(signal.SIGTERM)
        assert check.wait(timeout=60) != 0
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in tree if _alive(p)], "processes outlived the stopped check"
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
        for pid in tree:  # a failed test leaves nothing behind either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
