"""How much memory a problem may take, and skipping what does not fit instead of failing."""

from __future__ import annotations

import pytest
import torch

import teachkit
from teachkit import device
from teachkit.bench import matmul_dtype
from teachkit.bench.decode import (
    DEFAULT,
    ONE_LAUNCH,
    PAGED,
    SPLIT,
    UNSPLIT,
    bench_decode,
    decode_bytes,
)


def test_memory_budget_is_a_sane_number():
    budget = device.memory_budget()
    assert isinstance(budget, int) and budget > 2**26
    if not teachkit.ON_GPU:
        assert budget == device.memory_budget("cpu") <= 2**50


def test_fits():
    assert device.fits(0) and device.fits(1)
    assert not device.fits(2**60)
    budget = device.memory_budget()
    assert device.fits(budget // 2) and not device.fits(budget, headroom=0.5)


def test_fits_or_skip_says_what_it_skips(capsys):
    assert device.fits_or_skip(1, "a small problem")
    assert capsys.readouterr().out == ""
    assert not device.fits_or_skip(2**60, "a huge problem")
    out = capsys.readouterr().out
    assert out.startswith("skipped a huge problem: it needs about") and out.count("\n") == 1


def test_skip_if_out_of_memory_swallows_oom_and_goes_on(capsys):
    ran = []
    for n in range(3):
        with device.skip_if_out_of_memory(f"problem {n}"):
            if n == 1:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")
            ran.append(n)
    assert ran == [0, 2]
    out = capsys.readouterr().out
    assert out.startswith("skipped problem 1: it needs more GPU memory than this GPU has free (")
    assert out.rstrip().endswith("GiB)") and out.count("\n") == 1


def test_skip_if_out_of_memory_knows_old_style_messages(capsys):
    with device.skip_if_out_of_memory("old torch"):
        raise RuntimeError("CUDA error: out of memory")
    assert "skipped old torch" in capsys.readouterr().out


def test_skip_if_out_of_memory_lets_other_errors_through(capsys):
    with pytest.raises(ValueError, match="not memory"), device.skip_if_out_of_memory("x"):
        raise ValueError("not memory")
    with pytest.raises(RuntimeError, match="something else"), device.skip_if_out_of_memory("x"):
        raise RuntimeError("something else")
    assert capsys.readouterr().out == ""


def test_matmul_dtype_follows_the_tensor_cores():
    assert matmul_dtype((8, 0)) == matmul_dtype((9, 0)) == torch.bfloat16
    assert matmul_dtype((7, 5)) == torch.float16  # a T4: no bf16 tensor cores
    if not teachkit.ON_GPU:
        assert matmul_dtype() == torch.float32


def test_bench_decode_skips_what_does_not_fit(monkeypatch, capsys):
    pytest.importorskip("triton")
    shape = {"heads": 2, "kv_heads": 1, "head_dim": 16}
    small, big = decode_bytes(1, 40, **shape), decode_bytes(1, 4000, **shape)
    budget = int((small + big) / 2 / 0.9)  # room for the small problem only
    monkeypatch.setattr(device, "memory_budget", lambda device=None: budget)
    results = bench_decode(batches=(1,), lengths=(40, 4000), **shape, page_size=8,
                           sdpa_backends=(), progress=False)
    assert {r.problem for r in results} == {"B=1 S=40"}
    assert [r.provider for r in results] == [UNSPLIT, PAGED, SPLIT, ONE_LAUNCH, DEFAULT]
    out = capsys.readouterr().out
    assert "skipped B=1 S=4000 fp16: it needs about" in out and "S=40 " not in out


def test_bench_decode_skips_a_problem_that_runs_out_of_memory(monkeypatch, capsys):
    pytest.importorskip("triton")
    from teachkit.bench import decode as bench_decode_module

    real = bench_decode_module._time_decode

    def oom_on_long_caches(name, label, q, k, *args):
        if k.shape[2] > 100 and name == SPLIT:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real(name, label, q, k, *args)

    monkeypatch.setattr(bench_decode_module, "_time_decode", oom_on_long_caches)
    results = bench_decode(batches=(1,), lengths=(24, 104), heads=1, head_dim=16, page_size=8,
                           sdpa_backends=(), progress=False)
    got = {(r.problem, r.provider) for r in results}
    assert ("B=1 S=24", SPLIT) in got and ("B=1 S=104", UNSPLIT) in got
    assert ("B=1 S=104", SPLIT) not in got
    assert "skipped B=1 S=104 fp16 teachkit split-KV: it needs more GPU memory" in \
        capsys.readouterr().out


def test_skip_if_out_of_memory_lets_go_of_what_the_failed_block_held(monkeypatch, capsys):
    import weakref

    held, freed_in_time = [], []
    # the cache is emptied while the error is still being handled: the tensor must be gone then
    monkeypatch.setattr(device, "free_cached_memory", lambda: freed_in_time.append(held[0]()))

    def problem():
        tensor = torch.zeros(1000)
        held.append(weakref.ref(tensor))

        def run():  # a closure over the tensor, in whose frame the error is raised
            tensor.add_(1)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")

        run()

    with device.skip_if_out_of_memory("problem"):
        problem()
    assert freed_in_time == [None]
    assert "skipped problem" in capsys.readouterr().out
