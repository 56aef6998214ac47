"""The rounds of a persistent grid (notebook 06): each program's row, round by round, as the
resident kernels take their items, and which programs wait for the next round."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from teachkit.plots.resident_rounds import (  # noqa: E402
    plot_rounds,
    round_rows,
    waiting_items,
    waiting_share,
)


def test_program_p_takes_items_p_p_plus_programs_and_on():
    rows = round_rows(192, 264, 3)
    assert rows.shape == (3, 264)
    assert rows[0, 191] == 0 and rows[0, 192] == 1  # 72 programs start row 1 in round 0
    assert rows[1, 119] == 1 and rows[1, 120] == 2  # and 120 finish it in round 1
    assert (round_rows(256, 264, 2)[0] == [0] * 256 + [1] * 8).all()


def test_programs_wait_where_their_row_ends_in_a_later_round():
    assert not waiting_items(132, 264, 4).any()  # two whole rows a round
    waiting = waiting_items(192, 264, 3)  # 3M float32 in chunks of 16384
    assert waiting.sum(axis=1).tolist() == [72, 144, 24]
    assert waiting[0, 192:].all() and not waiting[0, :192].any()
    assert waiting_items(256, 264, 3).sum(axis=1).tolist() == [8, 16, 24]  # 4M, or 3M in 12k


def test_a_share_of_the_items_wait_over_a_whole_tensor():
    """24 rows of 3M float32 in chunks of 16384 (the record's) against 16 rows of 4M, and 3M
    in chunks of 12288 on a filled grid (the 8 spare programs push each row further) or on
    256 programs, one whole row a round."""
    assert round(waiting_share(192, 264, 24), 2) == 0.31
    assert round(waiting_share(256, 264, 16), 2) == 0.23
    assert round(waiting_share(256, 264, 24), 2) == 0.36
    assert waiting_share(256, 256, 24) == 0.0


def test_the_figure_has_a_panel_a_grid_and_refuses_bad_input():
    fig = plot_rounds({"3M in 16k": (192, 264, 24), "3M in 12k, whole rows": (256, 256, 24)})
    assert len(fig.axes) == 2
    assert "31% of the items wait" in fig.axes[0].get_title(loc="left")
    assert "0% of the items wait" in fig.axes[1].get_title(loc="left")
    plt.close(fig)
    with pytest.raises(ValueError, match="grids"):
        plot_rounds({})
    with pytest.raises(TypeError, match="programs"):
        plot_rounds({"a": (3, 2.5, 4)})
