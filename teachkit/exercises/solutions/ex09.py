"""Solutions of the exercises of notebook 09, kept apart from their checkers in
:mod:`teachkit.exercises.ex09`."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ...kernels.decode import MAX_SPLITS, fullest_wave_tiles

__all__ = ["solution_num_splits", "solution_merge_splits", "solution_token_rows",
           "solution_tile_keys", "solution_merge_kernel", "solution_last_wave_splits",
           "solution_fullest_wave_tiles", "solution_fullest_wave_plan"]

NEG_INF = float("-inf")


def solution_num_splits(programs: int, key_blocks: int, sms: int) -> int:
    """No split when every SM already has a program; else the most splits whose grid still fits
    in one wave of two programs per SM, within bounds.

    The unsplit grid has ``programs`` programs (``B * H_kv``); ``s`` splits make
    ``programs * s``. If ``programs >= sms`` the grid is full and splitting only adds traffic:
    ``s = 1``. Otherwise one wave of two programs per SM holds ``s = 2 * sms // programs``
    splits (rounded down: one split more would start a second wave that is nearly empty). A
    split must hold at least one key block, so ``s <= key_blocks``, and the merge kernel takes
    at most ``MAX_SPLITS`` (128); there is always at least one split.
    """
    if programs >= sms:
        return 1
    fit = 2 * sms // programs  # the most splits in one wave of 2 programs per SM
    return max(1, min(fit, key_blocks, MAX_SPLITS))


def solution_last_wave_splits(programs: int, sms: int, resident: int, most: int) -> int:
    """The count of ranges, from 2 to ``most``, whose grid ends on the fullest last wave.

    An SM holds ``resident`` programs of these tiles at once, so a wave is ``resident * sms``
    programs. Cut into ``n`` ranges, the ``programs`` of the unsplit grid become
    ``programs * n``: that many waves, ``programs * n / (resident * sms)``, of which the GPU
    runs ``ceil`` of them, the last one partly empty. Its fill is ``waves / ceil(waves)``: 1
    when the grid ends on a whole wave. Keep the count with the largest fill; on a tie the
    fewer ranges, which write fewer partial results for the merge.
    """
    best, best_fill = 2, 0.0
    for n in range(2, most + 1):
        waves = programs * n / (resident * sms)
        fill = waves / math.ceil(waves)
        if fill > best_fill:  # strictly larger: a tie keeps the fewer ranges
            best, best_fill = n, fill
    return best


def solution_fullest_wave_tiles(programs: int, sms: int,
                                tiles: tuple[tuple[int, int, int], ...]) -> tuple[int, int, int]:
    """The tiles, of ``tiles`` (``(stage bytes, stages, programs an SM)``, the usual ones first),
    that an unsplit grid of ``programs`` runs with on ``sms`` SMs.

    While the grid fits in one wave of the usual tiles (``programs <= resident * sms``) every
    program runs at once and there is no last wave to wait for: keep them. Otherwise a wave of
    tiles ``t`` is ``t[2] * sms`` programs, the GPU runs ``ceil(programs / places)`` of them,
    and the last one is ``programs / (places * waves)`` full: one division of whole numbers, so
    two tiles that fill their last wave alike compare equal. Keep the fullest; on a tie the
    first, the usual tiles before the others.
    """
    usual = tiles[0]
    if programs <= usual[2] * sms:
        return usual
    best, best_fill = usual, 0.0
    for tile in tiles:
        places = tile[2] * sms
        fill = programs / (places * -(-programs // places))
        if fill > best_fill:  # strictly larger: a tie keeps the earlier tiles
            best, best_fill = tile, fill
    return best


def solution_merge_splits(outs: torch.Tensor, lses: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Merge the partial results of ``n`` splits of the keys: notebook 04's rule for ``n`` parts.

    .. math::  m = \max_s lse_s,\quad w_s = e^{lse_s - m},\quad
               out = \frac{\sum_s w_s\, out_s}{\sum_s w_s},\quad lse = m + \log \sum_s w_s.

    Subtracting the largest lse keeps every weight in ``[0, 1]`` (no overflow, however large
    the scores); an empty split (``lse = -inf``) weighs 0. A row whose splits are all empty saw
    no key: zeros and ``-inf``, as ``scaled_dot_product_attention`` gives.

    Parameters
    ----------
    outs : torch.Tensor
        ``(n, ..., D)``: each split's output, normalised over its own keys (zeros if empty).
    lses : torch.Tensor
        ``(n, ...)``: each split's log-sum-exp, ``-inf`` if empty.

    Returns
    -------
    out : torch.Tensor
        ``(..., D)`` in ``outs``' dtype.
    lse : torch.Tensor
        ``(...)`` in ``lses``' dtype.
    """
    m = lses.amax(dim=0)
    m = torch.where(m == NEG_INF, 0.0, m)  # every split empty: any finite shift will do
    w = torch.exp(lses - m)  # (n, ...), each in [0, 1]
    total = w.sum(dim=0)
    safe = torch.where(total > 0, total, 1.0)
    out = (w.unsqueeze(-1) * outs.to(w.dtype)).sum(dim=0) / safe.unsqueeze(-1)
    lse = torch.where(total > 0, m + torch.log(safe), NEG_INF)
    return out.to(outs.dtype), lse


def solution_token_rows(block_table: torch.Tensor, page_size: int,
                        positions: torch.Tensor) -> torch.Tensor:
    """Rows of the flattened page pool that hold the given logical tokens.

    Token ``t`` of sequence ``b`` lies in its logical page ``t // page_size``, which the table
    maps to the physical page ``block_table[b, t // page_size]``; inside it, at slot
    ``t % page_size``. Seen as rows ``pool.view(num_pages * page_size, ...)``, that is row
    ``page * page_size + slot``. ``torch.gather`` picks, for every (b, t), the entry of row b.

    Parameters
    ----------
    block_table : torch.Tensor
        ``(B, max_pages)`` integers.
    page_size : int
        Tokens per page.
    positions : torch.Tensor
        ``(B, n)`` logical positions.

    Returns
    -------
    torch.Tensor
        ``(B, n)`` int64 rows.
    """
    logical = positions.long() // page_size
    page = torch.gather(block_table.long(), 1, logical)
    return page * page_size + positions.long() % page_size


def solution_tile_keys(start: int, block_n: int, page_size: int) -> torch.Tensor:
    """The key each row of a tile holds with the tile's pages interleaved.

    The tile holds the ``block_n`` keys from ``start`` (a multiple of ``block_n``), which fill
    ``n = block_n // page_size`` whole pages. Row ``i`` takes slot ``i // n`` of the tile's
    page ``i % n``: rows ``r, r + n, r + 2n, ...`` all lie in page ``r``, so a thread that loads
    rows ``n`` apart looks up one table entry.

    Parameters
    ----------
    start : int
        The tile's first key.
    block_n : int
        Keys a tile, a multiple of ``page_size``.
    page_size : int
        Tokens a page.

    Returns
    -------
    torch.Tensor
        ``(block_n,)`` int64: row ``i``'s key.
    """
    rows = torch.arange(block_n)
    n = block_n // page_size
    return start + (rows % n) * page_size + rows // n


@triton.jit
def solution_merge_kernel(O_PART, LSE_PART, O, LSE, num_splits,
                          stride_ps, stride_pr, stride_ls, stride_o,
                          HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr):
    """Program ``row``: merge the ``num_splits`` partial results of one row by their lse.

    ``O_PART`` is ``(num_splits, n_rows, HEAD_DIM)`` (split ``s``, row ``r`` at
    ``s * stride_ps + r * stride_pr``), ``LSE_PART`` ``(num_splits, n_rows)`` (split rows
    ``stride_ls`` apart), both float32; ``O`` is ``(n_rows, HEAD_DIM)`` (rows ``stride_o``
    apart) and ``LSE`` ``(n_rows,)`` float32. ``SPLITS`` is a power of two at least
    ``num_splits``: the partials are one ``(SPLITS, HEAD_DIM)`` tile, the rows past
    ``num_splits`` masked (lse ``-inf``, weight 0). Empty splits have lse ``-inf`` and weigh 0;
    a row whose splits are all empty gets zeros and ``-inf``."""
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, SPLITS)                                   # (SPLITS,)
    offs_d = tl.arange(0, HEAD_DIM)                                 # (HEAD_DIM,)
    used = offs_s < num_splits
    lse = tl.load(LSE_PART + offs_s * stride_ls + row, mask=used,
                  other=float("-inf"))                              # (SPLITS,)
    part = tl.load(O_PART + offs_s[:, None] * stride_ps + row * stride_pr + offs_d[None, :],
                   mask=used[:, None], other=0.0)                   # (SPLITS, HEAD_DIM)
    m = tl.max(lse, 0)                                              # -inf: every split empty
    shift = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - shift)                                         # (SPLITS,), each <= 1
    total = tl.sum(w, 0)
    safe = tl.where(total == 0.0, 1.0, total)                       # no key: no 0 / 0
    out = tl.sum(w[:, None] * part, 0) / safe                       # (HEAD_DIM,)
    tl.store(O + row * stride_o + offs_d, out.to(O.dtype.element_ty))
    tl.store(LSE + row, tl.where(total == 0.0, float("-inf"), shift + tl.log(safe)))


def solution_fullest_wave_plan(programs: int, sms: int, tiles: tuple[tuple[int, int, int], ...],
                               most: int, gain: float) -> tuple[tuple[int, int, int], int]:
    """The tiles and the count of ranges (1 to ``most``) that a grid of ``programs`` unsplit on
    ``sms`` SMs runs with: the unsplit pick of exercise 1c, unless some tiles cut into 2 to
    ``most`` ranges fill their last wave more than ``gain`` fuller.

    While the grid fits in one wave of the usual tiles there is no last wave to fill: keep them,
    unsplit. Otherwise the grid would run unsplit with the tiles of ``fullest_wave_tiles`` (the
    solution of exercise 1c), whose last wave has some fill. Cut into ``n`` ranges the grid has
    ``programs * n`` programs, and with tiles ``t`` it runs in waves of ``t[2] * sms``; keep the
    fullest last wave, trying the counts from the fewest and the tiles in order, so that a tie
    keeps the fewer ranges (fewer partial results to merge) and then the earlier tiles. Split
    only if that wave is more than ``gain`` fuller than the unsplit pick's: each range writes a
    partial result the merge reads back, and the fill is a model of the time, not the time.
    """
    if programs <= tiles[0][2] * sms:
        return tiles[0], 1
    kept = fullest_wave_tiles(programs, sms, tiles)
    places = kept[2] * sms
    kept_fill = programs / (places * -(-programs // places))
    best, best_fill = (kept, 1), 0.0
    for ranges in range(2, most + 1):
        for tile in tiles:
            places = tile[2] * sms
            fill = programs * ranges / (places * -(-programs * ranges // places))
            if fill > best_fill:  # strictly larger: a tie keeps fewer ranges, earlier tiles
                best, best_fill = (tile, ranges), fill
    return best if best_fill > kept_fill + gain else (kept, 1)
