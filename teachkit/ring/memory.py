"""What a ring worker holds in memory, against one device holding the whole sequence.

A rank of :func:`~teachkit.ring.attention.ring_attention` holds, for its ``n = N / W`` tokens:
its queries, the key/value block in hand, the key/value block in flight (received while it
computes), a float32 output accumulator with its lse, and for the length of one step the partial
result of the block in hand. One device running FlashAttention on the whole sequence holds
``q``, ``k``, ``v`` and the output of all ``N`` tokens; naive attention adds the ``N x N`` scores
and probabilities. Everything here is linear in ``N`` except those two matrices.

Examples
--------
>>> m = ring_memory(batch=1, heads=32, seq_len=131072, head_dim=128, world_size=4)
>>> round(m.worker_total / 2**30, 2), round(m.one_device_total / 2**30, 2)
(2.01, 4.02)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..tiling import score_matrix_bytes
from ..validation import compute_dtype, require_positive_int
from .layout import local_length

__all__ = ["RingMemory", "ring_memory", "longest_sequence"]


@dataclass(frozen=True)
class RingMemory:
    """Bytes per buffer, for one ring worker and for one device holding everything.

    Attributes
    ----------
    per_worker : dict
        Buffer name to bytes on each rank; the keys of ``held_bytes`` of
        :class:`~teachkit.ring.attention.RankResult`, plus the transient partial result.
    one_device : dict
        Buffer name to bytes for FlashAttention over the whole sequence on one device.
    naive_scores : int
        Bytes of naive attention's float32 scores and probabilities (``N x N`` per head, two).
    """

    per_worker: dict[str, int]
    one_device: dict[str, int]
    naive_scores: int

    @property
    def worker_total(self) -> int:
        """Everything one ring worker holds at its peak."""
        return sum(self.per_worker.values())

    @property
    def one_device_total(self) -> int:
        """Everything one device running FlashAttention on the whole sequence holds."""
        return sum(self.one_device.values())


def ring_memory(batch: int, heads: int, seq_len: int, head_dim: int, world_size: int,
                dtype: torch.dtype = torch.float16) -> RingMemory:
    """Bytes a ring worker holds, against one device, for a ``(batch, heads, seq_len, head_dim)``
    self-attention split over ``world_size`` ranks.

    Parameters
    ----------
    batch, heads, seq_len, head_dim : int
        The whole problem; ``world_size`` must divide ``seq_len``.
    world_size : int
        Ranks ``W`` of the ring (``1``: no block in flight).
    dtype : torch.dtype
        Of q, k, v and the output; the accumulator and lse are float32 (float64 for float64).

    Returns
    -------
    RingMemory

    Examples
    --------
    >>> m = ring_memory(1, 1, 8, 4, world_size=2, dtype=torch.float32)
    >>> m.per_worker["queries"], m.per_worker["k/v block in flight"], m.one_device["q, k, v"]
    (64, 128, 384)
    """
    for value, name in ((batch, "batch"), (heads, "heads"), (head_dim, "head_dim")):
        require_positive_int(value, name)
    n = local_length(seq_len, world_size)
    size = torch.empty((), dtype=dtype).element_size()
    acc = torch.empty((), dtype=compute_dtype(dtype)).element_size()
    rows = batch * heads * n
    block = rows * head_dim * size
    per_worker = {
        "queries": block,
        "k/v block in hand": 2 * block,
        "k/v block in flight": 2 * block if world_size > 1 else 0,
        "output accumulator": rows * head_dim * acc,
        "lse": rows * acc,
        "partial (out, lse) of one step": block + rows * 4,
    }
    all_rows = batch * heads * seq_len
    one_device = {
        "q, k, v": 3 * all_rows * head_dim * size,
        "output": all_rows * head_dim * size,
        "lse": all_rows * 4,
    }
    naive = score_matrix_bytes(seq_len, seq_len, batch, heads, torch.float32, matrices=2)
    return RingMemory(per_worker, one_device, naive)


def longest_sequence(memory_bytes: float, batch: int, heads: int, head_dim: int,
                     world_size: int, dtype: torch.dtype = torch.float16,
                     multiple_of: int = 1) -> tuple[int, int]:
    """The longest sequences that fit in ``memory_bytes`` per device: ``(one device, ring)``.

    Both costs are linear in the length, so this is the memory divided by the bytes per token,
    rounded down to a multiple of ``world_size * multiple_of`` (the ring's blocks must be equal).

    Examples
    --------
    >>> longest_sequence(141e9, batch=1, heads=32, head_dim=128, world_size=4)
    (4286232, 8572468)
    """
    step = world_size * multiple_of
    per_token = ring_memory(batch, heads, step, head_dim, world_size, dtype)
    one = int(memory_bytes // (per_token.one_device_total / step))
    ring = int(memory_bytes // (per_token.worker_total / step))
    return one // step * step, ring // step * step
