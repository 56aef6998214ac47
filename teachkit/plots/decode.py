"""Pictures of decoding: SMs left idle, bandwidth per provider, memory under three allocators,
waste against page size, and a block table mapping logical pages to a pool.

:func:`plot_sm_occupancy` draws a GPU's SMs as squares, filled by the programs of a grid.
:func:`plot_decode_bandwidth` draws the benchmark of :mod:`teachkit.bench.decode`: GB/s against
cache length per provider, one panel per batch size, and the speed-up of the teachkit kernels
over the unsplit one. :func:`plot_memory_snapshots` and :func:`plot_waste_against_page_size` draw
what :func:`teachkit.paging.simulate_serving` measured; :func:`plot_block_table` draws a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from .figures import label_device, new_axes

__all__ = [
    "plot_sm_occupancy",
    "plot_decode_bandwidth",
    "split_sweep_rates",
    "plot_split_sweep",
    "plot_memory_snapshots",
    "plot_waste_against_page_size",
    "plot_block_table",
]


def _seq_color(i: int) -> tuple:
    return plt.get_cmap("tab20")(i % 20)


def plot_sm_occupancy(grids: Mapping[str, int], sms: int, per_row: int = 33,
                      title: str | None = None) -> plt.Figure:
    """One panel per grid: the GPU's SMs as squares, those that get a program filled.

    A grid of ``p`` programs keeps ``min(p, sms)`` SMs busy in its first wave; the rest idle
    (the label says how many waves the grid takes when ``p > sms``).

    Parameters
    ----------
    grids : mapping of str to int
        A label per grid and its number of programs.
    sms : int
        SMs of the GPU (132 on an H100 SXM).
    per_row : int
        Squares per row.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = -(-sms // per_row)
    fig, axes = plt.subplots(len(grids), 1, figsize=(7.5, (0.22 * rows + 0.5) * len(grids)),
                             squeeze=False)
    for ax, (label, programs) in zip(axes[:, 0], grids.items(), strict=True):
        busy = min(programs, sms)
        for i in range(sms):
            r, c = divmod(i, per_row)
            ax.add_patch(Rectangle((c, -r), 0.85, 0.85, color="#4c9be8" if i < busy
                                   else "#e5e5e5"))
        waves = programs / sms
        ax.set_title(f"{label}: {programs} programs, {busy} of {sms} SMs busy"
                     + (f" ({waves:.1f} waves)" if programs > sms else ""),
                     fontsize=9, loc="left")
        ax.set_xlim(-0.2, per_row)
        ax.set_ylim(-rows + 0.7, 1)
        ax.set_aspect("equal")
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_decode_bandwidth(results: list, ceiling: float | None = None,
                          baseline: str = "teachkit unsplit", device: str | None = None,
                          title: str = "Decoding one token: K and V read per second"
                          ) -> plt.Figure:
    """GB/s against cache length per provider (top), speed-up over ``baseline`` (bottom);
    one column per batch size.

    Parameters
    ----------
    results : list of teachkit.bench.Measurement
        What :func:`teachkit.bench.decode.bench_decode` returned (or a saved record): read by
        their ``params`` ``B`` (the column) and ``S`` (the x axis).
    ceiling : float, optional
        The measured copy bandwidth, a dashed line.
    baseline : str
        The provider the speed-ups are relative to.
    device : str, optional
        Written in the corner (default: this machine).
    title : str
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    table: dict[int, dict[str, dict[int, float]]] = {}
    for r in results:
        table.setdefault(r.params["B"], {}).setdefault(r.provider, {})[r.params["S"]] = r.value
    providers = list(dict.fromkeys(r.provider for r in results))
    batches = sorted(table)
    fig, axes = plt.subplots(2, len(batches), figsize=(4.2 * len(batches), 6.4), squeeze=False,
                             sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    top = max([r.value for r in results] + [ceiling or 0]) * 1.1
    for col, batch in enumerate(batches):
        ax, ax2 = axes[0, col], axes[1, col]
        for j, prov in enumerate(providers):
            pts = table[batch].get(prov, {})
            if not pts:
                continue
            xs = sorted(pts)
            teach = prov.startswith("teachkit")
            style = {"lw": 2.2 if teach else 1.2, "ls": "-" if teach else "--",
                     "marker": "o" if teach else ".", "color": f"C{j}"}
            ax.plot(xs, [pts[x] for x in xs], label=prov, **style)
            base = table[batch].get(baseline, {})
            if teach and prov != baseline and base:
                common = [x for x in xs if x in base]
                ax2.plot(common, [pts[x] / base[x] for x in common], label=prov, **style)
        if ceiling:
            ax.axhline(ceiling, color="k", ls=":", lw=1)
            ax.text(min(min(t) for t in table[batch].values()), ceiling, f" copy {ceiling:.0f}",
                    va="bottom", fontsize=8)
        ax.set_ylim(0, top)
        ax.set_title(f"batch {batch}", fontsize=10)
        ax.grid(alpha=0.3)
        ax2.axhline(1, color="0.5", lw=0.8)
        ax2.grid(alpha=0.3)
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("cache length (tokens)")
        lengths = sorted({x for p in table[batch].values() for x in p})
        ax2.set_xticks(lengths, [f"{x // 1024}k" if x % 1024 == 0 else str(x)
                                 for x in lengths], fontsize=8)
    axes[0, 0].set_ylabel("GB/s of K and V")
    axes[1, 0].set_ylabel(f"speed-up over\n{baseline}")
    axes[0, -1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=11)
    label_device(fig, device)
    fig.tight_layout()
    return fig


def split_sweep_rates(results: Iterable, block_n: int = 64
                      ) -> dict[tuple[int, int], dict[int, float]]:
    """A split sweep's figures at one ``BLOCK_N``: ``(B, S)`` to ``{num_splits: value}``, in
    the order measured.

    Parameters
    ----------
    results : iterable of teachkit.bench.Measurement
        A sweep: ``params`` with ``B`` and ``S``, ``provider_params`` with ``num_splits`` and
        ``block_n`` (:func:`teachkit.bench.decode.split_params`); others raise ``ValueError``.
    block_n : int
        Which ``BLOCK_N`` of the sweep to keep.

    Examples
    --------
    >>> from types import SimpleNamespace as Row
    >>> rows = [Row(params={"B": 1, "S": 4096}, provider="", value=100.0 * n,
    ...             provider_params={"num_splits": n, "block_n": bn})
    ...         for n in (1, 8) for bn in (32, 64)]
    >>> split_sweep_rates(rows)
    {(1, 4096): {1: 100.0, 8: 800.0}}
    """
    rates: dict[tuple[int, int], dict[int, float]] = {}
    for r in results:
        swept = r.provider_params
        if "num_splits" not in swept or "block_n" not in swept:
            raise ValueError(f"{r.provider!r} is not a split sweep's provider: its "
                             "provider_params need num_splits and block_n")
        if swept["block_n"] == block_n:
            rates.setdefault((r.params["B"], r.params["S"]), {})[swept["num_splits"]] = r.value
    return rates


def plot_split_sweep(results: list, ceiling: float | None = None, block_n: int = 64,
                     picks: Mapping[tuple[int, int], int] | None = None,
                     device: str | None = None,
                     title: str = "Split-KV at batch 1: GB/s against the number of splits"
                     ) -> plt.Figure:
    """GB/s of split-KV against ``num_splits``, one line per problem (cache length), for the
    sweep's runs at ``BLOCK_N = block_n``; a ring marks the split count a rule picks.

    Parameters
    ----------
    results : list of teachkit.bench.Measurement
        A sweep, as :func:`split_sweep_rates` reads it; the lines are labelled with the
        results' ``problem``.
    ceiling : float, optional
        The measured copy bandwidth, a dotted line.
    block_n : int
        Which ``BLOCK_N`` of the sweep to draw.
    picks : mapping of (int, int) to int, optional
        ``(B, S)`` to the number of splits to mark (e.g. what ``choose_num_splits`` returns).
    device : str, optional
        Written in the corner (default: this machine).
    title : str
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    results = list(results)
    lines = split_sweep_rates(results, block_n)
    if not lines:
        raise ValueError(f"no results at BLOCK_N = {block_n} to draw")
    labels = {(r.params["B"], r.params["S"]): r.problem for r in results}
    fig, ax = new_axes(width=7.5, height=4.2)
    for j, problem in enumerate(sorted(lines)):
        pts = lines[problem]
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], marker="o", ms=4, color=f"C{j}",
                label=labels[problem])
        pick = (picks or {}).get(problem)
        if pick in pts:
            ax.plot([pick], [pts[pick]], "o", ms=11, mfc="none", mec=f"C{j}", mew=1.8)
    if ceiling:
        ax.axhline(ceiling, color="k", ls=":", lw=1)
        ax.text(1, ceiling, f" copy {ceiling:.0f}", va="bottom", fontsize=8)
    ax.set_xscale("log", base=2)
    ticks = sorted({x for pts in lines.values() for x in pts})
    ax.set_xticks(ticks, [str(x) for x in ticks], fontsize=8)
    ax.set_xlabel(f"num_splits (BLOCK_N = {block_n})")
    ax.set_ylabel("GB/s of K and V")
    ax.set_ylim(0, max([v for pts in lines.values() for v in pts.values()] + [ceiling or 0]) * 1.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title, fontsize=11)
    label_device(fig, device)
    fig.tight_layout()
    return fig


def plot_memory_snapshots(runs: Sequence, title: str | None = None) -> plt.Figure:
    """Each allocator's memory at its busiest step: one strip of slots per policy.

    Every sequence has its colour: solid where its slots hold tokens, pale where they are
    reserved but empty; white is free.

    Parameters
    ----------
    runs : sequence of teachkit.paging.ServingStats
        From :func:`teachkit.paging.simulate_serving`, one per policy.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 0.95 * len(runs) + 0.5), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        for seq, start, size, written in run.snapshot:
            color = _seq_color(seq)
            ax.add_patch(Rectangle((start, 0), written, 1, color=color, lw=0))
            ax.add_patch(Rectangle((start + written, 0), size - written, 1, color=color,
                                   alpha=0.25, lw=0))
        ax.set_xlim(0, run.capacity)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        name = run.policy + (f" (pages of {run.page_size})" if run.page_size else "")
        tokens = sum(w for *_, w in run.snapshot)
        sequences = len({seq for seq, *_ in run.snapshot})
        ax.set_title(f"{name}: {sequences} sequences, {tokens / run.capacity:.0%} of memory "
                     "holds tokens", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("memory slot (one token's keys and values)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_waste_against_page_size(runs: Mapping[int, object],
                                 references: Sequence = (),
                                 title: str = "Paged memory: waste against page size"
                                 ) -> plt.Figure:
    """Left: fraction of the handed-out memory holding no token; right: sequences served at
    once; against page size, with contiguous policies as horizontal lines.

    Parameters
    ----------
    runs : mapping of int to teachkit.paging.ServingStats
        From :func:`teachkit.paging.waste_against_page_size`.
    references : sequence of teachkit.paging.ServingStats
        Contiguous runs (``"reserve max"``, ``"reserve exact"``) to draw as lines.
    title : str
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, (ax, ax2) = new_axes(2, width=4.8, height=3.4)
    sizes = sorted(runs)
    ax.plot(sizes, [100 * runs[p].wasted for p in sizes], "o-", color="C0", label="paged")
    ax2.plot(sizes, [runs[p].mean_running for p in sizes], "o-", color="C0", label="paged")
    for i, ref in enumerate(references):
        color = f"C{i + 1}"
        ax.axhline(100 * ref.wasted, color=color, ls="--", lw=1, label=ref.policy)
        ax2.axhline(ref.mean_running, color=color, ls="--", lw=1, label=ref.policy)
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xticks(sizes, [str(p) for p in sizes])
        a.set_xlabel("page size (tokens)")
        a.grid(alpha=0.3)
    ax.set_ylabel("% of handed-out memory empty")
    ax.set_ylim(0, 100)
    ax2.set_ylabel("sequences decoding at once")
    ax2.set_ylim(0, None)
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_block_table(block_table: torch.Tensor, cache_seqlens: Sequence[int] | torch.Tensor,
                     page_size: int, num_pages: int,
                     title: str | None = None) -> plt.Figure:
    """The block table (left) and the page pool it points into (right).

    Each sequence has a colour; a table cell shows the physical page of a logical page, and the
    pool shows, for each physical page, whose logical page it holds and how full it is.

    Parameters
    ----------
    block_table : torch.Tensor
        ``(B, max_pages)``, -1 for no page.
    cache_seqlens : sequence of int or torch.Tensor
        ``(B,)`` lengths.
    page_size, num_pages : int
        The pool's shape.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    table = block_table.detach().cpu().tolist()
    lens = [int(n) for n in torch.as_tensor(cache_seqlens).tolist()]
    B, width = len(table), len(table[0]) if table else 0
    per_row = min(num_pages, 12)
    pool_rows = -(-num_pages // per_row)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(3 + 0.7 * (width + per_row),
                                                 1.2 + 0.55 * max(B, pool_rows)),
                                  gridspec_kw={"width_ratios": [max(width, 1), per_row]})
    owner: dict[int, tuple[int, int, int]] = {}
    for b, row in enumerate(table):
        for p, page in enumerate(row):
            used = min(page_size, lens[b] - p * page_size) if page >= 0 else 0
            color = _seq_color(b) if page >= 0 else "#f2f2f2"
            ax.add_patch(Rectangle((p, -b), 0.92, 0.9, color=color, alpha=0.9 if page >= 0
                                   else 1))
            ax.text(p + 0.46, -b + 0.45, str(page), ha="center", va="center", fontsize=9)
            if page >= 0:
                owner[page] = (b, p, used)
    ax.set_xlim(-0.1, max(width, 1))
    ax.set_ylim(-B + 0.8, 1.1)
    ax.set_yticks([-b + 0.45 for b in range(B)], [f"seq {b} ({lens[b]})" for b in range(B)])
    ax.set_xticks([p + 0.46 for p in range(width)], [str(p) for p in range(width)])
    ax.set_xlabel("logical page")
    ax.set_title("block table: physical page per logical page", fontsize=9)
    for spine in ax.spines.values():
        spine.set_visible(False)
    for page in range(num_pages):
        r, c = divmod(page, per_row)
        if page in owner:
            b, p, used = owner[page]
            ax2.add_patch(Rectangle((c, -r), 0.92, 0.9, color=_seq_color(b), alpha=0.25))
            ax2.add_patch(Rectangle((c, -r), 0.92 * used / page_size, 0.9, color=_seq_color(b)))
            ax2.text(c + 0.46, -r + 0.45, f"s{b}:{p}", ha="center", va="center", fontsize=7)
        else:
            ax2.add_patch(Rectangle((c, -r), 0.92, 0.9, fill=False, ec="0.7"))
        ax2.text(c + 0.04, -r + 0.82, str(page), fontsize=6, color="0.3", va="top")
    ax2.set_xlim(-0.1, per_row)
    ax2.set_ylim(-pool_rows + 0.8, 1.1)
    ax2.axis("off")
    ax2.set_title(f"pool of {num_pages} pages of {page_size} tokens (seq:logical page; "
                  "fill = tokens written)", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
