"""``python -m teachkit.bench decode`` on tiny sizes: every provider checked, timed, recorded."""

from __future__ import annotations

import pytest

import teachkit
from teachkit.bench import load_results, save_results
from teachkit.bench.core import Measurement
from teachkit.bench.decode import (
    DEFAULT,
    ONE_LAUNCH,
    PAGED,
    SPLIT,
    UNSPLIT,
    bench_decode,
    decode_params,
    decode_problem,
    main,
    split_params,
    split_provider,
    summary,
)

pytest.importorskip("triton")


def test_bench_decode_measures_every_provider():
    results = bench_decode(batches=(2,), lengths=(37,), heads=2, kv_heads=1, head_dim=16,
                           page_size=8, sdpa_backends=("math",), num_splits=3, progress=False)
    assert [r.provider for r in results] == ["SDPA math", UNSPLIT, PAGED, SPLIT, ONE_LAUNCH,
                                                 DEFAULT]
    for r in results:
        assert r.problem == decode_problem(2, 37) and r.unit == "GB/s" and r.value > 0
        assert r.params == {"B": 2, "S": 37, "dtype": "float16"}
        assert r.value == pytest.approx(2 * 2 * 1 * 37 * 16 * 2 / r.ms / 1e6)
    forced = {r.provider: r.provider_params for r in results}
    assert forced == {"SDPA math": {}, UNSPLIT: {}, PAGED: {}, SPLIT: {"num_splits": 3},
                      ONE_LAUNCH: {"num_splits": 3}, DEFAULT: {"num_splits": 3}}
    assert "split-KV" in summary(results, ceiling=1.0)


def test_a_forced_config_is_in_the_teachkit_providers_params():
    from teachkit.kernels.decode import DecodeConfig

    results = bench_decode(batches=(1,), lengths=(20,), heads=2, head_dim=16, page_size=8,
                           sdpa_backends=("math",), config=DecodeConfig(16, 4, 1),
                           progress=False)
    tiles = {"block_n": 16, "num_warps": 4, "num_stages": 1}
    assert {r.provider: r.provider_params for r in results} == {
        "SDPA math": {}, UNSPLIT: tiles, PAGED: tiles, SPLIT: tiles, ONE_LAUNCH: tiles,
        DEFAULT: tiles}


def test_problem_and_split_params():
    assert decode_params(16, 131072, "bf16") == {"B": 16, "S": 131072, "dtype": "bfloat16"}
    assert split_params(8, 64) == {"num_splits": 8, "block_n": 64}
    assert split_provider(8, 64) == "splits=8 BLOCK_N=64"  # a label, for tables only


@pytest.mark.skipif(teachkit.ON_GPU, reason="the refusal is for machines without a GPU")
def test_cli_refuses_cpu_without_flag_and_records_with_it(tmp_path, capsys):
    assert main([]) == 2
    path = tmp_path / "decode.json"
    assert main(["--allow-cpu", "--batches", "1", "--lengths", "20", "--sdpa",
                 "--json", str(path), "--plot", str(tmp_path / "decode")]) == 0
    out = capsys.readouterr().out
    assert "teachkit split-KV" in out and "results:" in out and "figure:" in out
    assert (tmp_path / "decode.png").exists()
    results, record = load_results(path)
    assert {r.provider for r in results} == {UNSPLIT, PAGED, SPLIT, ONE_LAUNCH, DEFAULT}
    assert {(r.params["B"], r.params["S"]) for r in results} == {(1, 20)}
    assert record["ceilings"]["copy_gbps"] > 0
    assert record["timing"] == "wall clock median (CPU)"


def test_records_keep_extra_entries_beside_the_results(tmp_path):
    rows = [Measurement(decode_problem(1, 64), "fp16", SPLIT, 0.5, 10.0, "GB/s",
                        decode_params(1, 64))]
    path = save_results(tmp_path / "r.json", rows, {"memory": [{"L": 64}]}, copy_gbps=5.0)
    results, record = load_results(path)
    assert results == rows
    assert record["memory"] == [{"L": 64}] and record["ceilings"] == {"copy_gbps": 5.0}
