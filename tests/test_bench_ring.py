"""The ring benchmark's records: named like the others, in the package's records, keyed by
parameters."""

from __future__ import annotations

import pytest

import teachkit
from teachkit.bench import load_results, record_path
from teachkit.ring.bench import bench_ring, ring_record_name, ring_record_path, save_ring_bench


def test_ring_records_are_named_and_placed_like_the_others(tmp_path):
    assert ring_record_name(4, "NVIDIA H200") == "ring_nvidia_h200_x4"
    here = ring_record_name(2)
    assert ring_record_path(2) == record_path(here, exists=False)
    assert ring_record_path(2, folder=tmp_path) == tmp_path / f"{here}.json"


@pytest.mark.skipif(teachkit.ON_GPU, reason="the CPU path (gloo, Triton's interpreter)")
def test_a_tiny_cpu_run_records_params(tmp_path):
    pytest.importorskip("triton")
    bench = bench_ring(2, lengths=[32], heads=1, head_dim=16, causal=(True,), repeats=1,
                       allow_cpu=True, timeout_s=120, wall_s=240)
    assert bench.results
    for r in bench.results:
        assert r.params == {"N": 32, "causal": True, "dtype": "float16"}
        assert r.provider_params in ({"world_size": 1},
                                     {"world_size": 2, "layout": "contiguous"},
                                     {"world_size": 2, "layout": "striped"})
    results, record = load_results(save_ring_bench(bench, tmp_path / "ring.json"))
    assert results == bench.results and record["ceilings"]["world_size"] == 2
