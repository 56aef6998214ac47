"""teachkit.gpus: the GPUs Colab lends, and the facts the kernels and notebooks take from it."""

from __future__ import annotations

import dataclasses

import pytest

from teachkit import gpus
from teachkit.gpus import COLAB_GPUS, SHARED_MEMORY_LIMIT, ColabGpu, by_capability


def test_the_four_colab_gpus_and_their_facts():
    facts = {g.name: (g.sm_name, g.bf16, g.cute_dsl, g.tma, g.triton_dot) for g in COLAB_GPUS}
    assert facts == {
        "T4": ("sm_75", False, False, False, "fma"),
        "A100": ("sm_80", True, True, False, "mma"),
        "L4": ("sm_89", True, True, False, "mma"),
        "H100": ("sm_90", True, True, True, "wgmma"),
    }
    assert [g.capability for g in COLAB_GPUS] == sorted(g.capability for g in COLAB_GPUS)
    assert {g.name: g.memory_gib for g in COLAB_GPUS} == {"T4": 15.0, "A100": 40.0, "L4": 22.5,
                                                           "H100": 80.0}


def test_shared_memory_limits_and_gpu_classes():
    assert SHARED_MEMORY_LIMIT == {75: 64 * 1024, 80: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}
    assert list(SHARED_MEMORY_LIMIT) == [75, 80, 89, 90]  # the order the check reports in
    assert gpus.GPU_CLASSES == {75: (7, 5), 80: (8, 0), 89: (8, 9), 90: (9, 0)}
    for g in COLAB_GPUS:  # each GPU's class in the kernels' tables is its own
        assert gpus.gpu_class(g.capability) == g.sm
    assert gpus.gpu_class((8, 6)) == 89 and gpus.gpu_class((10, 0)) == 80


def test_gpus_is_a_leaf():
    import ast
    import inspect

    for node in ast.walk(ast.parse(inspect.getsource(gpus))):  # no kernel, nothing of teachkit
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not node.module.startswith("teachkit"), node.module
        elif isinstance(node, ast.Import):
            assert not any(alias.name.startswith("teachkit") for alias in node.names)


def test_lookup_and_frozen():
    assert by_capability((8, 0)).name == "A100" and by_capability([9, 0]).name == "H100"
    assert by_capability((8, 6)) is None and by_capability((10, 0)) is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        COLAB_GPUS[0].memory_gib = 16.0
    assert isinstance(COLAB_GPUS[0], ColabGpu)
    assert gpus.CUTE_DSL_MIN_CAPABILITY == (8, 0)


def test_tables_have_a_row_per_gpu():
    rows = gpus.gpu_table()
    assert [r["GPU"] for r in rows] == ["T4", "A100", "L4", "H100"]
    assert all(len(r) == len(rows[0]) for r in rows)
    markdown = gpus.describe_gpus().splitlines()
    assert len(markdown) == 2 + len(COLAB_GPUS) and markdown[1].startswith("| --- |")
    assert all(line.count("|") == len(rows[0]) + 1 for line in markdown)
    plain = gpus.describe_gpus(markdown=False).splitlines()
    assert plain[1].split()[:3] == ["T4", "Turing", "sm_75"] and "|" not in plain[0]
