"""The plain split-KV decoding kernel against the float64 reference of teachkit.attention
(interpreter on CPU, GPU if any): tiny shapes, cache lengths no split or key block divides,
splits past the last key, large scores, strided caches, and the errors that name the argument."""

from __future__ import annotations

import math

import pytest
import torch
from inputs import randn

import teachkit
from teachkit.attention import naive_attention
from teachkit.compare import relative_error

pytest.importorskip("teachkit.kernels")
from teachkit.kernels import decode_simple as module  # noqa: E402
from teachkit.kernels.decode_simple import decode_attention_simple  # noqa: E402

DEV = teachkit.DEVICE
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def reference(q, k, v, scale=None):
    """Float64 ``(out, lse)`` of one query per row against every key."""
    q, k, v = q.double(), k.double(), v.double()
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    lse = torch.logsumexp(q @ k.transpose(-2, -1) * scale, dim=-1)
    return naive_attention(q, k, v, scale=scale), lse


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("S", "num_splits"), [(1, 1), (37, 1), (37, 3), (50, 4), (5, 4),
                                               (17, 32)])
def test_matches_the_float64_reference(dtype, S, num_splits):
    gen = torch.Generator().manual_seed(S * 131 + num_splits)
    q = randn(2, 3, 1, 16, gen=gen, dtype=dtype).to(DEV)
    k, v = (randn(2, 3, S, 16, gen=gen, dtype=dtype).to(DEV) for _ in range(2))
    out, lse = decode_attention_simple(q, k, v, num_splits=num_splits)
    ref_out, ref_lse = reference(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (2, 3, 1) and lse.dtype == torch.float32
    assert relative_error(out, ref_out) <= RTOL[dtype]
    assert relative_error(lse, ref_lse) <= 1e-5


def test_large_scores_and_a_given_scale_do_not_overflow():
    gen = torch.Generator().manual_seed(1)
    q = randn(1, 2, 1, 32, gen=gen).to(DEV)
    k, v = (randn(1, 2, 41, 32, gen=gen).to(DEV) for _ in range(2))
    out, lse = decode_attention_simple(q, k, v, num_splits=3, scale=40.0)  # scores of order 1000
    ref_out, ref_lse = reference(q, k, v, scale=40.0)
    assert torch.isfinite(out).all()
    assert relative_error(out, ref_out) <= 1e-5
    assert relative_error(lse, ref_lse) <= 1e-5


def test_strided_cache():
    gen = torch.Generator().manual_seed(2)
    q = randn(2, 4, 1, 16, gen=gen).to(DEV)
    k, v = (randn(2, 29, 4, 16, gen=gen).to(DEV).transpose(1, 2) for _ in range(2))  # (B, H, S, D)
    assert not k.is_contiguous()
    out, _ = decode_attention_simple(q, k, v, num_splits=2)
    assert relative_error(out, reference(q, k, v)[0]) <= 1e-5


def test_agrees_with_the_full_kernel():
    from teachkit.kernels.decode import decode_attention

    gen = torch.Generator().manual_seed(3)
    q = randn(2, 2, 1, 64, gen=gen, dtype=torch.float16).to(DEV)
    k, v = (randn(2, 2, 70, 64, gen=gen, dtype=torch.float16).to(DEV) for _ in range(2))
    out, lse = decode_attention_simple(q, k, v, num_splits=3)
    full_out, full_lse = decode_attention(q, k, v, num_splits=3, return_lse=True)
    assert relative_error(out, full_out) <= 2e-3
    assert relative_error(lse, full_lse) <= 1e-5


@pytest.mark.parametrize(("change", "error", "message"), [
    (lambda q, k, v: (q.expand(2, 3, 2, 16), k, v), ValueError, "one query per sequence"),
    (lambda q, k, v: (q[0], k[0], v[0]), ValueError, "q must be 4-D"),
    (lambda q, k, v: (q.double(), k.double(), v.double()), TypeError, "float16, bfloat16"),
    (lambda q, k, v: (q, k.half(), v), TypeError, "share one dtype"),
    (lambda q, k, v: (q[..., :12], k[..., :12], v[..., :12]), ValueError, "head dim"),
    (lambda q, k, v: (q, k[:, :, :0], v[:, :, :0]), ValueError, "at least one key"),
    (lambda q, k, v: (q, k, v[:, :, :5]), ValueError, "k and v must have the same length"),
])
def test_bad_inputs_name_the_argument(change, error, message):
    q = torch.randn(2, 3, 1, 16, device=DEV)
    k, v = (torch.randn(2, 3, 9, 16, device=DEV) for _ in range(2))
    with pytest.raises(error, match=message):
        decode_attention_simple(*change(q, k, v))


@pytest.mark.parametrize(("num_splits", "error"), [(0, ValueError), (2.0, TypeError),
                                                    (module.MAX_SPLITS + 1, ValueError)])
def test_bad_num_splits(num_splits, error):
    q = torch.randn(1, 1, 1, 16, device=DEV)
    k = v = torch.randn(1, 1, 9, 16, device=DEV)
    with pytest.raises(error, match="num_splits"):
        decode_attention_simple(q, k, v, num_splits=num_splits)


def test_an_empty_batch():
    q = torch.randn(0, 2, 1, 16, device=DEV)
    k = v = torch.randn(0, 2, 9, 16, device=DEV)
    out, lse = decode_attention_simple(q, k, v)
    assert out.shape == (0, 2, 1, 16) and lse.shape == (0, 2, 1)
