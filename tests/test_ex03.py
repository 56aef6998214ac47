"""Checkers of notebook 03: they accept the solutions, hint on stubs, and explain wrong answers."""

from __future__ import annotations

import pytest
import torch

from teachkit.exercises import ex03
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex03 as solutions
from teachkit.softmax import exp_shift, merge_stats

NEG_INF = float("-inf")


def _stub(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- the online step


def test_online_step_accepts_solution(capsys):
    assert ex03.check_online_step(solutions.solution_online_step) is None
    assert "[correct]" in capsys.readouterr().out


def test_online_step_hints_on_stub(capsys):
    assert ex03.check_online_step(_stub) is None
    out = capsys.readouterr().out
    assert "[not attempted]" in out and "Hint" in out and "old maximum" in out


def test_online_step_nan_on_masked_prefix():
    def plain_exp(m, d, x):  # NaN while the row has only seen -inf
        m_new = torch.maximum(m, x)
        return m_new, d * torch.exp(m - m_new) + torch.exp(x - m_new)

    with pytest.raises(ExerciseFailed, match=r"(?s)-inf.*NaN.*exp_shift"):
        ex03.check_online_step(plain_exp)


def test_online_step_without_rescale():
    def no_rescale(m, d, x):
        m_new = torch.maximum(m, x)
        return m_new, d + exp_shift(x, m_new)

    with pytest.raises(ExerciseFailed, match="without rescaling the old d"):
        ex03.check_online_step(no_rescale)


def test_online_step_inverted_factor():
    def inverted(m, d, x):
        m_new = torch.maximum(m, x)
        factor = torch.where(m == NEG_INF, 0.0, torch.exp(m_new - m))
        return m_new, d * factor + exp_shift(x, m_new)

    with pytest.raises(ExerciseFailed, match=r"exp\(m_new - m_old\)"):
        ex03.check_online_step(inverted)


def test_online_step_unshifted_exp():
    def unshifted(m, d, x):
        m_new = torch.maximum(m, x)
        return m_new, d * exp_shift(m, m_new) + torch.exp(x)

    with pytest.raises(ExerciseFailed, match="subtract"):
        ex03.check_online_step(unshifted)


def test_online_step_reducing_over_rows(unwatched):
    def reduces(m, d, x):
        m_new, d_new = solutions.solution_online_step(m, d, x)
        return m_new.amax(), d_new.sum()

    with pytest.raises(ExerciseFailed, match="one entry per row"):
        ex03.check_online_step(reduces)


# ---------------------------------------------------------------- the merge


def test_merge_accepts_solution_and_core(capsys):
    assert ex03.check_merge(solutions.solution_merge) is None
    assert capsys.readouterr().out.count("[correct]") == 1
    with pytest.raises(ExerciseFailed, match="handed the checker teachkit.softmax.merge_stats"):
        ex03.check_merge(merge_stats)


def test_merge_hints_on_stub(capsys):
    assert ex03.check_merge(_stub) is None
    assert "Hint" in capsys.readouterr().out


def test_merge_adding_ds():
    def add(m_a, d_a, m_b, d_b):
        return torch.maximum(m_a, m_b), d_a + d_b

    with pytest.raises(ExerciseFailed, match="d_a \\+ d_b"):
        ex03.check_merge(add)


def test_merge_nan_for_empty_parts():
    def plain_exp(m_a, d_a, m_b, d_b):
        m = torch.maximum(m_a, m_b)
        return m, d_a * torch.exp(m_a - m) + d_b * torch.exp(m_b - m)

    with pytest.raises(ExerciseFailed, match=r"(?s)NaN.*\(-inf, 0\)"):
        ex03.check_merge(plain_exp)


def test_merge_inverted_factor():
    def inverted(m_a, d_a, m_b, d_b):
        m = torch.maximum(m_a, m_b)
        return m, d_a * exp_shift(m, m_a) + d_b * exp_shift(m, m_b)

    with pytest.raises(ExerciseFailed, match=r"exp\(m_part - m\)"):
        ex03.check_merge(inverted)


def test_merge_not_commutative():
    def lopsided(m_a, d_a, m_b, d_b):  # right when a holds the maximum, not otherwise
        return m_a, d_a + d_b * exp_shift(m_b, m_a)

    with pytest.raises(ExerciseFailed):
        ex03.check_merge(lopsided)


# ---------------------------------------------------------------- the warp butterfly


def test_warp_allreduce_accepts_solution(capsys):
    assert ex03.check_warp_allreduce(solutions.solution_warp_allreduce) is None
    assert "[correct]" in capsys.readouterr().out


def test_warp_allreduce_hints_on_stub(capsys):
    assert ex03.check_warp_allreduce(_stub) is None
    assert "lane ^ offset" in capsys.readouterr().out


def test_warp_allreduce_one_step_only():
    def one_step(m, d, shfl_xor, lanes):
        return merge_stats(m, d, shfl_xor(m, lanes // 2), shfl_xor(d, lanes // 2))

    with pytest.raises(ExerciseFailed, match=r"(?s)hears from only 2 of.*butterfly steps"):
        ex03.check_warp_allreduce(one_step)


def test_warp_allreduce_repeated_offset():
    def same_offset(m, d, shfl_xor, lanes):
        for _ in range(lanes.bit_length() - 1):
            m, d = merge_stats(m, d, shfl_xor(m, 1), shfl_xor(d, 1))
        return m, d

    with pytest.raises(ExerciseFailed, match="offsets you shuffled at, \\[1\\]"):
        ex03.check_warp_allreduce(same_offset)


def test_warp_allreduce_plain_sum():
    def plain_sum(m, d, shfl_xor, lanes):
        offset = lanes // 2
        while offset:
            m, d = torch.maximum(m, shfl_xor(m, offset)), d + shfl_xor(d, offset)
            offset //= 2
        return m, d

    with pytest.raises(ExerciseFailed, match="rescale both d's"):
        ex03.check_warp_allreduce(plain_sum)


def test_warp_allreduce_refuses_a_reduction_without_butterfly():
    # The answer that used to pass: the maximum and the rescaled sum over the lane axis,
    # broadcast back to every lane, with no lane ^ offset exchange at all.
    def amax_and_sum(m, d, shfl_xor, lanes):
        top = m.amax(dim=-1, keepdim=True)
        total = (d * exp_shift(m, top)).sum(dim=-1, keepdim=True)
        return top.expand_as(m), total.expand_as(d)

    with pytest.raises(ExerciseFailed, match="never called shfl_xor"):
        ex03.check_warp_allreduce(amax_and_sum)

    def per_warp_reshape(m, d, shfl_xor, lanes):  # assumes the lanes of a warp sit together
        shfl_xor(m, 1)
        mw, dw = m.reshape(-1, lanes), d.reshape(-1, lanes)
        top = mw.amax(dim=-1, keepdim=True)
        total = (dw * exp_shift(mw, top)).sum(dim=-1, keepdim=True)
        return top.expand_as(mw).reshape(-1), total.expand_as(dw).reshape(-1)

    with pytest.raises(ExerciseFailed, match="other warps got mixed in"):
        ex03.check_warp_allreduce(per_warp_reshape)


def test_warp_allreduce_refuses_gathering_every_lane():
    def gather_all(m, d, shfl_xor, lanes):  # right values, but lanes - 1 exchanges, no butterfly
        acc_m, acc_d = m, d
        for offset in range(1, lanes):
            acc_m, acc_d = merge_stats(acc_m, acc_d, shfl_xor(m, offset), shfl_xor(d, offset))
        return acc_m, acc_d

    with pytest.raises(ExerciseFailed, match="called shfl_xor 62 times"):
        ex03.check_warp_allreduce(gather_all)


def test_warp_allreduce_bad_shuffle_arguments():
    def row_of_lanes(m, d, shfl_xor, lanes):
        shfl_xor(m[:4], 1)
        return m, d

    with pytest.raises(ExerciseFailed, match="one value per lane"):
        ex03.check_warp_allreduce(row_of_lanes)

    def offset_too_large(m, d, shfl_xor, lanes):
        shfl_xor(m, lanes)
        return m, d

    with pytest.raises(ExerciseFailed, match="offset must be an int from 0 to 31"):
        ex03.check_warp_allreduce(offset_too_large)
