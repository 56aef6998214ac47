"""The torch reference of attention's backward: the formulas and the two blocked loops against
float64 autograd, on any lengths, blocks that divide nothing, causal and not."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from teachkit.attention import blockwise_attention
from teachkit.attention_backward import (
    attention_gradients,
    blockwise_attention_backward,
    softmax_delta,
)


def autograd_reference(q, k, v, do, causal, scale=None):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal,
                                                           scale=scale)
    return torch.autograd.grad(out, leaves, do.double())


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 30), S=st.integers(1, 30), block_m=st.integers(1, 12),
       block_n=st.integers(1, 12), causal=st.booleans(), seed=st.integers(0, 2**31))
def test_blocked_loops_match_autograd(L, S, block_m, block_n, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, do = (torch.randn(2, L, 8, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(2, S, 8, generator=g, dtype=torch.float64) for _ in range(2))
    want = autograd_reference(q, k, v, do, causal)
    out, lse = blockwise_attention(q, k, v, causal=causal)
    for got in (attention_gradients(q, k, v, do, causal),
                blockwise_attention_backward(q, k, v, out, lse, do, causal,
                                             block_m=block_m, block_n=block_n)):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_low_precision_inputs_give_float32_gradients():
    q, k, v, do = (torch.randn(1, 2, 9, 16).half() for _ in range(4))
    out, lse = blockwise_attention(q, k, v)
    grads = blockwise_attention_backward(q, k, v, out, lse, do, block_m=4, block_n=4)
    want = autograd_reference(q, k, v, do, False)
    for a, b in zip(grads, want, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b, rtol=2e-2, atol=2e-3)


def test_scale_and_delta_identity():
    g = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(3, 7, 4, generator=g, dtype=torch.float64) for _ in range(4))
    for a, b in zip(attention_gradients(q, k, v, do, scale=-0.7),
                    autograd_reference(q, k, v, do, False, scale=-0.7), strict=True):
        torch.testing.assert_close(a, b)
    p = torch.softmax(q @ k.transpose(-2, -1) / 2, -1)
    out, dp = p @ v, do @ v.transpose(-2, -1)
    torch.testing.assert_close(softmax_delta(out, do), (p * dp).sum(-1))  # rowsum(P o dP)


def test_bad_blocks_say_what_to_pass():
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="block_m"):
        blockwise_attention_backward(q, q, q, q, q[..., 0], q, block_m=0)
