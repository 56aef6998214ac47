"""The recorded GPU benchmarks ship with the package and load by name."""

from __future__ import annotations

import pytest

from teachkit.bench import (
    Measurement,
    find_records,
    load_record,
    load_results,
    record_path,
    recorded_matmul_dtype,
    records_dir,
    save_results,
)


def test_every_shipped_record_loads():
    names = find_records()
    assert names, "teachkit/benchmarks holds no records"
    assert names == sorted(names)
    for name in names:
        results, record = load_record(name)
        assert isinstance(record["device"], str) and "ceilings" in record
        assert all(isinstance(r, Measurement) for r in results)
        assert load_results(record_path(name)) == (results, record)


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
