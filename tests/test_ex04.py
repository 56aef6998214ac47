"""The checkers of notebook 04 explain wrong answers (test_exercises.py holds
every checker to its solution and to an unfilled stub)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from teachkit.exercises import ex04  # noqa: E402
from teachkit.exercises.checking import ExerciseFailed  # noqa: E402
from teachkit.exercises.solutions import ex04 as solutions  # noqa: E402
from teachkit.softmax import exp_shift  # noqa: E402

# --- exercise 1: rescale_chunk ---------------------------------------------------------------


def _rescale(weight):
    return lambda p, m_l, d_l, m, d: (p.double() * weight(m_l, d_l, m, d).unsqueeze(-1)).to(p.dtype)


@pytest.mark.parametrize("wrong,message", [
    (_rescale(lambda m_l, d_l, m, d: torch.exp(m_l - m) / d), "you left out d_local"),
    (_rescale(lambda m_l, d_l, m, d: d_l * torch.exp(m - m_l) / d), "wrong sign"),
    (_rescale(lambda m_l, d_l, m, d: d_l * torch.exp(m_l - m)), "did not divide by the global d"),
    (_rescale(lambda m_l, d_l, m, d: d_l * torch.exp(m_l) / torch.exp(m) / d), "NaN where"),
])
def test_rescale_chunk_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex04.check_rescale_chunk(wrong)
    assert "On " in str(info.value)  # names the case


def test_rescale_chunk_without_unsqueeze_names_the_shapes():
    def no_unsqueeze(p, m_l, d_l, m, d):
        return p * (d_l * torch.exp(m_l - m) / d)

    with pytest.raises(ExerciseFailed, match=r"unsqueeze\(-1\)") as info:
        ex04.check_rescale_chunk(no_unsqueeze)
    assert "(3, 5, 100)" in str(info.value)


def test_rescale_chunk_requires_the_input_dtype():
    def float32_out(p, m_l, d_l, m, d):
        wide = torch.promote_types(p.dtype, torch.float32)  # forgets to cast back to bfloat16
        return p.to(wide) * (d_l * exp_shift(m_l, m) / d).unsqueeze(-1)

    with pytest.raises(ExerciseFailed, match="bfloat16"):
        ex04.check_rescale_chunk(float32_out)


# --- exercise 2: merge_out_lse ---------------------------------------------------------------


def _weighted(w_a, w_b, lse):
    return lambda oa, la, ob, lb: (
        (w_a(la, lb).unsqueeze(-1) * oa + w_b(la, lb).unsqueeze(-1) * ob).to(oa.dtype),
        lse(la, lb),
    )


@pytest.mark.parametrize("wrong,message", [
    # lse by the naive log(exp + exp): overflows at lse ~ 1000
    (_weighted(lambda a, b: torch.exp(a - torch.log(a.exp() + b.exp())),
               lambda a, b: torch.exp(b - torch.log(a.exp() + b.exp())),
               lambda a, b: torch.log(a.exp() + b.exp())), "infinity"),
    # weights exchanged
    (_weighted(lambda a, b: torch.sigmoid(b - a), lambda a, b: torch.sigmoid(a - b),
               torch.logaddexp), "weights are swapped"),
    # plain average
    (_weighted(lambda a, b: torch.full_like(a, 0.5), lambda a, b: torch.full_like(a, 0.5),
               torch.logaddexp), "averaged"),
    # plain sum
    (_weighted(lambda a, b: torch.ones_like(a), lambda a, b: torch.ones_like(a),
               torch.logaddexp), "added the two outputs"),
    # the ring form with log(1 + exp(.)): -inf + inf when lse_a = -inf
    (_weighted(lambda a, b: torch.sigmoid(a - b), lambda a, b: torch.sigmoid(b - a),
               lambda a, b: a + torch.log1p(torch.exp(b - a))), "NaN where"),
])
def test_merge_out_lse_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex04.check_merge_out_lse(wrong)
    assert "On " in str(info.value)


def test_merge_out_lse_needs_weight_zero_for_parts_without_keys():
    def plain_exp(oa, la, ob, lb):
        lse = torch.logaddexp(la, lb)
        out = torch.exp(la - lse).unsqueeze(-1) * oa + torch.exp(lb - lse).unsqueeze(-1) * ob
        return out.to(oa.dtype), lse

    with pytest.raises(ExerciseFailed, match="no key in either part") as info:
        ex04.check_merge_out_lse(plain_exp)
    assert "exp_shift" in str(info.value)


def test_merge_out_lse_asks_for_a_pair():
    with pytest.raises(ExerciseFailed, match=r"pair \(out, lse\)"):
        ex04.check_merge_out_lse(lambda oa, la, ob, lb: oa)


# --- exercise 3: block_update ----------------------------------------------------------------


def _update(rescale_acc=True, rescale_l=True, exp=exp_shift, normalise=False):
    def update(m, l, acc, s, v):
        m_new = torch.maximum(m, s.amax(-1))
        alpha = exp(m, m_new)
        p = exp(s, m_new.unsqueeze(-1))
        l_new = (alpha * l if rescale_l else l) + p.sum(-1)
        acc_new = (alpha.unsqueeze(-1) * acc if rescale_acc else acc) + p @ v.to(p.dtype)
        if normalise:
            acc_new = acc_new / l_new.unsqueeze(-1)
        return m_new, l_new, acc_new

    return update


@pytest.mark.parametrize("wrong,message", [
    (_update(rescale_acc=False), "acc is not rescaled"),
    (_update(rescale_l=False), "l is not rescaled"),
    (_update(normalise=True), "divided by l at every step"),
    (_update(exp=lambda x, m: torch.exp(x - m)), "NaN where"),
])
def test_block_update_explains_wrong_answers(wrong, message):
    with pytest.raises(ExerciseFailed, match=message) as info:
        ex04.check_block_update(wrong)
    assert "On " in str(info.value)


def test_block_update_needs_l_measured_from_the_maximum():
    def no_max(m, l, acc, s, v):  # right output by luck on small scores, l in the wrong frame
        e = torch.exp(s)
        return torch.maximum(m, s.amax(-1)), l + e.sum(-1), acc + e @ v.to(e.dtype)

    with pytest.raises(ExerciseFailed, match="final l") as info:
        ex04.check_block_update(no_max)
    assert "measured from the running maximum" in str(info.value)


def test_block_update_reports_shape_and_dtype_trouble(unwatched):
    def keeps_block_axis(m, l, acc, s, v):
        m_new, l_new, acc_new = solutions.solution_block_update(m, l, acc, s, v)
        return m_new.unsqueeze(-1), l_new, acc_new

    with pytest.raises(ExerciseFailed, match="the new m should have shape"):
        ex04.check_block_update(keeps_block_axis)

    def no_cast(m, l, acc, s, v):
        m_new = torch.maximum(m, s.amax(-1))
        p = exp_shift(s, m_new.unsqueeze(-1))
        alpha = exp_shift(m, m_new)
        return m_new, alpha * l + p.sum(-1), alpha.unsqueeze(-1) * acc + p @ v

    with pytest.raises(ExerciseFailed, match="bfloat16"):
        ex04.check_block_update(no_cast)
