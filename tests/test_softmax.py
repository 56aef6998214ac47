"""The softmax references against torch.softmax and a float64 reference."""

from __future__ import annotations

import pytest
import torch
from inputs import ALL_FLOATS, RTOL, randn

from teachkit import softmax as sm
from teachkit.compare import relative_error

STABLE = [sm.safe_softmax, sm.online_softmax, lambda x, dim=-1: sm.chunked_softmax(x, 7, dim)]
STABLE_IDS = ["safe", "online", "chunked7"]
INF, NAN = float("inf"), float("nan")


def reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x.double(), dim=dim)


@pytest.mark.parametrize("fn", STABLE, ids=STABLE_IDS)
@pytest.mark.parametrize("dtype", ALL_FLOATS)
def test_matches_float64_reference(fn, dtype, gen):
    x = randn(3, 5, 37, gen=gen, dtype=dtype, scale=4)
    for dim in (-1, 0, 1):
        out = fn(x, dim=dim)
        assert out.dtype == dtype and out.shape == x.shape
        assert relative_error(out, reference(x, dim)) < RTOL[dtype]


@pytest.mark.parametrize("fn", STABLE, ids=STABLE_IDS)
def test_huge_magnitudes_do_not_overflow(fn, gen):
    x = randn(4, 53, gen=gen, scale=1000)
    assert relative_error(fn(x), reference(x)) < 1e-6
    x16 = randn(4, 53, gen=gen, dtype=torch.float16, scale=30)
    assert relative_error(fn(x16), reference(x16)) < RTOL[torch.float16]


def test_naive_overflows_on_purpose(gen):
    x = torch.tensor([1.0, 100.0, 3.0])
    assert torch.isnan(sm.naive_softmax(x)).any()
    assert torch.isnan(sm.naive_softmax(torch.tensor([12.0, 1.0], dtype=torch.float16))).any()
    y = randn(2, 11, gen=gen)
    assert relative_error(sm.naive_softmax(y), reference(y)) < 1e-6


@pytest.mark.parametrize("fn", STABLE + [sm.naive_softmax], ids=STABLE_IDS + ["naive"])
def test_nan_pattern_follows_torch(fn):
    x = torch.tensor([
        [1.0, 2.0, 3.0, 4.0],
        [-INF, -INF, -INF, -INF],  # all masked: NaN
        [1.0, INF, 2.0, 3.0],      # +inf: NaN
        [1.0, NAN, 2.0, 3.0],      # NaN: NaN
        [-INF, -INF, 2.0, 3.0],    # masked prefix: zeros then the rest
    ])
    if fn is sm.naive_softmax:  # exp(+inf) overflows on purpose: inf/inf = NaN, finite/inf = 0
        x = x[[0, 1, 3, 4]]
    out, ref = fn(x), torch.softmax(x, dim=-1)
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert relative_error(out, ref) < 1e-6


@pytest.mark.parametrize("fn", STABLE, ids=STABLE_IDS)
def test_masked_prefix_longer_than_a_chunk(fn, gen):
    x = randn(3, 40, gen=gen)
    x[:, :23] = -INF
    out = fn(x)
    assert torch.all(out[:, :23] == 0)
    assert relative_error(out, reference(x)) < 1e-6


@pytest.mark.parametrize("fn", STABLE + [sm.naive_softmax], ids=STABLE_IDS + ["naive"])
def test_shapes_strides_and_empty(fn, gen):
    x = randn(6, 9, gen=gen).t()  # non-contiguous
    assert not x.is_contiguous()
    assert relative_error(fn(x, dim=0), reference(x, 0)) < 1e-6
    assert relative_error(fn(x[::2]), reference(x[::2])) < 1e-6
    s = torch.tensor(2.5)
    assert fn(s).shape == () and fn(s).item() == 1.0
    for shape, dim in [((0, 4), -1), ((4, 0), -1), ((4, 0), 0), ((0,), 0)]:
        e = torch.empty(shape)
        assert fn(e, dim=dim).shape == e.shape
    one = randn(5, 1, gen=gen)
    assert torch.all(fn(one) == 1)


@pytest.mark.parametrize("fn", STABLE + [sm.naive_softmax], ids=STABLE_IDS + ["naive"])
def test_bad_input_says_what_to_pass(fn):
    with pytest.raises(TypeError, match="floating-point"):
        fn(torch.arange(5))
    with pytest.raises(TypeError, match="torch.Tensor"):
        fn([1.0, 2.0])
    with pytest.raises(ValueError, match="out of range"):
        fn(torch.randn(3, 4), dim=2)


def test_chunk_size_is_checked():
    with pytest.raises(ValueError, match="positive"):
        sm.chunked_softmax(torch.randn(5), 0)
    with pytest.raises(TypeError, match="positive int"):
        sm.chunked_softmax(torch.randn(5), 2.5)


def test_stats_and_lse_forms(gen):
    x = randn(4, 29, gen=gen, scale=3)
    m, d = sm.softmax_stats(x)
    mo, do = sm.online_stats(x)
    assert torch.equal(m, mo) and relative_error(do, d) < 1e-6
    assert relative_error(sm.logsumexp(x), torch.logsumexp(x.double(), -1)) < 1e-6
    mc, dc = sm.chunk_stats(x, 8)
    assert mc.shape == (4, 4)
    mr, dr = sm.reduce_stats(mc, dc)
    assert torch.equal(mr, m) and relative_error(dr, d) < 1e-6
    lse_a = sm.logsumexp(x[:, :10])
    lse_b = sm.logsumexp(x[:, 10:])
    assert relative_error(sm.merge_lse(lse_a, lse_b), torch.logsumexp(x.double(), -1)) < 1e-6
    empty_m, empty_d = sm.softmax_stats(torch.empty(3, 0))
    assert torch.all(empty_m == -INF) and torch.all(empty_d == 0)
    assert sm.logsumexp(torch.tensor([1.0, INF])).item() == INF


def test_online_prefix_stats_by_hand():
    m, d = sm.online_prefix_stats(torch.tensor([1.0, 3.0, 2.0, 5.0]))
    assert m.tolist() == [1.0, 3.0, 3.0, 5.0]
    expected = [1.0, 1 + torch.exp(torch.tensor(-2.0)).item()]
    assert torch.allclose(d[:2], torch.tensor(expected))
    assert abs(d[-1].item() - 1.2034) < 1e-4


def test_merge_stats_masked_parts_and_broadcasting():
    ninf = torch.tensor(-INF)
    m, d = sm.merge_stats(ninf, torch.tensor(0.0), ninf, torch.tensor(0.0))
    assert m.item() == -INF and d.item() == 0.0  # two empty parts: still empty, no NaN
    m, d = sm.merge_stats(ninf, torch.tensor(0.0), torch.tensor(2.0), torch.tensor(3.0))
    assert m.item() == 2.0 and d.item() == 3.0
    m, d = sm.merge_stats(torch.zeros(3, 1), torch.ones(3, 1), torch.zeros(1, 4), torch.ones(1, 4))
    assert m.shape == (3, 4) and torch.all(d == 2)
    with pytest.raises(ValueError, match="broadcast"):
        sm.merge_stats(torch.zeros(3), torch.ones(3), torch.zeros(4), torch.ones(4))
    with pytest.raises(TypeError):
        sm.merge_stats(torch.arange(3), torch.ones(3), torch.zeros(3), torch.ones(3))
