"""The Gluon FlashAttention forward for Hopper: what it accepts everywhere, its output on sm_90.

The kernel compiles for sm_90 only (Gluon has no interpreter), so on a CPU these tests check the
entry point's refusals and the tile table; on a Hopper GPU they compare the kernel with the
course's Triton kernel and with float64 attention (``gpu_checks/hopper_gpu.py`` checks more
shapes and times it).
"""

from __future__ import annotations

import pytest
import torch

import teachkit

pytest.importorskip("teachkit.kernels")
from teachkit.compare import attention_reference, relative_error  # noqa: E402
from teachkit.gpus import SHARED_MEMORY_LIMIT  # noqa: E402
from teachkit.kernels import flash, flash_attention  # noqa: E402
from teachkit.kernels import flash_hopper as fh  # noqa: E402

ON_HOPPER = teachkit.ON_GPU and torch.cuda.get_device_capability()[0] == 9


def test_the_tiles_fit_an_sm90_program():
    """Queries, STAGES key and value blocks and the barriers fit in sm_90's shared memory."""
    for d, (_, stages) in fh.HOPPER_TILES.items():
        queries = fh.HOPPER_QUERY_BUFFERS[d] * fh.HOPPER_ROWS * d
        for block_n in fh.HOPPER_KEY_BLOCKS[d]:
            tiles = 2 * (queries + 2 * stages * block_n * d)
            assert tiles + 1024 <= SHARED_MEMORY_LIMIT[90], (d, block_n)
    for d in fh.HOPPER_PREFERRED_HEAD_DIMS:
        for causal in (False, True):
            form = fh.hopper_form(d, 4096, 4096, causal)
            assert form.block_n in fh.HOPPER_KEY_BLOCKS[d], (d, causal)
    for d, (block_n, _) in fh.HOPPER_TILES.items():  # the default key block, written twice
        assert fh.HOPPER_KEY_BLOCKS[d][0] == block_n


@pytest.mark.skipif(ON_HOPPER, reason="checks the refusal off Hopper")
def test_refuses_without_a_hopper_gpu_and_says_what_to_use():
    q = torch.zeros(1, 2, 128, 64, dtype=torch.float16, device=teachkit.DEVICE)
    assert not fh.hopper_ready(q, q, q)
    with pytest.raises(ValueError, match="Hopper GPU.*flash_attention takes"):
        fh.flash_attention_hopper(q, q, q)


def test_bad_arguments_are_named():
    q = torch.zeros(1, 2, 128, 64, dtype=torch.float16, device=teachkit.DEVICE)
    with pytest.raises(TypeError, match="q"):
        fh.flash_attention_hopper("q", q, q)
    with pytest.raises(TypeError, match="overlap"):
        fh.flash_attention_hopper(q, q, q, overlap="yes")
    with pytest.raises(TypeError, match="persistent"):
        fh.flash_attention_hopper(q, q, q, persistent=None)
    with pytest.raises(TypeError, match="causal"):
        fh.flash_attention_hopper(q, q, q, causal=1.5)
    with pytest.raises(TypeError, match="block_n must be one of"):
        fh.flash_attention_hopper(q, q, q, block_n="256")
    with pytest.raises(ValueError, match=r"block_n must be one of \(128, 256\) at head dim 64"):
        fh.flash_attention_hopper(q, q, q, block_n=64)
    with pytest.raises(ValueError, match=r"block_n must be one of \(128,\) at head dim 128"):
        wide = torch.zeros(1, 2, 128, 128, dtype=torch.float16, device=teachkit.DEVICE)
        fh.flash_attention_hopper(wide, wide, wide, block_n=256)


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 4, 256, 256, 64), (1, 8, 2, 384, 640, 128)])
def test_matches_the_triton_kernel_and_float64(shape, causal, dtype):
    B, H, H_kv, L, S, D = shape
    gen = torch.Generator("cuda").manual_seed(0)
    q = torch.randn(B, H, L, D, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(B, H_kv, S, D, device="cuda", dtype=dtype, generator=gen)
            for _ in range(2))
    out, lse = fh.flash_attention_hopper(q, k, v, causal, return_lse=True)
    ref, ref_lse = flash_attention(q, k, v, causal=causal, return_lse=True,
                                   config=flash.table_config(q, causal))
    want, _ = attention_reference(q, k, v, causal)
    tolerance = 1e-2 if dtype == torch.bfloat16 else 2e-3
    assert relative_error(out, want) < tolerance
    assert relative_error(out, ref) < tolerance
    assert (lse - ref_lse).abs().max().item() < 1e-3
    assert torch.equal(out, fh.flash_attention_hopper(q, k, v, causal, overlap=False))
    assert torch.equal(out, fh.flash_attention_hopper(q, k, v, causal, persistent=True))
    if D == 64:  # 256 keys a block, without the overlap: other sums, same answer
        wide, wide_lse = fh.flash_attention_hopper(q, k, v, causal, return_lse=True,
                                                   overlap=False, block_n=256)
        assert relative_error(wide, want) < tolerance
        assert (wide_lse - ref_lse).abs().max().item() < 1e-3


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("form", [(64, 256, False), (64, 128, True), (128, 128, True)])
def test_a_persistent_grid_computes_the_same_bits(form, causal):
    """More units than SMs, an odd number of query tiles (9) and grouped heads: each program of
    the persistent grid walks many tiles (and pairs, with the mask), and every row comes out as
    one program per unit computes it, lse included."""
    D, block_n, overlap = form
    gen = torch.Generator("cuda").manual_seed(3)
    q = torch.randn(2, 16, 1152, D, device="cuda", dtype=torch.float16, generator=gen)
    k, v = (torch.randn(2, 8, 1280, D, device="cuda", dtype=torch.float16, generator=gen)
            for _ in range(2))
    runs = [fh.flash_attention_hopper(q, k, v, causal, return_lse=True, overlap=overlap,
                                      block_n=block_n, persistent=p) for p in (False, True)]
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    want, _ = attention_reference(q[:1, :2], k[:1, :1], v[:1, :1], causal)
    assert relative_error(runs[1][0][:1, :2], want) < 2e-3


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
def test_lengths_the_tiles_do_not_divide_are_refused():
    q = torch.zeros(1, 2, 200, 64, dtype=torch.float16, device="cuda")
    k = torch.zeros(1, 2, 256, 64, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="multiple of 128"):
        fh.flash_attention_hopper(q, k, k)
    with pytest.raises(ValueError, match="multiple of 128"):
        fh.flash_attention_hopper(k, q, q)


def test_flash_attention_prefers_the_gluon_kernel_only_where_it_takes_the_inputs():
    q = torch.zeros(1, 2, 128, 128, dtype=torch.float16, device=teachkit.DEVICE)
    assert fh.hopper_preferred(q, q, q) == ON_HOPPER
    for other in (q.float(), q[..., :64].contiguous(), q.transpose(2, 3), q[:, :, :100]):
        assert not fh.hopper_preferred(other, other, other)
    # head dim 64: from 1024 keys on, in whole 256-key blocks
    q64 = torch.zeros(1, 2, 128, 64, dtype=torch.float16, device=teachkit.DEVICE)
    def keys(n):
        return torch.zeros(1, 2, n, 64, dtype=torch.float16, device=teachkit.DEVICE)

    assert fh.hopper_preferred(q64, keys(1024), keys(1024)) == ON_HOPPER
    for n in (768, 1152):  # too few keys; not whole 256-key blocks
        assert not fh.hopper_preferred(q64, keys(n), keys(n))
    # with the causal mask 128 queries read at most 128 keys, whatever S
    assert not fh.hopper_preferred(q64, keys(4096), keys(4096), causal=True)


def test_the_form_follows_the_keys_a_query_tile_reads():
    def wide(persistent):
        return fh.HopperForm(256, False, persistent)

    for L, S, causal, expect in [(4096, 4096, False, wide(True)), (4096, 4096, True, wide(True)),
                                 (1024, 1024, False, wide(True)), (1024, 1024, True, wide(True)),
                                 (128, 4096, False, wide(True)), (128, 4096, True, None),
                                 (8192, 4096, True, wide(True)), (4096, 3840, False, wide(True)),
                                 (512, 768, False, None), (2048, 16384, True, wide(True)),
                                 (768, 16384, True, None)]:
        assert fh.hopper_form(64, L, S, causal) == expect, (L, S, causal)
    assert fh.hopper_form(128, 128, 128, True) == fh.HopperForm(128, True, True)
    assert fh.hopper_form(128, 128, 8192, False) == fh.HopperForm(128, True, False)
    assert fh.hopper_form(32, 4096, 4096, False) is None


def test_small_problems_run_one_program_per_tile():
    """Below HOPPER_MIN_UNITS_PER_SM units a SM the form is the same but not persistent; without
    the sequences and the SMs the problem counts as large. L = 1024: 8 tiles, 4 causal pairs."""
    sms = 132
    for D, causal, sequences, persistent in [(128, True, 16, False), (128, True, 17, True),
                                             (64, True, 16, False), (64, True, 17, True),
                                             (64, False, 65, False), (64, False, 66, True),
                                             (128, False, 1000, False)]:
        form = fh.hopper_form(D, 1024, 1024, causal, sequences, sms)
        assert form == fh.hopper_form(D, 1024, 1024, causal)._replace(persistent=persistent), (
            D, causal, sequences)
    assert fh.hopper_units(1024, 16, True) == 64 and fh.hopper_units(1152, 1, True) == 5
    assert fh.hopper_form(64, 512, 512, False, 1, sms) is None  # the Triton kernel's, as before


def test_the_unit_walk_covers_every_tile_once():
    """The kernel's walk, step by step as its Gluon helpers take it (unit_tiles, tile_at,
    next_tile from each program's first unit, program_tiles' count), gives walk_schedule's
    tiles; for any number of programs every tile is visited once, and with the causal mask a
    unit's tiles read n_m + 1 key blocks of 128 together, so with n_m even the programs' work
    differs by one unit at most (with n_m odd the middle tile is a unit of half that)."""
    for n_m in (1, 2, 3, 8):
        for BH in (1, 3):
            for causal in (False, True):
                U = (n_m + 1) // 2 if causal else n_m
                for G in (1, 2, 5, 64):
                    walks = fh.walk_schedule(n_m, BH, G, causal)
                    for pid, walk in enumerate(walks):
                        u, half, stepped = pid, 0, []
                        count = sum(1 if not causal or 2 * (w % U) == n_m - 1 else 2
                                    for w in range(pid, U * BH, G))
                        for _ in range(count):
                            j = u % U
                            m = j + (1 - half) * (n_m - 1 - 2 * j) if causal else j
                            stepped.append((u // U, m))
                            tiles = 1 if not causal or 2 * j == n_m - 1 else 2
                            last = int(half + 1 >= tiles)
                            u, half = u + last * G, (half + 1) * (1 - last)
                        assert stepped == walk, (n_m, BH, causal, G, pid)
                    seen = sorted(t for walk in walks for t in walk)
                    assert seen == [(bh, m) for bh in range(BH) for m in range(n_m)]
                    if causal and n_m % 2 == 0:
                        blocks = [sum(m + 1 for _, m in walk) for walk in walks]
                        assert max(blocks) - min(blocks) <= n_m + 1, blocks


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_runs_the_wide_form_at_head_dim_64_from_1024_keys(causal):
    """From 1024 keys a query tile reads (S; min(L, S) with the mask) flash_attention's forward
    is the wide form's, bit for bit; with the mask and 256 queries, the Triton kernel's."""
    gen = torch.Generator("cuda").manual_seed(2)
    k, v = (torch.randn(1, 2, 4096, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    for L in (256, 1024, 4096):
        q = torch.randn(1, 4, L, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = flash_attention(q, k, v, causal=causal)
        if causal and L < 1024:
            kernel = flash_attention(q, k, v, causal=causal,
                                     config=flash.table_config(q, causal))
        else:
            kernel = fh.flash_attention_hopper(q, k, v, causal, overlap=False, block_n=256)
        assert torch.equal(out, kernel), L
        want, _ = attention_reference(q, k, v, causal)
        assert relative_error(out, want) < 1e-2


@pytest.mark.skipif(not ON_HOPPER, reason="the Gluon kernel compiles for sm_90 only")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_runs_the_gluon_kernel_with_gradients(causal):
    """At a preferred head dim flash_attention's forward is the Gluon kernel's, bit for bit,
    and its gradients (the Triton backward from the Gluon kernel's lse) match float64."""
    B, H, H_kv, L, S, D = 2, 4, 2, 256, 384, 128
    gen = torch.Generator("cuda").manual_seed(1)
    q = torch.randn(B, H, L, D, device="cuda", dtype=torch.float16, generator=gen)
    k, v = (torch.randn(B, H_kv, S, D, device="cuda", dtype=torch.float16, generator=gen)
            for _ in range(2))
    assert fh.hopper_preferred(q, k, v)
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    gluon_out, gluon_lse = fh.flash_attention_hopper(q, k, v, causal, return_lse=True)
    assert torch.equal(out, gluon_out) and torch.equal(lse, gluon_lse)
    triton_out = flash_attention(q, k, v, causal=causal, config=flash.table_config(q, causal))
    assert relative_error(out, triton_out) < 2e-3
    # a transposed view is read by the Triton kernel in place
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not fh.hopper_preferred(q_t, k, v)
    assert relative_error(flash_attention(q_t, k, v, causal=causal), out) < 2e-3

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    wants = [t.double().requires_grad_() for t in (q, k, v)]
    dout = torch.randn_like(q)
    flash_attention(*leaves, causal=causal).backward(dout)
    attention_reference(*wants, causal)[0].backward(dout.double())
    for got, want in zip(leaves, wants, strict=True):
        assert relative_error(got.grad, want.grad) < 5e-3


def test_a_triton_without_the_gluon_parts_keeps_flash_attention_on_its_triton_kernel(tmp_path):
    """Gluon is experimental: where this Triton's Gluon cannot build the Hopper kernel, importing
    it fails, and flash_attention (and the benchmark's providers) go on without it."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "sys.modules['teachkit.kernels.flash_hopper'] = None  # its import now fails\n"
        "import torch, teachkit\n"
        "from teachkit.bench.attention import PROVIDERS, attention_providers\n"
        "from teachkit.kernels import flash, flash_attention\n"
        "assert flash.hopper_preferred is None\n"
        "assert list(attention_providers()) == list(PROVIDERS)\n"
        "q = torch.randn(1, 2, 16, 16, device=teachkit.DEVICE)\n"
        "ref = torch.nn.functional.scaled_dot_product_attention(q, q, q)\n"
        "assert teachkit.relative_error(flash_attention(q, q, q), ref) < 1e-4\n"
        "print('ok')\n"
    )
    # from an empty folder: the teachkit installed in this environment, not a checkout's
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
