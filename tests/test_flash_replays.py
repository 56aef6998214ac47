"""``flash_attention``'s kept launches: a call without autograd of a kind met before makes its
launch of the Triton kernel again on new tensors, skipping the checks, the configuration's
lookup and the launch cache's key, and gives what the full path gives, bit for bit. Under the
interpreter the fixture :func:`kept` puts :class:`kept_launches.InterpretedReplay` in the place
of Triton's launcher (see ``test_decode_replays.py``)."""

from __future__ import annotations

import pytest
import torch
from kept_launches import kept_in, launches_through, outputs

import teachkit

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels import flash  # noqa: E402
from teachkit.kernels.flash import FlashConfig, flash_attention  # noqa: E402

DEV = teachkit.DEVICE
ON_GPU = teachkit.ON_GPU
L, D = (200, 64) if ON_GPU else (40, 16)

KINDS_OF_CALLS = ["plain", "causal", "with its lse", "grouped heads", "a scale", "strided",
                  "float32", "bfloat16", "a config", "TMA descriptors", "Hopper's sizes",
                  "Hopper's sizes, causal"]
"""Calls of flash_attention that its kept launches serve (:func:`flash_call`)."""


def flash_call(kind: str, seed: int) -> tuple[tuple, dict]:
    """Fresh arguments of the kind named ``kind`` of :data:`KINDS_OF_CALLS`: the tensors, then
    the keywords."""
    gen = torch.Generator(device=DEV).manual_seed(seed)

    def qkv(H_kv=2, dtype=torch.float16, L=L, D=D):
        return tuple(torch.randn(2, heads, L, D, device=DEV, generator=gen).to(dtype)
                     for heads in (4, H_kv, H_kv))

    hopper = {"L": 256, "D": 128} if ON_GPU else {}  # the Gluon kernel's sizes on Hopper

    def strided():  # (B, L, H, D) in memory, seen as (B, H, L, D)
        return tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in qkv())

    tiles = FlashConfig(64, 32, 4, 2) if ON_GPU else FlashConfig(16, 16, 4, 1)
    return {
        "plain": lambda: (qkv(), {}),
        "causal": lambda: (qkv(), {"causal": True}),
        "with its lse": lambda: (qkv(), {"return_lse": True}),
        "grouped heads": lambda: (qkv(H_kv=1), {}),
        "a scale": lambda: (qkv(), {"scale": 0.3}),
        "strided": lambda: (strided(), {}),
        "float32": lambda: (qkv(dtype=torch.float32), {}),
        "bfloat16": lambda: (qkv(dtype=torch.bfloat16), {"causal": True}),
        "a config": lambda: (qkv(), {"config": tiles}),
        "TMA descriptors": lambda: (qkv(), {"config": tiles._replace(tma=True)}),
        "Hopper's sizes": lambda: (qkv(**hopper), {}),
        "Hopper's sizes, causal": lambda: (qkv(**hopper), {"causal": True, "return_lse": True}),
    }[kind]()


def launches() -> int:
    """Launches of the forward kernel through Triton's path so far."""
    return launches_through(flash.flash_fwd_kernel)


@pytest.fixture
def kept(monkeypatch):
    """:data:`flash.FLASH_REPLAYS`, empty, with stand-in launchers under the interpreter."""
    with kept_in(flash, flash.FLASH_REPLAYS, monkeypatch) as table:
        yield table


@pytest.mark.parametrize("kind", KINDS_OF_CALLS)
def test_a_kind_of_call_met_before_makes_its_launch_again(kind, kept):
    tensors, kwargs = flash_call(kind, 0)
    first = flash_attention(*tensors, **kwargs)
    assert len(kept) == 1
    replay = next(iter(kept.values()))
    gluon = (flash.hopper_preferred is not None and "config" not in kwargs
             and flash.hopper_preferred(*tensors, kwargs.get("causal", False)))
    assert (replay.config is None) == gluon  # the Gluon kernel's launch, kept too
    assert replay.tma == (kind == "TMA descriptors" and flash._tma_ok(*tensors))
    before = launches()
    again = flash_attention(*tensors, **kwargs)
    for a, b in zip(outputs(again), outputs(first), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)  # bit for bit
        assert a.data_ptr() != b.data_ptr() and a.stride() == b.stride()
    other, other_kwargs = flash_call(kind, 1)
    got = flash_attention(*other, **other_kwargs)
    assert launches() < before if not ON_GPU else launches() == before  # none through Triton
    kept.clear()
    want = flash_attention(*other, **other_kwargs)
    for a, b in zip(outputs(got), outputs(want), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_calls_it_cannot_serve_have_no_key(kept):
    q = torch.randn(1, 2, 8, 16, device=DEV)
    plain = (q, q, q, False, None, False, None, False, None)
    assert flash.replay_key(*plain) is not None
    for place, value in ((3, 1), (4, -0.5), (4, torch.tensor(0.5)), (5, None),
                         (6, (16, 16, 4, 1, False)), (6, FlashConfig(16.0, 16, 4, 1)),
                         (7, True), (8, flash.BackwardConfig)):
        call = list(plain)
        call[place] = value
        assert flash.replay_key(*call) is None, value
    r = q.clone().requires_grad_(True)
    assert flash.replay_key(r, q, q, *plain[3:]) is None  # autograd records it
    with torch.no_grad():
        assert flash.replay_key(r, q, q, *plain[3:]) is not None
    flash_attention(r, q, q)  # differentiable: nothing kept
    assert kept == {}
    if ON_GPU:
        assert flash.replay_key(q.cpu(), q.cpu(), q.cpu(), *plain[3:]) is None


def test_a_negative_scale_and_refusals_take_the_full_path(kept):
    (q, k, v), _ = flash_call("plain", 0)
    flash_attention(q, k, v, scale=-0.2)  # run as (-q) with 0.2: not kept
    assert kept == {}
    torch.testing.assert_close(flash_attention(q, k, v, scale=-0.2).float(),
                               flash_attention(-q, k, v, scale=0.2).float(), rtol=0, atol=0)
    flash_attention(q, k, v)
    flash_attention(q, k, v)
    k.requires_grad_(True)
    out = flash_attention(q, k, v)  # autograd records this one: the full path
    assert out.requires_grad
    with pytest.raises(ValueError, match="scale must be a finite number"):
        flash_attention(q, k.detach(), v, scale=float("nan"))
