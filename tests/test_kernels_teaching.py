"""The teaching kernels of notebook 06 against float64 references (interpreter on a CPU)."""

from __future__ import annotations

import math

import pytest
import torch

import teachkit
from teachkit.compare import relative_error
from teachkit.kernels import teaching


def test_row_max(gen):
    x = torch.randn(7, 37, generator=gen).to(teachkit.DEVICE)
    x[2, 5:] = -math.inf
    assert torch.equal(teaching.row_max(x).cpu(), x.cpu().amax(dim=1))


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_row_softmax(gen, dtype, rtol):
    x = torch.randn(5, 101, generator=gen) * 100
    x[1, ::2] = -math.inf
    x[3] = -math.inf
    x = x.to(teachkit.DEVICE, dtype)
    got = teaching.row_softmax(x)
    assert got.dtype == dtype
    assert relative_error(got, torch.softmax(x.cpu().double(), dim=-1)) <= rtol


def test_row_softmax_strided(gen):
    x = torch.randn(3, 60, generator=gen).to(teachkit.DEVICE)[:, :45]
    assert relative_error(teaching.row_softmax(x), torch.softmax(x.cpu().double(), -1)) <= 1e-5


def test_reduce_stats(gen):
    x = torch.randn(4, 33, 5, generator=gen, dtype=torch.float64) * 50
    x[:, ::4] = -math.inf
    x[2] = -math.inf
    m_lane = x.amax(-1)
    safe = torch.where(torch.isinf(m_lane), 0.0, m_lane)
    d_lane = torch.exp(x - safe[..., None]).sum(-1)
    m, d = teaching.reduce_stats(m_lane.float().to(teachkit.DEVICE),
                                 d_lane.float().to(teachkit.DEVICE))
    ref_m = x.flatten(1).amax(-1)
    ref_d = torch.exp(x.flatten(1) - torch.where(torch.isinf(ref_m), 0.0, ref_m)[:, None]).sum(-1)
    assert relative_error(m, ref_m) <= 1e-7
    assert relative_error(d, ref_d) <= 1e-5
    assert m[2].item() == -math.inf and d[2].item() == 0.0


def test_reduce_kernel_module_is_written_whole_and_once(tmp_path, monkeypatch):
    """The kernel's module file is renamed into place (a process importing it never reads half
    a file), left alone when it already holds the source, and no partial file stays behind."""
    import tempfile

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    teaching._reduce_stats_kernel.cache_clear()
    combine = teaching.merge_combine_natural
    teaching._reduce_stats_kernel(combine)
    (path,) = (tmp_path / "teachkit_kernels").iterdir()
    source, written = path.read_text(), path.stat().st_mtime_ns
    teaching._reduce_stats_kernel.cache_clear()
    teaching._reduce_stats_kernel(combine)
    assert path.read_text() == source and path.stat().st_mtime_ns == written
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    teaching._reduce_stats_kernel.cache_clear()


def test_fused_one_row_beyond_limit(gen):
    x = torch.randn(2, 17_000, generator=gen).to(teachkit.DEVICE)
    got = teaching.fused_one_row(x, num_warps=4)
    assert relative_error(got, torch.softmax(x.cpu().double(), -1)) <= 1e-5


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("g", [1, 5, 8])
def test_exchange_pairs_gives_every_program_the_merge(gen, packed, g):
    """Both ways of exchanging (m, d) leave every program with the merge of all pairs, an
    empty pair (-inf, 0) included; on the GPU through the exchange itself, under the
    interpreter (no polls) partly through the fallback."""
    m = torch.randn(g, generator=gen) * 20
    d = torch.rand(g, generator=gen) + 0.5
    m[0], d[0] = -math.inf, 0.0
    want_m, want_d = m.double().amax(), (d.double() * torch.exp(m.double() - m.double().amax()))
    got_m, got_d = teaching.exchange_pairs(m.to(teachkit.DEVICE), d.to(teachkit.DEVICE), packed)
    if g == 1:
        assert got_m.item() == -math.inf and got_d.item() == 0.0
        return
    assert torch.all(got_m.cpu() == want_m.float())
    assert relative_error(got_d.cpu(), want_d.nansum().expand(g)) <= 1e-6


def test_exchange_pairs_names_bad_input():
    ok = torch.zeros(4, device=teachkit.DEVICE)
    with pytest.raises(ValueError, match="m must be a 1-D float32 tensor of 1 to 1024 pairs"):
        teaching.exchange_pairs(torch.zeros(2, 2, device=teachkit.DEVICE), ok)
    with pytest.raises(ValueError, match="d must be a 1-D float32"):
        teaching.exchange_pairs(ok, torch.zeros(2000, device=teachkit.DEVICE))
    with pytest.raises(ValueError, match="same shape"):
        teaching.exchange_pairs(ok, torch.zeros(3, device=teachkit.DEVICE))
    with pytest.raises(TypeError, match="packed must be a bool"):
        teaching.exchange_pairs(ok, ok, packed=1)
    with pytest.raises(TypeError, match="m"):
        teaching.exchange_pairs([1.0], ok)
