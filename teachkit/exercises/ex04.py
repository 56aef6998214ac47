r"""Exercises of notebook 04, *chunks and log-sum-exp merges*.

Three exercises, each with a checker ``check_<name>(fn)`` here and a solution
``solution_<name>`` in :mod:`teachkit.exercises.solutions.ex04`:

1. :func:`check_rescale_chunk`: turn a chunk's own softmax into its slice of the global softmax,
   :math:`p = p_{local}\, d_{local}\, e^{m_{local} - m} / d`.
2. :func:`check_merge_out_lse`: merge two partial attention results ``(out, lse)`` over disjoint
   keys, the update of ring attention.
3. :func:`check_block_update`: one step of the online attention update over a block of keys and
   values, the inner loop of FlashAttention.

Every checker runs the learner's function on fresh random inputs (odd sizes, several dtypes,
batched rows, values times 1000, ``-inf`` masks, fully masked chunks) and compares with a float64
reference. When an answer is wrong, the checker also tries the usual mistakes on the same inputs
and names the one the answer matches.

Examples
--------
>>> from teachkit.exercises.solutions.ex04 import solution_rescale_chunk
>>> check_rescale_chunk(solution_rescale_chunk)
[correct] Rescale a chunk's local softmax into the global softmax
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..attention import attention_scores
from ..compare import relative_error
from ..softmax import exp_shift, softmax_stats
from .checking import (
    SOFTMAX_FUNCTIONS,
    call_learner,
    exercise,
    expect,
    expect_close,
    fresh_generator,
    matching_mistake,
    random_normal,
)

__all__ = [
    "check_rescale_chunk",
    "check_merge_out_lse",
    "check_block_update",
]

NEG_INF = float("-inf")
# Largest relative error accepted against the float64 reference, per dtype of the inputs.
_RTOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2}
_NAN_ADVICE = (
    "NaN where the reference is finite. Usual causes: exp(-inf - (-inf)) for a part that holds "
    "no probability mass (its maximum or lse is -inf): use teachkit.softmax.exp_shift(x, m), "
    "which gives 0 there; -inf + inf; or inf / inf from exponentiating large values separately "
    "(exp(a) / exp(b) instead of exp(a - b))."
)
_INF_ADVICE = (
    "An infinity where the reference is finite: exp of a large positive number overflowed. "
    "Only ever exponentiate differences that are <= 0 (subtract the larger value first)."
)


SHAPE_ADVICE = (
    "Statistics have one axis fewer than the tensors they describe: add it back with "
    ".unsqueeze(-1) before combining them, and convert dtypes with .to(...)."
)
"""Advice shown when the learner's function raises (most often a shape that does not broadcast)."""


Mistakes = dict[str, torch.Tensor] | Callable[[], dict[str, torch.Tensor]]


def _advice(got: object, ref: torch.Tensor, mistakes: Mistakes, default: str) -> str:
    """Name the likely mistake: NaN/inf trouble, or a known wrong formula that ``got`` matches.

    ``mistakes`` maps an explanation to the wrong answer it produces on the same inputs (or is a
    function returning that mapping, computed only when needed).
    """
    if not isinstance(got, torch.Tensor) or got.shape != ref.shape:
        return default
    g = got.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if bool((torch.isnan(g) & ~torch.isnan(r)).any()):
        return _NAN_ADVICE
    if bool((torch.isinf(g) & torch.isfinite(r)).any()):
        return _INF_ADVICE
    if callable(mistakes):
        mistakes = mistakes()
    explanation = matching_mistake(g, mistakes)
    return "Your result matches a common mistake: " + explanation if explanation else default


def _check(
    got: object, ref: torch.Tensor, case: str, rtol: float,
    mistakes: Mistakes | None = None, default: str = "",
) -> None:
    """:func:`expect_close` with the advice chosen by :func:`_advice`."""
    advice = ""
    if not (isinstance(got, torch.Tensor) and got.shape == ref.shape
            and relative_error(got, ref) <= rtol):
        advice = _advice(got, ref, mistakes or {}, default)
    expect_close(got, ref, case, rtol=rtol, advice=advice)


def _expect_dtype(got: torch.Tensor, dtype: torch.dtype, case: str, what: str) -> None:
    expect(
        got.dtype == dtype,
        f"On {case}: {what} should come back as {dtype}, got {got.dtype}. Compute in the "
        f"statistics' dtype if you like, then convert with .to({str(dtype).replace('torch.', '')})"
        " at the end.",
    )


# ---------------------------------------------------------------------------------------------
# Exercise 1: rescale a chunk's local softmax
# ---------------------------------------------------------------------------------------------


def _rescale_inputs(
    x: torch.Tensor, chunk: int
) -> list[tuple[torch.Tensor, ...]]:
    """Per chunk: ``(p_local, m_local, d_local, m, d)`` as a worker would hold them."""
    m, d = softmax_stats(x)
    out = []
    for c in x.split(chunk, dim=-1):
        m_l, d_l = softmax_stats(c)
        p_l = torch.softmax(c, dim=-1)
        p_l = torch.where((m_l == NEG_INF).unsqueeze(-1), torch.zeros((), dtype=c.dtype), p_l)
        out.append((p_l, m_l, d_l, m, d))
    return out


def _rescale_mistakes(parts: list[tuple[torch.Tensor, ...]]) -> dict[str, torch.Tensor]:
    def build(weight_of: Callable[..., torch.Tensor]) -> torch.Tensor:
        pieces = []
        for p_l, m_l, d_l, m, d in parts:
            p_l, m_l, d_l, m, d = (t.double() for t in (p_l, m_l, d_l, m, d))
            pieces.append(p_l * weight_of(m_l, d_l, m, d).unsqueeze(-1))
        return torch.cat(pieces, dim=-1)

    return {
        "you left out d_local. The chunk's mass is d_local * exp(m_local - m); p_local was "
        "divided by d_local, so multiply it back.": build(
            lambda m_l, d_l, m, d: torch.exp(m_l - m) / d),
        "the exponent has the wrong sign. The chunk's terms were measured from m_local and must "
        "be re-measured from m: the factor is exp(m_local - m), which is <= 1.": build(
            lambda m_l, d_l, m, d: d_l * torch.exp(m - m_l) / d),
        "you did not divide by the global d. After re-measuring from m the terms are "
        "exp(x - m); the softmax divides them by d.": build(
            lambda m_l, d_l, m, d: d_l * torch.exp(m_l - m)),
        "you divided by d_local instead of multiplying by it.": build(
            lambda m_l, d_l, m, d: torch.exp(m_l - m) / (d_l * d)),
    }


_RESCALE_DEFAULT = (
    "The global softmax of an element of chunk i is p_local * d_local * exp(m_local - m) / d; "
    "the statistics have shape (...), so unsqueeze(-1) them before multiplying p_local (..., n)."
)


@exercise(
    "Rescale a chunk's local softmax into the global softmax",
    "p_local was divided by the chunk's own sum and measured from the chunk's own maximum. Undo "
    "both, then apply the row's.",
    forbid=(*SOFTMAX_FUNCTIONS,),
)
def check_rescale_chunk(fn: Callable[..., torch.Tensor]) -> None:
    """Check ``fn(p_local, m_local, d_local, m, d)`` chunk by chunk against a float64 softmax.

    Cases: a row of 1000 values in chunks of 128 (the last one shorter); a ``(3, 5, 777)`` batch
    times 1000 in chunks of 100; rows whose first 300 entries are ``-inf`` (whole chunks masked,
    ``p_local = 0``) plus scattered ``-inf``; float64 and bfloat16 inputs.
    """
    gen = fresh_generator()
    prefix = random_normal(4, 1000, gen=gen, scale=3.0)
    prefix[:, :300] = NEG_INF
    prefix[torch.rand(4, 1000, generator=gen) < 0.2] = NEG_INF
    prefix[:, -1] = random_normal(4, gen=gen).abs()  # every row keeps a finite entry
    cases = [
        ("one row of 1000 values in chunks of 128 (the last holds 104), float32",
         random_normal(1000, gen=gen, scale=3.0).float(), 128),
        ("a (3, 5, 777) batch of rows times 1000 in chunks of 100, float32",
         random_normal(3, 5, 777, gen=gen, scale=1000.0).float(), 100),
        ("rows whose first 300 entries are -inf (chunks 0 and 1 fully masked: p_local = 0, "
         "m_local = -inf, d_local = 0) and 20% scattered -inf, chunks of 128, float32",
         prefix.float(), 128),
        ("a (6, 259) batch in chunks of 64, float64",
         random_normal(6, 259, gen=gen, scale=5.0), 64),
        ("a (6, 259) batch in chunks of 64, bfloat16",
         random_normal(6, 259, gen=gen, scale=2.0).to(torch.bfloat16), 64),
    ]
    for case, x, chunk in cases:
        parts = _rescale_inputs(x, chunk)
        pieces = []
        for p_l, m_l, d_l, m, d in parts:
            got = call_learner(fn, case, p_l.clone(), m_l.clone(), d_l.clone(), m.clone(),
                               d.clone(), advice=SHAPE_ADVICE)
            expect(isinstance(got, torch.Tensor),
                   f"On {case}: expected a torch.Tensor, got {type(got).__name__}.")
            expect(got.shape == p_l.shape,
                   f"On {case}: expected shape {tuple(p_l.shape)} (the chunk's shape), got "
                   f"{tuple(got.shape)}. The statistics have shape {tuple(m_l.shape)}: "
                   "unsqueeze(-1) them so they broadcast along the chunk.")
            _expect_dtype(got, p_l.dtype, case, "the rescaled chunk")
            pieces.append(got)
        ref = torch.softmax(x.double(), dim=-1)
        _check(torch.cat(pieces, dim=-1), ref, case, _RTOL[x.dtype],
               _rescale_mistakes(parts), _RESCALE_DEFAULT)


# ---------------------------------------------------------------------------------------------
# Exercise 2: merge two partial attention results by their lse
# ---------------------------------------------------------------------------------------------


def _partial(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, offset: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` over one part of the keys (starting at ``offset``): ``(out, lse)``."""
    s = attention_scores(q, k, causal, key_offset=offset)
    lse = torch.logsumexp(s, dim=-1)
    p = exp_shift(s, lse.unsqueeze(-1))
    return (p @ v.to(p.dtype)).to(q.dtype), lse


def _two_part_merge_mistakes(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> dict[str, torch.Tensor]:
    a, b = out_a.double(), out_b.double()
    la, lb = lse_a.double().unsqueeze(-1), lse_b.double().unsqueeze(-1)
    w_a = torch.sigmoid(la - lb)
    return {
        "the weights are swapped. Part a's weight is exp(lse_a - lse): the part with the larger "
        "lse holds more of the probability mass.": (1 - w_a) * a + w_a * b,
        "you added the two outputs. Each is normalised over its own keys; weight them by "
        "exp(lse_i - lse) so the weights sum to 1.": a + b,
        "you averaged the two outputs. The weights are not 1/2 each but exp(lse_i - lse), the "
        "share of the probability mass each part holds.": (a + b) / 2,
    }


_MERGE_DEFAULT = (
    "out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b with lse = log(exp(lse_a) + "
    "exp(lse_b)); the lse tensors have no Dv axis, so unsqueeze(-1) the weights."
)


def _merge_case(
    fn: Callable[..., Any], case: str, parts: tuple[torch.Tensor, ...], ref_out: torch.Tensor,
    ref_lse: torch.Tensor, rtol: float,
) -> None:
    got = call_learner(fn, case, *(t.clone() for t in parts), advice=SHAPE_ADVICE)
    expect(isinstance(got, tuple) and len(got) == 2,
           f"On {case}: return a pair (out, lse), got {type(got).__name__}.")
    out, lse = got
    expect(isinstance(lse, torch.Tensor) and lse.shape == ref_lse.shape,
           f"On {case}: lse should have shape {tuple(ref_lse.shape)} (one number per query row), "
           f"got {getattr(lse, 'shape', type(lse).__name__)}.")
    _check(lse, ref_lse, case + " (the merged lse)", rtol,
           default="lse = m + log(exp(lse_a - m) + exp(lse_b - m)) with m = max(lse_a, lse_b), or "
           "lse_a + softplus(lse_b - lse_a).")
    _check(out, ref_out, case + " (the merged out)", rtol, _two_part_merge_mistakes(*parts),
           _MERGE_DEFAULT)
    _expect_dtype(out, parts[0].dtype, case, "out")


@exercise(
    "Merge two partial attention results (out, lse)",
    "Each part's out is a softmax-weighted average over its own keys. What share of the union's "
    "softmax mass does each part hold?",
    forbid=("teachkit.attention.merge_partials", "teachkit.ring.attention.merge_partials_",
            "teachkit.exercises.solutions.ex09.solution_merge_splits",),
)
def check_merge_out_lse(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Check ``fn(out_a, lse_a, out_b, lse_b) -> (out, lse)`` against attention over the union.

    Cases: 301 keys split 150 + 151 for a ``(2, 3)`` batch of 37 queries; a causal split where
    the first 100 queries see no key of part b (``lse_b = -inf``), in both argument orders;
    synthetic partials whose lse differ by about 1000 (both signs); rows where neither part saw a
    key; float64 and bfloat16 outputs.
    """
    gen = fresh_generator()
    B, H, L, S, D = 2, 3, 37, 301, 16
    q, k, v = (random_normal(B, H, n, D, gen=gen) for n in (L, S, S))
    # float32 attention split in two parts, and the union in float64
    for cut, dtype in ((150, torch.float32), (1, torch.float32), (150, torch.float64),
                       (150, torch.bfloat16)):
        case = (f"{S} keys split {cut} + {S - cut} for a (2, 3) batch of {L} queries, "
                f"{str(dtype).replace('torch.', '')}")
        qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
        a = _partial(qd, kd[..., :cut, :], vd[..., :cut, :], False, 0)
        b = _partial(qd, kd[..., cut:, :], vd[..., cut:, :], False, cut)
        ref_out, ref_lse = _partial(*(t.double() for t in (qd, kd, vd)), False, 0)
        _merge_case(fn, case, (*a, *b), ref_out, ref_lse, _RTOL[dtype])

    # causal: queries 0..99 see no key of part b
    Lc = 130
    qc = random_normal(2, Lc, D, gen=gen)
    kc, vc = random_normal(2, 160, D, gen=gen), random_normal(2, 160, D, gen=gen)
    a = _partial(qc.float(), kc[:, :100].float(), vc[:, :100].float(), True, 0)
    b = _partial(qc.float(), kc[:, 100:].float(), vc[:, 100:].float(), True, 100)
    ref_out, ref_lse = _partial(qc, kc, vc, True, 0)
    case = "causal attention split at key 100: queries 0..99 see no key of part b (lse_b = -inf)"
    _merge_case(fn, case, (*a, *b), ref_out, ref_lse, _RTOL[torch.float32])
    _merge_case(fn, case + ", passed as (b, a)", (*b, *a), ref_out, ref_lse, _RTOL[torch.float32])

    # synthetic partials with lse apart by about 1000
    out_a = random_normal(3, 41, 8, gen=gen).float()
    out_b = random_normal(3, 41, 8, gen=gen).float()
    # rounded to float32 first: the learner gets float32 lse, the reference uses the same values
    lse_a = (random_normal(3, 41, gen=gen) + 1000.0).float().double()
    lse_b = random_normal(3, 41, gen=gen).float().double()
    lse_c = (lse_a + random_normal(3, 41, gen=gen)).float().double()
    # Near lse = 1000 a float32 lse is only known to about 1000 * 6e-8, so the weights
    # exp(lse_i - lse) of two comparable parts carry errors of a few 1e-5: hence 5e-4 there.
    for name, la, lb, tol in (("lse_a - lse_b ~ +1000", lse_a, lse_b, 1e-5),
                              ("lse_a - lse_b ~ -1000", lse_b, lse_a, 1e-5),
                              ("lse_a ~ lse_b ~ 1000 (both large)", lse_a, lse_c, 5e-4)):
        ref_lse = torch.logaddexp(la, lb)
        ref_out = (torch.exp(la - ref_lse).unsqueeze(-1) * out_a.double()
                   + torch.exp(lb - ref_lse).unsqueeze(-1) * out_b.double())
        _merge_case(fn, f"synthetic partials with {name}", (out_a, la.float(), out_b, lb.float()),
                    ref_out, ref_lse, tol)

    # rows where neither part saw a key
    a = _partial(qc.float(), kc[:, 100:130].float(), vc[:, 100:130].float(), True, 100)
    b = _partial(qc.float(), kc[:, 130:].float(), vc[:, 130:].float(), True, 130)
    ref_out, ref_lse = _partial(qc, kc[:, 100:], vc[:, 100:], True, 100)
    _merge_case(fn, "causal parts of keys 100..129 and 130..159: queries 0..99 see no key in "
                "either part (expected out = 0, lse = -inf)", (*a, *b), ref_out, ref_lse,
                _RTOL[torch.float32])


# ---------------------------------------------------------------------------------------------
# Exercise 3: one step of the online attention update
# ---------------------------------------------------------------------------------------------


def _new_max_and_probs(
    m: torch.Tensor, s: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What every variant shares: the new maximum, ``alpha = e^(m - m')``, ``p = e^(s - m')``."""
    m_new = torch.maximum(m, s.amax(dim=-1))
    return m_new, exp_shift(m, m_new), exp_shift(s, m_new.unsqueeze(-1))


def _wrong_no_rescale_acc(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m_new, alpha, p = _new_max_and_probs(m, s)
    return m_new, alpha * l + p.sum(-1), acc + p @ v.to(p.dtype)


def _wrong_no_rescale_l(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m_new, alpha, p = _new_max_and_probs(m, s)
    return m_new, l + p.sum(-1), alpha.unsqueeze(-1) * acc + p @ v.to(p.dtype)


def _wrong_normalise_each_step(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m_new, alpha, p = _new_max_and_probs(m, s)
    l_new = alpha * l + p.sum(-1)
    acc_new = alpha.unsqueeze(-1) * acc + p @ v.to(p.dtype)
    return m_new, l_new, torch.where(l_new.unsqueeze(-1) > 0, acc_new / l_new.unsqueeze(-1), 0.0)


_BLOCK_MISTAKES: dict[str, Callable[..., tuple[torch.Tensor, ...]]] = {
    "acc is not rescaled. When the maximum grows from m to m', everything accumulated so far "
    "was measured from m: multiply acc by alpha = exp(m - m') too, as you do l.":
        _wrong_no_rescale_acc,
    "l is not rescaled. Multiply the old l by alpha = exp(m - m') before adding the new block's "
    "sum.": _wrong_no_rescale_l,
    "acc is divided by l at every step. Keep acc unnormalised: the output is acc / l once, after "
    "the last block (here the checker divides by your l at the end).": _wrong_normalise_each_step,
}


def _run_blocks(
    update: Callable[..., Any], case: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    block: int, causal: bool, scale: float | None, masked_prefix: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Drive ``update`` over the key blocks like FlashAttention; return ``(out, m, l)``."""
    s_all = attention_scores(q, k, causal, scale)
    s_all[..., :masked_prefix] = NEG_INF  # a padding mask over the first keys
    dtype = s_all.dtype
    L, Dv = q.shape[-2], v.shape[-1]
    m = torch.full((*q.shape[:-2], L), NEG_INF, dtype=dtype)
    l = torch.zeros((*q.shape[:-2], L), dtype=dtype)
    acc = torch.zeros((*q.shape[:-2], L, Dv), dtype=dtype)
    for start in range(0, k.shape[-2], block):
        s = s_all[..., start : start + block]
        vb = v[..., start : start + block, :]
        got = call_learner(update, f"{case} (block at key {start})", m.clone(), l.clone(),
                           acc.clone(), s.clone(), vb.clone(), advice=SHAPE_ADVICE)
        expect(isinstance(got, tuple) and len(got) == 3,
               f"On {case}: return a triple (m, l, acc), got {type(got).__name__}.")
        for name, new, old in zip(("m", "l", "acc"), got, (m, l, acc), strict=True):
            expect(isinstance(new, torch.Tensor) and new.shape == old.shape,
                   f"On {case} (block at key {start}): the new {name} should have shape "
                   f"{tuple(old.shape)}, got {getattr(new, 'shape', type(new).__name__)}. "
                   "Reduce over the block's keys (dim=-1) and keep the query axis.")
        m, l, acc = (t.to(dtype) for t in got)
    # rows that saw no key (l = 0) give 0, like SDPA; a NaN in l stays visible
    out = torch.where(l.unsqueeze(-1) == 0, torch.zeros((), dtype=dtype), acc / l.unsqueeze(-1))
    return out, m, l


@exercise(
    "One step of the online attention update (m, l, acc)",
    "This is the online step of notebook 03 applied to a whole block of scores, with a running "
    "output that must be rescaled the same way as l.",
    forbid=("teachkit.attention.attention_block_update", "teachkit.attention.naive_attention",
            "teachkit.attention.blockwise_attention",
            "torch.nn.functional.scaled_dot_product_attention",
            "teachkit.kernels.flash.flash_attention",
            "teachkit.kernels.flash_simple.flash_attention_simple",
            "teachkit.exercises.solutions.ex08.solution_exp2_update",),
)
def check_block_update(fn: Callable[..., tuple[torch.Tensor, ...]]) -> None:
    """Check ``fn(m, l, acc, s, v) -> (m, l, acc)`` by running it over all key blocks.

    After the last block, ``acc / l`` must equal float64 attention and ``(m, l)`` the row's
    maximum and denominator. Cases: 45 queries and 301 keys in blocks of 64 for a ``(2, 3)``
    batch; scale 10, so scores of order 100 where a plain ``exp`` overflows; causal attention with
    the first 100 keys masked (whole blocks of ``-inf`` first, and queries that see no key at
    all); float64; bfloat16 values.
    """
    gen = fresh_generator()
    D = 16
    # (case, batch, L, S, block, causal, scale, masked key prefix, dtype, rtol)
    cases = [
        ("a (2, 3) batch, 45 queries, 301 keys in blocks of 64 (the last holds 45), float32",
         (2, 3), 45, 301, 64, False, None, 0, torch.float32, 1e-5),
        ("scale 10 instead of 1/sqrt(16): scores of order 100, where exp(s) overflows float32, "
         "33 queries, 130 keys in blocks of 32", (2,), 33, 130, 32, False, 10.0, 0,
         torch.float32, 2e-4),
        ("causal attention with the first 100 keys masked (blocks of -inf first; queries 0..99 "
         "see no key: expected out = 0), 150 queries, 201 keys in blocks of 32",
         (2,), 150, 201, 32, True, None, 100, torch.float32, 1e-5),
        ("a (3,) batch, 29 queries, 77 keys in blocks of 16, float64",
         (3,), 29, 77, 16, False, None, 0, torch.float64, 1e-12),
        ("bfloat16 q, k, v (scores in float32), 40 queries, 99 keys in blocks of 32",
         (2,), 40, 99, 32, False, None, 0, torch.bfloat16, 1e-5),
    ]
    for case, batch, L, S, block, causal, scale, prefix, dtype, rtol in cases:
        q = random_normal(*batch, L, D, gen=gen).to(dtype)
        k = random_normal(*batch, S, D, gen=gen).to(dtype)
        v = random_normal(*batch, S, D, gen=gen).to(dtype)
        args = (q, k, v, block, causal, scale, prefix)
        out, m, l = _run_blocks(fn, case, *args)
        s64 = attention_scores(q.double(), k.double(), causal, scale)
        s64[..., :prefix] = NEG_INF
        ref_m, ref_l = softmax_stats(s64)
        ref_out = exp_shift(s64, ref_m.unsqueeze(-1)) @ v.double()
        ref_out = torch.where(ref_l.unsqueeze(-1) > 0, ref_out / ref_l.unsqueeze(-1), 0.0)

        def wrong_results(
            index: int, case: str = case, args: tuple = args
        ) -> dict[str, torch.Tensor]:
            return {e: _run_blocks(w, case, *args)[index] for e, w in _BLOCK_MISTAKES.items()}

        _check(out, ref_out, case + " (acc / l after the last block)", rtol,
               lambda: wrong_results(0),
               default="acc' = exp(m - m') * acc + p @ v with p = exp(s - m'); do not divide by "
               "l in the update.")
        _check(m, ref_m, case + " (the final m)", rtol,
               default="m' is the larger of the running m and the block's maximum score.")
        _check(l, ref_l, case + " (the final l)", rtol, lambda: wrong_results(2),
               default="l is measured from the running maximum: l' = exp(m - m') * l + "
               "sum_j exp(s_j - m').")
