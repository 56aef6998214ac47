"""16-bit rows held as their own 32-bit words, two elements a word, as Triton functions.

A float16 or bfloat16 row read as int32 words takes half the registers of its float32 values:
the resident kernels that keep a chunk through their row's wait keep it so
(:func:`~teachkit.kernels.softmax_kernels.resident_words_kernel` in Triton,
:func:`~teachkit.kernels.softmax_tma.resident_tma_words_kernel` in Gluon, which calls these
element-wise functions as they are). ``halves`` turns a word into its two float32 elements,
``pack_halves`` (or ``pack_halves_x2``, one instruction a word; ``pack_results`` picks) rounds two
back into a word, and ``fresh`` keeps the compiler from holding the float32 halves alive between
two uses; ``fresh_halves`` is ``halves`` of ``fresh``, in one instruction an element for
bfloat16.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["CVT_X2_MIN_CAPABILITY", "cvt_x2", "fresh", "fresh_halves", "halves", "pack_halves",
           "pack_halves_x2", "pack_results"]


@triton.jit
def halves(words, HALF: tl.constexpr):
    """The two 16-bit floats of ``HALF`` (``tl.bfloat16`` or ``tl.float16``) in each int32 of
    ``words``, as float32: ``(low, high)``, the elements at the even and odd columns of a
    little-endian row."""
    low = words.to(tl.int16).to(HALF, bitcast=True).to(tl.float32)
    high = (words >> 16).to(tl.int16).to(HALF, bitcast=True).to(tl.float32)
    return low, high


@triton.jit
def pack_halves(low, high, HALF: tl.constexpr):
    """Float32 ``low`` and ``high`` rounded to ``HALF`` and packed into int32 words, the
    inverse of :func:`halves`."""
    low_bits = low.to(HALF).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    high_bits = high.to(HALF).to(tl.int16, bitcast=True).to(tl.int32)
    return (high_bits << 16) | low_bits


CVT_X2_MIN_CAPABILITY = (8, 0)
"""The oldest GPU with PTX's ``cvt.rn.bf16x2.f32`` and ``cvt.rn.f16x2.f32`` (Ampere, sm_80), the
conversions :func:`pack_halves_x2` is written in."""


def cvt_x2(capability: tuple[int, int] | None) -> bool:
    """Whether a GPU of compute ``capability`` has the instruction :func:`pack_halves_x2` is
    written in, so that :func:`resident_words_kernel` may round with it (``None``: Triton's
    interpreter, which runs no PTX).

    >>> cvt_x2((9, 0)), cvt_x2((7, 5)), cvt_x2(None)
    (True, False, False)
    """
    return capability is not None and tuple(capability) >= CVT_X2_MIN_CAPABILITY


@triton.jit
def pack_halves_x2(low, high, HALF: tl.constexpr):
    """:func:`pack_halves` in one instruction a word: PTX's ``cvt.rn.bf16x2.f32`` (``f16x2``
    for float16) rounds ``high`` and ``low`` to nearest even and packs them, the same bits.
    Triton converts each element with an instruction of its own (``F2F.BF16.F32`` in sm_90
    SASS); this is one ``F2FP.BF16.F32.PACK_AB`` for two
    (``python -m teachkit.kernels --resident-conversions``). Compiled on sm_80 and later only
    (:data:`CVT_X2_MIN_CAPABILITY`)."""
    if HALF == tl.bfloat16:
        asm: tl.constexpr = "cvt.rn.bf16x2.f32 $0, $2, $1;"
    else:
        asm: tl.constexpr = "cvt.rn.f16x2.f32 $0, $2, $1;"
    return tl.inline_asm_elementwise(asm, "=r,r,r", [low, high], dtype=tl.int32, is_pure=True,
                                     pack=1)


@triton.jit
def pack_results(low, high, HALF: tl.constexpr, CVT_X2: tl.constexpr):
    """Float32 results ``low`` and ``high`` rounded to ``HALF`` and packed into int32 words by
    :func:`pack_halves_x2` (one instruction a word) with ``CVT_X2``, else by :func:`pack_halves`:
    the same bits either way. The words kernels take ``CVT_X2`` from their configuration."""
    if CVT_X2:
        y = pack_halves_x2(low, high, HALF)
    else:
        y = pack_halves(low, high, HALF)
    return y


@triton.jit
def fresh(words, m):
    """``words`` again, as a new value that depends on ``m`` (it is ``words`` unless ``m`` is
    NaN, and then the softmax it feeds is NaN either way). :func:`halves` of it cannot be
    merged by the compiler with an earlier :func:`halves` of ``words``, so the float32 halves are
    computed where they are used instead of kept alive in registers meanwhile."""
    return tl.where(m == m, words, 0)


@triton.jit
def fresh_halves(words, m, HALF: tl.constexpr, PRMT: tl.constexpr = True):
    """``halves(fresh(words, m), HALF)``; with ``PRMT``, for bfloat16, in one instruction an
    element: PTX's
    ``prmt.b32`` moves a word's two bytes of one element into the high half of a float32 and
    zeroes the low half (a bfloat16 is a float32's high 16 bits). Its byte selector is computed
    from ``m`` (zero bytes if ``m`` is NaN, as :func:`fresh`), so the compiler cannot reuse the
    halves of an earlier call. Float16 (or ``PRMT`` off) takes :func:`halves` of :func:`fresh`.
    With ``PRMT``, compiled only (PTX: Triton's interpreter runs none);
    ``python -m teachkit.kernels --tma-words-instructions`` counts its instructions in the TMA
    words kernel."""
    if PRMT and HALF == tl.bfloat16:
        # prmt.b32 d, a, b, s: byte i of d is byte (nibble i of s) of b:a, bytes 0-3 from a (the
        # word) and 4-7 from b (here 0). 0x1044: bytes 1, 0 of the word on top, zeros below (the
        # low element); 0x3244: bytes 3, 2 (the high one); 0x4444: all zeros.
        keep = m == m
        low_sel = words * 0 + tl.where(keep, 0x1044, 0x4444)  # words * 0: its shape and layout
        high_sel = words * 0 + tl.where(keep, 0x3244, 0x4444)
        low = tl.inline_asm_elementwise("prmt.b32 $0, $1, 0, $2;", "=r,r,r", [words, low_sel],
                                        dtype=tl.int32, is_pure=True, pack=1)
        high = tl.inline_asm_elementwise("prmt.b32 $0, $1, 0, $2;", "=r,r,r",
                                         [words, high_sel], dtype=tl.int32, is_pure=True,
                                         pack=1)
        return low.to(tl.float32, bitcast=True), high.to(tl.float32, bitcast=True)
    else:
        return halves(fresh(words, m), HALF)
