r"""The CuTe DSL softmax kernel's three tiers, run in plain torch on any machine.

The kernel (:mod:`teachkit.cute.kernel`) gives one row to one CTA. Thread ``t`` of ``threads``
loads *vectors* of ``vec`` consecutive elements, vectors ``t, t + threads, t + 2 * threads, ...``,
so thread ``t`` owns the elements

.. math::  (t + k \cdot threads) \cdot vec + v, \qquad k = 0, 1, \dots,\quad v = 0, \dots, vec - 1.

Notebook 03's :func:`teachkit.reduction.simulate_block_reduction` already reduces a row the way a
block does, with *scalar* ownership (thread ``t`` owns ``t, t + threads, ...``). Vector ownership
is the same thing on a reordered row: :func:`to_thread_major` moves each thread's elements, in the
order it loads them, into its scalar slots. So the simulation here is a thin wrapper:

1. **Thread tier**: each thread's ``(m, d)`` over its vectors (threads past the end of a short
   row keep the identity ``(-inf, 0)``);
2. **Warp tier**: five butterfly rounds per warp; :func:`warp_butterfly` replays them round by
   round (:func:`butterfly_round`) for the trace, and its last round is the warps' pairs;
3. **Block tier**: the warps' pairs, as written to shared memory, merged as a tree (what
   :func:`block_merge` does);
4. **Normalise**: :func:`teachkit.softmax.normalize_with_stats`.

Tiers 1-3 are ``simulate_block_reduction`` on the reordered row, reused as it is.

The kernel folds a vector at a time (the vector's max and sum, then one merge); the simulation
folds element by element. The merge is associative, so both give the same ``(m, d)`` to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..reduction import simulate_block_reduction, tree_reduce
from ..softmax import merge_stats, normalize_with_stats
from ..validation import require_float_tensor, require_positive_int
from .config import WARP_SIZE, launch_config

__all__ = [
    "thread_of_element",
    "elements_of_thread",
    "to_thread_major",
    "butterfly_round",
    "warp_butterfly",
    "block_merge",
    "CuteSoftmaxTrace",
    "simulate_cute_softmax",
]

Stats = tuple[torch.Tensor, torch.Tensor]


def _check_layout(threads: int, vec: int, warp_size: int = WARP_SIZE) -> None:
    require_positive_int(threads, "threads")
    require_positive_int(vec, "vec")
    require_positive_int(warp_size, "warp_size")
    if warp_size & (warp_size - 1) or threads % warp_size:
        raise ValueError(
            f"warp_size must be a power of two and threads a multiple of it, got "
            f"threads={threads}, warp_size={warp_size}; e.g. threads=128, warp_size=32"
        )


def thread_of_element(n_cols: int, threads: int, vec: int) -> torch.Tensor:
    """Which thread loads each element of a row: ``(i // vec) % threads``, shape ``(n_cols,)``.

    Examples
    --------
    >>> thread_of_element(12, threads=2, vec=3).tolist()
    [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1]
    """
    require_positive_int(threads, "threads")
    require_positive_int(vec, "vec")
    return (torch.arange(n_cols) // vec) % threads


def elements_of_thread(t: int, n_cols: int, threads: int, vec: int) -> list[int]:
    """The elements thread ``t`` loads, in the order it loads them (vector by vector).

    Examples
    --------
    >>> elements_of_thread(1, n_cols=20, threads=2, vec=4)
    [4, 5, 6, 7, 12, 13, 14, 15]
    >>> elements_of_thread(1, n_cols=18, threads=2, vec=4)   # the row ends inside vector 3
    [4, 5, 6, 7, 12, 13, 14, 15]
    """
    return torch.nonzero(thread_of_element(n_cols, threads, vec) == t).flatten().tolist()


def to_thread_major(x: torch.Tensor, threads: int, vec: int) -> torch.Tensor:
    """Reorder the last axis so that scalar ownership equals the kernel's vector ownership.

    The row is padded with ``-inf`` (the merge's identity) to a multiple of ``threads * vec``,
    seen as ``(steps, threads, vec)`` and transposed to ``(steps, vec, threads)``: thread ``t``'s
    ``j``-th element (vector ``j // vec``, lane ``j % vec``) lands at ``j * threads + t``, where
    :func:`~teachkit.reduction.simulate_block_reduction` expects it.

    Examples
    --------
    >>> to_thread_major(torch.arange(8.0), threads=2, vec=2).tolist()
    [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]
    """
    require_float_tensor(x)
    x = x.reshape(1) if x.dim() == 0 else x
    sweep = threads * vec
    n = x.shape[-1]
    pad = -n % sweep
    if pad:
        x = torch.nn.functional.pad(x, (0, pad), value=float("-inf"))
    steps = x.shape[-1] // sweep
    grid = x.reshape(*x.shape[:-1], steps, threads, vec).transpose(-1, -2)
    return grid.reshape(*x.shape[:-1], steps * sweep)


def butterfly_round(m: torch.Tensor, d: torch.Tensor, offset: int) -> Stats:
    """One shuffle round in every warp: lane ``l`` merges its pair with lane ``l ^ offset``'s.

    Parameters
    ----------
    m, d : torch.Tensor
        ``(..., lanes)``: each lane's pair before the round (lanes a power of two).
    offset : int
        The XOR distance, ``16, 8, 4, 2, 1`` in a warp of 32.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        Each lane's pair after the round, same shapes.

    Examples
    --------
    >>> m, d = torch.tensor([1.0, 4.0, 2.0, 3.0]), torch.ones(4)
    >>> butterfly_round(m, d, offset=2)[0].tolist()
    [2.0, 4.0, 2.0, 4.0]
    """
    partner = torch.arange(m.shape[-1], device=m.device) ^ offset
    return merge_stats(m, d, m[..., partner], d[..., partner])


def warp_butterfly(m: torch.Tensor, d: torch.Tensor, warp_size: int = WARP_SIZE) -> list[Stats]:
    """Every round of the warp tier: the lanes' pairs before and after each shuffle round.

    Parameters
    ----------
    m, d : torch.Tensor
        ``(..., threads)``: each thread's pair after the thread tier.
    warp_size : int
        Lanes per warp (a power of two).

    Returns
    -------
    list of (torch.Tensor, torch.Tensor)
        ``log2(warp_size) + 1`` pairs of ``(..., warps, warp_size)`` tensors: the start, then
        each round (offsets ``warp_size / 2, ..., 2, 1``). After the last round every lane of a
        warp holds the warp's pair.
    """
    _check_layout(m.shape[-1], 1, warp_size)
    shape = (*m.shape[:-1], m.shape[-1] // warp_size, warp_size)
    rounds = [(m.reshape(shape), d.reshape(shape))]
    offset = warp_size // 2
    while offset:
        rounds.append(butterfly_round(*rounds[-1], offset))
        offset //= 2
    return rounds


def block_merge(warp_m: torch.Tensor, warp_d: torch.Tensor) -> Stats:
    """The block tier: merge the warps' pairs (read from shared memory) as a tree.

    Neighbours first, ``(w0, w1), (w2, w3), ...``, then the results, as the kernel's
    ``merge_warps`` does; ``warp_m`` and ``warp_d`` are ``(..., warps)``.

    Examples
    --------
    >>> m, d = block_merge(torch.tensor([5.0, 3.0]), torch.tensor([1.0, 1.0]))
    >>> round(m.item(), 4), round(d.item(), 4)
    (5.0, 1.1353)
    """
    pairs = list(zip(warp_m.unbind(-1), warp_d.unbind(-1), strict=True))
    (m, d), _ = tree_reduce(pairs)
    return m, d


@dataclass
class CuteSoftmaxTrace:
    """What every tier of the simulated kernel holds, row by row.

    Attributes
    ----------
    threads, vec, warp_size : int
        The layout: threads per CTA, elements per vector load, lanes per warp.
    thread_m, thread_d : torch.Tensor
        ``(..., threads)``: each thread's pair after its vectors (tier 1).
    rounds : list of (torch.Tensor, torch.Tensor)
        The warp tier, ``(..., warps, warp_size)`` per entry: start, then each shuffle round.
    warp_m, warp_d : torch.Tensor
        ``(..., warps)``: the pairs lane 0 of each warp writes to shared memory.
    block_m, block_d : torch.Tensor
        ``(...)``: the row's ``(m, d)`` after the block tier.
    out : torch.Tensor
        The softmax, ``exp(x - block_m) / block_d``, in the input's dtype.
    """

    threads: int
    vec: int
    warp_size: int
    thread_m: torch.Tensor
    thread_d: torch.Tensor
    rounds: list[Stats]
    warp_m: torch.Tensor
    warp_d: torch.Tensor
    block_m: torch.Tensor
    block_d: torch.Tensor
    out: torch.Tensor

    @property
    def warps(self) -> int:
        """Warps per CTA."""
        return self.threads // self.warp_size


def simulate_cute_softmax(
    x: torch.Tensor, threads: int | None = None, vec: int | None = None,
    warp_size: int = WARP_SIZE,
) -> CuteSoftmaxTrace:
    """Softmax over the last axis of ``x`` by the kernel's tiers, keeping what each tier holds.

    Parameters
    ----------
    x : torch.Tensor
        ``(..., n_cols)`` floating tensor; each row is one CTA's work.
    threads, vec : int, optional
        The layout; default: the kernel's own, :func:`teachkit.cute.config.launch_config`
        (for float64, which the kernel does not take, the layout of float32).
    warp_size : int
        Lanes per warp (32 on the GPU; smaller values make pictures readable).

    Returns
    -------
    CuteSoftmaxTrace
        Its ``out`` equals ``torch.softmax(x, -1)`` to rounding, with the same special values:
        a row with NaN or ``+inf``, or only ``-inf``, gives NaN; ``-inf`` entries give 0.

    Examples
    --------
    >>> x = torch.tensor([[1.0, 3.0, 2.0, 5.0, 0.5, 4.0, 6.0]])
    >>> trace = simulate_cute_softmax(x, threads=4, vec=2, warp_size=2)
    >>> trace.thread_m.tolist(), trace.warp_m.tolist(), trace.block_m.tolist()
    ([[3.0, 5.0, 4.0, 6.0]], [[5.0, 6.0]], [6.0])
    >>> torch.allclose(trace.out, torch.softmax(x, -1))
    True
    """
    require_float_tensor(x)
    row = x.reshape(1) if x.dim() == 0 else x  # a 0-d tensor is a row of one, as in torch
    n_cols = row.shape[-1]
    if threads is None or vec is None:  # float64 (no kernel dtype): float32's layout
        kernel_dtype = x.dtype if x.dtype in (torch.float32, torch.bfloat16, torch.float16) \
            else torch.float32
        default = launch_config(max(n_cols, 1), kernel_dtype)
        threads = default.threads if threads is None else threads
        vec = default.vec if vec is None else vec
    _check_layout(threads, vec, warp_size)
    tiers = simulate_block_reduction(to_thread_major(row, threads, vec), threads, warp_size)
    rounds = warp_butterfly(tiers.thread_m, tiers.thread_d, warp_size)  # the same merges, kept
    out = normalize_with_stats(x, tiers.block_m, tiers.block_d)
    return CuteSoftmaxTrace(threads, vec, warp_size, tiers.thread_m, tiers.thread_d, rounds,
                            tiers.warp_m, tiers.warp_d, tiers.block_m, tiers.block_d, out)
