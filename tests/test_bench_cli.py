"""The command lines check their arguments before anything runs: every bad value is an argparse
error (exit status 2) naming the option, and no benchmark starts (a benchmark that ran would fail
these tests by its time: each call must return at once)."""

from __future__ import annotations

import argparse
import time

import pytest

from teachkit.bench import __main__ as bench_cli
from teachkit.bench import core

pytest.importorskip("teachkit.kernels")
from teachkit.bench import attention, decode, softmax  # noqa: E402
from teachkit.kernels import __main__ as kernels_cli  # noqa: E402

BAD = [
    (["attention", "--head-dims", "48"], "--head-dims: invalid choice: 48"),
    (["attention", "--lengths", "0"], "--lengths: 0 is not positive"),
    (["attention", "--lengths", "-8"], "--lengths: -8 is not positive"),
    (["attention", "--lengths", "1.5"], "not a whole number"),
    (["attention", "--providers", "flash"], "--providers: invalid choice: 'flash'"),
    (["softmax", "--shapes", "0x8"], "'0x8': 0 is not positive"),
    (["softmax", "--shapes", "8x-1"], "is not positive"),
    (["softmax", "--shapes", "8"], "is not ROWSxCOLS"),
    (["softmax", "--shapes", "8x8x8"], "is not ROWSxCOLS"),
    (["softmax", "--providers", "fused", "cudnn"], "invalid choice: 'cudnn'"),
    (["decode", "--batches", "0"], "--batches: 0 is not positive"),
    (["decode", "--lengths", "-8"], "--lengths: -8 is not positive"),
    (["decode", "--page-size", "0"], "--page-size: 0 is not positive"),
    (["decode", "--num-splits", "0"], "--num-splits: 0 is not positive"),
    (["decode", "--num-splits", "129"], "more than 128"),
    (["decode", "--heads", "4", "--kv-heads", "3"], "--kv-heads 3 does not divide"),
    (["decode", "--kv-heads", "0"], "--kv-heads: 0 is not positive"),
    (["decode", "--head-dim", "48"], "--head-dim: invalid choice: 48"),
    (["decode", "--block-n", "24"], "24 is not a power of two"),
    (["decode", "--block-n", "8"], "below 16"),
    (["decode", "--num-warps", "3"], "3 is not a power of two"),
    (["decode", "--sdpa", "fast"], "invalid choice: 'fast'"),
]


def _run(argv: list[str]) -> int:
    start = time.perf_counter()
    try:
        status = bench_cli.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    assert time.perf_counter() - start < 5, "the benchmark ran before the arguments were checked"
    return status


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments_fail_before_running(argv, message, capsys):
    assert _run([*argv, "--allow-cpu"]) == 2
    assert message in capsys.readouterr().err


def test_json_to_a_folder_or_an_unwritable_path_fails_before_running(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for sub in ("softmax", "attention", "decode", "traffic"):
        for path, message in ((str(tmp_path), "is a folder"), (f"{tmp_path}/", "is a folder"),
                              (f"{blocker}/out.json", "is a file, not a folder"),
                              ("/proc/teachkit/out.json", "cannot be written")):
            assert _run([sub, "--allow-cpu", "--json", path]) == 2, (sub, path)
            assert message in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_plot_that_cannot_be_written_fails_before_running(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TEACHKIT_FIGURES", "/proc/teachkit")
    assert _run(["softmax", "--allow-cpu", "--plot", "x"]) == 2
    assert "--plot" in capsys.readouterr().err


def test_argument_types():
    assert core.positive_int("3") == 3 and core.power_of_two("64") == 64
    for bad in ("0", "-1", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            core.positive_int(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="pass e.g. 32"):
        core.power_of_two("48")
    assert softmax._parse_shape("4096X128") == (4096, 128)


def test_writable_paths_are_accepted_without_writing_them(tmp_path):
    new = tmp_path / "a" / "b" / "out.json"
    assert core.writable_path(str(new)) == new
    assert not (tmp_path / "a").exists()  # nothing created by the check
    old = tmp_path / "old.json"
    old.write_text("kept")
    assert core.writable_path(str(old)) == old and old.read_text() == "kept"


def test_provider_names_are_the_tables_names():
    assert list(softmax.softmax_providers()) == list(softmax.PROVIDERS)
    from teachkit.kernels.flash_hopper import hopper_device

    hopper = list(attention.HOPPER_PROVIDERS) if hopper_device() else []
    assert list(attention.attention_providers()) == list(attention.PROVIDERS) + hopper
    with pytest.raises(ValueError, match=r"unknown providers \['nope'\]; choose from"):
        softmax.bench_softmax([(2, 8)], ["fp32"], ["torch", "nope"], progress=False)
    with pytest.raises(ValueError, match="unknown providers"):
        attention.bench_attention([16], [16], [False], providers=["flash"], show_progress=False)
    with pytest.raises(TypeError, match="list of names"):
        softmax.bench_softmax([(2, 8)], ["fp32"], "torch", progress=False)


def test_bench_decode_checks_its_arguments():
    with pytest.raises(ValueError, match="kv_heads = 3 does not divide heads = 4"):
        decode.bench_decode([1], [16], heads=4, kv_heads=3, progress=False)
    with pytest.raises(ValueError, match="page_size"):
        decode.bench_decode([1], [16], page_size=0, progress=False)
    with pytest.raises(ValueError, match="lengths"):
        decode.bench_decode([1], [0], progress=False)
    with pytest.raises(ValueError, match="unknown sdpa_backends"):
        decode.bench_decode([1], [16], sdpa_backends=["fast"], progress=False)


def test_the_kernel_error_is_not_swallowed():
    """A head dim the course's kernel does not take fails the benchmark; it used to be skipped,
    leaving an empty table and exit status 0."""
    with pytest.raises(ValueError, match="head dim 48 is not supported"):
        attention.bench_attention([16], [48], [False], providers=["teachkit flash"],
                                  tokens=16, heads=1, show_progress=False)


def test_kernels_cli_checks_the_head_dim(capsys):
    with pytest.raises(SystemExit) as exit_:
        kernels_cli.main(["--dot-evidence", "--head-dim", "48"])
    assert exit_.value.code == 2 and "--head-dim: invalid choice: 48" in capsys.readouterr().err


def test_bench_functions_check_sizes_and_dtypes_before_running():
    import torch

    cases = [
        (lambda: softmax.bench_softmax([(2, 8)], ["fp64"], progress=False), "dtype must be one of"),
        (lambda: softmax.bench_softmax([(0, 8)], ["fp32"], progress=False), r"shape\[0\]"),
        (lambda: softmax.bench_softmax([(1, 2, 8)], ["fp32"], progress=False), "pairs"),
        (lambda: attention.bench_attention([0], [16], [False], show_progress=False),
         r"lengths\[0\]"),
        (lambda: attention.bench_attention([16], [16], [False], "fp64", show_progress=False),
         "dtype must be one of"),
        (lambda: attention.bench_steps(0, [16], [False], show_progress=False), "length"),
        (lambda: decode.bench_decode([1], [16], "fp64", progress=False), "dtype must be one of"),
        (lambda: decode.bench_decode([True], [16], progress=False), r"batches\[0\]"),
        (lambda: core.matmul_tflops(dtype=torch.int32), "floating torch.dtype"),
        (lambda: core.matmul_tflops(0), "n must be a positive int"),
    ]
    for call, message in cases:
        with pytest.raises((TypeError, ValueError), match=message):
            call()
