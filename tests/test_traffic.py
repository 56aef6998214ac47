"""The bytes-moved model of teachkit.traffic equals what the instrumented memory counts."""

from __future__ import annotations

import pytest
import torch

from teachkit.compare import relative_error
from teachkit.traffic import (
    VARIANTS,
    Memory,
    measure_variants,
    run_variant,
    softmax_flops,
    traffic_formula,
    traffic_model,
)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_model_equals_count(variant, dtype, gen):
    M, N = int(torch.randint(1, 30, (1,), generator=gen)), int(torch.randint(1, 300, (1,),
                                                                              generator=gen))
    x = torch.randn(M, N, generator=gen).to(dtype)
    y, mem = run_variant(variant, x)
    model = traffic_model(variant, M, N, x.element_size())
    assert (mem.reads, mem.writes) == (model["reads"], model["writes"])
    assert y.shape == x.shape and y.dtype == x.dtype
    tol = 1e-5 if dtype != torch.bfloat16 else 2e-2
    assert relative_error(y, torch.softmax(x.double(), dim=-1)) < tol


def _evaluate(text: str, M: int, N: int, itemsize: int) -> int:
    """Bytes of a formula such as "3MN + 3M'" (M' counts float32 values, M the input dtype)."""
    total = 0
    for term in text.split(" + "):
        coeff, _, rest = term.partition("M")
        elems = M * N if rest.startswith("N") else M
        total += int(coeff or 1) * elems * (4 if rest.endswith("'") else itemsize)
    return total


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_formula_text_matches_model(variant):
    M, N, itemsize = 7, 33, 2
    reads, writes = traffic_formula(variant)
    assert traffic_model(variant, M, N, itemsize) == {
        "reads": _evaluate(reads, M, N, itemsize), "writes": _evaluate(writes, M, N, itemsize)}


def test_memory_log_and_counts():
    mem = Memory(a=torch.zeros(3, 5))
    mem.store("b", mem.load("a") + 1)
    assert mem.log == [("load", "a", 15), ("store", "b", 15)]
    assert (mem.reads, mem.writes, mem.read_elems, mem.write_elems) == (60, 60, 15, 15)


def test_softmax_flops():
    assert softmax_flops(3, 7) == 105


def test_measure_variants_small():
    results = measure_variants(5, 37, torch.float32)
    names = {r.provider for r in results}
    assert names == set(VARIANTS) | {"copy"}
    assert all(r.value > 0 and r.ms > 0 for r in results)
    assert {r.unit for r in results} == {"GB/s effective", "GB/s useful"}
    assert all(r.params == {"rows": 5, "cols": 37, "dtype": "float32"} for r in results)


def test_warm_timer_is_the_bench_timer(monkeypatch):
    from teachkit.bench import core
    from teachkit.traffic import warm_time_ms

    calls = []
    monkeypatch.setattr(core, "time_ms", lambda fn, **kw: calls.append(kw) or 1.5)
    assert warm_time_ms(lambda: None) == 1.5
    assert calls == [{"rep": 20, "graph": True, "warm_l2": True}]


def test_cli_records_params_and_its_timing(tmp_path, capsys):
    from teachkit.bench import load_results
    from teachkit.traffic import main

    if torch.cuda.is_available():
        pytest.skip("the CPU run of the command")
    path = tmp_path / "traffic.json"
    assert main(["--allow-cpu", "--json", str(path)]) == 0
    results, record = load_results(path)
    assert {(r.params["rows"], r.params["cols"]) for r in results} == {(64, 1000)}
    assert record["timing"] == "wall clock median (CPU)" and record["working_set"]
    assert "results:" in capsys.readouterr().out
