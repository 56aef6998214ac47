"""Which world the course runs in: a CUDA GPU, or Triton's interpreter on the CPU.

The decision is made once, when :mod:`teachkit` is imported, and before Triton is imported:
without a CUDA GPU the environment variable ``TRITON_INTERPRET=1`` is set, so every Triton kernel
of the course runs on CPU tensors through Triton's interpreter. With a GPU nothing is set and the
kernels compile for real. Notebooks never name a device; they ask this module.

Examples
--------
>>> import teachkit
>>> teachkit.device.DEVICE.type in ("cuda", "cpu")
True
>>> n = teachkit.device.pick(cpu=1_000, gpu=1_000_000)  # a size scaled to the world
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import TypeVar

import torch

__all__ = [
    "DEVICE",
    "ON_GPU",
    "INTERPRETED",
    "configure",
    "device_name",
    "describe",
    "compute_capability",
    "multiprocessors",
    "has_triton",
    "pick",
]

T = TypeVar("T")


def configure() -> bool:
    """Decide the world once; return ``True`` when a CUDA GPU is used.

    Without a CUDA GPU, sets ``TRITON_INTERPRET=1`` (unless the user already set it) so that
    Triton runs kernels through its interpreter on CPU tensors. Triton reads the variable when it
    is imported, so if Triton was imported before :mod:`teachkit` the choice cannot take effect and
    a warning says so.
    """
    on_gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
    if not on_gpu and "TRITON_INTERPRET" not in os.environ:
        if "triton" in sys.modules:
            warnings.warn(
                "triton was imported before teachkit on a machine without a CUDA GPU, so its "
                "interpreter could not be switched on; import teachkit first (or set "
                "TRITON_INTERPRET=1 before starting Python).",
                RuntimeWarning,
                stacklevel=2,
            )
        os.environ["TRITON_INTERPRET"] = "1"
    # Keep Triton's long-standing default (fused multiply-add allowed) and its warning quiet.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    return on_gpu


ON_GPU: bool = configure()
"""``True`` when kernels compile for a CUDA GPU; ``False`` under Triton's CPU interpreter."""

INTERPRETED: bool = not ON_GPU
"""``True`` when Triton kernels run in the interpreter (CPU tensors, small sizes)."""

DEVICE: torch.device = torch.device("cuda" if ON_GPU else "cpu")
"""Where the course puts its tensors: ``cuda`` on a GPU machine, else ``cpu``."""


def has_triton() -> bool:
    """Return ``True`` when Triton can be imported (it has no wheels for macOS or Windows)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def device_name() -> str:
    """A short human name of the device, e.g. ``'NVIDIA H100 80GB HBM3'`` or ``'CPU'``."""
    if ON_GPU:
        return torch.cuda.get_device_name(DEVICE)
    return "CPU (Triton interpreter)" if has_triton() else "CPU"


@functools.cache
def _properties(index: int) -> object:
    return torch.cuda.get_device_properties(index)


def _index(device: torch.device | str | None) -> int:
    device = torch.device("cuda" if device is None else device)
    if device.type != "cuda":
        raise ValueError(f"a CUDA device is needed, got {device}")
    return torch.cuda.current_device() if device.index is None else device.index


def compute_capability(device: torch.device | str | None = None) -> tuple[int, int]:
    """``(major, minor)`` compute capability of a CUDA device (default: the current one).

    Read once per device and kept: kernels ask on every launch, and asking torch each time
    costs microseconds a decoding step does not have.
    """
    props = _properties(_index(device))
    return props.major, props.minor


def multiprocessors(device: torch.device | str | None = None) -> int:
    """Streaming multiprocessors of a CUDA device (132 on an H100 SXM), read once per device."""
    return _properties(_index(device)).multi_processor_count


def describe() -> str:
    """One line that says which world this is, for the top of a notebook."""
    if ON_GPU:
        major, minor = torch.cuda.get_device_capability(DEVICE)
        world = f"GPU world: {device_name()} (sm_{major}{minor}), Triton kernels compiled"
    elif has_triton():
        world = "CPU world: Triton kernels run in the interpreter (TRITON_INTERPRET=1), small sizes"
    else:
        world = "CPU world without Triton: kernels are unavailable, the torch references run"
    return f"{world}; torch {torch.__version__}"


def pick(cpu: T, gpu: T) -> T:
    """Return ``gpu`` on a GPU machine and ``cpu`` otherwise.

    Use it for problem sizes, so that one notebook runs GPU-filling sizes on a GPU and
    interpreter-friendly sizes on a laptop.

    Parameters
    ----------
    cpu, gpu
        The value for each world.
    """
    return gpu if ON_GPU else cpu
