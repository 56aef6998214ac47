"""The checkers of notebook 08 explain wrong answers (test_exercises.py holds
every checker to its solution and to an unfilled stub)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from teachkit.exercises import ex08  # noqa: E402
from teachkit.exercises.checking import ExerciseFailed  # noqa: E402
from teachkit.exercises.solutions import ex08 as solutions  # noqa: E402
from teachkit.tiling import count_tiles  # noqa: E402


def _fails(check, fn, *fragments):
    with pytest.raises(ExerciseFailed) as info:
        check(fn)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- exercise 1: key range -------------------------------------------------------------------


def test_key_range_matches_the_mask_on_random_blocks(gen):
    for _ in range(200):
        bn = 2 ** int(torch.randint(4, 7, (), generator=gen))
        bm = bn * 2 ** int(torch.randint(0, 3, (), generator=gen))
        S = int(torch.randint(1, 500, (), generator=gen))
        start_m = bm * int(torch.randint(0, 500 // bm + 2, (), generator=gen))
        for causal in (False, True):
            want = ex08._brute_key_range(start_m, S, bm, bn, causal)
            assert solutions.solution_key_range(start_m, S, bm, bn, causal) == want


def test_key_range_without_the_cap_at_whole_blocks():
    def wrong(start_m, S, bm, bn, causal):
        return (start_m, min(start_m + bm, S)) if causal else ((S // bn) * bn, S)

    _fails(ex08.check_key_range, wrong, "expected (full_end, end)", "shorter than block_n",
           "min(start_m, (S // block_n) * block_n)")


def test_key_range_past_the_last_key():
    def wrong(start_m, S, bm, bn, causal):
        s_full = (S // bn) * bn
        return (min(start_m, s_full), start_m + bm) if causal else (s_full, S)

    _fails(ex08.check_key_range, wrong, "min(start_m + block_m, S)")


def test_key_range_stopping_at_the_first_row():
    def wrong(start_m, S, bm, bn, causal):
        s_full = (S // bn) * bn
        return (min(start_m, s_full), min(start_m + 1, S)) if causal else (s_full, S)

    _fails(ex08.check_key_range, wrong, "*last* query")


def test_key_range_ignoring_causal():
    def wrong(start_m, S, bm, bn, causal):
        return (S // bn) * bn, S

    _fails(ex08.check_key_range, wrong, "causal=True", "start_m + block_m")


def test_key_range_causal_without_a_mask():
    def wrong(start_m, S, bm, bn, causal):
        return min(start_m, (S // bn) * bn), min(start_m + bm, S)

    _fails(ex08.check_key_range, wrong, "Without a causal mask every query sees every key")


def test_key_range_diagonal_block_unmasked():
    def wrong(start_m, S, bm, bn, causal):
        s_full = (S // bn) * bn
        return (min(start_m + bm, s_full), min(start_m + bm, S)) if causal else (s_full, S)

    _fails(ex08.check_key_range, wrong, "above the diagonal", "at most start_m")


def test_key_range_tail_not_a_whole_block():
    def wrong(start_m, S, bm, bn, causal):
        return (min(start_m, S), min(start_m + bm, S)) if causal else (S, S)

    _fails(ex08.check_key_range, wrong, "multiple of block_n")


def test_key_range_everything_masked_is_slow_but_named():
    def wrong(start_m, S, bm, bn, causal):
        return 0, (min(start_m + bm, S) if causal else S)

    _fails(ex08.check_key_range, wrong, "need no mask")


def test_key_range_shape_of_the_answer():
    _fails(ex08.check_key_range, lambda *a: 3, "return a pair")
    _fails(ex08.check_key_range, lambda *a: (0.0, 1.0), "should be an int")


# --- exercise 2: exp2 update -----------------------------------------------------------------


def _update(s_units, exp_p, exp_alpha, rescale=True, shift_inf=True, natural_m=False):
    def fn(m2, l, acc, s_raw, v, scale):
        s2 = s_units(s_raw, scale)
        m_new = torch.maximum(m2, s2.amax(-1))
        shift = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new) \
            if shift_inf else m_new
        p = exp_p(s2 - shift.unsqueeze(-1))
        alpha = exp_alpha(m2 - shift)
        acc_new = (alpha.unsqueeze(-1) * acc if rescale else acc) + p @ v
        return (m_new / math.log2(math.e) if natural_m else m_new), alpha * l + p.sum(-1), acc_new

    return fn


def log2_units(s, scale):
    """Raw scores in log2 units of the scaled scores."""
    return s * scale * math.log2(math.e)


def test_exp2_update_solution_is_the_natural_update(gen):
    m2 = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    l = torch.rand(3, 5, generator=gen, dtype=torch.float64) + 0.5
    acc = torch.randn(3, 5, 4, generator=gen, dtype=torch.float64)
    s, v = (torch.randn(3, 5, 7, generator=gen, dtype=torch.float64),
            torch.randn(3, 7, 4, generator=gen, dtype=torch.float64))
    got = solutions.solution_exp2_update(m2, l, acc, s, v, 0.3)
    want = ex08._natural_update(m2, l, acc, s, v, 0.3)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_exp2_update_forgetting_log2e():
    _fails(ex08.check_exp2_update, _update(lambda s, c: s * c, torch.exp2, torch.exp2),
           "common mistake", "scale * log2(e)")


def test_exp2_update_mixing_exp_and_log2_units():
    _fails(ex08.check_exp2_update, _update(log2_units, torch.exp, torch.exp), "must be exp2")


def test_exp2_update_alpha_with_exp():
    _fails(ex08.check_exp2_update, _update(log2_units, torch.exp2, torch.exp), "alpha = exp2")


def test_exp2_update_acc_not_rescaled():
    _fails(ex08.check_exp2_update, _update(log2_units, torch.exp2, torch.exp2, rescale=False),
           "acc was not rescaled")


def test_exp2_update_nan_on_rows_with_no_key():
    msg = _fails(ex08.check_exp2_update,
                 _update(log2_units, torch.exp2, torch.exp2, shift_inf=False),
                 "-inf - (-inf) is NaN")
    assert "window mask" in msg


def test_exp2_update_maximum_in_natural_units():
    _fails(ex08.check_exp2_update,
           _update(log2_units, torch.exp2, torch.exp2, natural_m=True), "natural units")


def test_exp2_update_wrong_return():
    _fails(ex08.check_exp2_update, lambda m2, l, acc, s, v, c: (m2, l), "triple")
    _fails(ex08.check_exp2_update, lambda m2, l, acc, s, v, c: (m2, l, acc[..., 0]),
           "should be a tensor of shape")


def test_exp2_update_a_crash_is_reported():
    def crash(m2, l, acc, s, v, c):
        return m2, l, acc @ v

    _fails(ex08.check_exp2_update, crash, "your function raised")


# --- exercise 3: causal flops ----------------------------------------------------------------


def test_causal_flops_counts_match_tiling(gen):
    for _ in range(50):
        bn = 2 ** int(torch.randint(4, 7, (), generator=gen))
        bm = bn * 2 ** int(torch.randint(0, 2, (), generator=gen))
        L, S = (int(torch.randint(1, 2000, (), generator=gen)) for _ in range(2))
        got = solutions.solution_causal_flops(L, S, 64, bm, bn)
        assert got == ex08._flops_reference(L, S, 64, bm, bn)
    # L = S = 4096 in 128 x 64 tiles: 32 query blocks see 2, 4, ..., 64 key blocks.
    assert solutions.solution_causal_flops(4096, 4096, 64, 128, 64) == 1056 * 4 * 128 * 64 * 64
    assert count_tiles(4096, 4096, 128, 64, causal=True).computed == 1056


def _flops_with(mistake):
    def fn(L, S, D, bm, bn):
        return ex08._flops_mistakes(L, S, D, bm, bn)[mistake]

    return fn


@pytest.mark.parametrize(("index", "fragment"), [
    (0, "visible (query, key) pairs"),
    (1, "nominal 2 L S D"),
    (2, "never loaded"),
    (3, "one matrix product"),
    (4, "clipped the last query block"),
    (5, "real size"),
])
def test_causal_flops_mistakes_are_named(index, fragment):
    mistake = list(ex08._flops_mistakes(100, 100, 64, 64, 32))[index]
    _fails(ex08.check_causal_flops, _flops_with(mistake), fragment, "computed tiles")


def test_causal_flops_float_is_refused(unwatched):
    _fails(ex08.check_causal_flops, lambda *a: float(solutions.solution_causal_flops(*a)),
           "should be an int")


# --- exercise 2b: the forward kernel ---------------------------------------------------------


@triton.jit
def _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, SKIP: tl.constexpr, ALPHA: tl.constexpr,
                DIVIDE: tl.constexpr, STRICT: tl.constexpr, LSE_KIND: tl.constexpr,
                MASK_V: tl.constexpr, MASK_STORE: tl.constexpr):
    # One masked loop (no unmasked fast path), with one mistake switched on by a flag.
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * stride_q + offs_d[None, :], mask=offs_m[:, None] < L,
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    end = tl.minimum(start_m + BLOCK_M, S) if CAUSAL and SKIP else S
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + cols[:, None] * stride_k + offs_d[None, :], mask=cols[:, None] < S,
                    other=0.0)
        if MASK_V:
            v = tl.load(V + cols[:, None] * stride_v + offs_d[None, :], mask=cols[:, None] < S,
                        other=0.0)
        else:
            v = tl.load(V + cols[:, None] * stride_v + offs_d[None, :])
        s = tl.dot(q, tl.trans(k)) * scale
        keep = cols[None, :] < S
        if CAUSAL:
            if STRICT:
                keep = keep & (cols[None, :] < offs_m[:, None])
            else:
                keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - shift)
        p = tl.exp(s - shift[:, None])
        if ALPHA == 2:
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        elif ALPHA == 1:
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc + tl.dot(p.to(v.dtype), v)
        else:
            l_i = l_i + tl.sum(p, 1)
            acc = acc + tl.dot(p.to(v.dtype), v)
        if DIVIDE == 2:
            acc = acc / l_i[:, None]
        m_i = m_new
    out = acc / l_i[:, None] if DIVIDE != 1 else acc
    if LSE_KIND == 0:
        lse = m_i + tl.log(l_i)
    elif LSE_KIND == 1:
        lse = m_i
    else:
        lse = (m_i + tl.log(l_i)) * 1.4426950408889634
    if MASK_STORE:
        tl.store(O + offs_m[:, None] * stride_o + offs_d[None, :], out.to(O.dtype.element_ty),
                 mask=offs_m[:, None] < L)
    else:
        tl.store(O + offs_m[:, None] * stride_o + offs_d[None, :], out.to(O.dtype.element_ty))
    tl.store(LSE + offs_m, lse, mask=offs_m < L)


@triton.jit
def _flash_masked_everywhere(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o,
                             scale, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 0, False, 0, True, True)


@triton.jit
def _flash_no_skip(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                   CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, False, 2, 0, False, 0, True, True)


@triton.jit
def _flash_no_alpha(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 0, 0, False, 0, True, True)


@triton.jit
def _flash_no_alpha_acc(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                        CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 1, 0, False, 0, True, True)


@triton.jit
def _flash_no_division(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                       CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 1, False, 0, True, True)


@triton.jit
def _flash_divide_each_step(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o,
                            scale, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 2, False, 0, True, True)


@triton.jit
def _flash_strict(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                  CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 0, True, 0, True, True)


@triton.jit
def _flash_lse_is_max(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                      CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 0, False, 1, True, True)


@triton.jit
def _flash_lse_log2(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 0, False, 2, True, True)


@triton.jit
def _flash_unmasked_v(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                      CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 0, False, 0, False, True)


@triton.jit
def _flash_unmasked_store(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                          CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr):
    _flash_body(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale, CAUSAL,
                HEAD_DIM, BLOCK_M, BLOCK_N, True, 2, 0, False, 0, True, False)


@triton.jit
def _flash_stub(Q, K, V, O, LSE, L, S, stride_q, stride_k, stride_v, stride_o, scale,
                CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    raise NotImplementedError  # delete this line when your kernel is written


def test_flash_kernel_accepts_solution_and_one_masked_loop(capsys):
    ex08.check_flash_kernel(solutions.solution_flash_kernel)
    ex08.check_flash_kernel(_flash_masked_everywhere)
    ex08.check_flash_kernel(_flash_stub)
    out = capsys.readouterr().out
    assert out.count("[correct]") == 2 and "[not attempted]" in out and "divided by l" in out


@pytest.mark.parametrize(("kernel", "says"), [
    (_flash_no_skip, "yet your loop loaded those keys"),
    (_flash_no_alpha, "neither l nor acc was rescaled"),
    (_flash_no_alpha_acc, r"acc was not rescaled by alpha \(l was\)"),
    (_flash_no_division, "never divided by l"),
    (_flash_divide_each_step, "inside the loop and again at the end"),
    (_flash_strict, "strict"),
    (_flash_lse_is_max, "lse is the row maximum m alone"),
    (_flash_lse_log2, "log2 units"),
    (_flash_unmasked_v, "0 \\* NaN"),
    (_flash_unmasked_store, "stored outside the rows of O"),
    (lambda q, k, v: torch.softmax(q @ k.T, -1) @ v, "not a Triton kernel"),
])
def test_flash_kernel_mistakes_are_named(kernel, says):
    with pytest.raises(ExerciseFailed, match=says):
        ex08.check_flash_kernel(kernel)
