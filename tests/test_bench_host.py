"""``python -m teachkit.bench host``: the host cost of a call, split into what surrounds the
launches and the launches themselves, beside torch's op."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("teachkit.kernels")
from teachkit.bench import __main__ as bench_cli  # noqa: E402
from teachkit.bench import host  # noqa: E402
from teachkit.bench.core import load_results  # noqa: E402
from teachkit.device import INTERPRETED  # noqa: E402
from teachkit.kernels import flash, grid_math, softmax_kernels  # noqa: E402


def test_launches_skipped_skips_every_launch_and_puts_them_back():
    x = torch.full((3, 40), 2.0, device=host.DEVICE)
    own_run = vars(softmax_kernels.fused_kernel).get("run")  # the launch cache's, on a GPU
    with host.launches_skipped():
        # a real launch with these arguments would fail; a skipped one returns at once
        assert softmax_kernels.fused_kernel[(1,)]("not", "a", "tensor") is None
        assert flash.flash_fwd_kernel[(1, 1)]() is None
        softmax_kernels.softmax(x)  # the checks and allocations still run
    assert vars(softmax_kernels.fused_kernel).get("run") is own_run
    assert torch.allclose(softmax_kernels.softmax(x).cpu(), torch.full((3, 40), 1 / 40))


def test_launches_come_back_after_an_error():
    own_run = vars(flash.flash_fwd_kernel).get("run")
    with pytest.raises(RuntimeError, match="inside"):
        with host.launches_skipped():
            raise RuntimeError("inside")
    assert vars(flash.flash_fwd_kernel).get("run") is own_run
    with pytest.raises(TypeError):  # launching for real again: the arguments are checked
        softmax_kernels.fused_kernel[(1,)]("not", "a", "tensor")


def test_launch_cache_bypassed_launches_through_jitfunction_run_and_puts_the_cache_back():
    x = torch.randn(3, 40, device=host.DEVICE)
    own_run = vars(softmax_kernels.fused_kernel).get("run")
    with host.launch_cache_bypassed():
        assert "run" not in vars(softmax_kernels.fused_kernel)
        y = softmax_kernels.softmax(x)
    assert vars(softmax_kernels.fused_kernel).get("run") is own_run
    assert torch.allclose(y, softmax_kernels.softmax(x))


def test_launcher_calls_record_the_cached_launches_of_one_call_and_replay_them():
    x = torch.randn(3, 40, device=host.DEVICE)
    softmax_kernels.softmax(x)  # compiled, and kept by the launch cache on a GPU
    y, made = host.launcher_calls(lambda: softmax_kernels.softmax(x))
    torch.testing.assert_close(y, torch.softmax(x, -1))
    if INTERPRETED:  # no launcher: nothing to record
        assert made == []
        return
    assert len(made) == 1
    launch, args = made[0]
    assert y.data_ptr() in args and x.data_ptr() in args
    y.zero_()
    launch(*args)  # the launcher alone writes the same softmax into the held output
    torch.testing.assert_close(y, torch.softmax(x, -1))
    run = vars(softmax_kernels.fused_kernel)["run"]
    launchers = [entry[1] for entry in run.compiled.values()]
    launchers += [replay.launch for replay in softmax_kernels.FUSED_REPLAYS.values()]
    assert launchers and not any(getattr(launch, "__name__", "") == "launch_and_record"
                                 for launch in launchers)
    softmax_kernels.softmax(x)  # the own launchers are back: nothing more recorded
    assert len(made) == 1


def test_the_ways_of_timing_put_softmaxs_kept_launches_back():
    x = torch.randn(3, 40, device=host.DEVICE)
    softmax_kernels.FUSED_REPLAYS.clear()  # what earlier tests kept
    softmax_kernels.softmax(x)
    kept = dict(softmax_kernels.FUSED_REPLAYS)  # one launch on a GPU, none in the interpreter
    assert len(kept) == (0 if INTERPRETED else 1)
    with host.launches_skipped():
        y = softmax_kernels.softmax(x)  # a kept launch whose launcher does nothing
        assert all(r.launch is host._no_launch for r in softmax_kernels.FUSED_REPLAYS.values())
    assert softmax_kernels.FUSED_REPLAYS == kept
    with host.launch_cache_bypassed():
        assert softmax_kernels.FUSED_REPLAYS == {}
        z = softmax_kernels.softmax(x)
        assert softmax_kernels.FUSED_REPLAYS == {}  # nothing kept without the cache
    assert softmax_kernels.FUSED_REPLAYS == kept
    torch.testing.assert_close(z, torch.softmax(x, -1))
    assert y.shape == x.shape


def test_launcher_calls_put_the_launchers_back_after_an_error():
    def fails():
        raise RuntimeError("inside")

    before = {id(k): dict(getattr(vars(k).get("run"), "compiled", {}))
              for k in host._entry_kernels()}
    with pytest.raises(RuntimeError, match="inside"):
        host.launcher_calls(fails)
    after = {id(k): dict(getattr(vars(k).get("run"), "compiled", {}))
             for k in host._entry_kernels()}
    assert after == before


def test_bench_host_times_every_op_four_ways_and_the_launcher_alone_on_a_gpu():
    results = host.bench_host(calls=2, show_progress=False, rounds=2)
    ways = (*host.PROVIDERS, host.LAUNCHER_ALONE) if host.ON_GPU else host.PROVIDERS
    assert [(r.params["op"], r.provider) for r in results] == [
        (op, p) for op in host.OPS for p in ways]
    assert all(r.value > 0 and r.unit == "µs per call" for r in results)
    firsts = results[::len(ways)]
    assert [r.params["dtype"] for r in firsts] == ["bfloat16", "float16", "float16", "float16"]


@pytest.mark.parametrize("kwargs, error, message", [
    ({"ops": ["matmul"]}, ValueError, "unknown ops"),
    ({"ops": "softmax"}, TypeError, "list of names"),
    ({"calls": 0}, ValueError, "calls must be a positive int"),
    ({"calls": 2.5}, TypeError, "calls must be a positive int"),
])
def test_bench_host_checks_its_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        host.bench_host(**kwargs, show_progress=False)


def test_cli_writes_a_record_keyed_by_params(tmp_path, capsys):
    path = tmp_path / "host.json"
    assert bench_cli.main(["host", "--allow-cpu", "--calls", "2", "--ops", "softmax",
                           "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "softmax: checks, allocations and Python" in out
    results, record = load_results(path)
    assert {r.provider for r in results} == set(host.PROVIDERS) | (
        {host.LAUNCHER_ALONE} if host.ON_GPU else set())
    assert json.loads(path.read_text())["results"][0]["params"]["op"] == "softmax"


@pytest.mark.parametrize("argv, message", [
    (["host", "--calls", "0"], "--calls: 0 is not positive"),
    (["host", "--ops", "matmul"], "--ops: invalid choice: 'matmul'"),
    (["host", "--graph", "--allow-cpu"], "--graph does not apply"),
])
def test_cli_refuses_bad_arguments_before_running(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_grid_math_agrees_with_triton():
    import triton

    for n in range(1, 3000):
        assert grid_math.next_power_of_2(n) == triton.next_power_of_2(n)
        for b in (1, 16, 64, 128):
            assert grid_math.cdiv(n, b) == triton.cdiv(n, b)
