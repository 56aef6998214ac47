"""The checked entry point of the CuTe DSL kernel, and what can be known without importing it.

:func:`cute_softmax` validates its input, then imports :mod:`teachkit.cute.kernel` (which needs
``cutlass``) only when it is about to launch. :func:`available` says whether that can work here (a
CUDA GPU of sm_80 or newer, and CuTe DSL installed) and :func:`unavailable_reason` why not;
:func:`kernel_source` shows the kernel's code by reading the file, so a notebook on a machine
without a GPU or CuTe DSL can still print it.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import torch

from ..gpus import CUTE_DSL_MIN_CAPABILITY
from ..source import SourceCode
from ..validation import require_float_tensor, require_no_grad

__all__ = ["INSTALL_HINT", "KERNEL_DTYPES", "available", "cute_softmax", "kernel_source",
           "unavailable_reason"]

INSTALL_HINT = (
    "teachkit.cute needs NVIDIA's CuTe DSL, the optional extra of teachkit: run "
    "`pip install -e .[cute]` in the repository (or `pip install nvidia-cutlass-dsl`)"
)
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""Dtypes the kernel reads and writes (it computes in float32)."""
_KERNEL_FILE = Path(__file__).with_name("kernel.py")


@functools.cache
def _cutlass_importable() -> bool:
    try:
        importlib.import_module("cutlass.cute")
    except Exception:  # not installed, or a broken install: either way, unusable
        return False
    return True


def _capability() -> tuple[int, int] | None:
    """``(major, minor)`` of the current CUDA GPU, or ``None`` without one."""
    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability())


def unavailable_reason() -> str | None:
    """Why the CuTe DSL kernel cannot run here, or ``None`` when it can.

    Checked in the order a learner can act on: no CUDA GPU (the simulation stands in), a GPU
    older than CuTe DSL supports (Ampere, sm_80: a T4 is sm_75; choose another runtime), then
    CuTe DSL not installed (install it).

    Examples
    --------
    >>> reason = unavailable_reason()
    >>> reason is None or isinstance(reason, str)
    True
    """
    capability = _capability()
    if capability is None:
        return ("no CUDA GPU here; teachkit.cute.simulate_cute_softmax runs the kernel's "
                "thread, warp and block tiers in plain torch")
    if capability < CUTE_DSL_MIN_CAPABILITY:
        major, minor = capability
        return (f"CuTe DSL supports Ampere (sm_80) and newer; this GPU is sm_{major}{minor} "
                f"({torch.cuda.get_device_name()}); in Colab choose an L4, A100 or H100 "
                "runtime, or use teachkit.cute.simulate_cute_softmax")
    if not _cutlass_importable():
        return INSTALL_HINT
    return None


def available() -> bool:
    """``True`` when the kernel can run here: a CUDA GPU of sm_80 or newer, and CuTe DSL imports
    (:func:`unavailable_reason` says what is missing).

    Examples
    --------
    >>> available() == (unavailable_reason() is None)
    True
    """
    return unavailable_reason() is None


def load_kernel_module():
    """Import :mod:`teachkit.cute.kernel`, or raise ``ImportError`` saying how to install CuTe."""
    try:
        return importlib.import_module("teachkit.cute.kernel")
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} ({err})") from err


def cute_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis of a 2-D CUDA tensor by the CuTe DSL kernel.

    One CTA per row; rows of any length; float32, bfloat16 or float16 in and out, float32
    inside. The kernel is compiled on first use for each dtype and layout and cached. Semantics
    follow ``torch.softmax``: a row with NaN or ``+inf``, or only ``-inf``, gives NaN.

    Parameters
    ----------
    x : torch.Tensor
        ``(rows, cols)`` on a CUDA device (made contiguous if it is not).

    Returns
    -------
    torch.Tensor
        Same shape, dtype and device as ``x``.

    Raises
    ------
    TypeError
        ``x`` is not a tensor of a kernel dtype.
    ValueError
        ``x`` requires grad (the kernel has no backward pass), is not 2-D, or is not on a CUDA
        device.
    RuntimeError
        No CUDA GPU is present, or it is older than sm_80 (CuTe DSL needs Ampere or newer).
    ImportError
        CuTe DSL is not installed.

    Examples
    --------
    >>> cute_softmax(torch.randn(4, 10, dtype=torch.float64))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: the CuTe kernel reads float32, bfloat16 or float16, got torch.float64; ...
    """
    require_float_tensor(x)
    if x.dtype not in KERNEL_DTYPES:
        raise TypeError(
            f"the CuTe kernel reads float32, bfloat16 or float16, got {x.dtype}; convert with "
            "x.float(), or use teachkit.cute.simulate_cute_softmax, which takes any float dtype"
        )
    require_no_grad(("x", x), kernel="cute_softmax",
                    reference="the torch reference teachkit.softmax.safe_softmax")
    if x.dim() != 2:
        raise ValueError(
            f"cute_softmax takes a 2-D tensor (rows, cols), got shape {tuple(x.shape)}; "
            "reshape first, e.g. x.reshape(-1, x.shape[-1])"
        )
    if not torch.cuda.is_available():
        raise RuntimeError(
            "cute_softmax needs a CUDA GPU and this machine has none; on a CPU, "
            "teachkit.cute.simulate_cute_softmax runs the same tiers in plain torch"
        )
    if not x.is_cuda:
        raise ValueError(
            f"x is on {x.device}, but the CuTe kernel runs on a CUDA GPU; move it first, "
            "e.g. x.cuda()"
        )
    capability = tuple(torch.cuda.get_device_capability(x.device))
    if capability < CUTE_DSL_MIN_CAPABILITY:
        raise RuntimeError(
            f"CuTe DSL supports Ampere (sm_80) and newer; this GPU is "
            f"sm_{capability[0]}{capability[1]}; teachkit.cute.simulate_cute_softmax runs the "
            "same tiers in plain torch"
        )
    kernel = load_kernel_module()
    if x.numel() == 0:
        return torch.empty_like(x)
    return kernel.run_softmax(x.contiguous())


def kernel_source(name: str = "online_softmax_kernel") -> SourceCode:
    """The source of a function of :mod:`teachkit.cute.kernel`, read from the file.

    Works without CuTe DSL installed (nothing is imported), so a notebook can show the kernel
    on any machine. ``name`` is a top-level function: ``online_softmax_kernel``,
    ``merge_pair``, ``merge_warps``, ``launch_online_softmax``, ``run_softmax``...

    Examples
    --------
    >>> print(kernel_source("merge_pair"))  # doctest: +ELLIPSIS
    @cute.jit
    def merge_pair(...
    """
    text = _KERNEL_FILE.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            lines = text.splitlines()[start - 1 : node.end_lineno]
            return SourceCode("\n".join(lines), f"teachkit.cute.kernel.{name}")
    names = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
    raise ValueError(f"teachkit.cute.kernel has no function {name!r}; it has {names}")
