"""teachkit.cute: the layout, the three-tier simulation, and the CuTe DSL entry point's checks.

The simulation is compared with float64 ``torch.softmax`` on odd lengths and special values; the
entry point's errors are checked on any machine; the kernel itself runs only where a GPU and
CuTe DSL are present (skipped otherwise).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from inputs import RTOL, randn

import teachkit.cute as tc
from teachkit.bench.core import Measurement, load_record, load_results, save_results
from teachkit.compare import relative_error
from teachkit.cute import bench as cute_bench
from teachkit.cute import entry
from teachkit.cute.config import MAX_THREADS, MIN_THREADS, launch_config, vector_width
from teachkit.cute.entry import INSTALL_HINT, load_kernel_module
from teachkit.reduction import simulate_block_reduction
from teachkit.softmax import softmax_stats

NEG_INF = float("-inf")
LENGTHS = [1, 7, 37, 1000, 1024, 4097]


# --- layout -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 8, 12, 1000, 1001, 4096, 4097, 65536])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_launch_config_divides_rows_and_stays_in_bounds(n, dtype):
    cfg = launch_config(n, dtype)
    assert n % cfg.vec == 0 and cfg.vec * torch.finfo(dtype).bits // 8 <= 16
    assert MIN_THREADS <= cfg.threads <= MAX_THREADS and cfg.threads & (cfg.threads - 1) == 0
    assert cfg.warps == cfg.threads // 32
    assert launch_config(n, dtype, aligned=False).vec == 1


def test_vector_width_is_128_bits_when_the_row_allows():
    assert vector_width(4096, torch.float32) == 4
    assert vector_width(4096, torch.bfloat16) == 8
    assert vector_width(4098, torch.bfloat16) == 2


def test_launch_config_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_cols"):
        launch_config(0, torch.float32)
    with pytest.raises(TypeError, match="floating"):
        launch_config(10, torch.int32)


@pytest.mark.parametrize("n,threads,vec", [(75, 8, 4), (1000, 128, 4), (37, 128, 8), (9, 2, 1)])
def test_elements_of_thread_partition_the_row(n, threads, vec):
    owned = [tc.elements_of_thread(t, n, threads, vec) for t in range(threads)]
    assert sorted(e for es in owned for e in es) == list(range(n))
    owner = tc.thread_of_element(n, threads, vec)
    for t, es in enumerate(owned):
        assert all(int(owner[e]) == t for e in es)
        assert es == sorted(es)


def test_to_thread_major_puts_each_threads_elements_in_its_scalar_slots(gen):
    n, threads, vec = 75, 8, 4
    x = randn(n, gen=gen)
    xt = tc.to_thread_major(x, threads, vec)
    assert xt.shape[-1] % (threads * vec) == 0
    for t in range(threads):
        mine = x[tc.elements_of_thread(t, n, threads, vec)]
        slots = xt[t::threads]
        assert torch.equal(slots[: len(mine)], mine)
        assert bool((slots[len(mine):] == NEG_INF).all())


# --- simulation -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_simulation_matches_float64_softmax(n, dtype, gen):
    x = randn(3, n, gen=gen, dtype=dtype, scale=4.0)
    trace = tc.simulate_cute_softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    assert trace.out.dtype == dtype and trace.out.shape == x.shape
    assert relative_error(trace.out, ref) <= RTOL[dtype]


@pytest.mark.parametrize("threads,vec,warp_size", [(128, 4, 32), (64, 1, 8), (32, 8, 32),
                                                   (8, 2, 4)])
def test_simulation_any_layout_and_batch_shape(threads, vec, warp_size, gen):
    x = randn(2, 3, 531, gen=gen, scale=30.0)
    trace = tc.simulate_cute_softmax(x, threads=threads, vec=vec, warp_size=warp_size)
    assert relative_error(trace.out, torch.softmax(x.double(), -1)) <= RTOL[torch.float32]
    assert trace.thread_m.shape == (2, 3, threads)
    assert trace.warp_m.shape == (2, 3, threads // warp_size)
    assert trace.block_m.shape == (2, 3) and trace.warps == threads // warp_size


def test_each_tier_holds_the_statistics_of_its_elements(gen):
    n, threads, vec, warp_size = 1000, 64, 4, 16
    x = randn(n, gen=gen, scale=3.0)
    trace = tc.simulate_cute_softmax(x, threads=threads, vec=vec, warp_size=warp_size)
    owned = [tc.elements_of_thread(t, n, threads, vec) for t in range(threads)]
    for t in range(threads):
        m, d = softmax_stats(x[owned[t]].double())
        assert relative_error(trace.thread_m[t], m) == 0
        assert relative_error(trace.thread_d[t], d) < 1e-6
    for w in range(threads // warp_size):
        elems = [e for t in range(w * warp_size, (w + 1) * warp_size) for e in owned[t]]
        m, d = softmax_stats(x[elems].double())
        assert relative_error(trace.warp_m[w], m) == 0
        assert relative_error(trace.warp_d[w], d) < 1e-6
    m, d = softmax_stats(x.double())
    assert relative_error(trace.block_m, m) == 0 and relative_error(trace.block_d, d) < 1e-6


def test_butterfly_rounds_end_with_every_lane_holding_its_warp(gen):
    x = randn(2, 777, gen=gen)
    trace = tc.simulate_cute_softmax(x, threads=128, vec=1)
    assert len(trace.rounds) == 6  # start + 5 rounds in a warp of 32
    m_last, d_last = trace.rounds[-1]
    assert torch.equal(m_last, trace.warp_m.unsqueeze(-1).expand_as(m_last))
    assert torch.equal(d_last, trace.warp_d.unsqueeze(-1).expand_as(d_last))
    m0, _ = trace.rounds[0]
    assert torch.equal(m0.flatten(-2), trace.thread_m)


def test_butterfly_round_merges_partner_lanes():
    m = torch.tensor([1.0, 4.0, NEG_INF, 3.0])
    d = torch.tensor([1.0, 1.0, 0.0, 1.0])
    m1, d1 = tc.butterfly_round(m, d, offset=1)
    assert m1.tolist() == [4.0, 4.0, 3.0, 3.0]
    assert d1[2] == d1[3] == 1.0  # an idle lane adds nothing, and no NaN
    assert not bool(torch.isnan(d1).any())


def test_simulation_reuses_notebook_03s_block_reduction(gen):
    x = randn(4, 999, gen=gen)
    trace = tc.simulate_cute_softmax(x, threads=128, vec=1)  # vec 1: the same ownership
    block = simulate_block_reduction(x, threads=128)
    assert torch.equal(trace.block_m, block.block_m) and torch.equal(trace.block_d, block.block_d)
    m, d = tc.block_merge(trace.warp_m, trace.warp_d)
    assert torch.equal(m, trace.block_m) and torch.equal(d, trace.block_d)


def test_short_rows_leave_threads_and_warps_idle(gen):
    x = randn(3, 100, gen=gen)
    trace = tc.simulate_cute_softmax(x, threads=128, vec=4)  # 25 vectors: 25 busy threads
    busy = torch.isfinite(trace.thread_m)
    assert busy.sum(-1).tolist() == [25, 25, 25]
    assert (trace.thread_d[~busy] == 0).all()
    assert torch.isfinite(trace.warp_m).sum(-1).tolist() == [1, 1, 1]
    assert not bool(torch.isnan(trace.block_d).any())


def test_special_values_follow_torch_softmax(gen):
    x = randn(6, 301, gen=gen, scale=5.0)
    x[0, ::3] = NEG_INF  # masked entries: 0
    x[1] = NEG_INF  # all masked: NaN
    x[2, 17] = float("nan")  # NaN: NaN row
    x[3, 200] = float("inf")  # +inf: NaN row
    x[4] *= 1000  # huge: still exact
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        xd = x.to(dtype)
        out = tc.simulate_cute_softmax(xd).out
        ref = torch.softmax(xd.double(), dim=-1)
        assert torch.equal(torch.isnan(out), torch.isnan(ref)), dtype
        assert relative_error(out, ref) <= RTOL[dtype], dtype


@pytest.mark.parametrize("shape", [(), (5,), (0,), (3, 0), (0, 7)])
def test_simulation_edge_shapes(shape, gen):
    x = randn(*shape, gen=gen) if shape else torch.tensor(2.5)
    out = tc.simulate_cute_softmax(x).out
    ref = torch.softmax(x.double().reshape(x.shape or (1,)), -1).reshape(x.shape)
    assert out.shape == x.shape
    assert relative_error(out, ref) <= RTOL[torch.float32]


def test_simulation_rejects_bad_input():
    with pytest.raises(TypeError, match="floating-point"):
        tc.simulate_cute_softmax(torch.arange(10))
    with pytest.raises(ValueError, match="multiple"):
        tc.simulate_cute_softmax(torch.randn(10), threads=100, vec=1)
    with pytest.raises(ValueError, match="positive"):
        tc.simulate_cute_softmax(torch.randn(10), threads=128, vec=0)


# --- the entry point, without (or with) the kernel --------------------------------------------


def test_importing_teachkit_cute_needs_no_cutlass():
    code = ("import sys, teachkit, teachkit.cute, teachkit.cute.bench; "
            "assert 'cutlass' not in sys.modules; assert 'teachkit.cute.kernel' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_kernel_source_reads_the_file_without_importing():
    src = tc.kernel_source()
    assert src.origin == "teachkit.cute.kernel.online_softmax_kernel"
    assert src.text.startswith("@cute.kernel")
    for step in ("shuffle_sync_bfly", "autovec_copy", "barrier", "merge_warps"):
        assert step in src.text
    assert "def merge_pair" in str(tc.kernel_source("merge_pair"))
    with pytest.raises(ValueError, match="no function 'nope'"):
        tc.kernel_source("nope")


@pytest.mark.parametrize("bad,err,match", [
    ([1.0, 2.0], TypeError, "torch.Tensor"),
    (torch.arange(6).reshape(2, 3), TypeError, "floating-point"),
    (torch.randn(2, 3, dtype=torch.float64), TypeError, "float32, bfloat16 or float16"),
    (torch.randn(7), ValueError, "2-D"),
    (torch.randn(2, 3, 4), ValueError, "2-D"),
])
def test_cute_softmax_input_errors(bad, err, match):
    with pytest.raises(err, match=match):
        tc.cute_softmax(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cute_softmax_without_gpu_says_so():
    assert tc.available() is False and "no CUDA GPU" in tc.unavailable_reason()
    with pytest.raises(RuntimeError, match="needs a CUDA GPU.*simulate_cute_softmax"):
        tc.cute_softmax(torch.randn(4, 10))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cute_softmax_rejects_cpu_tensors_on_a_gpu_machine():
    with pytest.raises(ValueError, match="x.cuda()"):
        tc.cute_softmax(torch.randn(4, 10))


# --- where CuTe DSL runs: a CUDA GPU of sm_80 or newer, with nvidia-cutlass-dsl installed ----


def fake_gpu(monkeypatch, capability, cutlass=True):
    """Make ``teachkit.cute.entry`` see a GPU of ``capability`` (``None``: no GPU) and CuTe DSL
    importable or not, on any machine."""
    monkeypatch.setattr(entry, "_capability", lambda: capability)
    monkeypatch.setattr(entry, "_cutlass_importable", lambda: cutlass)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")


def test_without_a_gpu_the_reason_names_the_simulation(monkeypatch):
    fake_gpu(monkeypatch, None)
    assert tc.available() is False
    assert "no CUDA GPU" in tc.unavailable_reason()
    assert "simulate_cute_softmax" in tc.unavailable_reason()


@pytest.mark.parametrize("cutlass", [True, False])
def test_a_t4_is_too_old_for_cute_dsl_installed_or_not(monkeypatch, cutlass):
    fake_gpu(monkeypatch, (7, 5), cutlass=cutlass)
    assert tc.available() is False
    reason = tc.unavailable_reason()
    assert reason.startswith("CuTe DSL supports Ampere (sm_80) and newer; this GPU is sm_75")
    assert "Tesla T4" in reason  # installing CuTe DSL would not help: the GPU is named first


@pytest.mark.parametrize("capability", [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)])
def test_ampere_and_newer_need_only_cute_dsl_installed(monkeypatch, capability):
    fake_gpu(monkeypatch, capability, cutlass=False)
    assert tc.available() is False and tc.unavailable_reason() == INSTALL_HINT
    fake_gpu(monkeypatch, capability, cutlass=True)
    assert tc.available() is True and tc.unavailable_reason() is None


def test_cute_dsl_support_agrees_with_the_colab_gpu_table(monkeypatch):
    from teachkit.gpus import COLAB_GPUS

    for gpu in COLAB_GPUS:
        fake_gpu(monkeypatch, gpu.capability)
        assert tc.available() is gpu.cute_dsl, gpu.name


def test_cute_softmax_on_a_gpu_older_than_sm80_says_why(monkeypatch):
    x = torch.randn(4, 10)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    with pytest.raises(RuntimeError, match=r"Ampere \(sm_80\) and newer; this GPU is sm_75"):
        tc.cute_softmax(x)


def test_missing_cute_dsl_raises_import_error_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "cutlass", None)  # `import cutlass` now raises ImportError
    monkeypatch.delitem(sys.modules, "teachkit.cute.kernel", raising=False)
    with pytest.raises(ImportError, match=r"pip install -e \.\[cute\]"):
        load_kernel_module()
    assert "pip install -e .[cute]" in INSTALL_HINT


# --- benchmark records ------------------------------------------------------------------------


def test_record_names_and_loading(tmp_path):
    assert cute_bench.cute_record_name("NVIDIA H100 80GB HBM3") == "cute_softmax_nvidia_h100"
    assert cute_bench.cute_record_name("NVIDIA H200", graph=True) == \
        "cute_softmax_nvidia_h200_cudagraph"
    for graph in (False, True):  # the shipped records, read by name
        results, record = load_record(cute_bench.cute_record_name("NVIDIA H100", graph))
        assert {r.provider for r in results} >= {cute_bench.CUTE_PROVIDER, "torch"}
    params = {"rows": 64, "cols": 1000, "dtype": "float32"}
    rows = [Measurement("64x1000", "fp32", p, 0.1, v, "GB/s", params)
            for p, v in (("torch", 900.0), (cute_bench.CUTE_PROVIDER, 1000.0))]
    path = save_results(tmp_path / "r.json", rows, copy_gbps=2000.0)
    results, record = load_results(path)
    assert results == rows and record["ceilings"] == {"copy_gbps": 2000.0}


# --- the kernel itself (GPU and CuTe DSL only) ------------------------------------------------


@pytest.mark.skipif(not tc.available(), reason="needs a CUDA GPU and CuTe DSL")
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_matches_torch(n, dtype, gen):
    x = randn(5, n, gen=gen, dtype=dtype, scale=4.0).cuda()
    x[0, ::3] = NEG_INF
    y = tc.cute_softmax(x)
    assert y.dtype == dtype and y.shape == x.shape
    assert relative_error(y, torch.softmax(x.double(), -1)) <= max(RTOL[dtype], 1e-5)


# --- verify_softmax ---------------------------------------------------------------------------


def test_verify_softmax_passes_torch_and_catches_wrong_softmaxes():
    from teachkit.cute.verify import format_checks, verify_softmax
    from teachkit.softmax import naive_softmax

    kw = {"lengths": (7, 1000), "dtypes": (torch.float32, torch.bfloat16), "device": "cpu"}
    good = verify_softmax(lambda x: torch.softmax(x, -1), **kw)
    assert all(c.ok for c in good) and len(good) == 8
    naive = verify_softmax(naive_softmax, **kw)  # overflows on the rows times 1000
    assert not all(c.ok for c in naive)
    assert "FAIL" in format_checks(naive) and "cases ok" in format_checks(naive)
    no_nan = verify_softmax(lambda x: torch.softmax(x, -1).nan_to_num(0.0), **kw)
    assert [c.nan_match for c in no_nan] == [True, False] * 4


def test_cute_softmax_refuses_tensors_that_require_grad():
    x = torch.randn(2, 8, requires_grad=True)
    with pytest.raises(ValueError, match=r"requires grad.*safe_softmax"):
        tc.cute_softmax(x)
