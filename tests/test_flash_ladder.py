"""Notebook 08's ladder kernel: every step computes the same attention as float64, and the
bench's steps and their staircase plot read by parameters."""

from __future__ import annotations

import pytest
import torch
from inputs import randn

import teachkit
from teachkit.attention import attention_scores
from teachkit.compare import relative_error

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels.flash_ladder import (  # noqa: E402
    LADDER,
    QK_AHEAD,
    LadderStep,
    flash_attention_ladder,
)

DEV = teachkit.DEVICE
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("step", [*LADDER, QK_AHEAD])
@pytest.mark.parametrize(("L", "S", "causal"), [(37, 53, True), (53, 37, True), (29, 41, False),
                                                (64, 64, False), (16, 16, True)])
def test_every_step_matches_float64(step, L, S, causal, gen):
    q = randn(2, 2, L, 32, gen=gen, dtype=torch.float16).to(DEV)
    k, v = (randn(2, 2, S, 32, gen=gen, dtype=torch.float16).to(DEV) for _ in range(2))
    out, lse = flash_attention_ladder(q, k, v, causal, step=step)
    s = attention_scores(q.double(), k.double(), causal)
    assert relative_error(out, torch.softmax(s, -1) @ v.double()) < RTOL[torch.float16]
    assert relative_error(lse, torch.logsumexp(s, -1)) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("step", ["heavy first", QK_AHEAD])
def test_last_step_in_every_dtype(dtype, step, gen):
    q, k, v = (randn(1, 2, 40, 16, gen=gen, dtype=dtype).to(DEV) for _ in range(3))
    out, _ = flash_attention_ladder(q, k, v, True, step=step)
    s = attention_scores(q.double(), k.double(), True)
    assert relative_error(out, torch.softmax(s, -1) @ v.double()) < RTOL[dtype]


def test_scores_one_block_ahead_compute_what_the_last_step_computes(gen):
    """QK_AHEAD reorders the unmasked loop (the next block's scores before this block's
    softmax): the same operations on the same numbers, so the same output and lse."""
    q = randn(1, 2, 100, 32, gen=gen, dtype=torch.float32).to(DEV)
    k, v = (randn(1, 2, 90, 32, gen=gen, dtype=torch.float32).to(DEV) for _ in range(2))
    for causal in (False, True):
        out, lse = flash_attention_ladder(q, k, v, causal, step="heavy first")
        out_ahead, lse_ahead = flash_attention_ladder(q, k, v, causal, step=QK_AHEAD)
        assert relative_error(out_ahead, out) < 1e-6 and relative_error(lse_ahead, lse) < 1e-6


def test_each_step_adds_one_change():
    steps = list(LADDER.values())
    assert steps[0] == LadderStep(False, False, False, False)
    assert not any(step.qk_ahead for step in steps)  # an experiment, not a step of the ladder
    assert all(steps[-1][:4]) and QK_AHEAD == steps[-1]._replace(qk_ahead=True)
    for before, after in zip(steps, steps[1:], strict=False):
        assert sum(after) == sum(before) + 1 and all(a >= b for a, b in zip(after, before,
                                                                               strict=True))


def test_bad_arguments_say_what_to_pass(gen):
    q = randn(1, 1, 8, 16, gen=gen).to(DEV)
    with pytest.raises(ValueError, match="step must be one of"):
        flash_attention_ladder(q, q, q, step="fast")
    with pytest.raises(ValueError, match="qk_ahead needs block_kinds"):
        flash_attention_ladder(q, q, q, step=LADDER["exp2"]._replace(qk_ahead=True))
    with pytest.raises(ValueError, match=">= 0"):
        flash_attention_ladder(q, q, q, scale=-1.0)
    with pytest.raises(TypeError, match="causal"):
        flash_attention_ladder(q, q, q, causal="yes")


def test_bench_steps_are_the_ladder_and_plot_as_a_staircase():
    from teachkit.bench.attention import bench_steps, step_providers
    from teachkit.plots.attention_bench import plot_steps

    res = bench_steps(40, [16], [True], tokens=40, heads=1, show_progress=False)
    names = [r.provider for r in res]
    assert names == list(step_providers())
    assert names[0] == "simple" and names[-1] == "fast, table"
    assert [n.removeprefix("+ ") for n in names[1:len(LADDER)]] == list(LADDER)[1:]
    fig = plot_steps(res, device="test device")
    assert len(fig.axes) == 1 and len(fig.axes[0].patches) == len(names)
