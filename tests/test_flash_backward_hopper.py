"""The Gluon dK/dV kernel of the backward for Hopper: where it is chosen, and its gradients.

The kernel compiles for sm_90 only (Gluon has no interpreter), so on a CPU these tests check the
table and the conditions; ``tests/test_compile_check.py`` compiles it for sm_90 without a GPU.
On a Hopper GPU they compare ``flash_attention``'s gradients through it with float64 autograd.
"""

from __future__ import annotations

import pytest
import torch
from inputs import randn
from test_flash_backward import assert_close, reference

import teachkit
from teachkit.gpus import SHARED_MEMORY_LIMIT

K = pytest.importorskip("teachkit.kernels")
from teachkit.kernels import flash_backward  # noqa: E402
from teachkit.kernels import flash_backward_hopper as fbh  # noqa: E402

DEV = teachkit.DEVICE
ON_HOPPER = teachkit.ON_GPU and torch.cuda.get_device_capability()[0] == 9


def test_the_tiles_fit_an_sm90_program():
    """Both warpgroups' keys and values, STAGES blocks of q and dO, and the barriers fit in
    sm_90's shared memory (half precision: 2 bytes an element)."""
    for d, (block_m, stages) in fbh.DKDV_HOPPER_TILES.items():
        tiles = 2 * (2 * fbh.DKDV_HOPPER_KEYS * d + 2 * stages * block_m * d)
        assert tiles + 1024 <= SHARED_MEMORY_LIMIT[90], d


def test_the_table_asks_for_it_at_d128_on_sm90_with_either_mask():
    for causal in (False, True):
        for dtype in (torch.float16, torch.bfloat16):
            assert flash_backward.backward_config(128, dtype, (9, 0), causal).kv_hopper
        assert not flash_backward.backward_config(64, torch.float16, (9, 0), causal).kv_hopper
        assert not flash_backward.backward_config(128, torch.float16, (8, 0), causal).kv_hopper
        assert not flash_backward.backward_config(128, torch.float32, (9, 0), causal).kv_hopper


def test_it_takes_only_whole_tiles_of_contiguous_half_precision_on_hopper():
    q = torch.zeros(1, 2, 256, 128, dtype=torch.float16, device=DEV)
    assert fbh.dkdv_hopper_ready(q, q, q, q) == ON_HOPPER
    assert not fbh.dkdv_hopper_ready(q.float(), q.float(), q.float(), q.float())
    short = q[:, :, :200]  # S not a multiple of 128, L not of 64
    assert not fbh.dkdv_hopper_ready(short, q, q, q)
    assert not fbh.dkdv_hopper_ready(q[:, :, :0], q, q, q[:, :, :0])  # no queries
    assert not fbh.dkdv_hopper_ready(q, short, short, q)
    assert not fbh.dkdv_hopper_ready(q, q, q, q.transpose(1, 2).contiguous().transpose(1, 2))
    odd = torch.zeros(1, 2, 256, 136, dtype=torch.float16, device=DEV)[..., 4:132]
    assert not fbh.dkdv_hopper_ready(odd, q, q, q)


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
@pytest.mark.parametrize(("H", "H_kv", "L", "S", "causal"), [
    (4, 4, 512, 512, False), (4, 4, 512, 512, True), (8, 2, 384, 640, False),
    (4, 1, 256, 512, True), (2, 2, 512, 256, True)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flash_attention_s_gradients_through_it_match_float64(H, H_kv, L, S, causal, dtype,
                                                              gen, monkeypatch):
    """Grouped heads, L < S and L > S under the causal mask (key blocks no query sees), and the
    lse's gradient (it reaches the kernel through delta), against float64 autograd; the kernel
    is checked to have run."""
    launches = []

    def counted(*args):
        launches.append(args[0].shape)
        return fbh.launch_dkdv_hopper(*args)

    monkeypatch.setattr(flash_backward, "launch_dkdv_hopper", counted)
    q = randn(1, H, L, 128, gen=gen, dtype=dtype).to(DEV).requires_grad_()
    k, v = (randn(1, H_kv, S, 128, gen=gen, dtype=dtype).to(DEV).requires_grad_()
            for _ in range(2))
    out, lse = K.flash_attention(q, k, v, causal=causal, return_lse=True)
    do = randn(*out.shape, gen=gen, dtype=dtype).to(DEV)
    dlse = randn(*lse.shape, gen=gen).to(DEV)
    got = torch.autograd.grad((out.float() * do.float()).sum() + (lse * dlse).sum(), (q, k, v))
    assert launches == [q.shape]
    (out64, lse64), leaves = reference(q, k, v, causal)
    want = torch.autograd.grad((out64 * do.cpu().double()).sum()
                               + (lse64 * dlse.cpu().double()).sum(), leaves)
    assert_close(got, want, dtype)
