r"""Exercises of notebook 10, *ring attention*.

Three exercises, each with a checker ``check_<name>(fn)`` here and a solution
``solution_<name>`` in :mod:`teachkit.exercises.solutions.ex10`:

1. :func:`check_ring_plan`: for one rank, the rank whose key/value block it holds at each step
   and how that block is masked (contiguous or striped tokens, causal or not).
2. :func:`check_strict_block`: attention under the striped layout's "strict" mask, local key
   ``b`` visible to local query ``a`` only when ``b < a``; query 0 sees nothing.
3. :func:`check_ring_rank`: one rank's whole ring: attend to each block in turn and merge the
   partial ``(out, lse)`` into the running result.

Every checker runs the learner's function on fresh random cases (world sizes 1 to 6, block
lengths that are odd, float64 and float32) and compares with a reference derived from first
principles (the token positions each rank holds, a float64 masked softmax); a wrong answer
raises :class:`~teachkit.exercises.checking.ExerciseFailed` naming the case and the likely slip.

Examples
--------
>>> from teachkit.exercises.solutions.ex10 import solution_ring_plan
>>> check_ring_plan(solution_ring_plan)
[correct] The blocks a rank meets, in order, and their masks
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..attention import merge_partials
from ..compare import relative_error
from ..ring.attention import attend_block
from ..ring.layout import LAYOUTS, block_mask, positions, shard, source_rank
from ..tiling import FULL, MASKED, SKIP, STRICT, TileKind
from .checking import (
    ExerciseFailed,
    LargestFloat,
    call_learner,
    exercise,
    expect,
    expect_close,
    fresh_generator,
    matching_mistake,
    random_int,
)

__all__ = [
    "check_ring_plan",
    "check_strict_block",
    "check_ring_rank",
]

NEG_INF = float("-inf")
Pair = tuple[torch.Tensor, torch.Tensor]





@functools.cache
def _mask_from_positions(rank: int, src: int, world_size: int, n: int, causal: bool,
                         layout: str) -> TileKind:
    """Classify a block by its explicit token-level mask: the reference of exercise 1."""
    if not causal:
        return FULL
    pos_q = positions(rank, world_size, n, layout)
    pos_k = positions(src, world_size, n, layout)
    visible = pos_k[None, :] <= pos_q[:, None]
    if bool(visible.all()):
        return FULL
    if not bool(visible.any()):
        return SKIP
    a, b = torch.arange(n)[:, None], torch.arange(n)[None, :]
    if torch.equal(visible, b <= a):
        return MASKED
    if torch.equal(visible, b < a):
        return STRICT
    raise AssertionError(f"unexpected mask for rank {rank}, block of {src}")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# Exercise 1: the plan of one rank
# ---------------------------------------------------------------------------------------------


def _plan_advice(rank: int, world_size: int, step: int, got: tuple, want: tuple, causal: bool,
                 layout: str) -> str:
    g_src, g_mask = got
    w_src, w_mask = want
    if g_src != w_src:
        if g_src == (rank + step) % world_size:
            return ("Blocks travel to rank r + 1, so the block arriving at rank r came from r - 1: "
                    "at step t it started on rank (r - t) mod W, not (r + t).")
        return f"At step {step} rank {rank} holds the block that started on rank (r - t) mod W."
    src = w_src
    if not causal:
        return "Without a causal mask every key is visible: every block is 'full'."
    n = 3
    pq = positions(rank, world_size, n, layout).tolist()
    pk = positions(src, world_size, n, layout).tolist()
    where = (f"rank {rank} holds tokens {pq}... and the block of rank {src} holds keys at "
             f"{pk}...; ")
    if layout == "striped" and src > rank and g_mask == MASKED:
        return where + (f"key b = a is token {src} + W a, after query token {rank} + W a: "
                        "the diagonal is masked too, so b < a ('strict').")
    if layout == "striped" and src < rank and g_mask == STRICT:
        return where + f"key b = a is token {src} + W a, before query {rank} + W a: b <= a."
    if layout == "striped" and g_mask in (FULL, SKIP):
        return where + ("striped ranks interleave their tokens, so every block has keys both "
                        "before and after the queries: never all visible, never none.")
    if layout == "contiguous":
        return where + ("an earlier rank's keys all precede this rank's queries ('full'), its "
                        "own block is 'masked' (b <= a), a later rank's keys all follow ('skip').")
    return where + f"expected '{w_mask}'."


def _as_kind(mask: object, where: str) -> TileKind:
    """The learner's mask as a :class:`TileKind`, or an :class:`ExerciseFailed` saying what to
    return."""
    try:
        return TileKind.parse(mask, "the mask")
    except ValueError as err:
        hint = (" A block the causal diagonal crosses (b <= a) is MASKED, named 'masked'."
                if str(mask).lower() == "causal" else "")
        raise ExerciseFailed(f"On {where}: {err}.{hint}") from None


@exercise(
    "The blocks a rank meets, in order, and their masks",
    "At step t a rank holds the block that started t ranks before it. Then compare the block's "
    "token positions with the rank's own.",
    forbid=("teachkit.ring.layout.ring_schedule", "teachkit.ring.layout.block_mask",
            "teachkit.ring.layout.ring_tiles", "teachkit.ring.layout.source_rank",),
)
def check_ring_plan(fn: Callable[..., list[tuple[int, TileKind | str]]]) -> None:
    """Check ``fn(rank, world_size, causal, layout) -> [(source, mask), ...]`` for every rank.

    Each mask (a :class:`~teachkit.tiling.TileKind` or its name) is compared with the one read
    off the explicit token-level causal mask between the rank's query positions and the block's
    key positions. Cases: ``W`` = 1 to 6, both layouts,
    causal or not, and random ``W`` up to 9.
    """
    gen = fresh_generator()
    worlds = [1, 2, 3, 4, 5, 6] + [random_int(2, 9, gen) for _ in range(2)]
    for world_size in worlds:
        for layout in LAYOUTS:
            for causal in (True, False):
                for rank in range(world_size):
                    case = (f"rank {rank} of W = {world_size}, {layout}, "
                            f"{'causal' if causal else 'no mask'}")
                    got = call_learner(fn, case, rank, world_size, causal, layout)
                    expect(isinstance(got, (list, tuple)) and len(got) == world_size,
                           f"On {case}: return a list of {world_size} (source rank, mask) pairs, "
                           f"one per step, got {got!r}.")
                    for step, pair in enumerate(got):
                        expect(isinstance(pair, (list, tuple)) and len(pair) == 2,
                               f"On {case}, step {step}: each entry is a pair (source rank, "
                               f"mask), got {pair!r}.")
                        src = (rank - step) % world_size
                        want = (src, _mask_from_positions(rank, src, world_size, 4, causal,
                                                          layout))
                        got_pair = (pair[0], _as_kind(pair[1], f"{case}, step {step}"))
                        if got_pair != want:
                            raise ExerciseFailed(
                                f"On {case}, step {step}: expected ({want[0]}, {want[1]}), got "
                                f"({got_pair[0]!r}, {got_pair[1]}). "
                                + _plan_advice(rank, world_size, step, got_pair, want,
                                               causal, layout))


# ---------------------------------------------------------------------------------------------
# Exercise 2: the strict mask
# ---------------------------------------------------------------------------------------------


def _masked_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      visible: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 attention under an explicit mask; rows that see nothing get 0 and -inf."""
    s = (q.double() @ k.double().transpose(-2, -1)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~visible, NEG_INF)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(lse.unsqueeze(-1) == NEG_INF, 0.0, torch.exp(s - lse.unsqueeze(-1)))
    return p @ v.double(), lse


def _strict_mistakes(q: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    n = q.shape[-2]
    ones = torch.ones(n, n, dtype=torch.bool)
    return {
        "you kept the diagonal (b <= a, the causal mask of a 'masked' block). In the strict mask "
        "key b = a is a later token than query a: mask it too.": _masked_reference(
            q, k, v, ones.tril()),
        "you shifted the wrong way (queries 0..n-2 against keys 1..n-1): query a must see keys "
        "0..a-1, so drop the *first* query and the *last* key.": _masked_reference(
            q, k, v, ones.triu(1)),
        "every key is visible: the strict mask hides keys b >= a.": _masked_reference(
            q, k, v, ones),
    }


@exercise(
    "Attention under the strict mask b < a",
    "b < a is the causal mask shifted by one: which queries and which keys take part, and what "
    "does query 0 see?",
    forbid=("teachkit.ring.attention.attend_block", "teachkit.ring.attention.ring_step",
            "teachkit.ring.attention.simulate_ring",),
)
def check_strict_block(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Check ``fn(q, k, v) -> (out, lse)`` against float64 attention under ``b < a``.

    Cases: a ``(2, 3)`` batch of 37-token blocks in float64; float32 blocks of 16 tokens; a
    two-token block (query 1 sees key 0 only); a one-token block (nothing is visible).
    """
    gen = fresh_generator()
    cases = [
        ("a (2, 3) batch of 37-token blocks, float64", (2, 3), 37, torch.float64, 1e-10),
        ("float32 blocks of 16 tokens", (2,), 16, torch.float32, 1e-5),
        ("two-token blocks, float64", (1,), 2, torch.float64, 1e-10),
        ("one-token blocks (query 0 sees nothing), float64", (2,), 1, torch.float64, 0.0),
    ]
    for case, batch, n, dtype, rtol in cases:
        q, k, v = (torch.randn(*batch, n, 8, generator=gen, dtype=torch.float64).to(dtype)
                   for _ in range(3))
        got = call_learner(fn, case, q.clone(), k.clone(), v.clone())
        expect(isinstance(got, tuple) and len(got) == 2,
               f"On {case}: return a pair (out, lse), got {type(got).__name__}.")
        out, lse = got
        ref_out, ref_lse = _masked_reference(q, k, v, torch.ones(n, n, dtype=torch.bool).tril(-1))
        for index, name, ref in ((0, "out", ref_out), (1, "lse", ref_lse)):
            value = got[index]
            advice = ""
            if isinstance(value, torch.Tensor) and value.shape == ref.shape:
                if bool(torch.isnan(value[..., 0, :] if index == 0 else value[..., 0]).any()):
                    advice = ("Row 0 is NaN: query 0 sees no key, so a softmax over nothing is "
                              "0 / 0. Set its out to 0 and its lse to -inf yourself.")
                else:
                    for why, wrong in _strict_mistakes(q, k, v).items():
                        if relative_error(value, wrong[index]) < 1e-6 < relative_error(value, ref):
                            advice = "Your result matches a common mistake: " + why
                            break
            elif isinstance(value, torch.Tensor):
                raise ExerciseFailed(
                    f"On {case} ({name}): expected shape {tuple(ref.shape)}, got "
                    f"{tuple(value.shape)}. Return every row, query 0 included: (..., n, D) for "
                    "out and (..., n) for lse, with out 0 and lse -inf in row 0.")
            expect_close(value, ref, f"{case} ({name})", rtol=rtol, advice=advice)
        expect(out.dtype == q.dtype,
               f"On {case}: out should be in q's dtype {q.dtype}, got {out.dtype}.")


# ---------------------------------------------------------------------------------------------
# Exercise 3: one rank's ring
# ---------------------------------------------------------------------------------------------


def _partials(q: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor], rank: int,
              causal: bool, layout: str, strict_as_causal: bool = False) -> list[Pair]:
    """Float64 ``(out, lse)`` of every block in ring order, under the library's block masks."""
    parts = []
    for step in range(len(ks)):
        src = source_rank(rank, step, len(ks))
        mask = block_mask(rank, src, len(ks), causal, layout)
        if strict_as_causal and mask == STRICT:
            mask = MASKED
        parts.append(attend_block(q.double(), ks[src].double(), vs[src].double(), mask,
                                  block_attention='torch'))
    return parts


def _merged(parts: list[Pair]) -> Pair:
    return functools.reduce(lambda a, b: merge_partials(*a, *b), parts)


def _wrong_plain_sum(*args: object) -> Pair:
    """The partial outputs added, as if each were not normalised over its own keys."""
    return functools.reduce(lambda a, b: (a[0] + b[0], torch.logaddexp(a[1], b[1])),
                            _partials(*args))


def _wrong_mean(*args: object) -> Pair:
    """Each new partial output averaged with the running one, whatever their masses."""
    return functools.reduce(lambda a, b: ((a[0] + b[0]) / 2, torch.logaddexp(a[1], b[1])),
                            _partials(*args))


def _wrong_no_masks(q: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor], rank: int,
                    causal: bool, layout: str) -> Pair:
    """Every block attended in full: the ring of unmasked attention."""
    return _merged(_partials(q, ks, vs, rank, False, layout))


def _wrong_causal_for_strict(*args: object) -> Pair:
    """The blocks of later striped ranks masked with ``b <= a`` instead of ``b < a``."""
    return _merged(_partials(*args, strict_as_causal=True))


_RING_MISTAKES: dict[str, Callable[..., Pair]] = {
    "the partial outputs were added. Each is normalised over its own keys; weigh them by their "
    "share of the mass, exp(lse_b - lse) (merge_partials does).": _wrong_plain_sum,
    "the partial outputs were averaged. Blocks hold different shares of the softmax mass: weigh "
    "by exp(lse_a - lse) and exp(lse_b - lse) (merge_partials).": _wrong_mean,
    "every block was attended in full: apply each block's mask (skip, causal, strict) from the "
    "plan of exercise 1.": _wrong_no_masks,
    "the blocks of later striped ranks used b <= a; their diagonal key is a later token than the "
    "query: b < a (exercise 2).": _wrong_causal_for_strict,
}


def _expect_one_block(watch: LargestFloat, case: str, n: int, D: int, heads: int) -> None:
    """Fail if the learner's run made a float tensor larger, per head, than one block's scores
    (``n x n``) or one block of q, k or v (``n x D``): a rank never holds more than one block of
    keys at a time, so that tensor spans several blocks (a concatenation of the blocks, or the
    scores of the whole sequence), and the answer skipped the ring and its merge."""
    per_head = watch.numel / heads
    allowed = max(n * n, n * D)
    if per_head <= allowed:
        return
    raise ExerciseFailed(
        f"On {case}: your function made a float tensor of shape {watch.shape}, {per_head:.0f} "
        f"values per head, where one block's scores hold {n} x {n} = {n * n} and one block of "
        f"q, k or v {n} x {D} = {n * D}. It spans several blocks at once (the blocks "
        "concatenated, or scores against the whole sequence): that is single-process "
        "attention, and a rank of the ring never holds it. Take one block per step, attend to "
        "it under its mask, and merge the partial (out, lse) into the running result.")


@exercise(
    "One rank's ring: attend to each block in turn, merge by lse",
    "Walk your plan of exercise 1 step by step; every step gives a partial (out, lse) that "
    "notebook 04's merge folds in.",
    forbid=("teachkit.ring.attention.simulate_ring", "teachkit.ring.attention.ring_step",
            "teachkit.ring.attention.ring_attention", "teachkit.attention.naive_attention",
            "teachkit.attention.blockwise_attention",
            "torch.nn.functional.scaled_dot_product_attention",
            "teachkit.kernels.flash.flash_attention",
            "teachkit.kernels.flash_simple.flash_attention_simple",),
)
def check_ring_rank(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Check ``fn(q, k_blocks, v_blocks, rank, causal, layout) -> (out, lse)`` for every rank.

    The reference is float64 attention of the rank's queries over the whole sequence (its rows
    of the full causal or unmasked attention). Cases: ``W`` = 1 to 4 with both layouts, causal
    and not, blocks of 5 to 9 tokens, a ``(2, 3)`` batch, float64 and float32. Every torch
    operation of the learner's run is watched: a float tensor larger, per head, than one
    block's scores or one block of q, k or v is refused, since only an answer that joins the
    blocks (single-process attention in disguise) makes one.
    """
    gen = fresh_generator()
    cases = [(1, "contiguous", True, torch.float64), (2, "striped", True, torch.float64),
             (3, "contiguous", True, torch.float64), (3, "striped", True, torch.float64),
             (4, "contiguous", False, torch.float64), (4, "striped", True, torch.float32)]
    for world_size, layout, causal, dtype in cases:
        n = random_int(5, 9, gen)
        N = n * world_size
        q, k, v = (torch.randn(2, 3, N, 8, generator=gen, dtype=torch.float64).to(dtype)
                   for _ in range(3))
        s = (q.double() @ k.double().transpose(-2, -1)) * 8 ** -0.5
        if causal:
            s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), NEG_INF)
        ref_out, ref_lse = torch.softmax(s, dim=-1) @ v.double(), torch.logsumexp(s, dim=-1)
        ks = [shard(k, r, world_size, layout) for r in range(world_size)]
        vs = [shard(v, r, world_size, layout) for r in range(world_size)]
        rtol = 1e-10 if dtype == torch.float64 else 1e-5
        for rank in range(world_size):
            case = (f"rank {rank} of W = {world_size}, {layout}, "
                    f"{'causal' if causal else 'no mask'}, blocks of {n} tokens, "
                    f"{str(dtype).replace('torch.', '')}")
            qr = shard(q, rank, world_size, layout)
            with LargestFloat() as watch:
                got = call_learner(fn, case, qr.clone(), [t.clone() for t in ks],
                                   [t.clone() for t in vs], rank, causal, layout)
            _expect_one_block(watch, case, n, q.shape[-1], q.shape[:-2].numel())
            expect(isinstance(got, tuple) and len(got) == 2,
                   f"On {case}: return a pair (out, lse), got {type(got).__name__}.")
            want_out = shard(ref_out, rank, world_size, layout)
            want_lse = shard(ref_lse, rank, world_size, layout, dim=-1)
            for index, name, ref in ((0, "out", want_out), (1, "lse", want_lse)):
                value, advice = got[index], ""
                if not (isinstance(value, torch.Tensor) and value.shape == ref.shape
                        and relative_error(value, ref) <= rtol):
                    why = matching_mistake(value, {
                        why: mistake(qr, ks, vs, rank, causal, layout)[index]
                        for why, mistake in _RING_MISTAKES.items()}, rtol=1e-6)
                    advice = ("Your result matches a common mistake: " + why if why else
                              "Merge each block's partial with merge_partials, after attending "
                              "under that block's mask.")
                expect_close(value, ref, f"{case} ({name})", rtol=rtol, advice=advice)
