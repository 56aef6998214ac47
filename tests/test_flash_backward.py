"""FlashAttention's backward pass and grouped-query attention against float64 autograd.

Under Triton's interpreter on a CPU and compiled on a GPU. The reference is the plain formula,
``softmax(scale * q k^T) v`` with its lse, differentiated by torch in float64; the kernels'
gradients must match it for any lengths, causal or not, every dtype, grouped-query heads, a
negative scale, a loss that uses the lse, and strided inputs.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from inputs import randn

import teachkit
from teachkit.compare import attention_reference, relative_error

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels import flash, flash_backward  # noqa: E402

DEV = teachkit.DEVICE
RTOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def reference(q, k, v, causal, scale=None):
    """``(out, lse)`` in float64 on the CPU from leaf copies of q, k, v (returned too)."""
    leaves = tuple(t.detach().to("cpu", torch.float64).requires_grad_() for t in (q, k, v))
    return attention_reference(*leaves, causal, scale), leaves


def gradients(B, H, H_kv, L, S, D, causal, dtype, gen, scale=None, lse_weight=0.0,
              layout="contiguous"):
    """Gradients of ``sum(out * dO) + lse_weight * sum(lse * dlse)`` from the kernels and from
    float64 autograd."""
    if layout == "contiguous":
        q = randn(B, H, L, D, gen=gen, dtype=dtype)
        k, v = (randn(B, H_kv, S, D, gen=gen, dtype=dtype) for _ in range(2))
    else:  # (B, L, H, D) storage seen as (B, H, L, D), as a model's projections give
        q = randn(B, L, H, D, gen=gen, dtype=dtype).transpose(1, 2)
        k, v = (randn(B, S, H_kv, D, gen=gen, dtype=dtype).transpose(1, 2) for _ in range(2))
    q, k, v = (t.to(DEV).requires_grad_() for t in (q, k, v))
    out, lse = K.flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    do = randn(*out.shape, gen=gen, dtype=dtype).to(DEV)
    dlse = randn(*lse.shape, gen=gen).to(DEV)
    loss = (out.float() * do.float()).sum() + lse_weight * (lse * dlse).sum()
    got = torch.autograd.grad(loss, (q, k, v))
    (out64, lse64), leaves = reference(q, k, v, causal, scale)
    loss64 = ((out64 * do.cpu().double()).sum()
              + lse_weight * (lse64 * dlse.cpu().double()).sum())
    want = torch.autograd.grad(loss64, leaves)
    return got, want


def assert_close(got, want, dtype):
    """Each gradient's largest error, over the largest magnitude of all three: with one key,
    dQ is exactly 0 (the weight is 1 whatever the score), so its own scale is none."""
    scale = max(float(w.abs().max()) for w in want if w.numel())
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        assert g.shape == w.shape, name
        err = float((g.cpu().double() - w).abs().max()) / scale if w.numel() else 0.0
        assert err < RTOL[dtype], f"{name}: error {err:.2e} of the gradients' scale"


@pytest.mark.parametrize(("L", "S"), [(1, 1), (17, 17), (40, 23), (23, 40), (1, 33), (33, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_any_lengths(L, S, causal, gen):
    assert_close(*gradients(1, 2, 2, L, S, 16, causal, torch.float32, gen), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_every_dtype(dtype, causal, gen):
    assert_close(*gradients(2, 2, 2, 29, 37, 32, causal, dtype, gen), dtype)


@pytest.mark.parametrize(("H", "H_kv"), [(4, 2), (4, 1), (6, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_heads_sum_their_group(H, H_kv, causal, gen):
    """dK and dV of a key head add up the shares of every query head of its group."""
    assert_close(*gradients(2, H, H_kv, 21, 30, 16, causal, torch.float32, gen), torch.float32)


def test_grouped_query_forward_matches_sdpa(gen):
    q = randn(2, 6, 19, 32, gen=gen, dtype=torch.float16).to(DEV)
    k, v = (randn(2, 2, 27, 32, gen=gen, dtype=torch.float16).to(DEV) for _ in range(2))
    for causal in (False, True):
        out = K.flash_attention(q, k, v, causal=causal)
        (want, _), _ = reference(q, k, v, causal)
        assert relative_error(out.cpu(), want) < 2e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_grouped_query_tma_path(dtype, gen):
    """Tensor descriptors address key head ``h // group`` as the pointer path does."""
    q = randn(2, 4, 37, 32, gen=gen, dtype=dtype).to(DEV)
    k, v = (randn(2, 2, 29, 32, gen=gen, dtype=dtype).to(DEV) for _ in range(2))
    cfg = flash.FlashConfig(16, 16, 4, 1, tma=True) if teachkit.device.INTERPRETED else \
        flash.FlashConfig(128, 128, 8, 3, tma=True)
    out = flash.flash_attention(q, k, v, causal=True, config=cfg)
    (want, _), _ = reference(q, k, v, True)
    assert relative_error(out.cpu(), want) < 4 * RTOL[dtype]


def test_gradient_of_the_lse(gen):
    """A loss that uses the lse (as merging partial results does) adds dlse * P to dS."""
    assert_close(*gradients(1, 2, 1, 25, 31, 16, True, torch.float32, gen, lse_weight=1.0),
                 torch.float32)


def test_negative_and_zero_scale(gen):
    assert_close(*gradients(1, 2, 2, 20, 20, 16, False, torch.float32, gen, scale=-0.4),
                 torch.float32)
    assert_close(*gradients(1, 2, 2, 20, 20, 16, True, torch.float32, gen, scale=0.0),
                 torch.float32)


def test_strided_inputs(gen):
    assert_close(*gradients(2, 2, 1, 19, 26, 16, True, torch.float16, gen, layout="bshd"),
                 torch.float16)


@settings(max_examples=8, deadline=None)
@given(L=st.integers(1, 40), S=st.integers(1, 40), heads=st.sampled_from([(1, 1), (2, 1), (4, 2)]),
       causal=st.booleans(), seed=st.integers(0, 2**31))
def test_property_any_shape_matches_float64(L, S, heads, causal, seed):
    gen = torch.Generator().manual_seed(seed)
    assert_close(*gradients(1, *heads, L, S, 16, causal, torch.float32, gen), torch.float32)


def test_no_grad_no_graph(gen):
    """Without grad the forward kernel runs alone; with grad the output has a backward."""
    q, k, v = (randn(1, 1, 8, 16, gen=gen).to(DEV) for _ in range(3))
    assert K.flash_attention(q, k, v).grad_fn is None
    q.requires_grad_()
    with torch.no_grad():
        assert K.flash_attention(q, k, v).grad_fn is None
    out = K.flash_attention(q, k, v)
    assert out.requires_grad and "FlashAttentionFunction" in type(out.grad_fn).__name__


def test_only_the_lse_used(gen):
    q, k, v = (randn(1, 2, 9, 16, gen=gen).to(DEV).requires_grad_() for _ in range(3))
    _, lse = K.flash_attention(q, k, v, return_lse=True)
    lse.sum().backward()
    (_, lse64), leaves = reference(q, k, v, False)
    lse64.sum().backward()
    for got, want in zip((q, k), leaves[:2], strict=True):
        assert relative_error(got.grad.cpu(), want.grad) < 2e-5
    assert torch.equal(v.grad, torch.zeros_like(v))  # the lse does not depend on v


def test_empty_problems_give_zero_gradients(gen):
    q = randn(1, 2, 5, 16, gen=gen).to(DEV).requires_grad_()
    k, v = (randn(1, 2, 0, 16, gen=gen).to(DEV).requires_grad_() for _ in range(2))
    out = K.flash_attention(q, k, v)
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q)) and k.grad.shape == k.shape
    q0 = randn(1, 2, 0, 16, gen=gen).to(DEV).requires_grad_()
    k0, v0 = (randn(1, 2, 4, 16, gen=gen).to(DEV).requires_grad_() for _ in range(2))
    K.flash_attention(q0, k0, v0).sum().backward()
    assert torch.equal(k0.grad, torch.zeros_like(k0))


def test_gradients_are_deterministic(gen):
    """Each gradient row has one writer (no atomics): two runs agree bit for bit."""
    q, k, v = (randn(1, 2, 37, 16, gen=gen, dtype=torch.float16).to(DEV).requires_grad_()
               for _ in range(3))
    do = randn(1, 2, 37, 16, gen=gen, dtype=torch.float16).to(DEV)
    first = torch.autograd.grad(K.flash_attention(q, k, v, causal=True), (q, k, v), do)
    second = torch.autograd.grad(K.flash_attention(q, k, v, causal=True), (q, k, v), do)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_backward_configs_hold_their_divisibility():
    """The dK/dV kernel steps queries inside a key block, the dQ kernel keys inside a query
    block: each block must be a multiple of the step, for every GPU class and head dim."""
    for cap in ((7, 5), (8, 0), (8, 9), (9, 0), None):
        for d in flash.HEAD_DIMS:
            for dtype in (torch.float16, torch.float32):
                cfg = flash_backward.backward_config(d, dtype, cap)
                assert cfg.kv_block_n % cfg.kv_block_m == 0
                assert cfg.q_block_m % cfg.q_block_n == 0


def test_simple_kernel_refuses_grouped_heads(gen):
    from teachkit.kernels.flash_simple import flash_attention_simple

    q = randn(1, 2, 8, 16, gen=gen).to(DEV)
    k, v = (randn(1, 1, 8, 16, gen=gen).to(DEV) for _ in range(2))
    with pytest.raises(ValueError, match="grouped-query"):
        flash_attention_simple(q, k, v)


def test_a_query_with_only_minus_inf_scores_gives_zero_and_no_gradient(gen):
    """The one rule of every attention here: no key seen, output 0 and lse -inf, and no NaN in
    dq or dv (dK takes 0 * -inf from that q entry, NaN, as SDPA's autograd gives too)."""
    q = randn(1, 1, 20, 16, gen=gen).to(DEV)
    q[0, 0, 3] = float("-inf")   # with positive keys, every score of row 3 is -inf
    q[0, 0, 3, 1:] = 0.0
    k = randn(1, 1, 20, 16, gen=gen).to(DEV).abs() + 0.1
    v = randn(1, 1, 20, 16, gen=gen).to(DEV)
    for causal in (False, True):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out, lse = K.flash_attention(qq, kk, vv, causal=causal, return_lse=True)
        assert torch.equal(out[0, 0, 3], torch.zeros(16, device=DEV))
        assert lse[0, 0, 3] == float("-inf")
        assert torch.isfinite(out).all() and torch.isfinite(lse[0, 0, :3]).all()
        out.sum().backward()
        assert torch.isfinite(qq.grad).all() and torch.isfinite(vv.grad).all()
        assert torch.equal(qq.grad[0, 0, 3], torch.zeros(16, device=DEV))


def test_scale_and_flags_are_checked(gen):
    q = randn(1, 1, 4, 16, gen=gen).to(DEV)
    with pytest.raises(ValueError, match="finite"):
        K.flash_attention(q, q, q, scale=float("nan"))
    with pytest.raises(TypeError, match="causal"):
        K.flash_attention(q, q, q, causal="no")


def test_a_second_derivative_is_refused_by_name(gen):
    """The backward kernels have no backward: asking for a gradient of a gradient says so
    instead of failing later with a tensor that "does not require grad"."""
    q, k, v = (randn(1, 2, 9, 16, gen=gen).to(DEV).requires_grad_() for _ in range(3))
    loss = (K.flash_attention(q, k, v) ** 2).sum()  # its gradient depends on the output
    (dq,) = torch.autograd.grad(loss, q, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dq.sum().backward()


ONE_LOOP = flash_backward.BackwardConfig(16, 32, 4, 1, 32, 16, 4, 1, atomic_dq=True)


@pytest.mark.parametrize(("H", "H_kv", "L", "S"), [(2, 2, 29, 37), (4, 2, 40, 23)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_one_loop_with_atomic_dq_matches_float64(H, H_kv, L, S, causal, dtype, gen):
    """FlashAttention-2's single loop: dQ summed by atomic adds inside the dK/dV kernel."""
    q = randn(2, H, L, 32, gen=gen, dtype=dtype).to(DEV).requires_grad_()
    k, v = (randn(2, H_kv, S, 32, gen=gen, dtype=dtype).to(DEV).requires_grad_()
            for _ in range(2))
    do = randn(2, H, L, 32, gen=gen, dtype=dtype).to(DEV)
    got = torch.autograd.grad(K.flash_attention(q, k, v, causal=causal,
                                                backward_config=ONE_LOOP), (q, k, v), do)
    (out64, _), leaves = reference(q, k, v, causal)
    want = torch.autograd.grad((out64 * do.cpu().double()).sum(), leaves)
    assert got[0].dtype == dtype
    assert_close(got, want, dtype)


def test_backward_config_is_checked(gen):
    q = randn(1, 1, 4, 16, gen=gen).to(DEV)
    with pytest.raises(TypeError, match="backward_config must be a BackwardConfig"):
        K.flash_attention(q, q, q, backward_config=(16, 16, 16, 16, 4, 1))
    with pytest.raises(ValueError, match="kv_block_n a multiple of kv_block_m"):
        K.flash_attention(q, q, q, backward_config=flash_backward.BackwardConfig(
            32, 16, 4, 1, 16, 16, 4, 1))
    with pytest.raises(ValueError, match="q_warps must be 1, 2, 4, 8 or 16, got 3"):
        K.flash_attention(q, q, q, backward_config=flash_backward.BackwardConfig(
            16, 16, 4, 1, 16, 16, 3, 1))
    with pytest.raises(ValueError, match="kv_stages must be 1 to 8, got 0"):
        K.flash_attention(q, q, q, backward_config=flash_backward.BackwardConfig(
            16, 16, 4, 0, 16, 16, 4, 1))
    with pytest.raises(TypeError, match="kv_warp_specialize must be True or False"):
        K.flash_attention(q, q, q, backward_config=flash_backward.BackwardConfig(
            16, 16, 4, 1, 16, 16, 4, 1, kv_warp_specialize=1))
    with pytest.raises(TypeError, match="kv_hopper must be True or False"):
        K.flash_attention(q, q, q, backward_config=flash_backward.BackwardConfig(
            16, 16, 4, 1, 16, 16, 4, 1, kv_hopper="yes"))
    with pytest.raises(TypeError, match="kv_hopper_dq must be True or False"):
        K.flash_attention(q, q, q, backward_config=flash_backward.BackwardConfig(
            16, 16, 4, 1, 16, 16, 4, 1, kv_hopper_dq=None))


def test_the_warp_specialised_dkdv_is_chosen_where_it_can_run():
    """sm_90, half precision, D = 128, no causal mask: the table asks for it; the kernel runs
    where the tensors suit a descriptor, compiled (never under the interpreter)."""
    from teachkit.kernels import flash_backward_ws as ws

    table = flash_backward.backward_config(128, torch.float16, (9, 0))
    assert table.kv_warp_specialize
    assert not flash_backward.backward_config(128, torch.float16, (9, 0), causal=True)\
        .kv_warp_specialize
    assert not flash_backward.backward_config(128, torch.float16, (8, 0)).kv_warp_specialize
    assert not flash_backward.backward_config(64, torch.float16, (9, 0)).kv_warp_specialize
    q = torch.zeros(1, 2, 8, 128, dtype=torch.float16, device=DEV)
    on_hopper = teachkit.ON_GPU and torch.cuda.get_device_capability(q.device)[0] == 9
    assert ws.warp_specialized_dkdv(table, q, q) == on_hopper
    assert not ws.warp_specialized_dkdv(table._replace(atomic_dq=True), q, q)
    assert not ws.warp_specialized_dkdv(table, q.float(), q.float())
    odd_rows = torch.zeros(1, 2, 8, 136, dtype=torch.float16, device=DEV)[..., 4:132]
    assert not ws.warp_specialized_dkdv(table, q, odd_rows)


@pytest.mark.skipif(not teachkit.ON_GPU or torch.cuda.get_device_capability()[0] != 9,
                    reason="the warp-specialised dK/dV kernel runs on sm_90 GPUs")
@pytest.mark.parametrize(("H", "H_kv", "L", "S"), [(4, 4, 512, 512), (8, 2, 300, 700),
                                                   (4, 1, 1000, 130)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_warp_specialised_dkdv_matches_float64(H, H_kv, L, S, causal, dtype, gen):
    """The warp-specialised dK/dV kernel, causal too (the table leaves it off there, a config may
    ask for it), at lengths no tile divides and with grouped heads, against float64."""
    from teachkit.kernels import flash_backward_ws as ws

    # the Triton kernel, not the Gluon one the table runs first where the tiles divide
    config = flash_backward.backward_config(128, dtype, (9, 0))._replace(kv_hopper=False,
                                                                           kv_hopper_dq=False)
    q = randn(1, H, L, 128, gen=gen, dtype=dtype).to(DEV).requires_grad_()
    k, v = (randn(1, H_kv, S, 128, gen=gen, dtype=dtype).to(DEV).requires_grad_()
            for _ in range(2))
    do = randn(1, H, L, 128, gen=gen, dtype=dtype).to(DEV)
    assert ws.warp_specialized_dkdv(config, q, k, v, do)
    run = ws.flash_bwd_dkdv_ws_kernel.run
    launches = run.hits + run.misses
    got = torch.autograd.grad(K.flash_attention(q, k, v, causal=causal, backward_config=config),
                              (q, k, v), do)
    assert run.hits + run.misses > launches
    (out64, _), leaves = reference(q, k, v, causal)
    want = torch.autograd.grad((out64 * do.cpu().double()).sum(), leaves)
    assert_close(got, want, dtype)
