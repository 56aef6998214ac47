r"""Which tokens each worker holds, and which key/value block it meets at each step of the ring.

A sequence of ``N`` tokens is split along its length among ``W`` workers (ranks ``0 .. W-1``),
``n = N / W`` tokens each. Two assignments:

* ``"contiguous"``: rank ``r`` holds tokens ``r n, r n + 1, ..., (r + 1) n - 1``;
* ``"striped"``: rank ``r`` holds tokens ``r, r + W, r + 2W, ...`` (every ``W``-th token).

At step ``t`` of the ring, rank ``r`` holds the key/value block that started on rank
``(r - t) mod W`` (blocks travel to ``r + 1``). With a causal mask, the block of rank ``s`` meets
the queries of rank ``r`` in one of four ways (:func:`block_mask`), the kinds of
:class:`teachkit.tiling.TileKind` that sort the tiles of blocked attention, plus ``STRICT``:

=============  ===========================================  =====================================
mask           when                                         query ``a`` of rank ``r`` sees key ``b``
=============  ===========================================  =====================================
``FULL``       not causal; or contiguous with ``s < r``     always
``MASKED``     contiguous ``s == r``; striped ``s <= r``    ``b <= a`` (the causal mask)
``STRICT``     striped ``s > r``                            ``b < a`` (query 0 sees nothing)
``SKIP``       contiguous ``s > r``                         never: the block is not computed
=============  ===========================================  =====================================

(``a`` and ``b`` are local indices within the blocks.) For the striped rows: query ``a`` of rank
``r`` is token ``r + W a`` and key ``b`` of rank ``s`` is token ``s + W b``; the key is visible
iff ``W (b - a) <= r - s``, and ``r - s`` lies in ``[0, W)`` when ``s <= r`` (so ``b <= a``) and in
``(-W, 0)`` when ``s > r`` (so ``b < a``).

Examples
--------
>>> positions(1, 3, 4, "contiguous").tolist(), positions(1, 3, 4, "striped").tolist()
([4, 5, 6, 7], [1, 4, 7, 10])
>>> [str(block_mask(2, s, 3, causal=True, layout="contiguous")) for s in range(3)]
['full', 'full', 'masked']
>>> [str(block_mask(0, s, 3, causal=True, layout="striped")) for s in range(3)]
['masked', 'strict', 'strict']
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..tiling import FULL, MASKED, SKIP, STRICT, TileKind, count_tiles
from ..validation import require_positive_int

__all__ = [
    "LAYOUTS",
    "require_layout",
    "local_length",
    "positions",
    "shard",
    "unshard",
    "source_rank",
    "block_mask",
    "ring_schedule",
    "ring_tiles",
]

LAYOUTS = ("contiguous", "striped")
"""How tokens are assigned to ranks."""



def require_layout(layout: object) -> str:
    """Return ``layout`` if it is ``"contiguous"`` or ``"striped"``, else raise ``ValueError``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout  # type: ignore[return-value]


def _require_rank(rank: object, world_size: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    return rank


def local_length(seq_len: int, world_size: int) -> int:
    """Tokens per rank, ``seq_len // world_size``; ``ValueError`` unless ``world_size`` divides it.

    The ring needs every rank to hold a block of the same length (each receives exactly what its
    neighbour sends). Pad the sequence to a multiple of ``world_size`` and mask the padding, or
    pick a ``world_size`` that divides it.

    Examples
    --------
    >>> local_length(12, 4)
    3
    """
    require_positive_int(world_size, "world_size")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"the sequence length must be a positive int, got {seq_len!r}")
    if seq_len % world_size:
        down = seq_len - seq_len % world_size
        raise ValueError(
            f"the sequence length {seq_len} is not a multiple of world_size={world_size}: every "
            f"rank must hold the same number of tokens; pass a length that {world_size} divides "
            f"(e.g. pad to {down + world_size}), or another world_size"
        )
    return seq_len // world_size


def positions(rank: int, world_size: int, n_local: int, layout: str = "contiguous") -> torch.Tensor:
    """The global token positions rank ``rank`` holds, in its local order (int64 tensor).

    Examples
    --------
    >>> positions(2, 4, 3, "striped").tolist()
    [2, 6, 10]
    """
    require_positive_int(world_size, "world_size")
    _require_rank(rank, world_size)
    require_layout(layout)
    local = torch.arange(n_local)
    return rank * n_local + local if layout == "contiguous" else rank + world_size * local


def shard(x: torch.Tensor, rank: int, world_size: int, layout: str = "contiguous",
          dim: int = -2) -> torch.Tensor:
    """Rank ``rank``'s block of ``x`` along ``dim`` (the sequence axis), as a new tensor.

    The block is a contiguous copy, never a view of ``x``: a rank may use it as a buffer (the
    ring overwrites donated key/value blocks) without touching the whole sequence.

    Parameters
    ----------
    x : torch.Tensor
        A whole sequence, e.g. ``(B, H, N, D)``; ``world_size`` must divide ``N``.
    rank, world_size : int
        Which block, of how many.
    layout : str
        ``"contiguous"`` (tokens ``r n .. (r+1) n - 1``) or ``"striped"`` (``r, r + W, ...``).
    dim : int
        The sequence axis.

    Examples
    --------
    >>> x = torch.arange(8).reshape(1, 8, 1)
    >>> shard(x, 1, 2).flatten().tolist(), shard(x, 1, 2, "striped").flatten().tolist()
    ([4, 5, 6, 7], [1, 3, 5, 7])
    """
    require_layout(layout)
    n = local_length(x.shape[dim], world_size)
    _require_rank(rank, world_size)
    if layout == "contiguous":
        block = x.narrow(dim, rank * n, n)
    else:
        index = [slice(None)] * x.dim()
        index[dim] = slice(rank, None, world_size)
        block = x[tuple(index)]
    return block.clone(memory_format=torch.contiguous_format)


def unshard(blocks: Sequence[torch.Tensor], layout: str = "contiguous",
            dim: int = -2) -> torch.Tensor:
    """Put the blocks of ranks ``0 .. W-1`` back into one sequence: the inverse of :func:`shard`.

    Examples
    --------
    >>> x = torch.randn(2, 9, 3)
    >>> all(torch.equal(unshard([shard(x, r, 3, lay) for r in range(3)], lay), x)
    ...     for lay in ("contiguous", "striped"))
    True
    """
    require_layout(layout)
    if not blocks:
        raise ValueError("unshard needs the blocks of every rank, got none")
    whole = torch.cat(list(blocks), dim=dim)
    if layout == "contiguous":
        return whole
    # whole holds rank 0's tokens, then rank 1's, ...: token W a + r sits at index r n + a.
    W = len(blocks)
    n = blocks[0].shape[dim]
    order = torch.arange(W * n, device=whole.device).reshape(W, n).t().flatten()
    return whole.index_select(dim, order)


def source_rank(rank: int, step: int, world_size: int) -> int:
    """The rank whose key/value block rank ``rank`` holds at ``step`` (blocks move to ``r + 1``).

    Examples
    --------
    >>> [source_rank(1, t, 4) for t in range(4)]
    [1, 0, 3, 2]
    """
    require_positive_int(world_size, "world_size")
    _require_rank(rank, world_size)
    return (rank - step) % world_size


def block_mask(rank: int, src: int, world_size: int, causal: bool,
               layout: str = "contiguous") -> TileKind:
    """How the key/value block of rank ``src`` meets the queries of rank ``rank``.

    Returns ``TileKind.FULL``, ``MASKED``, ``STRICT`` or ``SKIP`` (see the module's table).

    Examples
    --------
    >>> block_mask(1, 2, 4, causal=True, layout="contiguous")
    <TileKind.SKIP: 0>
    >>> block_mask(1, 2, 4, causal=False)
    <TileKind.FULL: 1>
    """
    require_positive_int(world_size, "world_size")
    _require_rank(rank, world_size)
    _require_rank(src, world_size)
    require_layout(layout)
    if not causal:
        return FULL
    if layout == "contiguous":
        return FULL if src < rank else MASKED if src == rank else SKIP
    return MASKED if src <= rank else STRICT


def ring_schedule(world_size: int, causal: bool,
                  layout: str = "contiguous") -> list[list[TileKind]]:
    """``schedule[r][t]``: the mask of the block rank ``r`` holds at step ``t``.

    Examples
    --------
    >>> for row in ring_schedule(3, causal=True): print(" ".join(f"{m:6}" for m in row))
    masked skip   skip
    masked full   skip
    masked full   full
    """
    return [[block_mask(r, source_rank(r, t, world_size), world_size, causal, layout)
             for t in range(world_size)] for r in range(world_size)]


def ring_tiles(world_size: int, n_local: int, causal: bool, layout: str = "contiguous",
               block: int = 64) -> list[int]:
    """Tiles of ``block x block`` scores each rank computes over the whole ring: its work.

    A ``FULL`` block is ``count_tiles(n, n, ...)`` without a mask; a ``MASKED`` one skips the
    tiles above its diagonal; a ``STRICT`` one is computed as causal attention of queries
    ``1..n-1`` against keys ``0..n-2`` (which is what :func:`~teachkit.ring.attention.attend_block`
    does), a ``SKIP`` one costs nothing.

    Examples
    --------
    >>> ring_tiles(4, 256, causal=True, layout="contiguous")
    [10, 26, 42, 58]
    >>> ring_tiles(4, 256, causal=True, layout="striped")
    [40, 40, 40, 40]
    """
    require_positive_int(n_local, "n_local")
    cost = {
        SKIP: 0,
        FULL: count_tiles(n_local, n_local, block, block, causal=False).computed,
        MASKED: count_tiles(n_local, n_local, block, block, causal=True).computed,
        STRICT: count_tiles(n_local - 1, n_local - 1, block, block, causal=True).computed
        if n_local > 1 else 0,
    }
    return [sum(cost[m] for m in row) for row in ring_schedule(world_size, causal, layout)]
