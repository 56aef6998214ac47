r"""The tile schedule of blocked attention, and what the materialised score matrix costs.

Blocked (Flash) attention cuts the ``L x S`` score matrix into tiles of ``block_m`` queries by
``block_n`` keys. One program owns a block of queries and walks over the key blocks. With a causal
mask (top-left aligned, as ``scaled_dot_product_attention(is_causal=True)``: query ``i`` sees key
``j`` iff ``j <= i``) each tile is one of three kinds:

* :data:`SKIP`: every entry is masked (the tile lies above the diagonal); it is never computed;
* :data:`FULL`: no entry is masked (below the diagonal); computed without a mask;
* :data:`MASKED`: the diagonal crosses it; computed, then masked entry by entry.

They are the members of :class:`TileKind`, an ``IntEnum`` (a schedule stores them as small
integers); ring attention (:mod:`teachkit.ring.layout`) sorts its key/value blocks with the same
kinds, plus :data:`STRICT`. Without a causal mask every tile is :data:`FULL`. The last row and
column of tiles may be shorter when ``block_m`` does not divide ``L`` or ``block_n`` does not
divide ``S``.

Examples
--------
>>> tile_schedule(5, 7, 2, 3, causal=True)
tensor([[2, 0, 0],
        [1, 2, 0],
        [1, 2, 0]], dtype=torch.int8)
>>> count_tiles(5, 7, 2, 3, causal=True)
TileCounts(full=2, masked=3, skipped=4)
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import NamedTuple

import torch

from .validation import require_positive_int

__all__ = [
    "TileKind",
    "SKIP",
    "FULL",
    "MASKED",
    "STRICT",
    "TILE_NAMES",
    "TileCounts",
    "tile_bounds",
    "tile_kind",
    "tile_schedule",
    "schedule_from_mask",
    "count_tiles",
    "score_matrix_bytes",
    "blockwise_score_bytes",
]

class TileKind(IntEnum):
    """How a tile of the score matrix (or a ring attention block of keys) meets the causal mask.

    An ``IntEnum``, so a schedule tensor holds the kinds as integers and compares with them;
    ``str()`` and formatting give the lower-case name (``"masked"``).
    """

    SKIP = 0
    """Every entry is masked: the tile is never computed."""
    FULL = 1
    """No entry is masked: computed without a mask."""
    MASKED = 2
    """The causal diagonal crosses the tile: computed, key ``j`` hidden from query ``i`` when
    ``j > i`` (local indices on a ring block of the diagonal)."""
    STRICT = 3
    """Computed with the diagonal hidden too, ``j >= i``: the blocks a striped ring rank gets from
    later ranks (never in a tile schedule)."""

    def __str__(self) -> str:
        return self.name.lower()

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    @classmethod
    def parse(cls, value: object, name: str = "kind") -> TileKind:
        """``value`` as a :class:`TileKind`: a member, its integer, or its name (``"full"``).

        Raises
        ------
        ValueError
            Naming ``name`` and the kinds to pass, for anything else.
        """
        if isinstance(value, str):
            member = cls.__members__.get(value.upper())
            if member is not None:
                return member
        elif isinstance(value, int) and not isinstance(value, bool) and value in set(cls):
            return cls(value)
        names = ", ".join(repr(str(k)) for k in cls)
        raise ValueError(f"{name} must be a TileKind or one of the names {names}, got {value!r}")


SKIP = TileKind.SKIP
FULL = TileKind.FULL
MASKED = TileKind.MASKED
STRICT = TileKind.STRICT
TILE_NAMES: dict[int, str] = {kind: str(kind) for kind in TileKind}
"""The name of each kind, by kind or by its integer in a schedule."""


class TileCounts(NamedTuple):
    """How many tiles of a schedule are computed in full, computed with a mask, or skipped."""

    full: int
    masked: int
    skipped: int

    @property
    def total(self) -> int:
        """All tiles of the grid."""
        return self.full + self.masked + self.skipped

    @property
    def computed(self) -> int:
        """Tiles that are computed at all (full or masked)."""
        return self.full + self.masked


def tile_bounds(index: int, block: int, length: int) -> tuple[int, int]:
    """Half-open range ``[start, end)`` of tile ``index`` along an axis of ``length`` elements.

    The last tile is cut at ``length``.

    Examples
    --------
    >>> tile_bounds(2, 3, 7)
    (6, 7)
    """
    start = index * block
    return start, min(start + block, length)


def tile_kind(row_start: int, row_end: int, col_start: int, col_end: int,
              causal: bool) -> TileKind:
    """Classify the tile of queries ``[row_start, row_end)`` and keys ``[col_start, col_end)``.

    Query ``i`` sees key ``j`` iff ``j <= i``. The tile is :data:`SKIP` when even its last query
    (``row_end - 1``) cannot see its first key, :data:`FULL` when even its first query
    (``row_start``) sees its last key (``col_end - 1``), and :data:`MASKED` otherwise.

    Examples
    --------
    >>> [TILE_NAMES[tile_kind(0, 4, c, c + 4, causal=True)] for c in (0, 4)]
    ['masked', 'skip']
    """
    if not causal:
        return FULL
    if col_start > row_end - 1:
        return SKIP
    if col_end - 1 <= row_start:
        return FULL
    return MASKED


def _check_sizes(L: int, S: int, block_m: int, block_n: int) -> None:
    for value, name in ((L, "L"), (S, "S")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    require_positive_int(block_m, "block_m")
    require_positive_int(block_n, "block_n")


def tile_schedule(L: int, S: int, block_m: int, block_n: int, causal: bool) -> torch.Tensor:
    """The kind of every tile of an ``L x S`` score matrix in tiles of ``block_m x block_n``.

    Parameters
    ----------
    L, S : int
        Number of queries and of keys (any sizes; they need not be multiples of the blocks).
    block_m, block_n : int
        Queries and keys per tile.
    causal : bool
        Top-left-aligned causal mask (query ``i`` sees keys ``0..i``); ``False``: all tiles full.

    Returns
    -------
    torch.Tensor
        ``(ceil(L / block_m), ceil(S / block_n))`` int8 codes :data:`SKIP`, :data:`FULL`,
        :data:`MASKED`; row ``r`` is the walk of query block ``r`` over the key blocks.
    """
    _check_sizes(L, S, block_m, block_n)
    rows, cols = math.ceil(L / block_m), math.ceil(S / block_n)
    out = torch.empty(rows, cols, dtype=torch.int8)
    for r in range(rows):
        r0, r1 = tile_bounds(r, block_m, L)
        for c in range(cols):
            c0, c1 = tile_bounds(c, block_n, S)
            out[r, c] = tile_kind(r0, r1, c0, c1, causal)
    return out


def schedule_from_mask(mask: torch.Tensor, block_m: int, block_n: int) -> torch.Tensor:
    """Classify tiles from an explicit boolean ``(L, S)`` mask (``True`` = visible): the reference.

    A tile is :data:`SKIP` iff none of its entries is visible, :data:`FULL` iff all are, and
    :data:`MASKED` otherwise. :func:`tile_schedule` must agree with this for the causal mask.

    Examples
    --------
    >>> from teachkit.attention import causal_mask
    >>> ref = schedule_from_mask(causal_mask(9, 13), 4, 5)
    >>> bool((ref == tile_schedule(9, 13, 4, 5, causal=True)).all())
    True
    """
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a 2-D bool tensor, got {mask.dtype} {tuple(mask.shape)}")
    L, S = mask.shape
    _check_sizes(L, S, block_m, block_n)
    out = torch.empty(math.ceil(L / block_m), math.ceil(S / block_n), dtype=torch.int8)
    for r in range(out.shape[0]):
        r0, r1 = tile_bounds(r, block_m, L)
        for c in range(out.shape[1]):
            c0, c1 = tile_bounds(c, block_n, S)
            tile = mask[r0:r1, c0:c1]
            out[r, c] = FULL if bool(tile.all()) else SKIP if not bool(tile.any()) else MASKED
    return out


def count_tiles(L: int, S: int, block_m: int, block_n: int, causal: bool) -> TileCounts:
    """Count the full, masked and skipped tiles of :func:`tile_schedule` ``(L, S, ...)``.

    Examples
    --------
    >>> c = count_tiles(4096, 4096, 128, 128, causal=True)
    >>> c, c.total
    (TileCounts(full=496, masked=32, skipped=496), 1024)
    """
    s = tile_schedule(L, S, block_m, block_n, causal)
    return TileCounts(int((s == FULL).sum()), int((s == MASKED).sum()), int((s == SKIP).sum()))


def score_matrix_bytes(
    L: int, S: int, batch: int = 1, heads: int = 1, dtype: torch.dtype = torch.float32,
    matrices: int = 2,
) -> int:
    """Bytes of materialised attention's ``L x S`` matrices for ``batch x heads`` heads.

    ``matrices=2`` counts the scores and the probabilities, both held at once by
    ``softmax(q @ k.T) @ v`` written plainly.

    Examples
    --------
    >>> score_matrix_bytes(100_000, 100_000, matrices=1) / 1e9  # one fp32 matrix, one head
    40.0
    """
    return L * S * batch * heads * matrices * torch.empty((), dtype=dtype).element_size()


def blockwise_score_bytes(
    L: int, block_n: int, batch: int = 1, heads: int = 1, dtype: torch.dtype = torch.float32,
    matrices: int = 2,
) -> int:
    """Bytes of the ``L x block_n`` scores and probabilities blocked attention holds at a time.

    It no longer depends on the number of keys ``S``.

    Examples
    --------
    >>> blockwise_score_bytes(100_000, 64, matrices=1) / 1e6
    25.6
    """
    return score_matrix_bytes(L, block_n, batch, heads, dtype, matrices)
