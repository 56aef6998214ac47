"""A shorter host path for the launches an entry point makes on every call.

``kernel[grid](*args)`` goes through ``JITFunction.run``, which on every call binds the
arguments, specialises them (dtype and 16-byte alignment of each tensor, divisibility of each
integer), builds a cache key from them and the options, finds the compiled kernel, checks the
globals the kernel read, builds launch metadata for profiler hooks and calls the launcher.
``python -m teachkit.bench host`` measures that on a GPU: about 16 µs a launch on an H100
machine, of which the launcher itself, handed the compiled kernel, takes about 6.

:func:`cached_launch` keeps, per kernel, a dictionary from what decides the compiled kernel
(Triton's own specialisation of the arguments, the options passed, the device and Triton's
debug settings) to the compiled kernel, and on a hit calls its launcher directly. A miss goes
through ``JITFunction.run`` unchanged, which compiles or finds the kernel, launches it and
returns it for the dictionary. Anything this path does not handle takes ``JITFunction.run``
too: a grid given as a function, ``warmup``, pre-run hooks, profiler launch hooks.

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

from ..device import INTERPRETED

__all__ = ["cached_launch", "CachedRun"]

K = TypeVar("K")


class CachedRun:
    """The ``run`` that :func:`cached_launch` gives a kernel: ``kernel[grid](...)`` calls it.

    ``compiled`` maps a launch's key to its compiled kernel; ``hits`` and ``misses`` count the
    launches that took the short path and those that went through ``JITFunction.run``.
    """

    def __init__(self, kernel: Any) -> None:
        from triton import knobs
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction

        self.kernel = kernel
        self.compiled: dict[tuple, Any] = {}
        self.hits = 0
        self.misses = 0
        self._full_run = JITFunction.run
        self._driver = driver
        self._knobs = knobs

    def _hooks_free(self) -> bool:
        """True when no profiler hook wants to see launches (their chains are empty)."""
        runtime = self._knobs.runtime
        return all(type(h).__name__ == "HookChain" and not h.calls
                   for h in (runtime.launch_enter_hook, runtime.launch_exit_hook))

    def _key(self, device: int, specialization: list, options: dict) -> tuple:
        """What decides the compiled kernel: Triton's specialisation of the arguments (from the
        kernel's binder), the options passed, the device and Triton's debug settings."""
        return (device, tuple(specialization), tuple(options.items()), self._knobs.runtime.debug,
                self._knobs.compilation.instrumentation_mode)

    def _keep(self, compiled: Any, key: tuple) -> None:
        if compiled is not None and not hasattr(compiled, "result"):  # not compiled async
            self.compiled[key] = compiled

    def __call__(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = self.kernel
        if warmup or callable(grid) or kernel.pre_run_hooks or not self._hooks_free():
            return self._full_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
        device = self._driver.active.get_current_device()
        caches = kernel.device_caches.get(device)
        if caches is None:  # this device's binder is made by the first full run
            self.misses += 1
            compiled = self._full_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            _, specialization, options = kernel.device_caches[device][-1](*args, **kwargs)
            self._keep(compiled, self._key(device, specialization, options))
            return compiled
        bound, specialization, options = caches[-1](*args, **kwargs)
        key = self._key(device, specialization, options)
        compiled = self.compiled.get(key)
        if compiled is None:
            self.misses += 1
            compiled = self._full_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            self._keep(compiled, key)
            return compiled
        self.hits += 1
        n = len(grid)
        compiled.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
                     self._driver.active.get_current_stream(device), compiled.function,
                     compiled.packed_metadata, None, None, None, *bound.values())
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
