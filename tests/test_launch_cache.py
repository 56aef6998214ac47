"""The launch cache: on a GPU a second launch with the same specialisation takes the short path
and gives the same answer; anything that changes the compiled kernel misses; under the
interpreter kernels are left as they are."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("teachkit.kernels")
from kept_launches import InterpretedReplay, kept_in  # noqa: E402

from teachkit.device import DEVICE, INTERPRETED, ON_GPU  # noqa: E402
from teachkit.kernels import decode, flash, flash_backward, softmax_kernels  # noqa: E402
from teachkit.kernels.launch_cache import CachedRun, cached_launch, key_function  # noqa: E402

ENTRY_KERNELS = [softmax_kernels.fused_kernel, softmax_kernels.split_stats_kernel,
                 softmax_kernels.split_normalize_kernel, flash.flash_fwd_kernel,
                 flash_backward.flash_bwd_delta_kernel, flash_backward.flash_bwd_dkdv_kernel,
                 flash_backward.flash_bwd_dq_kernel, decode.decode_split_kernel,
                 decode.decode_merge_kernel]


def test_the_entry_points_kernels_carry_the_cache_on_a_gpu_only():
    for kernel in ENTRY_KERNELS:
        run = vars(kernel).get("run")
        assert isinstance(run, CachedRun) if ON_GPU else run is None, kernel


def test_anything_but_a_jit_function_is_returned_untouched():
    def plain():
        return 1

    assert cached_launch(plain) is plain
    assert "run" not in vars(plain)


@pytest.mark.skipif(INTERPRETED, reason="the cache is only installed on a GPU")
def test_a_repeated_launch_hits_and_agrees_and_a_new_specialisation_misses():
    run = vars(softmax_kernels.fused_kernel)["run"]
    fused = softmax_kernels.softmax_fused  # softmax itself would make its kept launch again
    x = torch.randn(37, 200, device=DEVICE)
    want = torch.softmax(x, -1)
    fused(x)  # compiled, and its key kept
    hits, misses = run.hits, run.misses
    for _ in range(3):
        torch.testing.assert_close(fused(x), want)
    assert (run.hits - hits, run.misses - misses) == (3, 0)
    # another dtype, and a base that is not 16-byte aligned: each its own compiled kernel
    for other in (x.half(), torch.randn(37 * 200 + 1, device=DEVICE)[1:].view(37, 200)):
        misses = run.misses
        torch.testing.assert_close(fused(other).float(),
                                   torch.softmax(other.float(), -1), atol=2e-3, rtol=2e-3)
        assert run.misses == misses + 1
        torch.testing.assert_close(fused(other).float(),
                                   torch.softmax(other.float(), -1), atol=2e-3, rtol=2e-3)
        assert run.misses == misses + 1  # the second call hit


@pytest.mark.skipif(INTERPRETED, reason="the cache is only installed on a GPU")
def test_an_integer_that_stops_dividing_by_16_misses():
    """Row strides 256 and 250 with the same rows of 200: Triton compiles one kernel for each
    (it specialises on divisibility by 16), so the cache must not share them."""
    kernel = softmax_kernels.fused_kernel
    run = vars(kernel)["run"]
    block_m, block_n, num_warps = softmax_kernels.fused_config(200)
    for width in (256, 250):
        x = torch.randn(32, width, device=DEVICE)[:, :200]
        y = torch.empty(32, width, device=DEVICE)[:, :200]
        misses = run.misses
        for _ in range(2):
            kernel[(32 // block_m,)](x, y, 32, 200, x.stride(0), y.stride(0), BLOCK_M=block_m,
                                     BLOCK_N=block_n, num_warps=num_warps)
            torch.testing.assert_close(y, torch.softmax(x, -1))
        assert run.misses == misses + 1, width


def test_argument_keys_refine_tritons_specialisation():
    from teachkit.kernels.launch_cache import UNCACHED, argument_key

    assert argument_key(16) != argument_key(17) != argument_key(1)  # integers by value
    assert argument_key(2**31) != argument_key(2**31 - 16)  # int64 against int32
    x = torch.zeros(8)
    assert argument_key(x) != argument_key(x[1:])  # 4 bytes off: not 16-byte aligned
    assert argument_key(x) != argument_key(x.half())
    assert argument_key(x) == argument_key(torch.ones(8))  # same dtype and alignment
    assert argument_key(True) != argument_key(False) != argument_key(0)
    assert argument_key(True) != argument_key(1)  # equal in Python, not to Triton
    assert argument_key(object()) is UNCACHED
    import numpy as np

    assert argument_key(np.int64(3)) is UNCACHED


def test_a_gluon_descriptor_is_keyed_by_dtype_block_and_layout_not_by_its_tensor():
    fh = pytest.importorskip("teachkit.kernels.flash_hopper")
    from teachkit.kernels.launch_cache import argument_key

    a, b = (torch.zeros(1, 2, 256, 64, dtype=torch.float16) for _ in range(2))
    assert argument_key(fh.tile_descriptor(a, 64)) == argument_key(fh.tile_descriptor(b, 64))
    assert argument_key(fh.tile_descriptor(a, 64)) != argument_key(fh.tile_descriptor(a, 128))
    assert argument_key(fh.tile_descriptor(a, 64)) != argument_key(
        fh.tile_descriptor(a.bfloat16(), 64))
    # same dtype and block in another layout (the 64-byte swizzle of 32 float16 columns)
    swizzled = fh.tile_descriptor(a, 64)
    swizzled.layout = fh.tile_layout(64, 32, torch.float16)
    assert swizzled.layout != fh.tile_descriptor(a, 64).layout
    assert argument_key(swizzled) != argument_key(fh.tile_descriptor(a, 64))


@pytest.mark.skipif(INTERPRETED, reason="the cache is only installed on a GPU")
def test_keys_by_value_miss_once_per_new_shape_and_the_dictionary_stays_bounded(monkeypatch):
    from teachkit.kernels import launch_cache

    run = vars(softmax_kernels.fused_kernel)["run"]
    monkeypatch.setattr(launch_cache, "MAX_KEYS", len(run.compiled) + 2)
    for rows in (5, 6, 7, 5):  # 5 and 6 are kept; 7 starts the dictionary again
        x = torch.randn(rows, 48, device=DEVICE)
        misses = run.misses
        torch.testing.assert_close(softmax_kernels.softmax(x), torch.softmax(x, -1))
        torch.testing.assert_close(softmax_kernels.softmax(x), torch.softmax(x, -1))
        assert run.misses - misses <= 1, rows  # the second call of a shape hits
    assert len(run.compiled) <= launch_cache.MAX_KEYS


@pytest.mark.skipif(INTERPRETED, reason="the cache is only installed on a GPU")
def test_a_cpu_tensor_misses_and_is_refused_as_triton_refuses_it():
    """A hit gives the launcher each tensor's address, which it does not check, so the key
    holds whether a tensor is on the GPU: a CPU tensor of a kept key's dtype and alignment
    misses, and Triton's own path refuses it."""
    kernel = softmax_kernels.fused_kernel
    block_m, block_n, num_warps = softmax_kernels.fused_config(64)
    x = torch.randn(16, 64, device=DEVICE)
    y = torch.empty_like(x)
    for _ in range(2):
        kernel[(16 // block_m,)](x, y, 16, 64, 64, 64, BLOCK_M=block_m, BLOCK_N=block_n,
                                 num_warps=num_warps)
    run = vars(kernel)["run"]
    hits, misses = run.hits, run.misses
    with pytest.raises(ValueError, match="cpu tensor"):
        kernel[(16 // block_m,)](x.cpu(), y, 16, 64, 64, 64, BLOCK_M=block_m,
                                 BLOCK_N=block_n, num_warps=num_warps)
    assert (run.hits, run.misses) == (hits, misses + 1)
    kernel[(16 // block_m,)](x, y, 16, 64, 64, 64, BLOCK_M=block_m, BLOCK_N=block_n,
                             num_warps=num_warps)
    assert run.hits == hits + 1  # the refusal kept nothing
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_the_written_key_function_gives_the_slow_keys_or_steps_aside():
    """For arguments of the kinds it was written for, key_function's key is slow_key's; for
    any others it returns None or raises, and the launch is keyed by slow_key."""
    from teachkit.kernels.launch_cache import _NoKey, key_function, slow_key

    constexpr = (False, False, False, False, False, True)
    first = (torch.zeros(4), 16, 0.5, None, True, 128)
    key_of = key_function(constexpr, first)
    x = torch.zeros(9, dtype=torch.float16)
    same_kinds = [first, (x, 17, 2.0, None, False, 64), (x[1:], 1, 0.1, None, True, "tf32")]
    for args in same_kinds:
        part, launch_args = key_of(*args)
        assert part == slow_key(constexpr, args)
        # the launcher gets the tensor's address, the rest as given
        assert launch_args == (args[0].data_ptr(), *args[1:])
    other_kinds = [(x, 16.0, 0.5, None, True, 1), (x, True, 0.5, None, True, 1),
                   (3, 16, 0.5, None, True, 1), (x, 16, 0.5), (x, 16, 0.5, object(), True, 1)]
    for args in other_kinds:
        try:
            fast = key_of(*args)
        except (AttributeError, TypeError, _NoKey):
            fast = None
        assert fast is None, args
    assert slow_key(constexpr, other_kinds[1]) != slow_key(constexpr, same_kinds[0])
    assert slow_key(constexpr, other_kinds[-1]) is None  # no key at all: Triton's own path
    one = torch.ones(1)
    assert key_function((False,), (torch.zeros(1),))(one) == ((torch.float32, True, False),
                                                              (one.data_ptr(),))


@pytest.mark.skipif(INTERPRETED, reason="the cache is only installed on a GPU")
def test_a_launch_after_a_change_of_kinds_misses_once():
    """An argument that is a float in one launch and a tensor in the next (as the flash kernel's
    q is a TMA descriptor or a tensor by its config) makes the next launch a miss, once: the
    same launch again hits, and so does a launch of the first kind."""
    import triton
    import triton.language as tl

    @cached_launch
    @triton.jit
    def copy_kernel(X, Y, EXTRA, N, BLOCK: tl.constexpr):  # EXTRA: any kind, unused
        offs = tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < N), mask=offs < N)

    run = vars(copy_kernel)["run"]
    x = torch.randn(50, device=DEVICE)
    for extra, new_key in ((0.5, True), (torch.zeros(3, device=DEVICE), True), (0.25, False)):
        misses = run.misses
        for _ in range(2):
            y = torch.zeros_like(x)
            copy_kernel[(1,)](x, y, extra, 50, BLOCK=64)
            torch.testing.assert_close(y, x)
        assert run.misses - misses == int(new_key), extra


def test_a_key_function_met_by_other_kinds_gives_the_slow_key_or_steps_aside():
    """Whatever kinds a key function was written for, a launch it keys gets slow_key's key: one
    launch, one key, so the launch after a change of kinds (a TMA descriptor where a tensor was,
    say) misses once, not twice. Every pair of kinds in two places, written and given."""
    import itertools

    from teachkit.kernels.launch_cache import _NoKey, key_function, slow_key

    descriptors = pytest.importorskip("triton.tools.tensor_descriptor")
    t = torch.zeros(4, 8, dtype=torch.float16)
    pool = [t, t[:, 1:], 16, 17, 0.5, None, True,
            descriptors.TensorDescriptor(t, list(t.shape), list(t.stride()), [2, 8])]
    constexpr = (False, False)
    for written in itertools.product(pool, repeat=2):
        key_of = key_function(constexpr, written)
        for given in itertools.product(pool, repeat=2):
            try:
                fast = key_of(*given)
            except (AttributeError, TypeError, _NoKey):
                continue
            if fast is not None:
                assert fast[0] == slow_key(constexpr, given), (written, given)


@pytest.mark.skipif(INTERPRETED, reason="the cache is only installed on a GPU")
def test_profiler_hooks_and_warmup_take_tritons_path():
    from triton import knobs

    run = vars(softmax_kernels.fused_kernel)["run"]
    x = torch.randn(8, 64, device=DEVICE)
    softmax_kernels.softmax(x)
    seen = []

    def hook(metadata):
        seen.append(metadata)

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        hits = run.hits
        softmax_kernels.softmax(x)
        assert run.hits == hits and len(seen) == 1  # the hook saw the launch
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)


def test_replay_keys_are_for_tensors_on_the_kernels_device_and_int_dims_only():
    from teachkit.kernels.launch_cache import launch_replay

    x = torch.randn(4, 8, device=DEVICE)
    assert softmax_kernels.replay_key(x, 1.0) is None and softmax_kernels.replay_key(x, 1)
    assert softmax_kernels.replay_key([1.0, 2.0], -1) is None
    assert launch_replay(cached_launch(lambda: None), (1,), (), {}) is None
    if ON_GPU:
        assert softmax_kernels.replay_key(x.cpu(), -1) is None  # a CPU tensor
    else:  # the interpreter: a key, but no launcher to keep
        softmax_kernels.FUSED_REPLAYS.clear()
        softmax_kernels.softmax(x)
        assert softmax_kernels.FUSED_REPLAYS == {}


KINDS_OF_SHORT_ROWS = ["2-D float32", "2-D, dim=1", "bfloat16", "3-D contiguous", "3-D, dim=2",
                       "1-D", "rows of a wider tensor", "one row repeated (row stride 0)",
                       "not 16-byte aligned", "a row of 16384"]
"""Calls of softmax that its kept launches serve (:func:`short_rows`)."""


def short_rows(kind: str, seed: int) -> tuple[torch.Tensor, int]:
    """A fresh input of the kind named ``kind`` of :data:`KINDS_OF_SHORT_ROWS` (its values
    drawn from ``seed``), and the dim of the call."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=DEVICE, generator=gen)

    return {
        "2-D float32": lambda: (randn(37, 200), -1),
        "2-D, dim=1": lambda: (randn(37, 200), 1),
        "bfloat16": lambda: (randn(64, 256).bfloat16(), -1),
        "3-D contiguous": lambda: (randn(2, 3, 100).half(), -1),
        "3-D, dim=2": lambda: (randn(2, 3, 100), 2),
        "1-D": lambda: (randn(1000), 0),
        "rows of a wider tensor": lambda: (randn(32, 256)[:, :200], -1),
        "one row repeated (row stride 0)": lambda: (randn(1, 300).expand(5, 300), -1),
        "not 16-byte aligned": lambda: (randn(37 * 200 + 1)[1:].view(37, 200), -1),
        "a row of 16384": lambda: (randn(3, 16384), -1),
    }[kind]()


@pytest.fixture
def kept_softmax(monkeypatch):
    """:data:`softmax_kernels.FUSED_REPLAYS`, empty, with stand-in launchers under the
    interpreter (:func:`kept_launches.kept_in`)."""
    with kept_in(softmax_kernels, softmax_kernels.FUSED_REPLAYS, monkeypatch) as table:
        yield table


@pytest.mark.parametrize("kind", KINDS_OF_SHORT_ROWS)
def test_softmax_keeps_its_fused_launch_and_a_repeat_makes_it_again(kind, kept_softmax):
    x, dim = short_rows(kind, 0)
    first = softmax_kernels.softmax(x, dim)
    assert len(kept_softmax) == 1
    run = vars(softmax_kernels.fused_kernel).get("run")  # the launch cache's, on a GPU
    before = (run.hits, run.misses) if run else -InterpretedReplay.made
    for t in (x, short_rows(kind, 1)[0]):  # the same tensor, and another of the same kind
        got = softmax_kernels.softmax(t, dim)
        want = torch.softmax(t.float(), dim).to(t.dtype)
        assert got.shape == want.shape and got.stride() == first.stride()
        torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(softmax_kernels.softmax(x, dim), first, atol=0, rtol=0)
    if run:
        assert (run.hits, run.misses) == before  # made again, not through the cache
    else:
        assert -InterpretedReplay.made == before - 3  # three launches made again
    assert len(kept_softmax) == 1


def test_calls_the_kept_launches_do_not_serve_take_the_full_path(kept_softmax):
    x = torch.randn(48, 64, device=DEVICE)
    for call in (lambda: softmax_kernels.softmax(x, 0),  # not the last axis
                 lambda: softmax_kernels.softmax(x.t(), -1),  # columns 48 elements apart
                 lambda: softmax_kernels.softmax(torch.randn(2, 5, 6, device=DEVICE)[:, 1:], -1),
                 lambda: softmax_kernels.softmax(torch.randn(2, 70000, device=DEVICE)),
                 lambda: softmax_kernels.softmax(torch.randn(0, 64, device=DEVICE)),
                 lambda: softmax_kernels.softmax(torch.tensor(3.0, device=DEVICE))):
        call()
        call()
    assert kept_softmax == {}
    torch.testing.assert_close(softmax_kernels.softmax(x, 0), torch.softmax(x, 0))


def test_a_kept_launch_still_refuses_what_the_full_path_refuses_and_follows_the_settings(
        kept_softmax):
    from triton import knobs

    x = torch.randn(8, 64, device=DEVICE, requires_grad=True)
    with torch.no_grad():
        softmax_kernels.softmax(x)  # kept: autograd does not record this call
        softmax_kernels.softmax(x)
    assert len(kept_softmax) == 1
    with pytest.raises(ValueError, match="requires grad"):
        softmax_kernels.softmax(x)  # autograd would record this one: the full checks refuse
    y = x.detach()
    before = softmax_kernels.replay_key(y, -1)
    with knobs.runtime.scope():
        knobs.runtime.debug = not knobs.runtime.debug
        assert softmax_kernels.replay_key(y, -1) != before  # another compiled kernel
    assert softmax_kernels.replay_key(y, -1) == before


@pytest.mark.skipif(INTERPRETED, reason="the launch cache is only installed on a GPU")
def test_a_kept_launch_is_captured_into_a_cuda_graph_on_the_capturing_stream():
    x = torch.randn(16, 128, device=DEVICE)
    softmax_kernels.softmax(x)
    softmax_kernels.softmax(x)  # the kept launch, before and during capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        y = softmax_kernels.softmax(x)
    torch.cuda.current_stream().wait_stream(stream)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_a_replay_makes_the_cached_launchers_call_again_with_other_addresses():
    """On any machine: a CachedRun around a stand-in kernel, its launcher a recorder."""
    from types import SimpleNamespace

    from teachkit.kernels.launch_cache import LaunchReplay

    params = [SimpleNamespace(is_constexpr=c) for c in (False, False, False, False, True)]
    run = CachedRun(SimpleNamespace(params=params, pre_run_hooks=[]))
    x, y = torch.zeros(8), torch.zeros(8)
    args, kwargs = (x, y, 8, 1, 64), {"num_warps": 2}
    assert run.replay((2,), args, kwargs) is None  # never launched: nothing to make again
    run._current_device, run._current_stream = (lambda: 0), (lambda device: 1000 + device)
    assert run.replay((2,), args, kwargs) is None  # launched, but not kept
    calls = []
    run._key_of = key_function(run._constexpr, args)  # as after the first launch's miss
    key, values = run.key(0, args, kwargs)
    head, rest = ("function", "metadata"), ("DEFAULT",)
    run.compiled[key] = ("compiled", lambda *a: calls.append(a), head, rest)
    replay = run.replay((2,), args, kwargs)
    assert isinstance(replay, LaunchReplay) and replay.grid == (2, 1, 1)
    replay(3, 111, 222)
    assert calls == [(2, 1, 1, 1003, *head, 111, 222, 8, 1, 64, *rest)]
    assert values[:2] == (x.data_ptr(), y.data_ptr()) and values[2:] == (8, 1, 64)
    # a tensor after an integer: the addresses would not all lead, so no replay
    assert run.replay((2,), (x, 8, y, 1, 64), kwargs) is None
    assert run.replay(lambda meta: (2,), args, kwargs) is None  # a grid function


@pytest.mark.parametrize("entry", ["softmax", "flash_attention", "decode_attention"])
def test_a_tensor_without_strides_gets_the_checks_message(entry):
    """A sparse tensor has no address to key: the call goes to the checks, which refuse it
    with their own words, not torch's 'Cannot access data pointer'."""
    import teachkit.kernels as kernels

    sparse = torch.randn(1, 2, 4, 16).to_sparse()
    call = getattr(kernels, entry)
    args = (sparse,) if entry == "softmax" else (sparse, sparse, sparse)
    with pytest.raises((TypeError, ValueError, RuntimeError)) as err:
        call(*args)
    assert "data pointer" not in str(err.value)
