"""The recorded GPU benchmarks ship with the package, load by name and key their results by
parameters."""

from __future__ import annotations

import json

import pytest

from teachkit.bench import (
    Measurement,
    find_records,
    format_table,
    load_record,
    load_results,
    record_path,
    recorded_matmul_dtype,
    records_dir,
    save_results,
    timing_description,
)

PROBLEM_KEYS = {  # the params every result of a record family carries
    "softmax_": {"rows", "cols", "dtype"},
    "cute_softmax_": {"rows", "cols", "dtype"},
    "traffic_": {"rows", "cols", "dtype"},
    "attention_backward_": {"D", "L", "S", "causal", "dtype", "pass"},
    "power_attention_backward_": {"D", "L", "S", "causal", "dtype", "pass"},
    "power_attention_": {"D", "L", "S", "causal", "dtype"},
    "power_settle_": {"D", "L", "S", "causal", "dtype", "from_s", "to_s", "run"},
    "attention_gqa_": {"D", "L", "S", "causal", "dtype", "kv_heads"},
    "attention_": {"D", "L", "S", "causal", "dtype"},
    "decode_head_dims_": {"B", "S", "dtype", "D"},
    "decode_": {"B", "S", "dtype"},
    "ring_": {"N", "causal", "dtype"},
    "host_": {"op", "dtype"},  # and the op's own sizes
}
OPTIONAL_KEYS = {  # params a result may add: an attention run given its tokens or heads, a
    "attention_": {"B", "H"},  # decoding sweep over head dims its D where it is not 128, or
    "decode_held_table_": {"D"},  # its cache heads where they are fewer than the query heads
    "decode_held_split_": {"D"},
    "decode_interleave_": {"D"},
    "decode_entry_waves_": {"D"},
    "decode_entry_tiles_": {"D"},
    "decode_entry_ranges_": {"D"},
    "decode_page_layout_": {"D"},
    "decode_last_wave_": {"H_kv"},
    "decode_short_rows_": {"D"},
    "decode_dependent_merge_": {"D"},
    "decode_nearly_full_": {"D"},
    "decode_tail_loop_": {"D", "page_size"},  # and a paged problem its pages
}


def test_every_shipped_record_loads():
    names = find_records()
    assert names, "teachkit/benchmarks holds no records"
    assert names == sorted(names)
    for name in names:
        results, record = load_record(name)
        assert isinstance(record["device"], str) and "ceilings" in record
        assert all(isinstance(r, Measurement) for r in results)
        assert load_results(record_path(name)) == (results, record)


def test_every_shipped_result_carries_its_params():
    for name in find_records():
        rows = json.loads(record_path(name).read_text())["results"]
        keys = next((k for prefix, k in PROBLEM_KEYS.items() if name.startswith(prefix)), None)
        assert keys is not None or not rows, f"{name}: a record family without known params"
        for row in rows:
            if name.startswith("host_"):
                assert keys <= set(row["params"]), (name, row)
            else:
                optional = next((k for prefix, k in OPTIONAL_KEYS.items()
                                 if name.startswith(prefix)), set())
                assert keys <= set(row["params"]) <= keys | optional, (name, row)
            assert row["params"]["dtype"] in ("float32", "float16", "bfloat16"), (name, row)
            assert isinstance(row["provider_params"], dict), (name, row)


def test_power_records_sample_every_timed_provider():
    """``gpu_checks/power_gpu.py``'s records: each timed provider on each problem has its
    clock, power and power-capped share, and the idle spell ran at the highest clock."""
    names = find_records("power_attention_")
    assert names
    for name in names:
        results, record = load_record(name)
        sampled = {(p["problem"], p["provider"]): p for p in record["power"]}
        assert set(sampled) == {(r.problem, r.provider) for r in results}, name
        for p in sampled.values():
            assert p["samples"] > 0 and 0 <= p["power_capped"] <= 1, (name, p)
            assert 0 < p["sm_mhz"] <= record["max_sm_mhz"] and 0 < p["watts"], (name, p)
        assert record["idle"]["sm_mhz"] == record["max_sm_mhz"], name


def test_parametrised_providers_carry_their_parameters():
    sweep, _ = load_record("attention_sweep_nvidia_h100")
    assert all(set(r.provider_params) == {"block_m", "block_n", "num_warps", "num_stages", "tma"}
               for r in sweep)
    splits, _ = load_record("decode_splits_nvidia_h100")
    assert all(set(r.provider_params) == {"num_splits", "block_n"} for r in splits)
    plain, _ = load_record("decode_nvidia_h100")
    assert all(r.provider_params == {} for r in plain)


def test_params_round_trip_and_old_records_are_refused(tmp_path):
    rows = [Measurement("B=1 S=64", "fp16", "splits=2 BLOCK_N=32", 0.5, 10.0, "GB/s",
                        {"B": 1, "S": 64, "dtype": "float16"}, {"num_splits": 2, "block_n": 32}),
            Measurement("D=16 L=8 causal", "fp16", "torch", 0.5, 1.0, "TFLOP/s",
                        {"D": 16, "L": 8, "S": 8, "causal": True, "dtype": "float16"})]
    path = save_results(tmp_path / "r.json", rows, timing=timing_description(graph=True))
    results, record = load_results(path)
    assert results == rows and results[1].provider_params == {}
    assert record["timing"] == timing_description(graph=True)
    old = json.loads(path.read_text())
    for row in old["results"]:
        del row["params"]
    path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="without params"):
        load_results(path)


def test_records_dir_is_the_package_folder():
    assert records_dir().is_dir()
    assert records_dir().name == "benchmarks"
    assert records_dir().joinpath("softmax_nvidia_h100.json").is_file()


def test_record_path_takes_a_name_with_or_without_suffix():
    path = record_path("softmax_nvidia_h100")
    assert path.name == "softmax_nvidia_h100.json" and path.is_file()
    assert record_path("softmax_nvidia_h100.json") == path


def test_unknown_record_names_the_available_ones():
    with pytest.raises(FileNotFoundError, match="no_such_record.*softmax_nvidia_h100"):
        load_record("no_such_record")
    with pytest.raises(ValueError, match="load_results"):
        record_path("../benchmarks/softmax_nvidia_h100")


def test_record_path_for_a_new_record_need_not_exist():
    path = record_path("decode_splits_test_gpu", exists=False)
    assert path.name == "decode_splits_test_gpu.json" and not path.is_file()


def test_find_records_by_prefix():
    decode = find_records("decode_")
    assert "decode_nvidia_h100" in decode and all(n.startswith("decode_") for n in decode)
    assert find_records("no_such_prefix_") == []


def test_records_without_a_matmul_dtype_were_bf16(tmp_path):
    _, ceilings = load_record("ceilings_nvidia_h100")
    assert recorded_matmul_dtype(ceilings) == "bfloat16"
    path = save_results(tmp_path / "c.json", [], copy_gbps=300.0, matmul_tflops=65.0,
                        matmul_dtype="float16")
    assert recorded_matmul_dtype(load_results(path)[1]) == "float16"


def test_format_table_shows_the_subjects_ratios_whatever_the_providers_order():
    """The recorded backward lists the course's kernel first; its ratios are still the ones
    shown when it is named the subject."""
    results, record = load_record("attention_backward_nvidia_h100")
    table = format_table(results, baseline=("sdpa flash", "sdpa cudnn"),
                         device=record["device"], subject="teachkit flash")
    head = table.splitlines()[1]
    assert "teachkit flash / sdpa flash" in head and "teachkit flash / sdpa cudnn" in head
    first = next(r for r in results if r.provider == "teachkit flash")
    flash = next(r for r in results if r.provider == "sdpa flash" and r.problem == first.problem)
    assert f"{first.value / flash.value:.2f}x" in table.splitlines()[3]
    # without a subject, the last provider's ratios, as before
    assert "sdpa cudnn / sdpa flash" in format_table(results, baseline=("sdpa flash",))
