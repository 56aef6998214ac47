"""``python -m teachkit.bench ceilings``: copy bandwidth and the matmul rate, with its dtype."""

from __future__ import annotations

import pytest

import teachkit
from teachkit.bench import copy_bandwidth, load_results, matmul_dtype, matmul_tflops
from teachkit.bench.softmax import main

pytest.importorskip("triton")


def test_ceilings_are_positive():
    assert copy_bandwidth(1 << 20) > 0
    assert matmul_tflops(64) > 0


@pytest.mark.skipif(teachkit.ON_GPU, reason="checks the CPU run of the command")
def test_ceilings_command_prints_and_records_the_matmul_dtype(tmp_path, capsys):
    path = tmp_path / "ceilings.json"
    assert main(["ceilings", "--allow-cpu", "--json", str(path)]) == 0
    assert "float32 matmul:" in capsys.readouterr().out
    _, record = load_results(path)
    assert record["ceilings"]["matmul_dtype"] == str(matmul_dtype()).removeprefix("torch.")
    assert record["ceilings"]["matmul_tflops"] > 0
