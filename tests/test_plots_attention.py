"""Plot helpers of notebook 07: the tile schedule and the memory of attention."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from teachkit.plots.attention import (  # noqa: E402
    TILE_COLORS,
    plot_attention_memory,
    plot_key_order,
    plot_tile_schedule,
    plot_walk,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_tile_schedule_figure_has_one_patch_per_tile_and_counts():
    fig = plot_tile_schedule(200, 300, 64, 48, causal=True)
    assert isinstance(fig, plt.Figure)
    ax = fig.axes[0]
    assert len(ax.patches) == 4 * 7
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("skip (") for lab in labels)
    assert "diagonal j = i" in labels


def test_tile_schedule_on_given_axes_and_without_mask():
    fig, ax = plt.subplots()
    assert plot_tile_schedule(33, 77, 16, 16, causal=False, ax=ax) is fig
    assert len(ax.lines) == 0  # no diagonal without a mask


def test_attention_memory_figure():
    lengths = [1024, 2048, 4096]
    fig = plot_attention_memory(
        lengths, {"fp16": [2.0 * n * n for n in lengths], "blocked": [128.0 * n for n in lengths]},
        budget=2.0**30, budget_label="1 GiB", measured={"measured": ([1024], [2.0e6])})
    assert isinstance(fig, plt.Figure)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "1 GiB" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_walk_figure_has_one_patch_per_tile_and_one_bar_per_program():
    from teachkit.kernels.flash_hopper import walk_schedule

    walks = walk_schedule(8, 3, 4, causal=True)
    fig = plot_walk(walks, 8, 3)
    tiles, bars = fig.axes
    assert len(tiles.patches) == 8 * 3
    assert [round(p.get_height()) for p in bars.patches] == [
        sum(m + 1 for _, m in w) for w in walks]
    labels = {t.get_text() for t in tiles.texts}
    assert "p0.0" in labels and "p3.1" in labels


def test_key_order_figure_labels_each_block_with_its_step_and_marks_the_masked_one():
    from matplotlib.colors import to_hex

    from teachkit.kernels.flash_hopper import key_block_order
    from teachkit.tiling import FULL, MASKED

    in_order = [list(range(len(b))) for b in key_block_order(1024, 1024, 256, causal=True)]
    fig = plot_key_order({"in order": in_order,
                          "diagonal first": key_block_order(1024, 1024, 256, causal=True)},
                         256, 1024)
    first, second = fig.axes
    assert len(first.patches) == len(second.patches) == 20  # 1+1+2+2+3+3+4+4 blocks
    colours = [to_hex(p.get_facecolor()) for p in second.patches]
    assert colours.count(TILE_COLORS[MASKED]) == 8  # one masked block a tile
    assert colours.count(TILE_COLORS[FULL]) == 12
    # tile 7 reads blocks 3, 2, 1, 0 diagonal first: the masked block 3 at step 1
    masked_steps = [t.get_text() for t, p in zip(second.texts, second.patches, strict=True)
                    if to_hex(p.get_facecolor()) == TILE_COLORS[MASKED]]
    assert set(masked_steps) == {"1"}
    masked_steps = [t.get_text() for t, p in zip(first.texts, first.patches, strict=True)
                    if to_hex(p.get_facecolor()) == TILE_COLORS[MASKED]]
    assert masked_steps == ["1", "1", "2", "2", "3", "3", "4", "4"]
