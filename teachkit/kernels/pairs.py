"""The merge rule and the ``(m, d)`` pair as Triton functions: what every softmax kernel of the
course builds on, the Triton ones (:mod:`teachkit.kernels.softmax_kernels`) and the Gluon one
(:mod:`teachkit.kernels.softmax_tma`), which calls these element-wise functions as they are.

``merge_combine`` is notebook 03's merge of two ``(m, d)`` pairs; ``online_update`` folds one
value into a running pair; ``pack_pair`` / ``unpack_pair`` turn a pair into the one 64-bit word
the resident kernels exchange between the programs of a row, and ``nap`` pauses between two polls
of those words.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..device import ON_GPU

__all__ = ["EMPTY_SLOT", "LOG2E", "MAX_SPIN", "SPIN_POLLS", "merge_combine", "nap",
           "online_update", "pack_pair", "unpack_pair"]

LOG2E = tl.constexpr(1.4426950408889634)
"""log2(e): ``exp(t)`` is computed as ``exp2(t * LOG2E)``, the GPU's native exponential."""
SPIN_POLLS = 1 << 16
"""Polls of the row's slots before a program of the compiled resident kernel reads its row
itself."""
MAX_SPIN = SPIN_POLLS if ON_GPU else 0
"""The polls a launch allows: :data:`SPIN_POLLS` on a GPU, none under the interpreter, which runs
one program at a time."""


# ---------------------------------------------------------------------------------------------
# The merge rule, written once for Triton
# ---------------------------------------------------------------------------------------------
@triton.jit
def merge_combine(m_a, d_a, m_b, d_b):
    """Combine two ``(m, d)`` pairs: notebook 03's merge, with ``exp(t)`` as ``exp2(t * log2 e)``.

    ``tl.reduce`` calls it on pairs of lanes in a tree. A side with ``m = -inf`` (nothing seen
    yet, or everything masked) adds 0 instead of the NaN of ``exp(-inf - (-inf))``. The difference
    is taken before scaling by log2(e), so it stays exact near the maximum even for huge inputs.
    """
    m = tl.maximum(m_a, m_b)
    safe = tl.where(m == float("-inf"), 0.0, m)
    return m, d_a * tl.exp2((m_a - safe) * LOG2E) + d_b * tl.exp2((m_b - safe) * LOG2E)


@triton.jit
def online_update(m, d, x):
    """Fold one value per lane into running per-lane ``(m, d)``: ``m``, ``d`` and ``x`` are
    ``(BLOCK,)``, one entry per lane."""
    m_new = tl.maximum(m, x)
    safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, d * tl.exp2((m - safe) * LOG2E) + tl.exp2((x - safe) * LOG2E)


# ---------------------------------------------------------------------------------------------
# The pair a resident program publishes for its chunk
# ---------------------------------------------------------------------------------------------
EMPTY_SLOT = tl.constexpr(-1)
"""What a slot of the resident kernel's exchange holds until its chunk's ``(m, d)`` is written:
all 64 bits set, a pair of NaNs with the sign and every payload bit set. A GPU's float32
arithmetic gives NaNs as ``0x7FFFFFFF`` (PTX's canonical NaN), so no pair it computes packs to
this word; one that did would only make the row's programs wait out their polls and read the row
themselves. ``EMPTY_SLOT.value`` is the Python int."""


@triton.jit
def pack_pair(m, d):
    """``(m, d)``, two float32 scalars, as one int64 word: ``m``'s bits high, ``d``'s low, so a
    single 64-bit store publishes both and a reader sees both or neither."""
    high = m.to(tl.int32, bitcast=True).to(tl.int64)
    low = d.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return (high << 32) | low


@triton.jit
def unpack_pair(word):
    """The ``(m, d)`` of :func:`pack_pair`'s words, element-wise."""
    m = (word >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    d = word.to(tl.int32).to(tl.float32, bitcast=True)
    return m, d


@triton.jit
def nap(x):
    """``x`` (an int32), after the thread has slept about 256 ns (PTX ``nanosleep``, sm_70 and
    later): a pause between two polls, meant to keep hundreds of waiting programs from
    crowding L2 with polls while the data the others wait for is on its way through it."""
    return tl.inline_asm_elementwise("nanosleep.u32 256; mov.u32 $0, $1;", "=r,r", [x],
                                     dtype=tl.int32, is_pure=False, pack=1)
