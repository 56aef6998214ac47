"""The attention references against scaled_dot_product_attention and a float64 reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from inputs import ALL_FLOATS, RTOL, randn

from teachkit import attention as at
from teachkit.compare import relative_error


def qkv(gen, *batch, L=37, S=53, D=16, Dv=None, dtype=torch.float32):
    q = randn(*batch, L, D, gen=gen, dtype=dtype)
    k = randn(*batch, S, D, gen=gen, dtype=dtype)
    v = randn(*batch, S, Dv or D, gen=gen, dtype=dtype)
    return q, k, v


def sdpa64(q, k, v, causal=False, scale=None):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal,
                                          scale=scale)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ALL_FLOATS)
@pytest.mark.parametrize("L,S", [(37, 53), (53, 37), (1, 70), (64, 64), (65, 129)])
def test_blockwise_and_naive_match_sdpa(causal, dtype, L, S, gen):
    q, k, v = qkv(gen, 2, 3, L=L, S=S, dtype=dtype)
    ref = sdpa64(q, k, v, causal)
    naive = at.naive_attention(q, k, v, causal=causal)
    out, lse = at.blockwise_attention(q, k, v, causal=causal, block_size=16)
    assert out.dtype == dtype and out.shape == ref.shape
    assert lse.shape == (2, 3, L) and lse.dtype == (torch.float64 if dtype == torch.float64
                                                    else torch.float32)
    assert relative_error(naive, ref) < RTOL[dtype]
    assert relative_error(out, ref) < RTOL[dtype]
    scores = at.attention_scores(q.double(), k.double(), causal=causal)
    assert relative_error(lse, torch.logsumexp(scores, -1)) < max(RTOL[dtype], 1e-6)


def test_scale_head_dims_and_strides(gen):
    q, k, v = qkv(gen, 4, L=19, S=23, D=8, Dv=5)
    for scale in (None, 0.3):
        out, _ = at.blockwise_attention(q, k, v, scale=scale, block_size=4)
        assert relative_error(out, sdpa64(q, k, v, scale=scale)) < 1e-6
    qt = randn(4, 8, 19, gen=gen).transpose(-2, -1)  # non-contiguous q
    assert relative_error(at.naive_attention(qt, k, v), sdpa64(qt, k, v)) < 1e-6
    q2, k2, v2 = qkv(gen, L=9, S=11)  # no batch axes
    assert relative_error(at.blockwise_attention(q2, k2, v2)[0], sdpa64(q2, k2, v2)) < 1e-6


def test_causal_skips_blocks_above_the_diagonal(gen, monkeypatch):
    q, k, v = qkv(gen, 1, L=20, S=100)
    calls = []
    original = at.attention_block_update

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(at, "attention_block_update", counting)
    at.blockwise_attention(q, k, v, causal=True, block_size=16)
    assert len(calls) == 2  # keys 0..31 hold every key a query 0..19 can see


def test_nan_and_inf_follow_sdpa(gen):
    q, k, v = qkv(gen, 1, L=5, S=9)
    q[0, 2, 0] = float("nan")
    k[0, 4, 1] = float("inf")
    ref = F.scaled_dot_product_attention(q, k, v)
    for out in (at.naive_attention(q, k, v), at.blockwise_attention(q, k, v, block_size=4)[0]):
        assert torch.equal(torch.isnan(out), torch.isnan(ref))


def test_empty_inputs(gen):
    q, k, v = qkv(gen, 2, L=4, S=0)
    out, lse = at.blockwise_attention(q, k, v)
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))  # zeros
    assert torch.all(lse == float("-inf"))
    q, k, v = qkv(gen, 2, L=0, S=5)
    assert at.blockwise_attention(q, k, v)[0].shape == (2, 0, 16)
    assert at.naive_attention(q, k, v).shape == (2, 0, 16)


def test_merge_partials_with_empty_and_far_apart_parts(gen):
    q, k, v = qkv(gen, 2, L=6, S=20)
    full = at.blockwise_attention(q, k, v)
    empty = at.blockwise_attention(q, k[:, :0], v[:, :0])
    out, lse = at.merge_partials(*full, *empty)
    assert relative_error(out, full[0]) < 1e-7 and torch.equal(lse, full[1])
    out, lse = at.merge_partials(*empty, *empty)
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))
    k2 = k.clone()
    k2[:, 10:] *= 200  # one part's lse hundreds above the other's
    a = at.blockwise_attention(q, k2[:, :10], v[:, :10])
    b = at.blockwise_attention(q, k2[:, 10:], v[:, 10:])
    out, _ = at.merge_partials(*a, *b)
    # scores in the hundreds: float32 holds them to |s| * 2^-24, and the weights exp(s - m)
    # inherit that relative error (2.5e-5 at worst over 3000 seeds, where a fixed 1e-5 failed
    # 15 times); the bound allows a few such roundings
    s_max = (q @ k2.transpose(-1, -2)).abs().max().item() * q.shape[-1] ** -0.5
    assert relative_error(out, sdpa64(q, k2, v)) < 1e-5 + 4 * s_max * 2.0**-24
    # lse near 1000: float32 rounds each lse to about 6e-5; the merge adds no more than that.
    big = [(o, lse + 1000.0) for o, lse in (a, b)]
    out_big, _ = at.merge_partials(*big[0], *big[1])
    assert relative_error(out_big, sdpa64(q, k2, v)) < 2e-4


def test_bad_inputs_say_what_to_pass(gen):
    q, k, v = qkv(gen, 2, L=4, S=6)
    with pytest.raises(ValueError, match="head dim"):
        at.naive_attention(q, k[..., :8], v)
    with pytest.raises(ValueError, match="same length"):
        at.blockwise_attention(q, k, v[:, :5])
    with pytest.raises(ValueError, match="batch dimensions"):
        at.blockwise_attention(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        at.naive_attention(q[0, 0], k, v)
    with pytest.raises(TypeError, match="one dtype"):
        at.naive_attention(q, k.double(), v)
    with pytest.raises(TypeError, match="floating-point"):
        at.naive_attention(q.long(), k.long(), v.long())
    with pytest.raises(ValueError, match="positive"):
        at.blockwise_attention(q, k, v, block_size=0)
    with pytest.raises(TypeError, match="scale"):
        at.blockwise_attention(q, k, v, scale="0.5")
    out, lse = at.blockwise_attention(q, k, v)
    with pytest.raises(ValueError, match="one shape"):
        at.merge_partials(out, lse, out[:1], lse[:1])
    with pytest.raises(ValueError, match="without its last axis"):
        at.merge_partials(out, lse, out, lse[..., :2])
