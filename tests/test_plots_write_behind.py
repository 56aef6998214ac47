"""The order of one program's steps in the resident TMA softmax (notebook 06), plain and written
behind: each item summed once, waited for once and written once, and written behind, another
item's sum between a pair's publication and the wait for its row."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from teachkit.plots.write_behind import plot_program_steps, program_steps  # noqa: E402


@pytest.mark.parametrize("behind", [False, True])
def test_every_item_is_summed_waited_for_and_written_once_in_that_order(behind):
    steps = program_steps(5, behind)
    for item in range(5):
        where = [steps.index((kind, item)) for kind in ("sum", "wait", "write")]
        assert where == sorted(where)
    assert sorted(steps) == sorted((k, i) for i in range(5) for k in ("sum", "wait", "write"))


def test_written_behind_the_next_sum_comes_before_the_wait():
    steps = program_steps(3, True)
    for item in range(2):
        assert steps.index(("sum", item + 1)) < steps.index(("wait", item))
    plain = program_steps(3, False)
    assert plain.index(("wait", 0)) < plain.index(("sum", 1))
    assert program_steps(1, True) == program_steps(1, False)


def test_items_must_be_a_positive_int():
    with pytest.raises(ValueError, match="items"):
        program_steps(0, True)


def test_the_plot_draws_a_box_a_step_in_both_orders():
    fig = plot_program_steps(3)
    assert len(fig.axes[0].patches) == 2 * 9
    plt.close(fig)
