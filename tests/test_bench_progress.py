"""Benchmarks draw a tqdm progress bar naming the current job, unless told not to."""

from __future__ import annotations

import pytest

from teachkit.bench.core import progress_bar
from teachkit.bench.softmax import bench_softmax
from teachkit.traffic import measure_variants

pytest.importorskip("triton")


def test_bench_softmax_draws_a_bar_only_when_asked(capsys):
    results = bench_softmax([(4, 100)], ["fp32"], providers=["torch", "fused"])
    err = capsys.readouterr().err
    assert len(results) == 2
    assert "4x100 fp32 fused" in err and "2/2" in err and "it/s" in err
    bench_softmax([(4, 100)], ["fp32"], providers=["torch"], progress=False)
    assert capsys.readouterr().err == ""


def test_measure_variants_bar(capsys):
    import torch

    measure_variants(3, 20, torch.float32, progress=False)
    assert capsys.readouterr().err == ""
    measure_variants(3, 20, torch.float32)
    assert "3x20 fp32 copy" in capsys.readouterr().err


def test_progress_bar_off_draws_nothing(capsys):
    with progress_bar(3, enabled=False) as bar:
        bar.set_description("job")
        bar.update(3)
    assert capsys.readouterr().err == ""
