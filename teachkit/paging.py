"""A paged KV cache in miniature: why pages, a simulated allocator, block tables.

A server decoding many sequences at once keeps every sequence's keys and values in GPU memory
and does not know in advance how long a sequence will grow. Reserving one contiguous region per
sequence wastes memory twice: inside each region (reserved for tokens not yet written, or never
written) and between regions (holes left by finished sequences, too small for the next one).
Cutting memory into fixed *pages* of ``page_size`` tokens removes the holes (any free page
fits) and bounds the waste inside a sequence to its last, partly filled page: at most
``page_size - 1`` tokens.

This module measures that with a small simulation of a server
(:func:`simulate_serving`, :func:`waste_against_page_size`), and holds the pieces a paged
kernel needs: a block table that maps each sequence's logical pages to physical pages taken from
a shuffled free list (:func:`build_block_table`), and helpers that scatter a contiguous cache
into a page pool and gather it back (:func:`scatter_to_pages`, :func:`gather_from_pages`,
:func:`paged_from_contiguous`), the reference the paged kernel is tested against, and
:func:`head_major`, the same pool stored with each head's rows of a page side by side.

Examples
--------
>>> import torch
>>> table = build_block_table(torch.tensor([5, 9]), page_size=4, num_pages=8,
...                           gen=torch.Generator().manual_seed(0))
>>> table.tolist()  # sequence 0 needs 2 pages, sequence 1 needs 3; -1: no page
[[4, 0, -1], [7, 3, 2]]
"""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from .validation import require_int

__all__ = [
    "POLICIES",
    "ServingStats",
    "request_lengths",
    "simulate_serving",
    "waste_against_page_size",
    "pages_needed",
    "build_block_table",
    "token_rows",
    "scatter_to_pages",
    "gather_from_pages",
    "paged_from_contiguous",
    "head_major",
]

POLICIES = ("reserve max", "reserve exact", "paged")
"""How :func:`simulate_serving` hands out memory: a contiguous region of the longest possible
length per sequence; a contiguous region of exactly the sequence's final length (an allocator
that knows the future, the best case of contiguous reservations); or pages on demand."""


# ---------------------------------------------------------------------------------------------
# The simulation
# ---------------------------------------------------------------------------------------------
def request_lengths(n: int, max_len: int, gen: torch.Generator | None = None,
                    min_len: int = 1) -> list[int]:
    """``n`` final sequence lengths drawn uniformly from ``min_len .. max_len``.

    Raises ``TypeError`` or ``ValueError`` unless ``n >= 0`` and ``1 <= min_len <= max_len`` are
    ints and ``gen`` is a ``torch.Generator`` or ``None``.

    Examples
    --------
    >>> request_lengths(4, 100, torch.Generator().manual_seed(0))
    [45, 40, 34, 61]
    """
    n = require_int(n, "n", 0)
    max_len = require_int(max_len, "max_len", 1)
    min_len = require_int(min_len, "min_len", 1)
    if min_len > max_len:
        raise ValueError(f"min_len = {min_len} is larger than max_len = {max_len}; pass "
                         "min_len <= max_len")
    _require_generator(gen)
    return torch.randint(min_len, max_len + 1, (n,), generator=gen).tolist()


def _require_generator(gen: object) -> None:
    if gen is not None and not isinstance(gen, torch.Generator):
        raise TypeError(f"gen must be a torch.Generator or None, got {type(gen).__name__}; pass "
                        "e.g. torch.Generator().manual_seed(0)")


def _serving_lengths(lengths: object) -> list[int]:
    """The final lengths of :func:`simulate_serving` as a list of ints ``>= 1``, or an error."""
    if isinstance(lengths, torch.Tensor):
        if (lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype.is_complex
                or lengths.dtype == torch.bool):
            raise TypeError(f"lengths must be a list of ints or a 1-D integer tensor, got a "
                            f"{lengths.dtype} tensor of shape {tuple(lengths.shape)}")
        lengths = lengths.tolist()
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Iterable):
        raise TypeError(f"lengths must be a list of ints (final sequence lengths), got "
                        f"{type(lengths).__name__}")
    out = []
    for i, n in enumerate(lengths):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"lengths must hold whole token counts (ints), got lengths[{i}] = "
                            f"{n!r} ({type(n).__name__}); pass ints, e.g. [math.ceil(x) for x "
                            "in lengths]")
        if n < 1:
            raise ValueError(f"lengths must be ints >= 1 (every sequence writes a token), got "
                             f"lengths[{i}] = {n}")
        out.append(int(n))
    if not out:
        raise ValueError("lengths is empty; pass the final length of at least one sequence")
    return out


class _FirstFit:
    """Contiguous memory of ``capacity`` slots: first-fit allocation, holes merged when freed."""

    def __init__(self, capacity: int) -> None:
        self.holes: list[tuple[int, int]] = [(0, capacity)]  # (start, size), sorted by start

    def alloc(self, size: int) -> int | None:
        for i, (start, hole) in enumerate(self.holes):
            if hole >= size:
                if hole == size:
                    del self.holes[i]
                else:
                    self.holes[i] = (start + size, hole - size)
                return start
        return None

    def free(self, start: int, size: int) -> None:
        i = bisect.bisect(self.holes, (start, size))
        self.holes.insert(i, (start, size))
        merged: list[tuple[int, int]] = []
        for s, n in self.holes:
            if merged and merged[-1][0] + merged[-1][1] == s:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((s, n))
        self.holes = merged

    def largest_hole(self) -> int:
        return max((n for _, n in self.holes), default=0)


class _FreePages:
    """The free pages of a pool of ``num_pages``, a stack whose ``pop()`` takes the most recently
    freed page, else the lowest never used: a list of every page, made lazily (a pool of 10**12
    slots costs nothing until its pages are taken)."""

    def __init__(self, num_pages: int) -> None:
        self.freed: list[int] = []
        self.fresh = 0  # pages fresh .. num_pages - 1 were never taken
        self.num_pages = num_pages

    def __len__(self) -> int:
        return len(self.freed) + self.num_pages - self.fresh

    def pop(self) -> int:
        if self.freed:
            return self.freed.pop()
        if self.fresh >= self.num_pages:
            raise IndexError("pop from an empty pool")
        self.fresh += 1
        return self.fresh - 1

    def extend(self, pages: Iterable[int]) -> None:
        self.freed.extend(pages)


@dataclass
class ServingStats:
    """What :func:`simulate_serving` measured.

    Averages are over the steps when a sequence was waiting for memory (the steps when memory
    limits the batch), or over all steps if none ever waited.

    Attributes
    ----------
    policy : str
        One of :data:`POLICIES`.
    capacity : int
        Token slots of memory.
    page_size : int
        Tokens per page (``"paged"``), else 0.
    steps : int
        Decoding steps until every sequence finished (fewer is faster).
    mean_running : float
        Sequences decoding together, on average: the batch the server achieves.
    used : float
        Fraction of memory holding tokens, on average.
    reserved : float
        Fraction of memory handed out (tokens plus reserved-but-empty slots), on average.
    stalled : float
        Fraction of those steps when the next sequence waited although enough slots were free
        in total, only in no single hole (external fragmentation; contiguous policies only).
    preemptions : int
        Sequences evicted to free pages for others (``"paged"`` only; they start again).
    snapshot : list of tuple
        The memory at the step when it held the most tokens, for pictures:
        ``(sequence, start, reserved, written)`` per region (for paged, per page).
    """

    policy: str
    capacity: int
    page_size: int
    steps: int
    mean_running: float
    used: float
    reserved: float
    stalled: float
    preemptions: int
    snapshot: list[tuple[int, int, int, int]] = field(default_factory=list, repr=False)

    @property
    def wasted(self) -> float:
        """Fraction of the reserved memory that holds no token."""
        return 1.0 - self.used / self.reserved if self.reserved else 0.0


def simulate_serving(lengths: list[int], capacity: int, policy: str, page_size: int = 16,
                     max_len: int | None = None) -> ServingStats:
    """Serve sequences of the given final ``lengths`` from ``capacity`` slots of memory.

    Sequences wait in a queue and are admitted in order while memory allows. Every step, each
    running sequence writes one token (its key and value); a sequence that reaches its length
    finishes and frees its memory. The policies (:data:`POLICIES`):

    ``"reserve max"``
        At admission, a contiguous region of ``max_len`` slots (default ``max(lengths)``),
        first fit.
    ``"reserve exact"``
        A contiguous region of exactly the final length, first fit: no region is too large,
        but finished sequences leave holes that the next one may not fit.
    ``"paged"``
        One page of ``page_size`` slots whenever a sequence's pages are full, from a free list.
        A sequence is admitted when the free list holds its first page plus a watermark (one
        page, and one more per 100 pages of the pool), or when no sequence is running and its
        pages fit the pool. When no page is left, the most recently
        admitted sequence is evicted, as vLLM does: its pages go back to the free list and it
        goes back to the front of the queue; re-admitted, it takes pages for the tokens it had
        and spends one step recomputing their keys and values.

    The simulation always ends, in at most ``sum(lengths) + len(lengths)`` steps: every step the
    oldest running sequence writes a token (or, once, rebuilds its cache after an eviction).

    Parameters
    ----------
    lengths : list of int
        Final length of every sequence, in arrival order (ints, each at least 1; a 1-D integer
        tensor works too).
    capacity : int
        Token slots (for paged, ``capacity // page_size`` pages).
    policy : str
        One of :data:`POLICIES`.
    page_size : int
        Tokens per page, for ``"paged"``.
    max_len : int, optional
        The reservation of ``"reserve max"``; default ``max(lengths)``.

    Returns
    -------
    ServingStats

    Raises
    ------
    TypeError
        ``lengths``, ``capacity``, ``page_size`` or ``max_len`` is not made of ints.
    ValueError
        An unknown policy, a length below 1, or a sequence the memory can never hold: longer
        than ``capacity`` (contiguous policies; ``max_len`` for ``"reserve max"``), or needing
        more pages than the pool has (``"paged"``); the message names the sequence.

    Examples
    --------
    >>> lens = request_lengths(200, 512, torch.Generator().manual_seed(0))
    >>> for policy in POLICIES:
    ...     s = simulate_serving(lens, capacity=8192, policy=policy)
    ...     print(f"{policy:13}: {s.used:.0%} of memory holds tokens, "
    ...           f"{s.mean_running:.1f} sequences at once, {s.steps} steps")
    reserve max  : 32% of memory holds tokens, 16.0 sequences at once, 3345 steps
    reserve exact: 42% of memory holds tokens, 21.3 sequences at once, 2597 steps
    paged        : 95% of memory holds tokens, 44.6 sequences at once, 1288 steps
    """
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    capacity = require_int(capacity, "capacity", 1)
    page_size = require_int(page_size, "page_size", 1)
    lengths = _serving_lengths(lengths)
    longest = max(range(len(lengths)), key=lengths.__getitem__)  # the first longest sequence
    if max_len is not None:
        max_len = require_int(max_len, "max_len", 1)
    max_len = lengths[longest] if max_len is None else max_len
    if policy == "reserve max" and max_len < lengths[longest]:
        raise ValueError(f"max_len = {max_len} is shorter than the longest sequence "
                         f"(lengths[{longest}] = {lengths[longest]}); pass max_len >= "
                         "max(lengths)")
    if policy == "paged":
        num_pages = capacity // page_size
        most = -(-lengths[longest] // page_size)
        if most > num_pages:
            raise ValueError(
                f"capacity {capacity} cannot hold one sequence of {lengths[longest]} tokens "
                f"(lengths[{longest}]) in pages of {page_size}: it needs {most} page(s), the "
                f"pool has {num_pages} (capacity // page_size); pass capacity >= "
                f"{most * page_size} or a smaller page_size")
    else:
        need = max_len if policy == "reserve max" else lengths[longest]
        if need > capacity:
            where = "max_len" if policy == "reserve max" else f"lengths[{longest}]"
            raise ValueError(f"capacity {capacity} cannot hold one sequence of {need} tokens "
                             f"({where}); pass capacity >= {need}")
    # Every step, the oldest running sequence writes a token (it is never evicted: it would
    # have to hold the whole pool, full, before its end) or rebuilds its cache (once), and a
    # sequence is admitted whenever none runs: sum(lengths) + len(lengths) steps at most.
    max_steps = sum(lengths) + len(lengths)
    paged = policy == "paged"
    queue = list(range(len(lengths)))  # waiting sequences, front first
    written = [0] * len(lengths)
    regions: dict[int, int] = {}  # contiguous: sequence -> start slot
    pages: dict[int, list[int]] = {}  # paged: sequence -> its pages
    free_pages = _FreePages(capacity // page_size)  # a stack: pop() takes the lowest first
    memory = _FirstFit(capacity)
    running: list[int] = []  # in admission order
    recomputing: set[int] = set()  # re-admitted after eviction: rebuilding their cache
    watermark = 1 + (capacity // page_size) // 100  # free pages a new admission must leave
    steps = preemptions = stalls = 0
    totals = busy = [0.0, 0.0, 0.0, 0]  # sums of: running, used, reserved; steps
    best: tuple[int, list[tuple]] = (-1, [])

    def size(seq: int) -> int:
        return max_len if policy == "reserve max" else lengths[seq]

    while queue or running:
        # Admit in order while memory allows.
        while queue:
            seq = queue[0]
            if paged:
                # the page of its first token, or after an eviction the pages of its tokens
                need = max(1, -(-written[seq] // page_size))
                # the watermark keeps room for running sequences to grow; with none running,
                # a sequence that fits the pool goes in (else a small pool would wait forever)
                if len(free_pages) < need + (watermark if running else 0):
                    break
                pages[seq] = [free_pages.pop() for _ in range(need)]
                if written[seq]:
                    recomputing.add(seq)
            else:
                start = memory.alloc(size(seq))
                if start is None:
                    free_total = sum(n for _, n in memory.holes)
                    stalls += free_total >= size(seq)
                    break
                regions[seq] = start
            running.append(queue.pop(0))
        # Every running sequence writes one token.
        for seq in list(running):
            if seq not in running:  # evicted during this step
                continue
            if seq in recomputing:  # this step rebuilds its keys and values, writes no new one
                recomputing.discard(seq)
                continue
            if paged and written[seq] == len(pages[seq]) * page_size:  # its pages are full
                while not free_pages:  # the newest sequence gives its pages back
                    victim = running.pop()
                    free_pages.extend(pages.pop(victim))
                    recomputing.discard(victim)
                    queue.insert(0, victim)
                    preemptions += 1
                if seq not in running:  # it was the newest: it waits for its turn again
                    continue
                pages[seq].append(free_pages.pop())
            written[seq] += 1
        steps += 1
        if steps > max_steps:  # a last guard: the argument above says this never happens
            raise RuntimeError(
                f"simulate_serving did not finish within {max_steps} steps (policy "
                f"{policy!r}, capacity {capacity}, page_size {page_size}, {len(lengths)} "
                "sequences): a bug in teachkit.paging; please report it with these arguments")
        tokens = sum(written[s] for s in running)
        held = (sum(len(pages[s]) for s in running) * page_size if paged
                else sum(size(s) for s in running))
        if paged and held // page_size + len(free_pages) != capacity // page_size:
            raise RuntimeError(f"simulate_serving lost track of pages at step {steps}: a bug "
                               "in teachkit.paging; please report it with the arguments")
        sample = (len(running), tokens / capacity, held / capacity, 1)
        totals = [a + b for a, b in zip(totals, sample, strict=True)]
        if queue:  # a sequence is waiting: memory is what limits the batch
            busy = [a + b for a, b in zip(busy, sample, strict=True)]
        if tokens > best[0]:
            # O(running) per step: a page list only grows while it lives (an evicted sequence
            # gets a new one), so its first n entries still hold this step's pages at the end
            snap = [(s, pages[s], len(pages[s]), written[s]) if paged else
                    (s, regions[s], size(s), written[s]) for s in running]
            best = (tokens, snap)
        for seq in [s for s in running if written[s] == lengths[s]]:
            running.remove(seq)
            if paged:
                free_pages.extend(pages.pop(seq))
            else:
                memory.free(regions.pop(seq), size(seq))
    if pages or regions or memory.holes != [(0, capacity)]:  # every sequence gave back its memory
        raise RuntimeError("simulate_serving ended with memory still held: a bug in "
                           "teachkit.paging; please report it with the arguments")
    if paged:  # the peak's pages, from the lists it kept
        layout = [(s, p * page_size, page_size, max(0, min(page_size, w - k * page_size)))
                  for s, held_pages, n, w in best[1] for k, p in enumerate(held_pages[:n])]
    else:
        layout = best[1]
    sums = busy if busy[3] else totals
    stalled = stalls / busy[3] if busy[3] else 0.0
    running_avg, used, reserved = (x / sums[3] for x in sums[:3])
    return ServingStats(policy, capacity, page_size if paged else 0, steps, running_avg, used,
                        reserved, stalled, preemptions, layout)


def waste_against_page_size(lengths: list[int], page_sizes: list[int], capacity: int
                            ) -> dict[int, ServingStats]:
    """Run the paged simulation once per page size: the measurement behind the waste plot.

    Small pages waste at most ``page_size - 1`` slots per sequence, large pages more; a page of
    the longest length is the ``"reserve max"`` policy again.

    Parameters
    ----------
    lengths : list of int
        Final lengths of the sequences, as for :func:`simulate_serving`.
    page_sizes : list of int
        Page sizes to try (each at most ``capacity``).
    capacity : int
        Token slots of memory.

    Returns
    -------
    dict of int to ServingStats
        One run per page size; ``.wasted`` is the fraction of allocated memory holding no token.

    Examples
    --------
    >>> lens = request_lengths(200, 512, torch.Generator().manual_seed(0))
    >>> runs = waste_against_page_size(lens, [1, 16, 256], capacity=8192)
    >>> {p: f"{s.wasted:.1%}" for p, s in runs.items()}
    {1: '0.0%', 16: '4.2%', 256: '48.5%'}
    """
    if isinstance(page_sizes, (str, bytes)) or not isinstance(page_sizes, Iterable):
        raise TypeError(f"page_sizes must be a list of ints, got {type(page_sizes).__name__}")
    sizes = [require_int(p, f"page_sizes[{i}]", 1) for i, p in enumerate(page_sizes)]
    return {p: simulate_serving(lengths, capacity, "paged", page_size=p) for p in sizes}


# ---------------------------------------------------------------------------------------------
# Block tables and page pools
# ---------------------------------------------------------------------------------------------
def _is_int_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _lengths(cache_seqlens: torch.Tensor | list[int]) -> torch.Tensor:
    """``cache_seqlens`` as a 1-D int64 tensor of lengths ``>= 0`` (on its device), or an error."""
    if isinstance(cache_seqlens, torch.Tensor):
        t = cache_seqlens
    else:
        try:
            t = torch.as_tensor(cache_seqlens)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"cache_seqlens must be a 1-D tensor or list of ints, got "
                            f"{type(cache_seqlens).__name__}: {err}") from None
        if t.numel() == 0:  # [] becomes float32: no sequence, no wrong type
            t = t.to(torch.int64)
    if t.dim() != 1 or not _is_int_dtype(t.dtype):
        raise TypeError(f"cache_seqlens must be a 1-D tensor or list of ints, got "
                        f"{t.dtype} of shape {tuple(t.shape)}")
    if t.numel() and int(t.min()) < 0:
        b = int((t < 0).nonzero()[0, 0])
        raise ValueError(f"cache_seqlens must be >= 0, got cache_seqlens[{b}] = {int(t[b])}")
    return t.to(torch.int64)


def _require_table(block_table: object, name: str = "block_table") -> torch.Tensor:
    """``block_table`` if it is a 2-D integer tensor, else ``TypeError``/``ValueError``."""
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"{name} must be a (batch, max_pages) integer torch.Tensor, got "
                        f"{type(block_table).__name__}; build one with build_block_table, or "
                        f"pass torch.tensor(rows, dtype=torch.int32)")
    if not _is_int_dtype(block_table.dtype):
        raise TypeError(f"{name} must hold integer page ids (int32 or int64), got "
                        f"{block_table.dtype}; convert it first, e.g. {name}.int()")
    if block_table.dim() != 2:
        raise ValueError(f"{name} must be 2-D (batch, max_pages), got shape "
                         f"{tuple(block_table.shape)}")
    return block_table


def _check_page_ids(block_table: torch.Tensor, need: torch.Tensor, num_pages: int) -> None:
    """Raise ``ValueError`` unless the first ``need[b]`` entries of every row ``b`` are page ids
    in ``[0, num_pages)``, no page listed twice (the entries past them are not read)."""
    width = int(need.max()) if need.numel() else 0
    if width > block_table.shape[1]:
        b = int((need > block_table.shape[1]).nonzero()[0, 0])
        raise ValueError(f"sequence {b} needs {int(need[b])} pages and block_table has "
                         f"{block_table.shape[1]} column(s); pass a table with at least {width} "
                         "columns (build_block_table makes one)")
    table = block_table.detach()[:, :width].to("cpu", torch.int64)
    used = torch.arange(width) < need.cpu()[:, None]
    ids, where = table[used], used.nonzero()  # both in row-major order

    def at(i: int) -> str:
        b, j = where[i].tolist()
        return f"block_table[{b}, {j}]"

    bad = ((ids < 0) | (ids >= num_pages)).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        page = int(ids[i])
        if page < 0:
            raise ValueError(
                f"{at(i)} = {page} is not a page: the first ceil(length / page_size) entries of "
                f"a sequence's row must be pages in [0, {num_pages}) (-1 marks only the entries "
                "past them); build the table with build_block_table")
        raise ValueError(f"{at(i)} = {page} is out of range for a pool of {num_pages} pages; "
                         f"pass page ids in [0, {num_pages}) or a larger pool")
    if ids.numel() > 1:
        ordered, order = ids.sort(stable=True)
        twice = (ordered[1:] == ordered[:-1]).nonzero()
        if twice.numel():
            k = int(twice[0, 0])
            raise ValueError(
                f"page {int(ordered[k])} appears twice in block_table, at "
                f"{at(int(order[k]))} and {at(int(order[k + 1]))}: two logical pages would "
                "share one physical page; give every logical page its own page "
                "(build_block_table does)")


def pages_needed(cache_seqlens: torch.Tensor | list[int], page_size: int) -> torch.Tensor:
    """Pages each sequence occupies, ``ceil(n / page_size)`` (int64).

    Examples
    --------
    >>> pages_needed([0, 1, 16, 17], 16).tolist()
    [0, 1, 1, 2]
    """
    page_size = require_int(page_size, "page_size", 1)
    return (_lengths(cache_seqlens) + page_size - 1) // page_size


def build_block_table(cache_seqlens: torch.Tensor | list[int], page_size: int,
                      num_pages: int | None = None, gen: torch.Generator | None = None,
                      max_pages: int | None = None, device: torch.device | str | None = None,
                      ) -> torch.Tensor:
    """A block table for sequences of the given lengths, pages taken from a shuffled free list.

    The free list is a random permutation of the pool's pages (a pool that has served many
    sequences hands out pages in no particular order); sequence 0 takes its pages first, then
    sequence 1, and so on. Row ``b`` lists sequence ``b``'s physical pages in logical order;
    entries past its pages are -1. Every page appears at most once.

    Parameters
    ----------
    cache_seqlens : torch.Tensor or list of int
        ``(B,)`` lengths.
    page_size : int
        Tokens per page.
    num_pages : int, optional
        Pages in the pool; default exactly the pages needed.
    gen : torch.Generator, optional
        Shuffles the free list; ``None`` hands out pages ``0, 1, 2, ...`` in order.
    max_pages : int, optional
        Columns of the table; default the most pages a sequence needs.
    device : torch.device or str, optional
        Where the table goes (default: the CPU).

    Returns
    -------
    torch.Tensor
        ``(B, max_pages)`` int32.

    Raises
    ------
    TypeError
        Lengths that are not ints, sizes that are not ints, or ``gen`` not a generator.
    ValueError
        Negative lengths, ``page_size < 1``, or a pool (``num_pages``) or table
        (``max_pages``) too small for the sequences.

    Examples
    --------
    >>> build_block_table([6, 2], page_size=4).tolist()  # no generator: pages in order
    [[0, 1], [2, -1]]
    """
    need = pages_needed(cache_seqlens, page_size).cpu()
    total = int(need.sum())
    num_pages = total if num_pages is None else require_int(num_pages, "num_pages", 0)
    if num_pages < total:
        raise ValueError(f"the sequences need {total} pages of {page_size} tokens, the pool has "
                         f"{num_pages}; pass num_pages >= {total}")
    width = int(need.max()) if need.numel() else 0
    max_pages = width if max_pages is None else require_int(max_pages, "max_pages", 0)
    if max_pages < width:
        raise ValueError(f"a sequence needs {width} pages; pass max_pages >= {width}")
    _require_generator(gen)
    free = (torch.randperm(num_pages, generator=gen) if gen is not None
            else torch.arange(num_pages))
    table = torch.full((len(need), max_pages), -1, dtype=torch.int32)
    taken = 0
    for b, n in enumerate(need.tolist()):
        table[b, :n] = free[taken:taken + n]
        taken += n
    return table.to(device) if device is not None else table


def _rows(block_table: torch.Tensor, page_size: int, positions: torch.Tensor) -> torch.Tensor:
    positions = positions.to(torch.int64)
    page = torch.gather(block_table.to(torch.int64), 1, positions // page_size)
    return page * page_size + positions % page_size


def token_rows(block_table: torch.Tensor, page_size: int, positions: torch.Tensor,
               num_pages: int | None = None) -> torch.Tensor:
    """Where logical tokens live in a pool seen as rows ``pool.view(-1, ...)``.

    Token ``t`` of sequence ``b`` is in page ``block_table[b, t // page_size]`` at slot
    ``t % page_size``, that is row ``page * page_size + slot`` of the flattened pool.

    Parameters
    ----------
    block_table : torch.Tensor
        ``(B, max_pages)`` integer table.
    page_size : int
        Tokens per page.
    positions : torch.Tensor
        ``(B, n)`` logical token indices (each inside its sequence's pages).
    num_pages : int, optional
        Pages in the pool: if given, pages outside ``[0, num_pages)`` raise too.

    Returns
    -------
    torch.Tensor
        ``(B, n)`` int64 row indices.

    Raises
    ------
    TypeError
        A table or positions that are not integer tensors.
    ValueError
        Shapes that do not match, a position outside the table's columns, or a position whose
        page entry is not a page (negative, such as the -1 padding, or ``>= num_pages``): such
        a row would silently wrap around the pool.

    Examples
    --------
    >>> token_rows(torch.tensor([[6, 4, -1], [5, 3, 1]]), 4, torch.tensor([[0, 5], [3, 8]]))
    tensor([[24, 17],
            [23,  4]])
    """
    block_table = _require_table(block_table)
    page_size = require_int(page_size, "page_size", 1)
    if not isinstance(positions, torch.Tensor) or not _is_int_dtype(positions.dtype):
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be a (batch, n) integer tensor, got {got}")
    if positions.dim() != 2 or positions.shape[0] != block_table.shape[0]:
        raise ValueError(f"positions must be (batch = {block_table.shape[0]}, n), got shape "
                         f"{tuple(positions.shape)}")
    span = block_table.shape[1] * page_size
    outside = (positions < 0) | (positions >= span)
    if bool(outside.any()):
        b, i = outside.nonzero()[0].tolist()
        raise ValueError(f"positions[{b}, {i}] = {int(positions[b, i])} is outside the table's "
                         f"{block_table.shape[1]} page(s) of {page_size} tokens; pass positions "
                         f"in [0, {span})")
    rows = _rows(block_table, page_size, positions)
    pages = rows.div(page_size, rounding_mode="floor")
    bad = (pages < 0) if num_pages is None else (pages < 0) | (pages >= num_pages)
    if bool(bad.any()):
        b, i = bad.nonzero()[0].tolist()
        t = int(positions[b, i])
        raise ValueError(f"positions[{b}, {i}] = {t} lies in block_table[{b}, {t // page_size}] "
                         f"= {int(pages[b, i])}, which is not a page"
                         + (f" of a pool of {num_pages}" if num_pages is not None else "")
                         + "; pass positions inside each sequence's pages")
    return rows


def _pool_checks(cache: torch.Tensor, block_table: torch.Tensor,
                 lengths: torch.Tensor) -> None:
    if cache.dim() != 4:
        raise ValueError(f"the cache must be (batch, kv_heads, length, head_dim), got shape "
                         f"{tuple(cache.shape)}")
    if block_table.shape[0] != cache.shape[0]:
        raise ValueError(f"block_table must be (batch = {cache.shape[0]}, max_pages), got "
                         f"{tuple(block_table.shape)}")
    if len(lengths) != cache.shape[0]:
        raise ValueError(f"cache_seqlens must hold {cache.shape[0]} lengths, got {len(lengths)}")


def _require_fill(fill: object) -> float:
    if isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a number, got {type(fill).__name__}")
    return float(fill)


def scatter_to_pages(cache: torch.Tensor, block_table: torch.Tensor,
                     cache_seqlens: torch.Tensor | list[int], page_size: int, num_pages: int,
                     fill: float = 0.0) -> torch.Tensor:
    """Copy a contiguous cache into a page pool, through a block table.

    Parameters
    ----------
    cache : torch.Tensor
        ``(B, H_kv, S, D)``; token ``t < n_b`` of sequence ``b`` is copied.
    block_table : torch.Tensor
        ``(B, max_pages)`` integer tensor from :func:`build_block_table`: the first
        ``ceil(n_b / page_size)`` entries of row ``b`` are distinct pages in
        ``[0, num_pages)``; entries past them are not read.
    cache_seqlens : torch.Tensor or list of int
        ``(B,)`` lengths ``n_b`` (each at most ``S``).
    page_size, num_pages : int
        The pool's shape.
    fill : float
        Value of every slot no token is copied to (NaN in tests: reading one shows).

    Returns
    -------
    torch.Tensor
        ``(num_pages, page_size, H_kv, D)`` in the cache's dtype and device.

    Raises
    ------
    TypeError
        A cache that is not a tensor, a table that is not an integer tensor, or lengths or
        sizes that are not ints.
    ValueError
        Shapes that do not match, a length past ``S``, or a table whose used entries hold a
        negative page (the -1 padding), a page ``>= num_pages``, or one page twice (the
        message names the entry).

    Examples
    --------
    >>> cache = torch.arange(5.0).reshape(1, 1, 5, 1)  # one sequence, one head, D = 1
    >>> pool = scatter_to_pages(cache, torch.tensor([[2, 0]]), [5], page_size=3, num_pages=3)
    >>> pool[..., 0, 0].tolist()  # page 2 holds tokens 0-2, page 0 holds tokens 3-4
    [[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 2.0]]
    """
    if not isinstance(cache, torch.Tensor):
        raise TypeError(f"cache must be a (batch, kv_heads, length, head_dim) torch.Tensor, got "
                        f"{type(cache).__name__}")
    block_table = _require_table(block_table)
    lengths = _lengths(cache_seqlens)
    page_size = require_int(page_size, "page_size", 1)
    num_pages = require_int(num_pages, "num_pages", 0)
    fill = _require_fill(fill)
    _pool_checks(cache, block_table, lengths)
    B, H_kv, S, D = cache.shape
    _require_within(lengths, S)
    _check_page_ids(block_table, (lengths + page_size - 1) // page_size, num_pages)
    pool = torch.full((num_pages, page_size, H_kv, D), fill, dtype=cache.dtype,
                      device=cache.device)
    flat = pool.view(num_pages * page_size, H_kv, D)
    table = block_table.to(cache.device)
    for b, n in enumerate(lengths.tolist()):
        rows = _rows(table[b:b + 1], page_size, torch.arange(n, device=cache.device)[None])
        flat[rows[0]] = cache[b, :, :n].transpose(0, 1)
    return pool


def _require_within(lengths: torch.Tensor, S: int) -> None:
    if lengths.numel() and int(lengths.max()) > S:
        b = int(lengths.argmax())
        raise ValueError(f"cache_seqlens[{b}] = {int(lengths[b])} is longer than the cache's "
                         f"{S} positions; pass lengths <= {S}")


def _require_pool(pool: object) -> None:
    """Raise ``TypeError`` unless ``pool`` is a tensor, ``ValueError`` unless it is
    ``(num_pages, page_size >= 1, kv_heads, head_dim)``."""
    if not isinstance(pool, torch.Tensor):
        raise TypeError(f"pool must be a (num_pages, page_size, kv_heads, head_dim) "
                        f"torch.Tensor, got {type(pool).__name__}")
    if pool.dim() != 4 or pool.shape[1] < 1:
        raise ValueError(f"pool must be (num_pages, page_size >= 1, kv_heads, head_dim), got "
                         f"shape {tuple(pool.shape)}")


def gather_from_pages(pool: torch.Tensor, block_table: torch.Tensor,
                      cache_seqlens: torch.Tensor | list[int], S: int | None = None,
                      fill: float = 0.0) -> torch.Tensor:
    """Read a page pool back into a contiguous cache ``(B, H_kv, S, D)`` (the reverse of
    :func:`scatter_to_pages`); positions at or past a sequence's length hold ``fill``.

    ``pool`` is ``(num_pages, page_size, H_kv, D)``; ``S`` defaults to the longest length. The
    table is checked as in :func:`scatter_to_pages` (each sequence's pages in
    ``[0, num_pages)``, no page twice), with the same errors.

    Examples
    --------
    >>> k = torch.randn(2, 3, 10, 8)
    >>> lens = torch.tensor([10, 7])
    >>> table = build_block_table(lens, 4, num_pages=9, gen=torch.Generator().manual_seed(1))
    >>> pool = scatter_to_pages(k, table, lens, page_size=4, num_pages=9)
    >>> back = gather_from_pages(pool, table, lens, S=10)
    >>> torch.equal(back[0], k[0]) and torch.equal(back[1, :, :7], k[1, :, :7])
    True
    """
    _require_pool(pool)
    block_table = _require_table(block_table)
    lengths = _lengths(cache_seqlens)
    fill = _require_fill(fill)
    num_pages, page_size, H_kv, D = pool.shape
    longest = int(lengths.max()) if lengths.numel() else 0
    S = longest if S is None else require_int(S, "S", 0)
    _require_within(lengths, S)
    cache = torch.full((len(lengths), H_kv, S, D), fill, dtype=pool.dtype, device=pool.device)
    _pool_checks(cache, block_table, lengths)
    _check_page_ids(block_table, (lengths + page_size - 1) // page_size, num_pages)
    flat = pool.reshape(num_pages * page_size, H_kv, D)
    table = block_table.to(pool.device)
    for b, n in enumerate(lengths.tolist()):
        rows = _rows(table[b:b + 1], page_size, torch.arange(n, device=pool.device)[None])
        cache[b, :, :n] = flat[rows[0]].transpose(0, 1)
    return cache


def paged_from_contiguous(
    k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor | list[int],
    page_size: int, num_pages: int | None = None, gen: torch.Generator | None = None,
    fill: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Page pools and a block table holding the same keys and values as a contiguous cache.

    Parameters
    ----------
    k_cache, v_cache : torch.Tensor
        ``(B, H_kv, S, D)``.
    cache_seqlens : torch.Tensor or list of int
        ``(B,)`` lengths.
    page_size : int
        Tokens per page.
    num_pages : int, optional
        Pages in the pools; default exactly the pages needed.
    gen : torch.Generator, optional
        Shuffles the free list (see :func:`build_block_table`).
    fill : float
        Value of the slots that hold no token.

    Returns
    -------
    k_pool, v_pool : torch.Tensor
        ``(num_pages, page_size, H_kv, D)``.
    block_table : torch.Tensor
        ``(B, max_pages)`` int32 on the caches' device.

    Examples
    --------
    >>> k, v = torch.randn(2, 1, 9, 4), torch.randn(2, 1, 9, 4)
    >>> k_pool, v_pool, table = paged_from_contiguous(k, v, [9, 3], page_size=4)
    >>> k_pool.shape, table.tolist()
    (torch.Size([4, 4, 1, 4]), [[0, 1, 2], [3, -1, -1]])
    """
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise (ValueError if isinstance(t, torch.Tensor) else TypeError)(
                f"{name} must be a (batch, kv_heads, length, head_dim) tensor, got {got}")
    if k_cache.dtype != v_cache.dtype:
        raise TypeError(f"k_cache and v_cache must share one dtype, got {k_cache.dtype} and "
                        f"{v_cache.dtype}; convert them, e.g. v_cache.to(k_cache.dtype)")
    if k_cache.shape[:3] != v_cache.shape[:3] or k_cache.device != v_cache.device:
        raise ValueError(f"k_cache and v_cache must have the same batch, heads and length on one "
                         f"device, got {tuple(k_cache.shape)} on {k_cache.device} and "
                         f"{tuple(v_cache.shape)} on {v_cache.device}")
    lengths = _lengths(cache_seqlens)
    table = build_block_table(lengths, page_size, num_pages, gen)
    num_pages = int(pages_needed(lengths, page_size).sum()) if num_pages is None else num_pages
    k_pool = scatter_to_pages(k_cache, table, lengths, page_size, num_pages, fill)
    v_pool = scatter_to_pages(v_cache, table, lengths, page_size, num_pages, fill)
    return k_pool, v_pool, table.to(k_cache.device)


def head_major(pool: torch.Tensor) -> torch.Tensor:
    """The same page pool, stored with each head's rows of a page side by side.

    A pool ``(num_pages, page_size, H_kv, D)`` stored as its shape says (vLLM's and
    FlashAttention's layout) keeps a token's heads together: one head's rows of a page lie
    ``H_kv * D`` elements apart, 4 KB at 32 heads of ``D = 64`` in 16 bits. The tensor returned
    has the same shape and values, with memory ordered ``(num_pages, H_kv, page_size, D)``: a
    head's page is one run of ``page_size * D`` elements, as in a contiguous ``(B, H_kv, S, D)``
    cache. ``decode.decode_attention`` takes either, since it reads a pool through its strides.

    Parameters
    ----------
    pool : torch.Tensor
        ``(num_pages, page_size, H_kv, D)``, any strides.

    Returns
    -------
    torch.Tensor
        A copy, ``(num_pages, page_size, H_kv, D)`` with strides
        ``(page_size * H_kv * D, D, page_size * D, 1)``.

    Raises
    ------
    TypeError
        ``pool`` is not a tensor.
    ValueError
        ``pool`` is not 4-D, or its pages hold no slot.

    Examples
    --------
    >>> pool = torch.zeros(8, 16, 32, 64)
    >>> pool.stride(), head_major(pool).stride()
    ((32768, 2048, 64, 1), (32768, 64, 1024, 1))
    >>> torch.equal(head_major(pool), pool)
    True
    """
    _require_pool(pool)
    return pool.transpose(1, 2).contiguous().transpose(1, 2)
