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

import contextlib
import functools
import gc
import numbers
import os
import sys
import traceback
import warnings
from collections.abc import Iterator
from typing import TypeVar

import torch

__all__ = [
    "DEVICE",
    "ON_GPU",
    "INTERPRETED",
    "configure",
    "repair_interpreter_index",
    "device_name",
    "describe",
    "compute_capability",
    "multiprocessors",
    "current_gpu",
    "on_other_gpu",
    "has_triton",
    "interpreter_switched_off",
    "pick",
    "memory_budget",
    "fits",
    "fits_or_skip",
    "is_out_of_memory",
    "skip_if_out_of_memory",
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
    if not on_gpu:
        repair_interpreter_index()
    return on_gpu


def repair_interpreter_index() -> bool:
    """Let Triton's interpreter take a loop bound computed from ``tl.program_id`` under
    NumPy 2.4 and later; return ``True`` when the repair was installed.

    The interpreter holds ``tl.program_id(0)`` as a NumPy array of one element, not of none,
    and Triton 3.6's interpreter turns a value into a Python ``int`` (for ``range``) with
    ``int(array)``. NumPy 2.4 made that a ``TypeError`` for any array that is not 0-d ("only
    0-dimensional arrays can be converted to Python scalars"), so a causal kernel, whose key
    loop ends where its query block starts, fails on a CPU with Triton 3.6 (Colab's version)
    and a NumPy from 2.4 on. Triton fixed it upstream (triton-lang/triton#9172, which takes
    the array's one element); this wraps the interpreter's tensor patch so that its
    ``__index__`` does the same. Nothing changes with an older NumPy, without Triton, or when
    Triton's interpreter is laid out differently.
    """
    import numpy as np

    if tuple(int(part) for part in np.__version__.split(".")[:2]) < (2, 4):
        return False
    try:
        from triton.runtime import interpreter
    except ImportError:  # no Triton (macOS, Windows): the kernels do not run anyway
        return False
    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None or getattr(patch, "repairs_index", False):
        return patch is not None

    def patch_lang_tensor(tensor: object, scope: object) -> None:
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patch_lang_tensor.repairs_index = True
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True


ON_GPU: bool = configure()
"""``True`` when kernels compile for a CUDA GPU; ``False`` under Triton's CPU interpreter."""

INTERPRETED: bool = not ON_GPU
"""``True`` when Triton kernels run in the interpreter (CPU tensors, small sizes)."""

DEVICE: torch.device = torch.device("cuda" if ON_GPU else "cpu")
"""Where the course puts its tensors: ``cuda`` on a GPU machine, else ``cpu``."""


def interpreter_switched_off() -> bool:
    """``True`` when no Triton kernel can run: no CUDA GPU, yet ``TRITON_INTERPRET`` holds a false
    value (``0``, ``false``, ``off``, ``no``, empty), so Triton neither interprets nor finds a
    driver. ``python -m teachkit.kernels`` sets it on purpose to compile without running; a
    kernel launch checks it first (:func:`teachkit.validation.require_kernel_world`).
    """
    if ON_GPU:  # asked on every launch: on a GPU, answer without reading the environment
        return False
    value = os.environ.get("TRITON_INTERPRET")
    return value is not None and value.strip().lower() not in ("1", "true", "on", "yes", "y")


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
    if type(device) is torch.device and device.index is not None and device.type == "cuda":
        return device.index  # a tensor's device, as the kernels ask on every launch
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


current_gpu = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
"""The current CUDA device's index, as ``torch.cuda.current_device()`` gives it but without its
check that CUDA is initialised (torch's C function): for hot paths that already know CUDA is up
(a CUDA tensor in hand, a kernel launched before)."""


def on_other_gpu(t: object) -> bool:
    """True when ``t`` is a CUDA tensor on a GPU other than the current CUDA device.

    Triton launches a kernel on the current device, whichever GPU its tensors live on, while
    torch's own ops run on their inputs' GPU. The entry points of :mod:`teachkit.kernels`
    (``softmax`` and its variants, ``flash_attention``, ``decode_attention``) ask this of their
    first input and, when it is true, launch inside ``torch.cuda.device(t.device)``, so a tensor
    on ``cuda:1`` works as it does with ``torch.softmax``. One comparison on every call; nothing
    on a CPU.

    Examples
    --------
    >>> on_other_gpu(torch.zeros(2))  # a CPU tensor
    False
    """
    return type(t) is torch.Tensor and t.is_cuda and t.get_device() != current_gpu()


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


# --- how much memory a problem may take -----------------------------------------------------------

HOST_MEMORY_FALLBACK = 2**34
"""What :func:`memory_budget` assumes on a CPU when the OS does not say (16 GiB)."""


def _host_memory() -> int:
    """The machine's physical memory in bytes, or :data:`HOST_MEMORY_FALLBACK`."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return HOST_MEMORY_FALLBACK


def memory_budget(device: torch.device | str | None = None) -> int:
    """Bytes this process may still allocate on ``device`` (default :data:`DEVICE`).

    On a CUDA GPU: the smaller of the driver's free memory (``torch.cuda.mem_get_info``) and
    what the per-process cap leaves (``fraction x total - reserved``, the fraction set by
    ``torch.cuda.set_per_process_memory_fraction``, 1 where torch cannot say), plus what
    PyTorch's caching allocator holds reserved but unused (``reserved - allocated``), which it
    hands out again first. Other processes on the same GPU count against it through the
    driver's free memory.

    On a CPU: the machine's physical memory (``os.sysconf``; 16 GiB where the OS does not
    say), a generous figure on purpose: the interpreter's problems are small, and the budget
    only exists so that the same code runs in both worlds.
    """
    device = DEVICE if device is None else torch.device(device)
    if device.type != "cuda":
        return _host_memory()
    index = _index(device)
    free, total = torch.cuda.mem_get_info(index)
    reserved = torch.cuda.memory_reserved(index)
    allocated = torch.cuda.memory_allocated(index)
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    fraction = get_fraction(index) if get_fraction is not None else 1.0
    capped = int(fraction * total) - reserved
    return max(0, min(free, capped) + reserved - allocated)


def fits(nbytes: int, headroom: float = 0.9, device: torch.device | str | None = None) -> bool:
    """True when ``nbytes`` fit in ``headroom`` times :func:`memory_budget` (the rest is left
    for the allocator's rounding, kernels' workspaces and what an estimate forgot).

    Examples
    --------
    >>> fits(1), fits(2**80)
    (True, False)
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Real):
        raise TypeError(f"nbytes must be a number of bytes, got {type(nbytes).__name__}")
    if not nbytes >= 0:
        raise ValueError(f"nbytes must be >= 0 (a size in bytes), got {nbytes!r}")
    if not (isinstance(headroom, numbers.Real) and 0 < headroom <= 1):
        raise ValueError(f"headroom must be a fraction in (0, 1], got {headroom!r}")
    return nbytes <= headroom * memory_budget(device)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f}"


def fits_or_skip(nbytes: int, what: str, headroom: float = 0.9) -> bool:
    """:func:`fits`, and when it does not, one printed line saying that ``what`` is skipped.

    For benchmark loops: ``if not fits_or_skip(estimate, label): continue``. The line goes to
    stdout, so that a notebook shows it beside the results.
    """
    if fits(nbytes, headroom):
        return True
    where = "this GPU has free" if ON_GPU else "this machine has"
    print(f"skipped {what}: it needs about {_gib(nbytes)} GiB, more than {where} "
          f"({_gib(memory_budget())} GiB)")
    return False


def is_out_of_memory(err: BaseException) -> bool:
    """True for ``torch.cuda.OutOfMemoryError`` and for a ``RuntimeError`` that says
    "out of memory" (how some backends and older torch report it)."""
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


def free_cached_memory() -> None:
    """Collect garbage, then hand PyTorch's cached GPU memory back to the driver."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _release_frames(err: BaseException) -> None:
    """Let go of what the frames an error passed through hold (the failed block's tensors, also
    through the closures of the functions those frames ran): clear each frame and unlink the
    traceback, for the error and the ones it was raised while handling."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        tb = err.__traceback__
        traceback.clear_frames(tb)
        while tb is not None:  # a frame keeps its function (and its closure) until freed
            tb.tb_next, tb = None, tb.tb_next
        err = err.__context__


@contextlib.contextmanager
def skip_if_out_of_memory(what: str) -> Iterator[None]:
    """Run the ``with`` block; if it runs out of GPU memory, say so in one line and go on.

    The out-of-memory error (see :func:`is_out_of_memory`) is swallowed after the memory the
    failed block held is freed (its frames are cleared, garbage collected, the allocator's cache
    emptied), so that the next problem of a loop starts clean; every other exception propagates.

    Examples
    --------
    >>> for n in (1, 2):
    ...     with skip_if_out_of_memory(f"problem {n}"):
    ...         if n == 1:
    ...             raise torch.cuda.OutOfMemoryError("CUDA out of memory")
    ...         print(f"problem {n} ran")  # doctest: +ELLIPSIS
    skipped problem 1: it needs more GPU memory than this GPU has free (... GiB)
    problem 2 ran
    """
    try:
        yield
    except Exception as err:
        if not is_out_of_memory(err):
            raise
        _release_frames(err)
    else:
        return
    free_cached_memory()
    print(f"skipped {what}: it needs more GPU memory than this GPU has free "
          f"({_gib(memory_budget())} GiB)")
