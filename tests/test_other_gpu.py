"""Inputs on a GPU other than the current CUDA device: the entry points run on the inputs' GPU,
as torch's ops do (Triton alone launches on the current device). Needs two GPUs; on fewer the
GPU tests skip, and on a CPU only the check itself runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from teachkit.compare import relative_error
from teachkit.device import on_other_gpu

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


def test_a_cpu_tensor_or_anything_else_is_never_on_another_gpu():
    assert not on_other_gpu(torch.zeros(3))
    assert not on_other_gpu([1.0, 2.0])
    assert not on_other_gpu(None)


@two_gpus
def test_a_tensor_on_the_second_gpu_is_on_another_gpu_until_that_gpu_is_current():
    x = torch.zeros(3, device="cuda:1")
    with torch.cuda.device(0):
        assert on_other_gpu(x)
    with torch.cuda.device(1):
        assert not on_other_gpu(x)


def _entry_points(dev: torch.device) -> list:
    """(name, teachkit's call, torch's call) on tensors of ``dev``; each call is made twice, so
    the second takes the launch cache's short path."""
    from teachkit.kernels import decode_attention, flash_attention, softmax

    x = torch.randn(64, 1000, device=dev)
    long_rows = torch.randn(4, 300_000, device=dev)
    q, k, v = (torch.randn(2, 4, 200, 64, device=dev, dtype=torch.float16) for _ in range(3))
    qd = torch.randn(2, 4, 1, 128, device=dev, dtype=torch.float16)
    kc, vc = (torch.randn(2, 2, 300, 128, device=dev, dtype=torch.float16) for _ in range(2))
    qb, kb, vb = (torch.randn(1, 4, 300, 128, device=dev, dtype=torch.float16) for _ in range(3))

    def grads(attend, *inputs):
        leaves = [t.clone().requires_grad_() for t in inputs]
        attend(*leaves).float().square().sum().backward()
        return torch.cat([t.grad.flatten() for t in leaves])

    def sdpa(*args, **kwargs):
        return F.scaled_dot_product_attention(*args, **kwargs, enable_gqa=True)

    return [
        ("softmax", lambda: softmax(x), lambda: torch.softmax(x, -1)),
        ("softmax, long rows", lambda: softmax(long_rows), lambda: torch.softmax(long_rows, -1)),
        ("flash_attention", lambda: flash_attention(q, k, v, causal=True),
         lambda: sdpa(q, k, v, is_causal=True)),
        ("flash_attention's gradients", lambda: grads(flash_attention, q, k, v),
         lambda: grads(sdpa, q, k, v)),
        ("flash_attention's gradients, D = 128", lambda: grads(flash_attention, qb, kb, vb),
         lambda: grads(sdpa, qb, kb, vb)),
        ("decode_attention", lambda: decode_attention(qd, kc, vc), lambda: sdpa(qd, kc, vc)),
    ]


@two_gpus
def test_entry_points_run_on_their_inputs_gpu_while_another_is_current():
    dev = torch.device("cuda", 1)
    with torch.cuda.device(0):
        for name, ours, reference in _entry_points(dev):
            for call in range(2):
                got = ours()
                assert got.device == dev, name
                assert torch.cuda.current_device() == 0, name
                error = relative_error(got, reference())  # torch's op, on cuda:1's stream
                assert error < 2e-3, f"{name}, call {call + 1}: relative error {error:.1e}"
