"""One level down: the online softmax as a CuTe DSL kernel, and its tiers simulated in torch.

Triton (notebook 06) lets a program reduce a row with ``tl.max`` or ``tl.reduce`` and decides
for it how threads cooperate. NVIDIA's CuTe DSL (CUTLASS 4.x, ``pip install -e .[cute]``) writes
that part by hand: every thread keeps a running ``(m, d)`` over its vector loads, warps merge
pairs by register shuffles, and warps merge through shared memory (notebook 11).

Importing this package needs neither a GPU nor CuTe DSL: only :func:`cute_softmax` does, and it
imports :mod:`teachkit.cute.kernel` when called. CuTe DSL compiles for Ampere (sm_80) and newer, so
in Colab the kernel runs on an L4, A100 or H100, not on a T4 (:func:`unavailable_reason` says so).

Modules
-------
config
    the layout of a row over threads and vectors (``launch_config``), shared by kernel and
    simulation.
simulate
    the kernel's thread, warp and block tiers run in plain torch, with a trace of each tier.
entry
    ``cute_softmax`` (checked entry point), ``available`` and ``unavailable_reason`` (a CUDA
    GPU of sm_80 or newer and CuTe DSL installed, or why not), ``kernel_source``.
kernel
    the CuTe DSL kernel itself (imports ``cutlass``).
verify
    any softmax checked against float64 ``torch.softmax`` on odd lengths and special rows.
bench
    the kernel timed beside ``teachkit.kernels.softmax`` and ``torch.softmax``; recorded figures.

Examples
--------
>>> import torch
>>> from teachkit.cute import simulate_cute_softmax
>>> x = torch.randn(2, 1000)
>>> torch.allclose(simulate_cute_softmax(x).out, torch.softmax(x, -1), atol=1e-6)
True
"""

from .config import WARP_SIZE, LaunchConfig, launch_config, vector_width
from .entry import INSTALL_HINT, available, cute_softmax, kernel_source, unavailable_reason
from .simulate import (
    CuteSoftmaxTrace,
    block_merge,
    butterfly_round,
    elements_of_thread,
    simulate_cute_softmax,
    thread_of_element,
    to_thread_major,
    warp_butterfly,
)

__all__ = [
    "INSTALL_HINT",
    "WARP_SIZE",
    "CuteSoftmaxTrace",
    "LaunchConfig",
    "available",
    "block_merge",
    "butterfly_round",
    "cute_softmax",
    "elements_of_thread",
    "kernel_source",
    "launch_config",
    "simulate_cute_softmax",
    "thread_of_element",
    "to_thread_major",
    "unavailable_reason",
    "vector_width",
    "warp_butterfly",
]
