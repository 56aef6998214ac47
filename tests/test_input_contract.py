"""The contract every entry point keeps (README, Guarantees): one rule for a query that sees no
key, kernels that refuse what they cannot do (autograd, float64, a world with no driver) with an
error that says what to pass, and scalars checked before use. Tiny shapes: the interpreter runs
the kernels on the CPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

import teachkit
from teachkit import validation
from teachkit.attention import (
    attention_scores,
    blockwise_attention,
    merge_partials,
    naive_attention,
)
from teachkit.ring import attend_block, merge_partials_, ring_step, simulate_ring

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels import decode_attention, softmax_kernels, teaching  # noqa: E402
from teachkit.kernels.decode_simple import decode_attention_simple  # noqa: E402
from teachkit.kernels.flash_simple import flash_attention_simple  # noqa: E402

DEV = teachkit.DEVICE
NEG_INF = float("-inf")


def _dead_rows(L: int, dead: list[int], dtype: torch.dtype, seed: int):
    """q, k, v where the query rows ``dead`` score -inf against every key (a -inf in q's first
    component, k's first component positive), as (..., L, D) tensors."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, L, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    k[..., 0] = k[..., 0].abs() + 0.5
    q[:, dead, 0] = NEG_INF
    return q.to(dtype), k.to(dtype), v.to(dtype)


# ---------------------------------------------------------------------------------------------
# One rule for a query that sees no key: output 0, lse -inf (SDPA's math backend)
# ---------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.integers(1, 6), data=st.data(), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_all_minus_inf_rows_give_zeros_like_sdpa(L, data, seed, dtype):
    dead = data.draw(st.lists(st.integers(0, L - 1), unique=True, max_size=L))
    q, k, v = _dead_rows(L, dead, dtype, seed)
    want = F.scaled_dot_product_attention(q, k, v)
    assert torch.all(want[:, dead] == 0)  # what torch 2.13's math backend gives
    for causal in (False, True):
        scores = attention_scores(q, k, causal)
        assert torch.all(scores[:, dead] == NEG_INF)
        out = naive_attention(q, k, v, causal=causal)
        bout, lse = blockwise_attention(q, k, v, causal=causal, block_size=2)
        assert not out.isnan().any() and not bout.isnan().any()
        assert torch.all(out[:, dead] == 0) and torch.all(bout[:, dead] == 0)
        assert torch.all(lse[:, dead] == NEG_INF)
        live = [i for i in range(L) if i not in dead]
        assert torch.allclose(out[:, live], bout[:, live], atol=1e-5)
    assert torch.allclose(naive_attention(q, k, v), want, atol=1e-5)


def test_all_minus_inf_rows_through_merges_and_the_ring():
    q, k, v = _dead_rows(4, [1], torch.float64, 0)
    a = blockwise_attention(q, k[:, :2], v[:, :2])
    b = blockwise_attention(q, k[:, 2:], v[:, 2:])
    out, lse = merge_partials(*a, *b)
    assert torch.all(out[:, 1] == 0) and torch.all(lse[:, 1] == NEG_INF)
    qq, kk, vv = (torch.cat([t, t], 1)[:, :4].unsqueeze(0) for t in (q, k[:, :4], v[:, :4]))
    for causal in (False, True):
        out, lse = simulate_ring(qq, kk, vv, world_size=2, causal=causal)
        assert torch.all(out[..., 1, :] == 0) and torch.all(lse[..., 1] == NEG_INF)
        assert not out.isnan().any()
    out, lse = attend_block(qq, kk, vv, "full", block_attention="torch")
    assert torch.all(out[..., 1, :] == 0) and torch.all(lse[..., 1] == NEG_INF)


def test_a_nan_score_stays_nan():
    q, k, v = _dead_rows(3, [1], torch.float64, 1)
    q[:, 2, 3] = float("nan")
    out = naive_attention(q, k, v)
    assert out[:, 2].isnan().all() and torch.all(out[:, 1] == 0) and not out[:, 0].isnan().any()
    assert F.scaled_dot_product_attention(q, k, v)[:, 2].isnan().all()


# ---------------------------------------------------------------------------------------------
# Autograd: the kernels have no backward pass; they say so instead of dropping the gradient
# ---------------------------------------------------------------------------------------------
def _kernel_calls():
    """``(name, call)``: ``call(g, h)`` runs the kernel with ``g`` applied to one input and ``h``
    to its other floating inputs."""
    x = torch.randn(3, 16, device=DEV)
    q = torch.randn(1, 2, 1, 16, device=DEV)
    kc = torch.randn(1, 2, 8, 16, device=DEV)
    qf = torch.randn(1, 1, 4, 16, device=DEV)
    m, d = torch.randn(2, 4, device=DEV), torch.rand(2, 4, device=DEV) + 1
    return [
        ("softmax", lambda g, h: softmax_kernels.softmax(g(x))),
        ("softmax_fused", lambda g, h: softmax_kernels.softmax_fused(g(x))),
        ("softmax_online", lambda g, h: softmax_kernels.softmax_online(g(x))),
        ("softmax_split", lambda g, h: softmax_kernels.softmax_split(g(x), chunk=128, block=128)),
        ("softmax_blog", lambda g, h: softmax_kernels.softmax_blog(g(x))),
        ("row_max", lambda g, h: teaching.row_max(g(x))),
        ("row_softmax", lambda g, h: teaching.row_softmax(g(x))),
        ("fused_one_row", lambda g, h: teaching.fused_one_row(g(x), num_warps=4)),
        ("reduce_stats", lambda g, h: teaching.reduce_stats(g(m), h(d))),
        ("decode_attention", lambda g, h: decode_attention(g(q), h(kc), h(kc))),
        ("decode_attention", lambda g, h: decode_attention(h(q), h(kc), g(kc))),
        ("flash_attention_simple", lambda g, h: flash_attention_simple(g(qf), h(qf), h(qf))),
        ("decode_attention_simple", lambda g, h: decode_attention_simple(g(q), h(kc), h(kc))),
        ("decode_attention_simple", lambda g, h: decode_attention_simple(h(q), h(kc), g(kc))),
    ]


def _ring_call(g, h):
    qd = torch.randn(1, 1, 4, 16, dtype=torch.float64)
    return simulate_ring(g(qd), h(qd), h(qd), 2)


def _same(t):
    return t


def _grad(t):
    return t.clone().requires_grad_()


@pytest.mark.parametrize("name,call", [*_kernel_calls(), ("ring", _ring_call)],
                         ids=lambda c: c if isinstance(c, str) else "")
def test_kernels_refuse_tensors_that_require_grad(name, call):
    with pytest.raises(ValueError, match=r"requires grad.*no backward.*torch\.no_grad\(\)"):
        call(_grad, _same)
    with torch.no_grad():  # the same call without grad mode runs
        call(_grad, _same)
    call(lambda t: _grad(t).detach(), _same)


def test_the_torch_references_stay_differentiable():
    q, k, v = (torch.randn(1, 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out, _ = blockwise_attention(q, k, v, causal=True, block_size=2)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_ring_merges_refuse_grad_instead_of_a_version_counter_error():
    q = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    out, lse = torch.zeros_like(q), torch.full(q.shape[:-1], NEG_INF, dtype=q.dtype)
    with pytest.raises(ValueError, match="out_b requires grad"):
        merge_partials_(out, lse, q.clone().requires_grad_(), lse.clone())
    with pytest.raises(ValueError, match="q requires grad"):
        ring_step(out, lse, q.clone().requires_grad_(), q, q, "full", block_attention="torch")


# ---------------------------------------------------------------------------------------------
# The dtype contract: references take float64, kernels say which dtypes they take and where to go
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,call", _kernel_calls(), ids=lambda c: c if isinstance(c, str)
                         else "")
def test_kernels_refuse_float64_and_name_the_reference(name, call):
    def double(t):
        return t.double()

    with pytest.raises(TypeError, match=r"float16, bfloat16 or float32.*(reference|"
                                        r"naive_attention)"):
        call(double, double)


# ---------------------------------------------------------------------------------------------
# TRITON_INTERPRET=0 on a machine without a GPU
# ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(teachkit.ON_GPU, reason="the hint is for machines without a GPU")
@pytest.mark.parametrize("value", ["0", "false", ""])
def test_interpreter_switched_off_without_a_gpu_says_unset_it(value, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert teachkit.device.interpreter_switched_off()
    x, q, kc = torch.randn(2, 8), torch.randn(1, 1, 1, 16), torch.randn(1, 1, 4, 16)
    for call in (lambda: softmax_kernels.softmax(x), lambda: teaching.row_softmax(x),
                 lambda: decode_attention(q, kc, kc)):
        with pytest.raises(RuntimeError, match="unset"):
            call()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not teachkit.device.interpreter_switched_off()


# ---------------------------------------------------------------------------------------------
# Scalars
# ---------------------------------------------------------------------------------------------
def test_scale_is_a_finite_number():
    q = torch.randn(1, 3, 8)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="scale must be a finite number"):
            naive_attention(q, q, q, scale=bad)
        with pytest.raises(ValueError, match="scale must be a finite number"):
            blockwise_attention(q, q[:, :0], q[:, :0], scale=bad)  # checked even with no key
        with pytest.raises(ValueError, match="scale must be a finite number"):
            simulate_ring(q[None], q[None], q[None], 1, scale=bad)
    for bad in (True, "0.5", torch.tensor(0.5)):
        with pytest.raises(TypeError, match="scale must be a float"):
            naive_attention(q, q, q, scale=bad)
    neg = naive_attention(q, q, q, scale=-2.0)
    assert torch.allclose(neg, F.scaled_dot_product_attention(q, q, q, scale=-2.0), atol=1e-6)
    assert validation.resolve_scale(None, 16) == 0.25


def test_power_of_two_sizes():
    assert validation.require_power_of_two(64, "block") == 64
    for bad, err in ((0, ValueError), (-8, ValueError), (48, ValueError), (True, TypeError),
                     (64.0, TypeError)):
        with pytest.raises(err, match="block"):
            validation.require_power_of_two(bad, "block")


# ---------------------------------------------------------------------------------------------
# More hostile inputs: strings for bools, negative lengths, non-tensors, huge pools
# ---------------------------------------------------------------------------------------------
def test_causal_must_be_a_bool_not_a_truthy_string():
    q = torch.randn(1, 3, 8)
    for call in (lambda c: naive_attention(q, q, q, causal=c),
                 lambda c: blockwise_attention(q, q, q, causal=c),
                 lambda c: attention_scores(q, q, causal=c),
                 lambda c: simulate_ring(q[None], q[None], q[None], 1, causal=c)):
        with pytest.raises(TypeError, match="causal must be True or False"):
            call("no")  # was taken as True: a silent wrong answer
        with pytest.raises(TypeError, match="causal must be True or False"):
            call(None)


def test_causal_mask_lengths():
    from teachkit.attention import causal_mask

    assert causal_mask(0, 3).shape == (0, 3)
    with pytest.raises(ValueError, match="L must be >= 0"):
        causal_mask(-1, 3)
    with pytest.raises(TypeError, match="S must be an int"):
        causal_mask(2, 3.0)


def test_relative_error_takes_real_tensors_only():
    from teachkit.compare import describe_mismatch, relative_error

    with pytest.raises(TypeError, match="got must be a torch.Tensor"):
        relative_error([1.0], torch.zeros(1))
    with pytest.raises(TypeError, match="complex"):
        relative_error(torch.zeros(2), torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="ref must be a torch.Tensor"):
        describe_mismatch(torch.zeros(1), 0.0)


def test_fold_and_tree_reduce_say_a_combine_is_a_function():
    from teachkit.reduction import fold, tree_reduce

    m, d = torch.zeros(3), torch.ones(3)
    for f in (fold, tree_reduce):
        with pytest.raises(TypeError, match="combine must be a function"):
            f(m, d)  # the pairs passed as two tensors: was "Boolean value of Tensor ... ambiguous"


def test_paged_pools_share_one_dtype():
    from teachkit.paging import paged_from_contiguous

    k = torch.randn(1, 1, 5, 2)
    with pytest.raises(TypeError, match="one dtype"):
        paged_from_contiguous(k, k.double(), [5], 2)


def test_ring_blocks_are_checked_before_use():
    q = torch.randn(1, 1, 4, 8)
    for call in (lambda: attend_block([1.0], q, q, "full", block_attention="torch"),
                 lambda: ring_step(torch.zeros_like(q), torch.zeros(1, 1, 4), [1.0], q, q, "full",
                                   block_attention="torch")):
        with pytest.raises(TypeError, match="q must be a torch.Tensor"):
            call()
    with pytest.raises(ValueError, match="mask must be a TileKind or one of the names"):
        ring_step(torch.zeros_like(q), torch.zeros(1, 1, 4), q, q, q, "diagonal")


def test_numpy_scales_are_numbers():
    np = pytest.importorskip("numpy")
    q = torch.randn(1, 3, 8)
    assert torch.allclose(naive_attention(q, q, q, scale=np.float32(0.5)),
                          naive_attention(q, q, q, scale=0.5))
    with pytest.raises(ValueError, match="finite"):
        naive_attention(q, q, q, scale=np.float64("nan"))


def test_reduce_stats_takes_a_jit_combine_only():
    m, d = torch.randn(2, 3, device=DEV), torch.rand(2, 3, device=DEV)
    for bad in (len, 3, lambda a, b, c, e: (a, b)):
        with pytest.raises(TypeError, match=r"combine must be a @triton.jit function"):
            teaching.reduce_stats(m, d, combine=bad)


def test_merge_lse_of_plus_inf_is_plus_inf_like_logaddexp():
    from teachkit.softmax import merge_lse

    a = torch.tensor([math.inf, math.inf, 0.0, NEG_INF, math.nan])
    b = torch.tensor([math.inf, 1.0, NEG_INF, NEG_INF, 0.0])
    got, want = merge_lse(a, b), torch.logaddexp(a, b)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~got.isnan()], want[~want.isnan()])


def test_fits_takes_a_size_and_a_fraction():
    from teachkit.device import fits

    assert fits(0) and fits(1.5)
    with pytest.raises(TypeError, match="nbytes"):
        fits("5")
    with pytest.raises(ValueError, match="nbytes"):
        fits(-1)
    for bad in (0, 1.5, math.nan):
        with pytest.raises(ValueError, match="headroom"):
            fits(1, headroom=bad)


def test_helpers_name_their_arguments():
    from teachkit.kernels.decode import decode_mask
    from teachkit.traffic import traffic_model

    with pytest.raises(ValueError, match="variant must be one of"):
        traffic_model("nope", 4, 4, 4)
    with pytest.raises(ValueError, match="block must be a power of two"):
        softmax_kernels.split_depth(0, 0)
    with pytest.raises(TypeError, match="cache_seqlens must be an int32 or int64"):
        decode_mask(torch.tensor([3.5]), 1, 5)
    with pytest.raises(ValueError, match="Lq must be an int >= 0"):
        decode_mask(torch.tensor([3]), -1, 5)


TILES = ((32 * 1024, 2, 4), (64 * 1024, 2, 2))


@pytest.mark.parametrize("call,error,message", [
    (lambda d: d.choose_num_splits(32, 8, 0), ValueError, "sms must be an int >= 1"),
    (lambda d: d.choose_num_splits(32.0, 8, 132), TypeError, "programs must be an int"),
    (lambda d: d.choose_num_splits(32, 8, 132, waves=float("nan")), ValueError, "waves"),
    (lambda d: d.last_wave_splits(160, 132, 0), ValueError, "resident must be an int >= 1"),
    (lambda d: d.last_wave_splits(160, 132, 2, most=1), ValueError, "most must be an int >= 2"),
    (lambda d: d.last_wave_fill(480, 0), ValueError, "places must be an int >= 1"),
    (lambda d: d.last_wave_fill(0, 264), ValueError, "programs must be an int >= 1"),
    (lambda d: d.fullest_wave_tiles(768, 132, ()), ValueError, "tiles must be a non-empty"),
    (lambda d: d.fullest_wave_tiles(768, 132, [(1, 2, 3)]), ValueError, "tuple of"),
    (lambda d: d.fullest_wave_tiles(768, 132, ((1, 2, 0),)), ValueError, "positive ints"),
    (lambda d: d.fullest_wave_plan(576, 132, TILES, gain=-1.0), ValueError, "gain"),
    (lambda d: d.fullest_wave_plan(576, 132, TILES, one_wave="no"), TypeError, "one_wave"),
    (lambda d: d.uneven_wave(416, 132, "4"), TypeError, "resident must be an int"),
    (lambda d: d.entry_grid_splits(32, 132, (2.0, 1.45, 65536, 2), 32), ValueError,
     "from <= to"),
    (lambda d: d.entry_grid_splits(32, 132, (1.45, 2.0), 32), ValueError, "grid must be"),
    (lambda d: d.entry_grid_splits(32, 132, d.ENTRY_GRID[90], 0), ValueError,
     "most must be an int >= 1"),
], ids=lambda c: c if isinstance(c, str) else "")
def test_wave_planning_helpers_name_a_bad_argument(call, error, message):
    """The public planning helpers of ``decode`` (what the exercises of notebook 09 rebuild)
    refuse arguments that would divide by zero, loop over nothing or mean nothing."""
    from teachkit.kernels import decode

    with pytest.raises(error, match=message):
        call(decode)


def test_wave_planning_helpers_take_numpy_counts():
    import numpy as np

    from teachkit.kernels import decode

    assert decode.last_wave_splits(np.int64(160), np.int64(132), 2) == 3
    assert decode.choose_num_splits(np.int32(32), 2048, 132) == 8


def test_first_kernels_refuse_offsets_past_int32():
    """row_max and reduce_stats keep row offsets in int32: past 2**31 they would read the wrong
    rows. (A meta tensor has the strides without the memory.)"""
    big = torch.empty(3, 2**30, device="meta")[:, :4]
    with pytest.raises(ValueError, match="int32"):
        teaching._require_int32_offsets(big, "row_max")
    teaching._require_int32_offsets(torch.empty(3, 2**28, device="meta"), "row_max")


def test_decode_attention_simple_keeps_the_no_key_rule():
    q = torch.randn(1, 2, 1, 16, device=DEV)
    k = torch.randn(1, 2, 40, 16, device=DEV).abs() + 0.5
    v = torch.randn(1, 2, 40, 16, device=DEV)
    q[0, 1, 0, 0] = NEG_INF  # head 1 scores -inf against every key
    out, lse = decode_attention_simple(q, k, v, num_splits=3)
    assert torch.all(out[0, 1] == 0) and lse[0, 1, 0] == NEG_INF
    with sdpa_kernel(SDPBackend.MATH):  # the rule is the math backend's (CUDA's fused ones: NaN)
        want = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(out[0, 1], want[0, 1])
    assert torch.allclose(out[0, 0], want[0, 0], atol=1e-5)


def test_plain_attention_inputs_says_yes_only_to_the_common_case():
    """The entry points skip their full checks when this says yes, so it must say no to anything
    those checks would refuse; off the GPU it always says no."""
    dev = teachkit.DEVICE
    q = torch.randn(2, 4, 3, 16, device=dev)
    k = torch.randn(2, 2, 5, 16, device=dev)
    heads = (16, 32, 64)
    plain = teachkit.ON_GPU
    assert validation.plain_attention_inputs(q, k, k.clone(), heads) is plain
    assert validation.plain_attention_inputs(q, k.transpose(1, 2), k.transpose(1, 2), heads,
                                             kv_heads_axis=2, batch_axis=None) is plain
    refused = [
        (q.half(), k, k),  # mixed dtypes
        (q.double(), k.double(), k.double()),  # a dtype the kernels do not take
        (q, k, k[:, :, :4]),  # k and v of different shapes
        (q, k[:, :1].expand(2, 3, 5, 16), k[:, :1].expand(2, 3, 5, 16)),  # 3 heads do not divide 4
        (q[..., :8], k[..., :8], k[..., :8]),  # a head dim not in the list
        (q[0], k[0], k[0]),  # 3-D
        (q, k[:1], k[:1]),  # another batch
        (torch.nn.Parameter(q), k, k),  # a subclass: the full checks decide
        (q.cpu(), k.cpu(), k.cpu()) if plain else (q, k, k),  # not on the GPU
    ]
    for args in refused:
        assert not validation.plain_attention_inputs(*args, heads), [a.shape for a in args]


def test_integer_checks_name_the_argument_and_say_which_integers_they_take():
    """``require_positive_int`` and ``require_int`` are one check: both refuse bools, floats
    and strings with a TypeError and a value below their minimum with a ValueError, each saying
    what to pass. ``require_int`` takes a NumPy integer and returns a plain ``int``;
    ``require_positive_int`` takes a plain ``int`` only, since its callers go on with the value
    they were given."""
    import numpy as np

    got = validation.require_int(np.int64(3), "n", 1)
    assert got == 3 and type(got) is int
    with pytest.raises(TypeError, match="n must be a positive int, got int64"):
        validation.require_positive_int(np.int64(3), "n")
    for check in (validation.require_positive_int, lambda v, n: validation.require_int(v, n, 1)):
        assert check(3, "n") == 3
        for bad in (True, 2.0, "3"):
            with pytest.raises(TypeError, match="n must be"):
                check(bad, "n")
        with pytest.raises(ValueError, match="pass 1 or more"):
            check(0, "n")
