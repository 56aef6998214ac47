"""The FlashAttention forward kernel against a float64 reference (interpreter on CPU, GPU if any).

Shapes stay tiny (the interpreter runs every program in Python): lengths that are not multiples
of the block, L != S, L = 1 and S = 1, causal and not, every head dim, every dtype.
"""

from __future__ import annotations

import math

import pytest
import torch
from inputs import randn

import teachkit
from teachkit.attention import attention_scores
from teachkit.compare import relative_error

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels import flash  # noqa: E402

DEV = teachkit.DEVICE
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
SDPA = torch.nn.functional.scaled_dot_product_attention


def qkv(B: int, H: int, L: int, S: int, D: int, gen: torch.Generator,
        dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, ...]:
    return tuple(randn(B, H, n, D, gen=gen, dtype=dtype).to(DEV) for n in (L, S, S))


def reference(q, k, v, causal=False, scale=None):
    """Output and lse in float64 on the CPU."""
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    out = SDPA(q, k, v, is_causal=causal, scale=scale)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    return out, torch.logsumexp(s, dim=-1)


def check(q, k, v, causal=False, scale=None):
    out, lse = K.flash_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    assert out.dtype == q.dtype and out.shape == q.shape and out.device == q.device
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:-1]
    ref_out, ref_lse = reference(q, k, v, causal, scale)
    assert relative_error(out, ref_out) < RTOL[q.dtype]
    assert relative_error(lse, ref_lse) < 1e-5
    return out, lse


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,S", [(1, 1), (1, 37), (37, 1), (33, 47), (47, 33), (64, 64), (80, 17)])
def test_any_lengths(L, S, causal, gen):
    check(*qkv(1, 2, L, S, 16, gen), causal=causal)


@pytest.mark.parametrize("dtype", list(RTOL))
@pytest.mark.parametrize("causal", [False, True])
def test_every_dtype(dtype, causal, gen):
    check(*qkv(2, 1, 29, 41, 32, gen, dtype), causal=causal)


@pytest.mark.parametrize("D", flash.HEAD_DIMS)
def test_every_head_dim(D, gen):
    check(*qkv(1, 1, 9, 20, D, gen), causal=D % 32 == 0)


def test_scale_and_plain_output(gen):
    q, k, v = qkv(1, 2, 21, 35, 16, gen, torch.float32)
    check(q, k, v, scale=0.3)
    check(q, k, v, causal=True, scale=2)
    out = K.flash_attention(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape


def test_large_scores_stay_finite(gen):
    q, k, v = qkv(1, 1, 19, 50, 16, gen, torch.float32)
    q, k = q * 30, k * 30  # scores in the thousands: exp would overflow without the max
    out, lse = K.flash_attention(q, k, v, return_lse=True)
    ref_out, ref_lse = reference(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    # Scores ~1e3 rounded to float32 carry errors ~1e-4 into the weights: the inputs' condition.
    assert relative_error(out, ref_out) < 1e-3
    assert relative_error(lse, ref_lse) < 1e-5


def test_non_contiguous_inputs(gen):
    B, L, S, H, D = 2, 23, 31, 2, 32
    q = randn(B, L, H, D, gen=gen, dtype=torch.float16).to(DEV).transpose(1, 2)
    k = randn(B, S, H, D, gen=gen, dtype=torch.float16).to(DEV).transpose(1, 2)
    wide = randn(B, H, S, 2 * D, gen=gen, dtype=torch.float16).to(DEV)
    v = wide[..., ::2]  # head dim with stride 2
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    for causal in (False, True):
        check(q, k, v, causal=causal)


def test_causal_rows_only_see_the_past(gen):
    q, k, v = qkv(1, 1, 40, 40, 16, gen, torch.float32)
    out = K.flash_attention(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 20:, :] = 100.0  # change only the future of the first 20 queries
    v2[..., 20:, :] = -7.0
    out2 = K.flash_attention(q, k2, v2, causal=True)
    assert torch.equal(out[..., :20, :], out2[..., :20, :])


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")
@pytest.mark.parametrize("causal", [False, True])
def test_nan_propagates_like_sdpa(causal, gen):
    q, k, v = qkv(1, 1, 30, 30, 16, gen, torch.float32)
    q[..., 3, 5] = float("nan")   # one query row
    k[..., 17, 0] = float("nan")  # one key: every row that sees it
    out = K.flash_attention(q, k, v, causal=causal)
    ref = SDPA(q.cpu().double(), k.cpu().double(), v.cpu().double(), is_causal=causal)
    assert torch.equal(torch.isnan(out.cpu()), torch.isnan(ref))
    assert torch.isnan(ref[..., 3, :]).all()
    assert not torch.isnan(ref[..., 4, :]).any() if causal else torch.isnan(ref).all()
    q, k, v = qkv(1, 1, 30, 30, 16, gen, torch.float32)
    v[..., 4, 7] = float("nan")   # one value: one output column of every row
    out = K.flash_attention(q, k, v)
    assert torch.equal(torch.isnan(out.cpu()), torch.isnan(SDPA(q.cpu(), k.cpu(), v.cpu())))


def test_no_keys_gives_zeros_and_no_queries_gives_empty(gen):
    q, k, v = qkv(1, 2, 5, 0, 16, gen)
    out, lse = K.flash_attention(q, k, v, return_lse=True)
    assert torch.equal(out.cpu(), SDPA(q.cpu().float(), k.cpu().float(), v.cpu().float()).half())
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))
    q, k, v = qkv(1, 2, 0, 7, 16, gen)
    out, lse = K.flash_attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == (1, 2, 0, 16) and lse.shape == (1, 2, 0)


def test_bad_inputs_say_what_to_pass(gen):
    q, k, v = qkv(1, 2, 8, 8, 16, gen)
    fa = K.flash_attention
    with pytest.raises(ValueError, match="4 dimensions"):
        fa(q[0], k[0], v[0])
    with pytest.raises(TypeError, match="torch.Tensor"):
        fa(q.tolist(), k, v)
    with pytest.raises(TypeError, match="floating-point"):
        fa(q.int(), k.int(), v.int())
    with pytest.raises(TypeError, match="float64"):
        fa(q.double(), k.double(), v.double())
    with pytest.raises(TypeError, match="one dtype"):
        fa(q, k.float(), v)
    with pytest.raises(ValueError, match="batch dimensions"):
        fa(q, torch.cat([k, k]), torch.cat([v, v]))
    with pytest.raises(ValueError, match="divides it"):
        fa(torch.cat([q, q[:, :1]], 1), k, v)  # 3 query heads, 2 key heads
    with pytest.raises(ValueError, match="divides it"):
        fa(q, k[:, :1], v)
    with pytest.raises(ValueError, match="same head dim"):
        fa(q, k[..., :8], v)
    with pytest.raises(ValueError, match="head dim of q and k"):
        fa(q, k, v[..., :8])
    with pytest.raises(ValueError, match="same length"):
        fa(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match=r"pass one of \(16, 32"):
        q3, k3, v3 = qkv(1, 1, 4, 4, 24, gen)
        fa(q3, k3, v3)
    with pytest.raises(TypeError, match="scale"):
        fa(q, k, v, scale="0.5")
    if teachkit.ON_GPU:
        with pytest.raises(ValueError, match="cuda"):
            fa(q.cpu(), k.cpu(), v.cpu())


def test_configs_tile_the_diagonal_and_are_all_listed():
    from teachkit.gpus import GPU_CLASSES
    from teachkit.kernels.compile_check import flash_launch_configs

    listed = {(c.constexprs["HEAD_DIM"], c.constexprs["BLOCK_M"], c.constexprs["BLOCK_N"],
               c.num_warps, c.num_stages, c.constexprs["USE_TMA"], c.constexprs["CAUSAL"], cap)
              for c in flash_launch_configs() for cap in c.capabilities}
    for cls, capability in GPU_CLASSES.items():
        for D in flash.HEAD_DIMS:
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                for causal in (False, True):
                    cfg = flash.flash_config(D, dtype, capability, causal)
                    assert cfg.block_m % cfg.block_n == 0  # the causal split needs it
                    assert cfg.num_stages in (2, 3, 4) and cfg.num_warps in (4, 8)
                    assert (D, *cfg, causal, cls) in listed  # compile-checked on its class
    cfg = flash.flash_config(64, torch.float16)  # the interpreter's
    assert cfg.block_m % cfg.block_n == 0
    assert flash.flash_config(16, torch.float16, (9, 0)) == flash.flash_config(64, torch.float16,
                                                                              (9, 0))
    with pytest.raises(ValueError, match="head dim 48"):
        flash.flash_config(48, torch.float16, (8, 0))


def test_tuning_lives_beside_the_kernel():
    from teachkit.kernels import flash_tuning

    assert flash_tuning.TUNED is flash.TUNED and flash_tuning.sweep is flash.sweep
    assert flash_tuning.candidate_configs is flash.candidate_configs
    assert flash_tuning.tuned_config is flash.tuned_config


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_simple_kernel_matches_float64(gen, dtype, causal):
    from teachkit.kernels.flash_simple import flash_attention_simple

    q, k, v = (randn(2, 3, n, 32, gen=gen, dtype=dtype).to(teachkit.DEVICE)
               for n in (37, 53, 53))
    out, lse = flash_attention_simple(q, k, v, causal=causal)
    s = attention_scores(q.double(), k.double(), causal)
    ref = torch.softmax(s, -1) @ v.double()
    assert relative_error(out, ref) < 4 * RTOL[dtype] + 1e-5
    assert relative_error(lse, torch.logsumexp(s, -1)) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("L", "S", "causal"), [(37, 53, False), (53, 37, True), (1, 29, False)])
def test_tma_path_matches_float64(gen, dtype, L, S, causal):
    """Keys and values through tensor descriptors (Hopper's copy engine; the interpreter emulates
    it): rows past S and past L come back as zeros and are masked like the pointer path's."""
    q = randn(2, 3, L, 32, gen=gen, dtype=dtype).to(DEV)
    k, v = (randn(2, 3, S, 32, gen=gen, dtype=dtype).to(DEV) for _ in range(2))
    cfg = flash.FlashConfig(16, 16, 4, 1, tma=True) if teachkit.device.INTERPRETED else \
        flash.FlashConfig(128, 128, 8, 3, tma=True)
    out, lse = flash.flash_attention(q, k, v, causal=causal, return_lse=True, config=cfg)
    s = attention_scores(q.double(), k.double(), causal)
    assert relative_error(out, torch.softmax(s, -1) @ v.double()) < 4 * RTOL[dtype]
    assert relative_error(lse, torch.logsumexp(s, -1)) < 1e-4
