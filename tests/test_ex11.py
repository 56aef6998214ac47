"""The checkers of notebook 11 explain wrong answers (test_exercises.py holds
every checker to its solution and to an unfilled stub)."""

from __future__ import annotations

import pytest
import torch

from teachkit.exercises import ex11
from teachkit.exercises.checking import ExerciseFailed
from teachkit.exercises.solutions import ex11 as solutions
from teachkit.reduction import tree_reduce
from teachkit.softmax import exp_shift, merge_stats


def _fails(check, fn, *fragments):
    with pytest.raises(ExerciseFailed) as info:
        check(fn)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


# --- exercise 1: thread_elements ---------------------------------------------------------------


def test_scalar_ownership_is_explained():
    _fails(ex11.check_thread_elements, lambda t, n, threads, vec: list(range(t, n, threads)),
           "scalar loads")


def test_stride_in_elements_is_explained():
    def wrong(t, n, threads, vec):
        return [e for k in range(t * vec, n, threads) for e in range(k, min(k + vec, n))]

    _fails(ex11.check_thread_elements, wrong, "threads * vec elements")


def test_indices_past_the_end_are_explained():
    def wrong(t, n, threads, vec):
        return [e for j in range(t, -(-n // vec), threads) for e in range(j * vec, (j + 1) * vec)]

    _fails(ex11.check_thread_elements, wrong, "past the row's end", "vector 18")


def test_contiguous_chunks_are_explained():
    def wrong(t, n, threads, vec):
        chunk = -(-n // threads)
        return list(range(t * chunk, min((t + 1) * chunk, n)))

    _fails(ex11.check_thread_elements, wrong, "contiguous chunk", "coalesced")


def test_wrong_order_and_wrong_type_are_explained(unwatched):
    _fails(ex11.check_thread_elements,
           lambda *a: solutions.solution_thread_elements(*a)[::-1] or [], "wrong order")
    _fails(ex11.check_thread_elements, lambda *a: None, "list of ints")


# --- exercise 2: fold_vector -------------------------------------------------------------------


def test_fold_without_rescale_is_explained():
    def wrong(m, d, v):
        m_new = torch.maximum(m, v.amax(-1))
        return m_new, d + exp_shift(v, m_new.unsqueeze(-1)).sum(-1)

    _fails(ex11.check_fold_vector, wrong, "not rescaled")


def test_fold_relative_to_the_vectors_own_max_is_explained():
    def wrong(m, d, v):
        m_new = torch.maximum(m, v.amax(-1))
        return m_new, d * exp_shift(m, m_new) + exp_shift(v, v.amax(-1, keepdim=True)).sum(-1)

    _fails(ex11.check_fold_vector, wrong, "vector's own maximum")


def test_fold_nan_from_masked_prefix_is_explained():
    def wrong(m, d, v):  # plain exp: exp(-inf - (-inf)) = NaN
        m_new = torch.maximum(m, v.amax(-1))
        return m_new, d * torch.exp(m - m_new) + torch.exp(v - m_new.unsqueeze(-1)).sum(-1)

    _fails(ex11.check_fold_vector, wrong, "NaN", "exp_shift")


def test_fold_must_return_a_pair():
    _fails(ex11.check_fold_vector, lambda m, d, v: m, "pair (m, d)")


# --- exercise 3: block_merge -------------------------------------------------------------------


def test_block_sum_without_rescale_is_explained():
    _fails(ex11.check_block_merge, lambda m, d: (m.amax(-1), d.sum(-1)), "without rescaling")


def test_block_keeping_only_the_max_warp_is_explained():
    def wrong(m, d):
        return m.amax(-1), torch.gather(d, -1, m.argmax(-1, keepdim=True)).squeeze(-1)

    _fails(ex11.check_block_merge, wrong, "only the warp holding the maximum")


def test_block_mean_is_explained():
    def wrong(m, d):
        top = m.amax(-1, keepdim=True)
        return top.squeeze(-1), (d * exp_shift(m, top)).mean(-1)

    _fails(ex11.check_block_merge, wrong, "average")


def test_block_nan_from_idle_warps_is_explained():
    def wrong(m, d):
        top = m.amax(-1, keepdim=True)
        return top.squeeze(-1), (d * torch.exp(m - top)).sum(-1)

    def naive_fold(m, d):  # a left fold with plain exp: idle warps (-inf, 0) give NaN
        acc_m, acc_d = m[..., 0], d[..., 0]
        for w in range(1, m.shape[-1]):
            new = torch.maximum(acc_m, m[..., w])
            acc_d = acc_d * torch.exp(acc_m - new) + d[..., w] * torch.exp(m[..., w] - new)
            acc_m = new
        return acc_m, acc_d

    _fails(ex11.check_block_merge, naive_fold, "NaN", "idle")
    _fails(ex11.check_block_merge, wrong, "NaN", "exp_shift")  # the fully masked row


def test_block_any_order_is_accepted():
    def left_fold(m, d):  # warp after warp rather than a tree, with the merge written out
        acc_m, acc_d = m[..., 0], d[..., 0]
        for w in range(1, m.shape[-1]):
            new = torch.maximum(acc_m, m[..., w])
            acc_d = acc_d * exp_shift(acc_m, new) + d[..., w] * exp_shift(m[..., w], new)
            acc_m = new
        return acc_m, acc_d

    assert ex11.check_block_merge(left_fold) is None


@pytest.mark.parametrize("name", ["tree_reduce", "merge_stats"])
def test_block_merge_refuses_the_library_tree_and_merge(name):
    """The learner writes the tree and the pair merge: the library's are refused, by name."""
    def with_tree_reduce(m, d):
        pairs = list(zip(m.unbind(-1), d.unbind(-1), strict=True))
        return tree_reduce(pairs)[0]

    def with_merge_stats(m, d):
        acc = (m[..., 0], d[..., 0])
        for w in range(1, m.shape[-1]):
            acc = merge_stats(*acc, m[..., w], d[..., w])
        return acc

    wrong = with_tree_reduce if name == "tree_reduce" else with_merge_stats
    _fails(ex11.check_block_merge, wrong, f"{name}", "library's version")
