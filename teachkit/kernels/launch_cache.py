"""A shorter host path for the launches an entry point makes on every call.

``kernel[grid](*args)`` goes through ``JITFunction.run``, which on every call binds the
arguments to the kernel's signature, specialises each (dtype and 16-byte alignment of a tensor,
divisibility by 16 of an integer), builds a cache key from that and the options, finds the
compiled kernel, checks the globals the kernel read, builds launch metadata for profiler hooks
and calls the launcher. For the decoding kernel's 50 parameters the binding and specialisation
alone took about 20 µs on an H100 machine, and the launcher, handed the compiled kernel, 13, each
timed by itself; ``python -m teachkit.bench host`` times the entry points with and without this
module.

:func:`cached_launch` keeps, per kernel, a dictionary from a launch's **key** to its compiled
kernel, and on a hit calls the compiled kernel's launcher directly. The key is built in Python
from what Triton specialises on, and finer: for each tensor its dtype and whether its address
is a multiple of 16; for each integer whether it is 1, whether it is a multiple of 16 and
which of int32 / int64 / uint64 holds it; the value of every ``tl.constexpr`` parameter and of
every keyword (``num_warps``, ...); the device; Triton's debug settings. Two launches with equal
keys therefore get the same compiled kernel from Triton too. A miss goes through
``JITFunction.run`` unchanged, which compiles or finds the kernel, launches it and returns it for
the dictionary. An argument of any other kind (a tensor descriptor, a NumPy integer) makes the
launch take ``JITFunction.run`` every time, as do a grid given as a function, ``warmup``,
pre-run hooks and profiler launch hooks.

Under Triton's interpreter (no GPU) the kernel is returned as it is.

Used as::

    @cached_launch
    @triton.jit
    def fused_kernel(X, Y, ...):
        ...

    fused_kernel[grid](x, y, ...)  # launched as any Triton kernel
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch

from ..device import INTERPRETED

__all__ = ["cached_launch", "CachedRun", "argument_key"]

K = TypeVar("K")

UNCACHED = object()
"""What :func:`argument_key` returns for an argument it does not know: no key, no cache."""


def argument_key(value: Any) -> Any:
    """The part of a launch's key for one argument of a non-constexpr parameter: at least what
    Triton specialises on, or :data:`UNCACHED`.

    Examples
    --------
    An integer's multiple of 16, equal to 1, fits int32, fits int64 (else uint64):

    >>> argument_key(32)[1:], argument_key(1)[1:], argument_key(2**40 + 3)[1:]
    ((True, False, True, True), (False, True, True, True), (False, False, False, True))
    >>> argument_key(0.5) is float, argument_key(None), argument_key(True)
    (True, None, (<class 'bool'>, True))
    >>> argument_key(torch.zeros(4)) == (torch.float32, True)
    True
    """
    kind = type(value)
    if kind is int:
        return (int, value % 16 == 0, value == 1, -2**31 <= value < 2**31,
                -2**63 <= value < 2**63)
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.data_ptr() % 16 == 0)
    if kind is float:
        return float
    if kind is bool:
        return (bool, value)
    if value is None:
        return None
    return UNCACHED


class CachedRun:
    """The ``run`` that :func:`cached_launch` gives a kernel: ``kernel[grid](...)`` calls it.

    ``compiled`` maps a launch's key to ``(compiled kernel, parameter names after the
    positional arguments, defaults used)``; ``hits`` and ``misses`` count the launches that took
    the short path and those that went through ``JITFunction.run``.
    """

    def __init__(self, kernel: Any) -> None:
        from triton import knobs
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction

        self.kernel = kernel
        self.compiled: dict[tuple, tuple] = {}
        self.hits = 0
        self.misses = 0
        self._constexpr = tuple(p.is_constexpr for p in kernel.params)
        self._full_run = JITFunction.run
        self._driver = driver
        self._knobs = knobs

    def _hooks_free(self) -> bool:
        """True when no profiler hook wants to see launches (their chains are empty)."""
        runtime = self._knobs.runtime
        return all(isinstance(h, self._knobs.HookChain) and not h.calls
                   for h in (runtime.launch_enter_hook, runtime.launch_exit_hook))

    def _key(self, device: int, args: tuple, kwargs: dict) -> tuple | None:
        """The launch's key, or None when an argument has no :func:`argument_key`."""
        if len(args) > len(self._constexpr):
            return None
        parts = [device, self._knobs.runtime.debug, self._knobs.compilation.instrumentation_mode]
        for value, constexpr in zip(args, self._constexpr, strict=False):
            part = value if constexpr else argument_key(value)
            if part is UNCACHED:
                return None
            parts.append(part)
        parts += kwargs.items()  # constexprs and options: their values decide the kernel
        return tuple(parts)

    def __call__(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = self.kernel
        if warmup or callable(grid) or kernel.pre_run_hooks or not self._hooks_free():
            return self._full_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
        device = self._driver.active.get_current_device()
        key = self._key(device, args, kwargs)
        try:
            hit = self.compiled.get(key) if key is not None else None
        except TypeError:  # an unhashable constexpr or keyword value: no key
            key = hit = None
        if hit is None:
            self.misses += 1
            compiled = self._full_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            if key is not None and compiled is not None and not hasattr(compiled, "result"):
                bound = kernel.device_caches[device][-1](*args, **kwargs)[0]
                rest = tuple(bound)[len(args):]
                self.compiled[key] = (compiled, rest,
                                      {n: bound[n] for n in rest if n not in kwargs})
            return compiled
        self.hits += 1
        compiled, rest, defaults = hit
        values = list(args)
        values += [kwargs[n] if n in kwargs else defaults[n] for n in rest]
        n = len(grid)
        compiled.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
                     self._driver.active.get_current_stream(device), compiled.function,
                     compiled.packed_metadata, None, None, None, *values)
        return compiled


def cached_launch(kernel: K) -> K:
    """Give a ``@triton.jit`` kernel the short host path of :class:`CachedRun`; returns it.

    Written above ``@triton.jit``. The kernel is the same object, launched the same way
    (``kernel[grid](...)``); only its ``run`` is replaced. Under the interpreter, or for
    anything that is not a ``JITFunction``, the kernel is returned untouched.
    """
    if INTERPRETED:
        return kernel
    from triton.runtime.jit import JITFunction

    if not isinstance(kernel, JITFunction):
        return kernel
    kernel.run = CachedRun(kernel)  # an instance attribute: ``kernel[grid]`` looks it up first
    return kernel
