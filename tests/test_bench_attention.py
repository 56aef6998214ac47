"""The attention benchmark's pieces on a CPU: flop counts, batches, a tiny run, table and plot."""

from __future__ import annotations

from teachkit.bench.attention import (
    attention_flops,
    attention_params,
    batch_for,
    bench_attention,
    problem_name,
)
from teachkit.bench.core import format_table
from teachkit.plots.attention_bench import plot_attention_tflops


def test_flops_and_batches():
    assert attention_flops(1, 1, 3, 5, 7, causal=False) == 4 * 3 * 5 * 7
    assert attention_flops(1, 1, 3, 5, 7, causal=True) == 2 * 3 * 5 * 7
    assert batch_for(4096) == 4 and batch_for(16384) == 1 and batch_for(1 << 20) == 1


def test_tiny_run_checks_every_provider_and_tabulates():
    res = bench_attention([33], [16], [False, True], providers=["sdpa math", "teachkit flash"],
                          tokens=33, heads=2, show_progress=False)
    assert {r.provider for r in res} == {"sdpa math", "teachkit flash"}
    assert {r.problem for r in res} == {"D=16 L=33", "D=16 L=33 causal"}
    for r in res:
        assert r.params == attention_params(16, 33, r.params["causal"], "fp16")
        assert r.problem == problem_name(16, 33, r.params["causal"])
        assert r.provider_params == {}
    table = format_table(res, baseline=("sdpa math",))
    assert "teachkit flash / sdpa math" in table
    fig = plot_attention_tflops(res, ceiling=1.0, device="test device")
    assert len(fig.axes) == 2


def test_steps_run_and_agree():
    from teachkit.bench.attention import bench_steps, step_providers

    res = bench_steps(40, [16], [True], tokens=40, heads=1)
    assert [r.provider for r in res] == list(step_providers())
    assert all(r.params == {"D": 16, "L": 40, "S": 40, "causal": True, "dtype": "float16"}
               for r in res)


def test_sweep_providers_carry_their_configuration():
    from types import SimpleNamespace

    from teachkit.bench.attention import sweep_params

    config = SimpleNamespace(block_m=128, block_n=64, num_warps=8, num_stages=3, tma=True)
    assert sweep_params(config) == {"block_m": 128, "block_n": 64, "num_warps": 8,
                                    "num_stages": 3, "tma": True}


def test_plot_reads_params_not_labels():
    from teachkit.bench.core import Measurement

    rows = [Measurement("a label", "fp16", "teachkit flash", 1.0, float(L), "TFLOP/s",
                        attention_params(D, L, c, "fp16"))
            for D in (64, 128) for c in (False, True) for L in (2048, 1024)]
    fig = plot_attention_tflops(rows)
    assert [ax.get_title() for ax in fig.axes] == ["D = 64", "D = 64, causal", "D = 128",
                                                    "D = 128, causal"]
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [1024, 2048]


def test_tiny_backward_run_checks_gradients_and_tabulates():
    from teachkit.bench.attention_backward import (
        BACKWARD_FLOPS_FACTOR,
        backward_params,
        bench_backward,
    )

    res = bench_backward([33], [16], [False, True], providers=["sdpa math", "teachkit flash"],
                         tokens=33, heads=2, show_progress=False)
    assert {(r.provider, r.params["causal"]) for r in res} == {
        (p, c) for p in ("sdpa math", "teachkit flash") for c in (False, True)}
    for r in res:
        assert r.params == backward_params(16, 33, r.params["causal"], "fp16")
        flops = BACKWARD_FLOPS_FACTOR * attention_flops(1, 2, 33, 33, 16, r.params["causal"])
        assert abs(r.value - flops / r.ms / 1e9) < 1e-9 * r.value
    assert "teachkit flash / sdpa math" in format_table(res, baseline=("sdpa math",))


def test_backward_cli_runs_on_a_cpu(tmp_path):
    from teachkit.bench.attention import main

    out = tmp_path / "backward.json"
    assert main(["--backward", "--lengths", "20", "--head-dims", "16", "--causal", "yes",
                 "--providers", "teachkit flash", "--allow-cpu", "--json", str(out)]) == 0
    assert out.exists()


def test_given_tokens_and_heads_label_each_problem(tmp_path, capsys):
    import json

    import pytest

    from teachkit.bench.attention import main

    out = tmp_path / "small.json"
    assert main(["--lengths", "16", "--head-dims", "16", "--causal", "yes", "--tokens", "32",
                 "--heads", "3", "--providers", "teachkit flash", "--allow-cpu",
                 "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["problem"] == "D=16 L=16 causal B=2 H=3"
    assert (row["params"]["B"], row["params"]["H"]) == (2, 3)
    assert main(["--steps", "--tokens", "32", "--allow-cpu"]) == 2
    assert "--tokens applies to the forward benchmark alone" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--heads", "0", "--allow-cpu"])


def test_grouped_query_problems_are_labelled_and_checked():
    import pytest

    res = bench_attention([24], [16], [True], providers=["teachkit flash", "sdpa math"],
                          tokens=24, heads=4, show_progress=False, kv_heads=[4, 1])
    assert {r.problem for r in res} == {"D=16 L=24 causal H_kv=4", "D=16 L=24 causal H_kv=1"}
    assert {r.params["kv_heads"] for r in res} == {4, 1}
    with pytest.raises(ValueError, match="kv_heads = 3 does not divide heads = 4"):
        bench_attention([24], [16], [True], tokens=24, heads=4, show_progress=False,
                        kv_heads=[3])


def test_the_one_loop_backward_is_timed_beside_the_two_loops():
    from teachkit.bench.attention_backward import ONE_LOOP, bench_backward

    res = bench_backward([33], [16], [True], providers=["teachkit flash", ONE_LOOP],
                         tokens=33, heads=2, show_progress=False)
    assert [r.provider for r in res] == ["teachkit flash", ONE_LOOP]
