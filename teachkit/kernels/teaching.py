r"""Small Triton kernels for notebook 06: a first kernel, a one-row softmax, a reduce of ``(m, d)``.

They are teaching code, written to be read beside :mod:`teachkit.kernels.softmax_kernels`:

``row_max`` (kernel ``row_max_kernel``)
    The first kernel: one program per row, a masked load with ``other=-inf``, ``tl.max``.
``row_softmax`` (kernel ``row_softmax_kernel``)
    The simplest fused softmax: one program per row, the whole row in one block (exercise 1's
    solution).
``merge_combine_natural`` and ``reduce_stats``
    The merge of two ``(m, d)`` pairs in natural units (``exp``, as in notebooks 03-04) and a
    kernel that reduces lanes of pairs with ``tl.reduce`` and any such combine (exercise 2).
``exchange_pairs`` (kernels ``counter_exchange_kernel`` and ``word_exchange_kernel``)
    How the programs of a row hand each other their ``(m, d)``, the resident kernel's exchange
    on its own, written two ways: two float32 stores and an arrival counter with
    release-acquire atomics, or one 64-bit word with a relaxed atomic (the shipped way).
``bf16_halves`` (kernel ``halves_kernel``)
    Any ``@triton.jit`` function that reads int32 words as their two bfloat16 halves, run on a
    bfloat16 tensor read as words (exercise 6; the shipped one is
    :func:`~teachkit.kernels.softmax_kernels.halves`).
``fused_one_row``
    The course's :func:`~teachkit.kernels.softmax_kernels.fused_kernel` launched for one row of
    *any* length, past the :data:`~teachkit.kernels.softmax_kernels.FUSED_MAX_COLS` the entry
    point allows, to see where a row stops fitting in registers (GPU only; under the interpreter
    it is merely slow).

All take tensors on :data:`teachkit.DEVICE` (CPU tensors under Triton's interpreter).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import torch
import triton
import triton.language as tl

from ..validation import require_kernel_tensor, require_power_of_two
from .softmax_kernels import (
    EMPTY_SLOT,
    MAX_SPIN,
    fused_kernel,
    merge_combine,
    pack_pair,
    read_pairs,
)

__all__ = [
    "bf16_halves",
    "counter_exchange_kernel",
    "exchange_pairs",
    "fused_one_row",
    "halves_kernel",
    "merge_combine_natural",
    "reduce_stats",
    "row_max",
    "row_max_kernel",
    "row_softmax",
    "row_softmax_kernel",
    "word_exchange_kernel",
]


def _rows_input(x: object, kernel: str, reference: str) -> torch.Tensor:
    """Check a ``(rows, n_cols)`` input of a teaching kernel; return it with unit column stride
    (the kernels index columns as ``row * stride + col``)."""
    require_kernel_tensor(x, "x", kernel, reference)
    if x.dim() != 2:
        raise ValueError(f"{kernel} takes a 2-D (rows, n_cols) tensor, got shape "
                         f"{tuple(x.shape)}; reshape it, e.g. x.reshape(-1, x.shape[-1])")
    return x if x.stride(1) == 1 or x.shape[1] <= 1 else x.contiguous()


def _require_int32_offsets(x: torch.Tensor, kernel: str) -> None:
    """The first kernels keep ``row * stride`` in int32, for reading's sake: refuse tensors whose
    offsets would wrap past 2**31 rather than read the wrong memory."""
    if x.shape[0] and (x.shape[0] - 1) * x.stride(0) + x.shape[1] >= 2**31:
        raise ValueError(f"{kernel} indexes rows in int32 and x spans 2**31 elements or more "
                         f"(shape {tuple(x.shape)}); split it into row blocks, or use "
                         "teachkit.kernels.softmax, whose kernels index in int64")


# ---------------------------------------------------------------------------------------------
# A first kernel: the maximum of every row
# ---------------------------------------------------------------------------------------------
@triton.jit
def row_max_kernel(X, OUT, n_cols, stride_x, BLOCK: tl.constexpr):
    """Program ``row``: the maximum of row ``row`` of ``X`` ``(rows, n_cols)`` into ``OUT[row]``
    (``OUT`` is ``(rows,)``)."""
    row = tl.program_id(0)                       # which row this program owns
    cols = tl.arange(0, BLOCK)                   # BLOCK offsets, a power of two >= n_cols
    mask = cols < n_cols                         # slots past the row's end read nothing
    x = tl.load(X + row * stride_x + cols, mask=mask, other=float("-inf"))
    tl.store(OUT + row, tl.max(x, axis=0))


def row_max(x: torch.Tensor) -> torch.Tensor:
    """The maximum of every row of a 2-D float tensor, one Triton program per row.

    Parameters
    ----------
    x : torch.Tensor
        ``(rows, n_cols)`` float16, bfloat16 or float32 on :data:`teachkit.DEVICE`, any
        strides (copied to a unit column stride if needed).

    Returns
    -------
    torch.Tensor
        ``(rows,)`` of ``x``'s dtype.
    """
    x = _rows_input(x, "row_max", "torch.amax(x, dim=1)")
    _require_int32_offsets(x, "row_max")
    rows, n_cols = x.shape
    if n_cols == 0 and rows > 0:
        raise ValueError(f"row_max of rows with no element is undefined (x has shape "
                         f"{tuple(x.shape)}); pass at least one column, as torch.amax needs")
    out = torch.empty(rows, dtype=x.dtype, device=x.device)
    if rows == 0:
        return out
    row_max_kernel[(rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
    return out


# ---------------------------------------------------------------------------------------------
# A one-row softmax: the whole row in one block
# ---------------------------------------------------------------------------------------------
@triton.jit
def row_softmax_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """Program ``row``: the softmax of row ``row`` of ``X`` ``(rows, n_cols)`` into the same row
    of ``Y``, the whole row in one ``(BLOCK,)`` block (``BLOCK >= n_cols``, a power of two)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # Padding slots read -inf: they cannot raise the maximum and add exp(-inf) = 0 to the sum.
    x = tl.load(X + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


def row_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of every row of a 2-D tensor, one program per row holding the whole row.

    Computes in float32 and writes ``x``'s dtype. Rows of at most a few thousand elements
    (the block is the next power of two of the row length).

    Parameters
    ----------
    x : torch.Tensor
        ``(rows, n_cols)`` float16, bfloat16 or float32 on :data:`teachkit.DEVICE`, any
        strides (copied to a unit column stride if needed).

    Returns
    -------
    torch.Tensor
        Same shape and dtype, contiguous.

    Examples
    --------
    >>> import teachkit
    >>> x = torch.tensor([[1.0, 3.0, 2.0, 5.0]], device=teachkit.DEVICE)
    >>> row_softmax(x).cpu()
    tensor([[0.0152, 0.1125, 0.0414, 0.8310]])
    """
    x = _rows_input(x, "row_softmax", "the torch reference teachkit.softmax.safe_softmax")
    rows, n_cols = x.shape
    y = torch.empty((rows, n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    row_softmax_kernel[(rows,)](x, y, n_cols, x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(n_cols))
    return y


# ---------------------------------------------------------------------------------------------
# The merge as a combine function, and a kernel that reduces lanes of (m, d) with any combine
# ---------------------------------------------------------------------------------------------
@triton.jit
def merge_combine_natural(m_a, d_a, m_b, d_b):
    """Merge two ``(m, d)`` pairs with ``d = sum exp(x - m)`` (natural units, notebook 03).

    The new maximum is the larger; each side's ``d`` is rescaled to it. When both sides are
    empty (``m = -inf``), the shift is taken from 0 so that ``exp(-inf) = 0`` replaces the NaN of
    ``exp(-inf - (-inf))``.
    """
    m = tl.maximum(m_a, m_b)
    safe = tl.where(m == float("-inf"), 0.0, m)
    return m, d_a * tl.exp(m_a - safe) + d_b * tl.exp(m_b - safe)


_REDUCE_SOURCE = """\
import triton
import triton.language as tl
from triton import jit


{combine}


@triton.jit
def reduce_stats_kernel(M, D, OUT_M, OUT_D, n_lanes, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    mask = lanes < n_lanes
    m = tl.load(M + row * stride + lanes, mask=mask, other=float("-inf"))  # (-inf, 0): empty
    d = tl.load(D + row * stride + lanes, mask=mask, other=0.0)
    m_row, d_row = tl.reduce((m, d), 0, {name})
    tl.store(OUT_M + row, m_row)
    tl.store(OUT_D + row, d_row)
"""


@functools.cache
def _reduce_stats_kernel(combine: object) -> object:
    """A kernel that reduces lanes with ``tl.reduce`` and ``combine`` as its combine function.

    ``tl.reduce`` takes its combine function as a global name of the kernel's module (a
    ``tl.constexpr`` argument is not accepted there by every Triton version), so the combine
    function's source and a small kernel are written to a module file of their own and imported:
    Triton then reads both like any other kernel, compiled or interpreted.
    """
    fn = getattr(combine, "fn", combine)
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        raise TypeError(f"combine must be a @triton.jit function defined in a file (its source is "
                        f"compiled with the kernel), got {combine!r}") from None
    if not hasattr(combine, "fn"):  # a JITFunction, or an InterpretedFunction in the interpreter
        raise TypeError(f"combine must be a @triton.jit function, got {combine!r}; decorate it "
                        "with @triton.jit, as merge_combine_natural is")
    source = _REDUCE_SOURCE.format(combine=textwrap.dedent(text),
                                   name=fn.__name__)
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    name = f"teachkit_reduce_{digest}"
    path = Path(tempfile.gettempdir()) / "teachkit_kernels" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != source:
        # Written beside it and renamed into place: another process (a second notebook, a
        # parallel test) that imports the same module never reads a half-written file.
        partial = path.with_name(f"{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_text(source)
        os.replace(partial, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.reduce_stats_kernel


def reduce_stats(m: torch.Tensor, d: torch.Tensor,
                 combine: object = merge_combine_natural) -> tuple[torch.Tensor, torch.Tensor]:
    """Reduce the lanes (last axis) of ``(m, d)`` pairs to one pair per row with ``tl.reduce``.

    Parameters
    ----------
    m, d : torch.Tensor
        float32 ``(rows, lanes)`` on :data:`teachkit.DEVICE`: per-lane maxima and denominators.
    combine
        A ``@triton.jit`` function ``(m_a, d_a, m_b, d_b) -> (m, d)``, passed to the kernel as a
        ``tl.constexpr`` and used as ``tl.reduce``'s combine function.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``(rows,)`` float32 each: the merged statistics of every row.
    """
    reference = "the torch reference teachkit.softmax.reduce_stats"
    m = require_kernel_tensor(m, "m", "reduce_stats", reference)
    d = require_kernel_tensor(d, "d", "reduce_stats", reference)
    if m.dim() != 2 or m.shape != d.shape:
        raise ValueError(f"m and d must be 2-D (rows, lanes) of one shape, got m"
                         f"{tuple(m.shape)} and d{tuple(d.shape)}")
    if m.device != d.device:
        raise ValueError(f"m and d must be on one device, got {m.device} and {d.device}")
    m = m.float().contiguous()
    d = d.float().contiguous()
    _require_int32_offsets(m, "reduce_stats")
    rows, lanes = m.shape
    out_m = torch.empty(rows, dtype=torch.float32, device=m.device)
    out_d = torch.empty_like(out_m)
    if rows == 0:
        return out_m, out_d
    if lanes == 0:  # nothing to reduce: the empty pair
        return out_m.fill_(float("-inf")), out_d.zero_()
    _reduce_stats_kernel(combine)[(rows,)](m, d, out_m, out_d, lanes, m.stride(0),
                                           BLOCK=triton.next_power_of_2(lanes))
    return out_m, out_d


# ---------------------------------------------------------------------------------------------
# Two bfloat16 elements in one int32 word
# ---------------------------------------------------------------------------------------------
@triton.jit
def halves_kernel(WORDS, LOW, HIGH, n, BLOCK: tl.constexpr, HALVES: tl.constexpr):
    """One program of ``BLOCK`` words: ``LOW`` and ``HIGH`` (float32) get what ``HALVES``, a
    ``@triton.jit`` function ``words -> (low, high)``, makes of the int32 ``WORDS``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    low, high = HALVES(tl.load(WORDS + offs, mask=mask, other=0))
    tl.store(LOW + offs, low, mask=mask)
    tl.store(HIGH + offs, high, mask=mask)


def bf16_halves(x: torch.Tensor, halves: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Read bfloat16 ``x`` as int32 words, two neighbouring elements each, and run ``halves``
    on the words in a kernel (:func:`halves_kernel`).

    Parameters
    ----------
    x : torch.Tensor
        bfloat16 on :data:`teachkit.DEVICE`, an even number of elements along the last axis.
    halves
        A ``@triton.jit`` function ``words -> (low, high)`` returning float32 tensors.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        float32 ``(..., n // 2)`` each: what ``halves`` made of each word, as low and high
        (the elements at the even and at the odd columns, if it is right).
    """
    require_kernel_tensor(x, "x", "bf16_halves", "torch: x.float()")
    if x.dtype != torch.bfloat16 or x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"x must be bfloat16 with an even number of elements along its last "
                         f"axis, got {x.dtype} of shape {tuple(x.shape)}")
    if not callable(getattr(halves, "fn", None)):
        raise TypeError(f"halves must be a @triton.jit function, got {type(halves).__name__}")
    words = x.contiguous().view(torch.int32)
    flat = words.flatten()
    low = torch.empty(flat.shape, dtype=torch.float32, device=flat.device)
    high = torch.empty_like(low)
    if flat.numel():
        block = 1024
        halves_kernel[(triton.cdiv(flat.numel(), block),)](flat, low, high, flat.numel(),
                                                          BLOCK=block, HALVES=halves)
    return low.view(words.shape), high.view(words.shape)


# ---------------------------------------------------------------------------------------------
# The exchange of (m, d) between the programs of a row, two ways
# ---------------------------------------------------------------------------------------------
@triton.jit
def counter_exchange_kernel(M, D, PART_M, PART_D, ARRIVED, OUT_M, OUT_D, G: tl.constexpr,
                            G_POW2: tl.constexpr, MAX_SPIN: tl.constexpr):
    """Program ``i`` of ``G`` publishes the pair ``(M[i], D[i])`` as two float32 stores to
    ``PART_M``/``PART_D``, then adds 1 to ``ARRIVED`` (int32, zeroed) with a release-acquire
    atomic: *release*, so that its stores are visible before its count is; *acquire*, so that
    the program that sees ``G`` sees every pair. It polls the counter (acquire) until ``G``,
    merges the ``G`` pairs and writes the result to ``OUT_M[i]``, ``OUT_D[i]``. After
    ``MAX_SPIN`` polls it merges ``M`` and ``D`` themselves instead (the interpreter runs one
    program at a time)."""
    i = tl.program_id(0)
    tl.store(PART_M + i, tl.load(M + i))
    tl.store(PART_D + i, tl.load(D + i))
    arrived = tl.atomic_add(ARRIVED, 1, sem="acq_rel") + 1
    polls = 0
    while (arrived < G) & (polls < MAX_SPIN):
        arrived = tl.atomic_add(ARRIVED, 0, sem="acquire")
        polls += 1
    lanes = tl.arange(0, G_POW2)
    if arrived >= G:
        m = tl.load(PART_M + lanes, mask=lanes < G, other=float("-inf"), cache_modifier=".cg")
        d = tl.load(PART_D + lanes, mask=lanes < G, other=0.0, cache_modifier=".cg")
    else:
        m = tl.load(M + lanes, mask=lanes < G, other=float("-inf"))
        d = tl.load(D + lanes, mask=lanes < G, other=0.0)
    m_row, d_row = tl.reduce((m, d), 0, merge_combine)
    tl.store(OUT_M + i, m_row)
    tl.store(OUT_D + i, d_row)


@triton.jit
def word_exchange_kernel(M, D, SLOTS, OUT_M, OUT_D, G: tl.constexpr, G_POW2: tl.constexpr,
                         MAX_SPIN: tl.constexpr):
    """Program ``i`` of ``G`` publishes the pair ``(M[i], D[i])`` as one 64-bit word
    (:func:`~teachkit.kernels.softmax_kernels.pack_pair`) to ``SLOTS[i]`` (int64, every slot
    :data:`~teachkit.kernels.softmax_kernels.EMPTY_SLOT`) with a relaxed atomic exchange: the
    word is the data, so nothing else has to become visible first. It waits for the ``G``
    slots as the resident kernel does (:func:`~teachkit.kernels.softmax_kernels.read_pairs`),
    merges them and writes the result to ``OUT_M[i]``, ``OUT_D[i]``; if they have not all
    arrived after ``MAX_SPIN`` polls, it merges ``M`` and ``D`` themselves instead."""
    i = tl.program_id(0)
    tl.atomic_xchg(SLOTS + i, pack_pair(tl.load(M + i), tl.load(D + i)), sem="relaxed")
    m, d, complete = read_pairs(SLOTS, G, G_POW2, MAX_SPIN)  # the resident kernel's wait
    if not complete:
        lanes = tl.arange(0, G_POW2)
        m = tl.load(M + lanes, mask=lanes < G, other=float("-inf"))
        d = tl.load(D + lanes, mask=lanes < G, other=0.0)
    m_row, d_row = tl.reduce((m, d), 0, merge_combine)
    tl.store(OUT_M + i, m_row)
    tl.store(OUT_D + i, d_row)


def exchange_pairs(m: torch.Tensor, d: torch.Tensor, packed: bool = True,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the exchange on its own: ``G = len(m)`` programs, program ``i`` holding the pair
    ``(m[i], d[i])``, each ending with the merge of all ``G`` pairs.

    Parameters
    ----------
    m, d : torch.Tensor
        ``(G,)`` float32 on :data:`teachkit.DEVICE`, ``G`` at most 1024 (the programs must all
        be on the GPU at once).
    packed : bool
        ``True`` for :func:`word_exchange_kernel`, ``False`` for
        :func:`counter_exchange_kernel`.

    Returns
    -------
    tuple of torch.Tensor
        ``(m_out, d_out)``, ``(G,)`` each: what every program merged (all equal).
    """
    for name, t in (("m", m), ("d", d)):
        require_kernel_tensor(t, name, "exchange_pairs", "teachkit.softmax.reduce_stats")
        if t.dtype != torch.float32 or t.dim() != 1 or not 1 <= t.numel() <= 1024:
            raise ValueError(f"{name} must be a 1-D float32 tensor of 1 to 1024 pairs, got "
                             f"{t.dtype} of shape {tuple(t.shape)}")
    if m.shape != d.shape:
        raise ValueError(f"m and d must have the same shape, got {tuple(m.shape)} and "
                         f"{tuple(d.shape)}")
    if not isinstance(packed, bool):
        raise TypeError(f"packed must be a bool, got {type(packed).__name__}")
    m, d = m.contiguous(), d.contiguous()
    g = m.numel()
    out_m, out_d = torch.empty_like(m), torch.empty_like(d)
    shape = {"G": g, "G_POW2": triton.next_power_of_2(g), "MAX_SPIN": MAX_SPIN}
    if packed:
        slots = torch.full((g,), EMPTY_SLOT.value, dtype=torch.int64, device=m.device)
        word_exchange_kernel[(g,)](m, d, slots, out_m, out_d, **shape)
    else:
        part_m, part_d = torch.empty_like(m), torch.empty_like(d)
        arrived = torch.zeros(1, dtype=torch.int32, device=m.device)
        counter_exchange_kernel[(g,)](m, d, part_m, part_d, arrived, out_m, out_d, **shape)
    return out_m, out_d


# ---------------------------------------------------------------------------------------------
# The fused kernel past its limit
# ---------------------------------------------------------------------------------------------
def fused_one_row(x: torch.Tensor, num_warps: int = 16) -> torch.Tensor:
    """Launch the course's :func:`~teachkit.kernels.softmax_kernels.fused_kernel` with one row
    per program and ``BLOCK_N`` the next power of two of the row length, whatever that length.

    :func:`teachkit.kernels.softmax_fused` refuses rows longer than ``FUSED_MAX_COLS``; this
    wrapper does not, so a GPU can show what happens when a row no longer fits in registers.

    Parameters
    ----------
    x : torch.Tensor
        ``(rows, n_cols)`` float16, bfloat16 or float32 on :data:`teachkit.DEVICE`, any
        strides (copied to a unit column stride if needed).
    num_warps : int
        Warps per program: each thread holds ``BLOCK_N / (32 * num_warps)`` values of the row.
    """
    x = _rows_input(x, "fused_one_row", "the torch reference teachkit.softmax.safe_softmax")
    require_power_of_two(num_warps, "num_warps")
    rows, n_cols = x.shape
    y = torch.empty((rows, n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    fused_kernel[(rows,)](x, y, rows, n_cols, x.stride(0), y.stride(0),
                          BLOCK_M=1, BLOCK_N=triton.next_power_of_2(n_cols), num_warps=num_warps)
    return y
