"""A stand-in for Triton's launcher in the kept launches of the entry points, for tests under
Triton's interpreter, where there is no launcher and so nothing is kept."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

import pytest
import torch

from teachkit.device import INTERPRETED, ON_GPU


class InterpretedReplay:
    """Stands in for :func:`teachkit.kernels.launch_cache.launch_replay` and the
    :class:`~teachkit.kernels.launch_cache.LaunchReplay` it gives:
    ``InterpretedReplay(kernel, grid, args, kwargs)`` makes ``kernel[grid](*args, **kwargs)``
    again when called with ``(device, *values)``, each of the leading tensor arguments rebuilt,
    of its first launch's dtype, shape and strides, at the address given for it (CPU memory that
    the call's tensors own), and each leading TMA descriptor taken as given. ``made`` counts
    the launches of every stand-in."""

    made = 0

    def __init__(self, kernel, grid, args, kwargs):
        from teachkit.kernels.launch_cache import _per_call

        self.kernel, self.grid, self.kwargs = kernel, grid, kwargs
        leading = 0
        while leading < len(args) and _per_call(args[leading]):
            leading += 1
        self.layouts = [(t.dtype, t.shape, t.stride()) if isinstance(t, torch.Tensor) else None
                        for t in args[:leading]]
        self.rest = args[leading:]

    @staticmethod
    def at(address: int, dtype: torch.dtype, shape: torch.Size, stride: tuple) -> torch.Tensor:
        """The tensor of ``dtype``, ``shape`` and ``stride`` whose first element lies at
        ``address``, in CPU memory that another tensor owns."""
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
        nbytes = extent * dtype.itemsize
        raw = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=torch.uint8)
        return raw.view(dtype).as_strided(shape, stride)

    def __call__(self, device: int, *values: object) -> None:
        InterpretedReplay.made += 1
        leading = [value if layout is None else self.at(value, *layout)
                   for value, layout in zip(values, self.layouts, strict=True)]
        self.kernel[self.grid](*leading, *self.rest, **self.kwargs)


def launches_through(*kernels) -> int:
    """Launches of ``kernels`` through Triton's path so far: the launch cache's on a GPU; under
    the interpreter, minus the stand-ins' launches (a kept call makes none through it, and only
    the stand-ins count there)."""
    if ON_GPU:
        return sum(k.run.hits + k.run.misses for k in kernels)
    return -InterpretedReplay.made


def outputs(result) -> tuple:
    """An entry point's result as a tuple: ``(out, lse)`` as it is, ``out`` alone as ``(out,)``."""
    return result if isinstance(result, tuple) else (result,)


@contextlib.contextmanager
def kept_in(module: object, table: dict, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """An entry point's table of kept launches (``table``, of ``module``), emptied before and
    after the block; under the interpreter, ``module``'s kept launches are
    :class:`InterpretedReplay` stand-ins while ``monkeypatch`` lasts."""
    if INTERPRETED:
        monkeypatch.setattr(module, "launch_replay", InterpretedReplay)
    table.clear()
    try:
        yield table
    finally:
        table.clear()
