"""``python -m teachkit.bench host``: what one call costs on the host, beside torch's own op.

A model calls softmax, attention and decoding once per layer and per token, so the work between
the Python call and the kernel's start (checking the inputs, allocating the outputs, Triton's
launcher) is paid on every call. On a tiny problem the GPU's part is a few microseconds, less
than the host's, so the time per call of many back-to-back calls (the GPU synchronised once, at
the end) is the host's time. Each op is timed four ways (five on a GPU), side by side in one
process, the ways taking turns in rounds (:data:`ROUNDS`), each keeping its fastest:

``torch``
    PyTorch's own op on the same tensors (``torch.softmax``,
    ``scaled_dot_product_attention``).
``teachkit``
    The course's entry point, as a user calls it.
``teachkit, Triton's launch path``
    The same call with each kernel launched through ``JITFunction.run`` rather than the short
    path of :func:`teachkit.kernels.launch_cache.cached_launch` and without the launches an
    entry point keeps to make again (:func:`launch_cache_bypassed`): what the cache saves.
``teachkit, no launch``
    The same call with every Triton launch of :mod:`teachkit.kernels` skipped
    (:func:`launches_skipped`): the checks, the allocations and the Python around them.
``Triton's launcher alone``
    Only the calls of Triton's compiled launcher that one ``teachkit`` call makes, with the
    arguments the launch cache handed it (:func:`launcher_calls`): the floor that no Python
    around a Triton launch can go below. On a GPU only (the interpreter has no launcher).

``teachkit`` minus ``teachkit, no launch`` is what the launches cost, and the launcher alone
is part of that. On a CPU the kernels run in Triton's interpreter, so only ``teachkit, no
launch`` means anything there.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator

import torch

from ..device import DEVICE, ON_GPU, device_name, pick
from ..validation import require_positive_int
from .core import (
    DTYPES,
    Measurement,
    add_common_arguments,
    dtype_name,
    finish,
    format_table,
    positive_int,
    progress_bar,
    require_names,
    start,
)

__all__ = ["OPS", "PROVIDERS", "LAUNCHER_ALONE", "ROUNDS", "DEFAULT_CALLS", "host_problems",
           "launches_skipped", "launch_cache_bypassed", "launcher_calls", "host_us", "bench_host",
           "main"]

OPS = ("softmax", "flash_attention", "flash_attention_d128", "decode_attention")
"""The calls timed: each entry point by the name :mod:`teachkit.kernels` gives it, and
``flash_attention_d128``, ``flash_attention`` at head dim 128, which on a Hopper GPU runs the Gluon
kernel (:mod:`teachkit.kernels.flash_hopper`, TMA descriptors built each call) instead of the
Triton one."""
PROVIDERS = ("torch", "teachkit", "teachkit, Triton's launch path", "teachkit, no launch")
"""The ways each op is timed everywhere, in order."""
TORCH, TEACHKIT, TRITON_PATH, NO_LAUNCH = PROVIDERS
LAUNCHER_ALONE = "Triton's launcher alone"
"""The way timed after :data:`PROVIDERS` where launches go through the launch cache (a GPU)."""
DEFAULT_CALLS = pick(cpu=20, gpu=1000)
"""Back-to-back calls a timing unless told: enough on a GPU for microseconds to add up to
milliseconds; few in the interpreter, where a call takes milliseconds."""
ROUNDS = 10
"""Rounds in which every provider is timed once; each provider's figure is its fastest round."""


def host_problems() -> dict[str, tuple[str, dict, Callable[[], object], Callable[[], object]]]:
    """Per op: its dtype's label (a key of :data:`teachkit.bench.DTYPES`), its sizes, torch's
    call and teachkit's call.

    On a GPU: softmax of 64 rows of 256 in bfloat16; flash_attention of (1, 2, 64, 64) in
    float16, and of (1, 2, 128, 128) (the Gluon kernel's smallest problem on Hopper);
    decode_attention of one new token of 32 heads of 128 against a cache of 256 tokens in
    float16, its lengths given and ``check_values=False``, as a decoding loop calls it.
    Smaller in the interpreter.
    """
    from ..kernels import decode_attention, flash_attention, softmax

    rows, cols = pick(cpu=(4, 64), gpu=(64, 256))
    x = torch.randn(rows, cols, dtype=torch.bfloat16, device=DEVICE)
    B, H, L, D = pick(cpu=(1, 2, 16, 16), gpu=(1, 2, 64, 64))
    q, k, v = (torch.randn(B, H, L, D, dtype=torch.float16, device=DEVICE) for _ in range(3))
    L2, D2 = pick(cpu=(16, 128), gpu=(128, 128))
    q2, k2, v2 = (torch.randn(B, H, L2, D2, dtype=torch.float16, device=DEVICE)
                  for _ in range(3))
    Hd, S, Dd = pick(cpu=(2, 64, 16), gpu=(32, 256, 128))
    qd, kc, vc = (torch.randn(1, Hd, n, Dd, dtype=torch.float16, device=DEVICE)
                  for n in (1, S, S))
    lens = torch.full((1,), S, dtype=torch.int32, device=DEVICE)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {
        "softmax": ("bf16", {"rows": rows, "cols": cols},
                    lambda: torch.softmax(x, -1), lambda: softmax(x)),
        "flash_attention": ("fp16", {"B": B, "H": H, "L": L, "S": L, "D": D},
                            lambda: sdpa(q, k, v), lambda: flash_attention(q, k, v)),
        "flash_attention_d128": ("fp16", {"B": B, "H": H, "L": L2, "S": L2, "D": D2},
                                 lambda: sdpa(q2, k2, v2), lambda: flash_attention(q2, k2, v2)),
        "decode_attention": ("fp16", {"B": 1, "H": Hd, "S": S, "D": Dd},
                             lambda: sdpa(qd, kc, vc),
                             lambda: decode_attention(qd, kc, vc, cache_seqlens=lens,
                                                      check_values=False)),
    }


def _no_launch(*args: object, **kwargs: object) -> None:
    return None


def _entry_kernels() -> list:
    """The Triton and Gluon kernels of the modules behind the entry points, each once."""
    from triton.runtime.jit import KernelInterface

    from ..kernels import (
        decode,
        decode_simple,
        flash,
        flash_backward,
        flash_simple,
        softmax_kernels,
    )

    modules = [softmax_kernels, flash, flash_simple, flash_backward, decode, decode_simple]
    with contextlib.suppress(ImportError):  # a Triton without Gluon
        from ..kernels import flash_backward_hopper, flash_hopper
        modules += [flash_hopper, flash_backward_hopper]
    return list({id(obj): obj for module in modules for obj in vars(module).values()
                 if isinstance(obj, KernelInterface)}.values())


@contextlib.contextmanager
def _runs_replaced(run_for: Callable[[object], Callable | None]) -> Iterator[None]:
    """Within the block each kernel's ``run`` is ``run_for(kernel)`` (``None``: the class's
    own, ``JITFunction.run``); on the way out, an exception included, each gets back the
    ``run`` it had."""
    kernels = _entry_kernels()
    own = [vars(kernel).get("run") for kernel in kernels]
    try:
        for kernel in kernels:
            run = run_for(kernel)
            if run is None:
                vars(kernel).pop("run", None)
            else:
                kernel.run = run
        yield
    finally:
        for kernel, run in zip(kernels, own, strict=True):
            if run is None:
                vars(kernel).pop("run", None)
            else:
                kernel.run = run


def _launchers_replaced(replay: tuple, launch_for: Callable[[Callable], Callable | None],
                        ) -> tuple | None:
    """``replay`` with the launcher of each of its
    :class:`~teachkit.kernels.launch_cache.LaunchReplay` (itself, or a field of the named tuple
    an entry point keeps, such as :class:`~teachkit.kernels.decode.DecodeReplay`) replaced by
    ``launch_for(launcher)``; ``None`` where that gives ``None`` for any of them."""
    from ..kernels.launch_cache import LaunchReplay

    if isinstance(replay, LaunchReplay):
        launch = launch_for(replay.launch)
        return None if launch is None else replay._replace(launch=launch)
    fields = {}
    for name, value in zip(replay._fields, replay, strict=True):
        if isinstance(value, LaunchReplay):
            fields[name] = _launchers_replaced(value, launch_for)
            if fields[name] is None:
                return None
    return replay._replace(**fields)


@contextlib.contextmanager
def _replays_replaced(launch_for: Callable[[Callable], Callable | None]) -> Iterator[None]:
    """Within the block each entry point's kept launches
    (:data:`~teachkit.kernels.launch_cache.REPLAY_TABLES`) call ``launch_for(launcher)``
    instead of their launcher, or are dropped where it gives ``None`` (so the entry point takes
    its first call's path); on the way out each table holds what it held before, and nothing
    kept within the block."""
    from ..kernels.launch_cache import REPLAY_TABLES

    held = [dict(table) for table in REPLAY_TABLES]
    try:
        for table in REPLAY_TABLES:
            for key, replay in list(table.items()):
                replaced = _launchers_replaced(replay, launch_for)
                if replaced is None:
                    del table[key]
                else:
                    table[key] = replaced
        yield
    finally:
        for table, before in zip(REPLAY_TABLES, held, strict=True):
            table.clear()
            table.update(before)


@contextlib.contextmanager
def launches_skipped() -> Iterator[None]:
    """Within the block, launching any Triton kernel of :mod:`teachkit.kernels` does nothing.

    ``kernel[grid](...)`` calls the kernel's ``run``; each kernel object gets a ``run`` of its
    own that returns at once, and an entry point's kept launches
    (:class:`~teachkit.kernels.launch_cache.LaunchReplay`) a launcher that does; each gets its
    own back on the way out (an exception included)."""
    with _runs_replaced(lambda kernel: _no_launch), _replays_replaced(lambda launch: _no_launch):
        yield


@contextlib.contextmanager
def launch_cache_bypassed() -> Iterator[None]:
    """Within the block, every kernel of :mod:`teachkit.kernels` is launched through Triton's
    ``JITFunction.run``, as if it had no
    :func:`~teachkit.kernels.launch_cache.cached_launch` (and so no kept launches either)."""
    with _runs_replaced(lambda kernel: None), _replays_replaced(lambda launch: None):
        yield


def launcher_calls(fn: Callable[[], object]) -> tuple[object, list[tuple[Callable, tuple]]]:
    """Call ``fn`` once and return what it returned, with each call it made of a Triton
    launcher through the launch cache (:class:`~teachkit.kernels.launch_cache.CachedRun`, or
    a launch an entry point kept, :class:`~teachkit.kernels.launch_cache.LaunchReplay`): the
    launcher and its arguments, in order. Empty where no launch took the cache's short path
    (Triton's interpreter, or a call that missed).

    The arguments hold the addresses of the call's tensors, not the tensors: replay them only
    while what ``fn`` returned is held, so that they write where they wrote the first time (the
    buffers an entry point keeps between calls stay, :mod:`teachkit.kernels.scratch`)."""
    from ..kernels.launch_cache import CachedRun

    made: list[tuple[Callable, tuple]] = []

    def recording(launch: Callable) -> Callable:
        def launch_and_record(*args: object) -> object:
            made.append((launch, args))
            return launch(*args)
        return launch_and_record

    runs = [run for kernel in _entry_kernels()
            if isinstance(run := vars(kernel).get("run"), CachedRun)]
    swapped = []
    try:
        for run in runs:
            for key, (compiled, launch, head, rest) in list(run.compiled.items()):
                entry = (compiled, recording(launch), head, rest)
                run.compiled[key] = entry
                swapped.append((run, key, entry, launch))
        with _replays_replaced(recording):
            result = fn()
    finally:
        for run, key, entry, launch in swapped:
            if run.compiled.get(key) is entry:
                run.compiled[key] = (entry[0], launch, *entry[2:])
    return result, made


def host_us(fn: Callable[[], object], calls: int) -> float:
    """Microseconds per call of ``calls`` back-to-back calls of ``fn``, the GPU synchronised at
    the end, after one call to warm up (compilation)."""
    def sync() -> None:
        if ON_GPU:
            torch.cuda.synchronize()

    fn()
    sync()
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - begin) / calls * 1e6


def bench_host(ops: Iterable[str] | None = None, calls: int | None = None,
               show_progress: bool = True, rounds: int = ROUNDS) -> list[Measurement]:
    """Time every op of ``ops`` (default :data:`OPS`) each way of :data:`PROVIDERS`, and
    :data:`LAUNCHER_ALONE` where its launches took the launch cache's short path, in ``rounds``
    interleaved rounds (default :data:`ROUNDS`), keeping each way's fastest.

    ``calls`` back-to-back calls a timing (default :data:`DEFAULT_CALLS`). The fastest round,
    not the median: what a call costs the host only grows with whatever else the machine does
    meanwhile (other processes, the allocator, interrupts), so the least time is the steadiest
    estimate of the call's own cost.
    """
    names = require_names(ops, OPS, "ops")
    calls = DEFAULT_CALLS if calls is None else require_positive_int(calls, "calls")
    rounds = require_positive_int(rounds, "rounds")
    problems = host_problems()
    ways = {NO_LAUNCH: launches_skipped, TRITON_PATH: launch_cache_bypassed}
    providers = {op: PROVIDERS for op in names}
    held, replays = {}, {}  # per op: what its recorded call returned, and its launcher calls
    for op in names:
        problems[op][3]()  # compiles, and fills the launch cache
        held[op], made = launcher_calls(problems[op][3])
        if made:
            replays[op] = lambda made=made: [launch(*args) for launch, args in made]
            providers[op] = (*PROVIDERS, LAUNCHER_ALONE)
    best = {(op, provider): float("inf") for op in names for provider in providers[op]}
    with progress_bar(len(names) * rounds, show_progress) as bar:
        # Every op and every way take turns within each round, so a slow spell of the machine
        # (it comes and goes over seconds on a shared host) hits them alike.
        for round_ in range(rounds):
            for op in names:
                bar.set_description(f"round {round_ + 1} of {rounds}: {op}")
                torch_call, teachkit_call = problems[op][2:]
                timed = {TORCH: torch_call, TEACHKIT: teachkit_call}
                if op in replays:
                    timed[LAUNCHER_ALONE] = replays[op]
                for provider in providers[op]:
                    with ways.get(provider, contextlib.nullcontext)():
                        us = host_us(timed.get(provider, teachkit_call), calls)
                    best[op, provider] = min(best[op, provider], us)
                bar.update()
    results = []
    for (op, provider), us in best.items():
        dtype, sizes = problems[op][:2]
        params = {"op": op, **sizes, "dtype": dtype_name(DTYPES[dtype])}
        results.append(Measurement(problem=op, dtype=dtype, provider=provider, ms=us / 1e3,
                                   value=us, unit="µs per call", params=params))
    return results


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m teachkit.bench host [options]``."""
    parser = argparse.ArgumentParser(prog="python -m teachkit.bench host", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), metavar="OP",
                        help="which entry points to time: " + ", ".join(OPS))
    parser.add_argument("--calls", type=positive_int, default=None,
                        help="back-to-back calls a timing (default 1000 on a GPU, 20 on a CPU)")
    parser.add_argument("--rounds", type=positive_int, default=ROUNDS,
                        help=f"interleaved rounds, each way keeping its fastest (default {ROUNDS})")
    add_common_arguments(parser)
    args = parser.parse_args(sys.argv[2:] if argv is None else argv)
    if args.graph:
        parser.error("--graph does not apply: a CUDA graph removes the host cost this measures")
    if not start(args):
        return 2
    print(f"device: {device_name()}")
    results = bench_host(args.ops, args.calls, rounds=args.rounds)
    print(format_table(results, baseline=(TORCH,), subject=TEACHKIT))
    for op in dict.fromkeys(r.problem for r in results):
        got = {r.provider: r.value for r in results if r.problem == op}
        checks = got[NO_LAUNCH]
        alone = (f", of which Triton's launcher alone {got[LAUNCHER_ALONE]:.1f} µs"
                 if LAUNCHER_ALONE in got else "")
        print(f"{op}: checks, allocations and Python {checks:.1f} µs, "
              f"launches {got[TEACHKIT] - checks:.1f} µs{alone} "
              f"({got[TRITON_PATH] - checks:.1f} µs through JITFunction.run), "
              f"torch {got[TORCH]:.1f} µs")

    def figure() -> object:
        from ..plots.host import plot_host_cost

        return plot_host_cost(results)

    finish(args, results, figure, timing=f"host: the fastest of {args.rounds} interleaved rounds "
           f"of {args.calls or DEFAULT_CALLS} back-to-back calls (time.perf_counter, the GPU "
           "synchronised at the end)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
