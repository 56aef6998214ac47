"""Solutions of the exercises of notebook 10, kept apart from their checkers in
:mod:`teachkit.exercises.ex10`."""

from __future__ import annotations

import torch

from ...attention import blockwise_attention, merge_partials
from ...ring.attention import attend_block
from ...tiling import FULL, MASKED, SKIP, STRICT, TileKind

__all__ = ["solution_ring_plan", "solution_strict_block", "solution_ring_rank"]

NEG_INF = float("-inf")


def solution_ring_plan(rank: int, world_size: int, causal: bool,
                       layout: str) -> list[tuple[int, TileKind]]:
    """The ``(source rank, mask)`` of the key/value block rank ``rank`` holds at each step.

    Blocks move one rank forward per step (to ``r + 1``), so at step ``t`` rank ``r`` holds the
    block that started on rank ``s = (r - t) mod W``; at step 0 its own. The mask compares the
    token positions: contiguous rank ``r`` holds ``r n .. (r+1) n - 1``, so an earlier rank's
    block (``s < r``) is visible in full, its own is masked as causal and a later one is
    skipped. Striped rank ``r`` holds tokens ``r + W a``; key ``b`` of rank ``s`` (token
    ``s + W b``) is visible to query ``a`` iff ``W (b - a) <= r - s``: ``b <= a`` (``MASKED``)
    when ``s <= r``, ``b < a`` (``STRICT``) when ``s > r``. Without a causal mask every block is
    ``FULL``.

    Returns
    -------
    list of (int, TileKind)
        One ``(source rank, mask)`` per step ``t = 0 .. W-1``; masks are
        :class:`~teachkit.tiling.TileKind` members: ``FULL``, ``MASKED``, ``STRICT`` or ``SKIP``.
    """
    plan = []
    for step in range(world_size):
        src = (rank - step) % world_size
        if not causal:
            mask = FULL
        elif layout == "contiguous":
            mask = FULL if src < rank else MASKED if src == rank else SKIP
        else:
            mask = MASKED if src <= rank else STRICT
        plan.append((src, mask))
    return plan


def solution_strict_block(q: torch.Tensor, k: torch.Tensor,
                          v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention where local query ``a`` sees local keys ``b < a`` only (striped, ``s > r``).

    That is causal attention of queries ``1 .. n-1`` against keys ``0 .. n-2``: query ``a``
    (row ``a - 1`` of the shifted problem) sees keys ``0 .. a - 1``. Query 0 sees no key, so its
    row is ``out = 0`` and ``lse = -inf``, the empty partial that the merge weighs by 0.
    The scale is ``1/sqrt(D)``.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``(..., n, D)`` blocks of one rank's queries and another rank's keys and values.

    Returns
    -------
    out : torch.Tensor
        ``(..., n, D)`` in q's dtype.
    lse : torch.Tensor
        ``(..., n)`` float32 (float64 for float64).
    """
    out = torch.zeros_like(q)
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = torch.full(q.shape[:-1], NEG_INF, dtype=lse_dtype, device=q.device)
    out_b, lse_b = blockwise_attention(q[..., 1:, :], k[..., :-1, :], v[..., :-1, :],
                                       causal=True)
    out[..., 1:, :] = out_b
    lse[..., 1:] = lse_b
    return out, lse


def solution_ring_rank(q: torch.Tensor, k_blocks: list[torch.Tensor],
                       v_blocks: list[torch.Tensor], rank: int, causal: bool,
                       layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One rank's whole ring: attend its queries to every block in ring order, merging as it goes.

    At step ``t`` the rank holds the block of rank ``s = (rank - t) mod W``
    (:func:`solution_ring_plan`); :func:`teachkit.ring.attend_block` gives the partial
    ``(out_b, lse_b)`` of that block under its mask (zeros and ``-inf`` for a skipped one) and
    :func:`teachkit.attention.merge_partials` folds it into the running ``(out, lse)``, which
    starts as the first block's partial.

    Parameters
    ----------
    q : torch.Tensor
        ``(..., n, D)``: this rank's queries.
    k_blocks, v_blocks : list of torch.Tensor
        The key and value blocks of ranks ``0 .. W-1``, each ``(..., n, D)``.
    rank : int
        This rank.
    causal : bool
        Causal attention over the whole sequence.
    layout : str
        ``"contiguous"`` or ``"striped"``.

    Returns
    -------
    out : torch.Tensor
        ``(..., n, D)`` in q's dtype.
    lse : torch.Tensor
        ``(..., n)`` float32 (float64 for float64).
    """
    out = lse = None
    for src, mask in solution_ring_plan(rank, len(k_blocks), causal, layout):
        part = attend_block(q, k_blocks[src], v_blocks[src], mask, block_attention="torch")
        out, lse = part if out is None else merge_partials(out, lse, *part)
    return out, lse
