"""The Gluon dK/dV kernel of the backward for Hopper: where it is chosen, and its gradients.

The kernel compiles for sm_90 only (Gluon has no interpreter), so on a CPU these tests check the
table and the conditions; ``tests/test_compile_check.py`` and ``tests/test_compiled_evidence.py``
compile it for sm_90 without a GPU.
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
    """Both warpgroups' keys and values, STAGES blocks of q and dO, with fused dQ two steps of
    both warpgroups' dS^T (half precision) and a float32 half of dQ each, and the barriers fit
    in sm_90's shared memory."""
    for d, (block_m, stages) in fbh.DKDV_HOPPER_TILES.items():
        half = 2 * (2 * fbh.DKDV_HOPPER_KEYS * d + 2 * stages * block_m * d)
        fused = 2 * 4 * (fbh.DKDV_HOPPER_KEYS // 2) * block_m + 4 * 2 * block_m * (d // 2)
        assert half + fused + 1024 <= SHARED_MEMORY_LIMIT[90], d


def test_the_table_asks_for_it_on_sm90_in_half_precision_with_either_mask():
    """dK/dV alone in Gluon at D = 128; with dQ fused in at D = 64 and 128."""
    for causal in (False, True):
        for dtype in (torch.float16, torch.bfloat16):
            assert flash_backward.backward_config(128, dtype, (9, 0), causal).kv_hopper
            for d in (64, 128):
                assert flash_backward.backward_config(d, dtype, (9, 0), causal).kv_hopper_dq
        assert not flash_backward.backward_config(64, torch.float16, (9, 0), causal).kv_hopper
        for name in ("kv_hopper", "kv_hopper_dq"):
            for cfg in (flash_backward.backward_config(128, torch.float16, (8, 0), causal),
                        flash_backward.backward_config(128, torch.float32, (9, 0), causal),
                        flash_backward.backward_config(128, torch.float16, None, causal)):
                assert not getattr(cfg, name), cfg


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


@pytest.fixture
def deterministic(request):
    """``torch.use_deterministic_algorithms(request.param)`` for the test, then off again."""
    torch.use_deterministic_algorithms(request.param)
    yield request.param
    torch.use_deterministic_algorithms(False)


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
@pytest.mark.parametrize(("H", "H_kv", "L", "S", "causal"), [
    (4, 4, 512, 512, False), (4, 4, 512, 512, True), (8, 2, 384, 640, False),
    (4, 1, 256, 512, True), (2, 2, 512, 256, True), (2, 2, 64, 1024, True)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("deterministic", [False, True], indirect=True)
def test_flash_attention_s_gradients_through_it_match_float64(H, H_kv, L, S, causal, dtype, D,
                                                              deterministic, gen, monkeypatch):
    """Grouped heads, L < S and L > S under the causal mask (key blocks no query sees, and a
    single query block), and the lse's gradient (it reaches the kernel through delta), against
    float64 autograd. The kernel is checked to have run as the table asks: with dQ fused in,
    unless deterministic algorithms are asked for, which at D = 64 leave it to Triton."""
    launches = []

    def counted(*args):
        launches.append("fused dQ" if args[10:] and args[10] is not None else "dK/dV")
        return fbh.launch_dkdv_hopper(*args)

    monkeypatch.setattr(flash_backward, "launch_dkdv_hopper", counted)
    q = randn(1, H, L, D, gen=gen, dtype=dtype).to(DEV).requires_grad_()
    k, v = (randn(1, H_kv, S, D, gen=gen, dtype=dtype).to(DEV).requires_grad_()
            for _ in range(2))
    out, lse = K.flash_attention(q, k, v, causal=causal, return_lse=True)
    do = randn(*out.shape, gen=gen, dtype=dtype).to(DEV)
    dlse = randn(*lse.shape, gen=gen).to(DEV)
    got = torch.autograd.grad((out.float() * do.float()).sum() + (lse * dlse).sum(), (q, k, v))
    assert launches == ([] if deterministic and D == 64
                        else ["dK/dV"] if deterministic else ["fused dQ"])
    (out64, lse64), leaves = reference(q, k, v, causal)
    want = torch.autograd.grad((out64 * do.cpu().double()).sum()
                               + (lse64 * dlse.cpu().double()).sum(), leaves)
    assert_close(got, want, dtype)


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
@pytest.mark.parametrize("D", [64, 128])
def test_deterministic_algorithms_give_the_same_bits_and_fused_dq_is_close(D, gen):
    """Under ``torch.use_deterministic_algorithms(True)`` two backward passes agree bit for bit;
    the default (fused dQ, added in any order) agrees with them to float32 rounding before the
    cast."""
    q, k, v = (randn(2, 4, 1024, D, gen=gen, dtype=torch.float16).to(DEV).requires_grad_()
               for _ in range(3))
    do = randn(*q.shape, gen=gen, dtype=torch.float16).to(DEV)

    def grads():
        return torch.autograd.grad(K.flash_attention(q, k, v, causal=True), (q, k, v), do)

    fused = grads()
    torch.use_deterministic_algorithms(True)
    try:
        first, second = grads(), grads()
    finally:
        torch.use_deterministic_algorithms(False)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    for a, b in zip(fused, first, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)
