"""Reductions of ``(m, d)`` pairs in any order and grouping, and a GPU block's reduction simulated.

Because :func:`teachkit.softmax.merge_stats` is associative and commutative, a row's statistics can
be reduced left to right, in a shuffled order, as a balanced tree, or the way a GPU does it:
every thread sweeps its own strided slice of the row, the 32 threads of a warp combine by
butterfly shuffles, and the warps of a block combine through shared memory. All give the same
``(m, d)`` up to rounding. This module makes each of those orders runnable on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from .softmax import merge_stats, online_stats
from .validation import require_float_tensor, require_positive_int

__all__ = ["Stats", "fold", "tree_reduce", "BlockReduction", "simulate_block_reduction"]

T = TypeVar("T")
Stats = tuple[torch.Tensor, torch.Tensor]
"""A pair ``(m, d)``: running maximum and denominator."""


def _merge_pair(a: Stats, b: Stats) -> Stats:
    return merge_stats(a[0], a[1], b[0], b[1])


def fold(items: Sequence[T], combine: Callable[[T, T], T] | None = None) -> T:
    """Combine ``items`` left to right: ``combine(combine(items[0], items[1]), items[2]) ...``.

    ``combine`` defaults to merging ``(m, d)`` pairs with :func:`~teachkit.softmax.merge_stats`.
    """
    if len(items) == 0:
        raise ValueError("fold needs at least one item")
    if combine is not None and not callable(combine):
        raise TypeError(f"combine must be a function (a, b) -> merged, or None for the (m, d) "
                        f"merge; got {type(combine).__name__} (pass the items as one sequence "
                        f"of pairs, e.g. list(zip(m, d)))")
    combine = combine or _merge_pair  # type: ignore[assignment]
    acc = items[0]
    for item in items[1:]:
        acc = combine(acc, item)  # type: ignore[misc]
    return acc


def tree_reduce(
    items: Sequence[T], combine: Callable[[T, T], T] | None = None
) -> tuple[T, int]:
    """Combine neighbours pairwise, level by level, like a parallel reduction; return the result
    and the number of levels (``ceil(log2(len(items)))``).

    ``combine`` defaults to merging ``(m, d)`` pairs with :func:`~teachkit.softmax.merge_stats`.
    """
    if len(items) == 0:
        raise ValueError("tree_reduce needs at least one item")
    if combine is not None and not callable(combine):
        raise TypeError(f"combine must be a function (a, b) -> merged, or None for the (m, d) "
                        f"merge; got {type(combine).__name__} (pass the items as one sequence "
                        f"of pairs, e.g. list(zip(m, d)))")
    combine = combine or _merge_pair  # type: ignore[assignment]
    level, levels = list(items), 0
    while len(level) > 1:
        pairs = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]  # type: ignore[misc]
        level = pairs + ([level[-1]] if len(level) % 2 else [])
        levels += 1
    return level[0], levels


@dataclass
class BlockReduction:
    """What each tier of a simulated GPU block reduction holds for every row.

    Attributes
    ----------
    thread_m, thread_d : torch.Tensor
        ``(..., threads)``: each thread's statistics of its own strided elements.
    warp_m, warp_d : torch.Tensor
        ``(..., warps)``: each warp's statistics after its butterfly shuffles.
    block_m, block_d : torch.Tensor
        ``(...)``: the row's statistics after the warps merged through shared memory.
    shuffle_steps : int
        Merges each thread did inside its warp (``log2(warp_size)``).
    """

    thread_m: torch.Tensor
    thread_d: torch.Tensor
    warp_m: torch.Tensor
    warp_d: torch.Tensor
    block_m: torch.Tensor
    block_d: torch.Tensor
    shuffle_steps: int


def simulate_block_reduction(
    x: torch.Tensor, threads: int = 128, warp_size: int = 32
) -> BlockReduction:
    """Reduce each row of ``x`` (last axis) to ``(m, d)`` the way one GPU thread block would.

    1. Thread ``t`` sweeps elements ``t, t + threads, t + 2*threads, ...`` with the online update
       (threads past the end of a short row keep the identity ``(-inf, 0)``).
    2. In each warp, ``log2(warp_size)`` butterfly steps: at offset 16, 8, 4, 2, 1 every lane
       merges with lane ``lane ^ offset`` (``__shfl_xor_sync`` on a GPU); then every lane holds
       the warp's statistics.
    3. Lane 0 of each warp writes to shared memory; the warps' pairs are merged as a tree.

    Parameters
    ----------
    x : torch.Tensor
        ``(..., N)`` floating tensor; rows are reduced independently.
    threads : int
        Threads per block, a multiple of ``warp_size``.
    warp_size : int
        Threads per warp, a power of two.
    """
    require_float_tensor(x)
    require_positive_int(threads, "threads")
    require_positive_int(warp_size, "warp_size")
    if warp_size & (warp_size - 1) or threads % warp_size:
        raise ValueError(
            f"warp_size must be a power of two and threads a multiple of it, got "
            f"threads={threads}, warp_size={warp_size}; e.g. threads=128, warp_size=32"
        )
    x = x.reshape(1) if x.dim() == 0 else x
    n = x.shape[-1]
    steps = -(-n // threads)
    pad = steps * threads - n
    padded = torch.nn.functional.pad(x, (0, pad), value=float("-inf")) if pad else x
    # (..., steps, threads): column t holds thread t's strided elements.
    per_thread = padded.reshape(*x.shape[:-1], steps, threads)
    thread_m, thread_d = online_stats(per_thread, dim=-2)

    warps = threads // warp_size
    m = thread_m.reshape(*x.shape[:-1], warps, warp_size)
    d = thread_d.reshape(*x.shape[:-1], warps, warp_size)
    lanes = torch.arange(warp_size, device=x.device)
    offset, shuffle_steps = warp_size // 2, 0
    while offset:
        partner = lanes ^ offset
        m, d = merge_stats(m, d, m[..., partner], d[..., partner])
        offset //= 2
        shuffle_steps += 1
    warp_m, warp_d = m[..., 0], d[..., 0]

    shared_memory = list(zip(warp_m.unbind(-1), warp_d.unbind(-1), strict=True))
    (block_m, block_d), _ = tree_reduce(shared_memory)
    return BlockReduction(thread_m, thread_d, warp_m, warp_d, block_m, block_d, shuffle_steps)
