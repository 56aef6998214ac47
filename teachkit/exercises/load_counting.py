"""How many times a learner's Triton kernel loads each element of the buffers a checker gave it,
counted while Triton's interpreter runs the kernel once on CPU buffers: all the interpreter's
loads go through one method of its builder, which :func:`count_loads` wraps.

On a CPU the learner's kernel is already interpreted. On a GPU it is compiled (a
``JITFunction``), and an interpreted twin of it runs instead: its own code over a copy of its
globals in which every ``@triton.jit`` function (the helpers it calls, the combine it passes to
``tl.reduce``) is a twin in turn, with the language's own device functions (``tl.max``,
``tl.sum``, the tensor's ``x.max(0)``) twinned in ``triton.language`` for as long as it runs.
Whatever the interpreter swaps into ``triton.language`` is put back afterwards, so kernels
compiled later compile as before. On a GPU the interpreter is otherwise unused, so the repair
of its loop bounds that a CPU session installs on import (:func:`teachkit.device.
repair_interpreter_index`, for Triton 3.6 under NumPy 2.4 and later) is installed here first.
So a checker counts the same loads wherever the learner is.
"""

from __future__ import annotations

import contextlib
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from teachkit.device import repair_interpreter_index

__all__ = ["count_loads"]

# Counting swaps functions in ``triton.language`` and a method of the interpreter's builder for
# as long as a kernel runs: two threads counting at once would put back each other's swaps.
_COUNTING = threading.Lock()


def count_loads(kernel: object, grid: tuple[int, ...], buffers: tuple[torch.Tensor, ...],
                *args: Any, **kwargs: Any) -> list[np.ndarray] | None:
    """Run ``kernel[grid](*args, **kwargs)`` once under Triton's interpreter and count how many
    times it loads each element of each of ``buffers``.

    Parameters
    ----------
    kernel
        The learner's ``@triton.jit`` kernel, interpreted (on a CPU) or compiled (on a GPU:
        its interpreted twin runs).
    grid
        The launch grid.
    buffers
        CPU tensors among ``args`` (or views of them), which the interpreter reads in place.
    *args, **kwargs
        The kernel's arguments, every tensor on the CPU.

    Returns
    -------
    list of numpy.ndarray or None
        One array of counts per buffer, of its shape; ``None`` where the interpreter cannot run
        the kernel (a checker then falls back on what it can read from the source).

    Notes
    -----
    One count runs at a time: a second thread calling it waits for the first to finish.
    """
    repair_interpreter_index()  # without it `range(0, n_cols, BLOCK)` fails (see the module)
    try:
        with _COUNTING, (contextlib.nullcontext(kernel) if _is_interpreted(kernel)
                         else _interpreted_twin(kernel)) as interpreted:
            if interpreted is None or not _is_interpreted(interpreted):
                return None
            with (_counting_loads(buffers) as counts, warnings.catch_warnings(),
                  np.errstate(all="ignore")):
                warnings.simplefilter("ignore", RuntimeWarning)
                interpreted[grid](*args, **kwargs)
    except Exception:  # noqa: BLE001 - what the interpreter cannot run, the checker ran compiled
        return None
    return counts


def _is_interpreted(kernel: object) -> bool:
    """Whether ``kernel`` is run by Triton's interpreter, whose loads all go through one method
    of its builder (the one :func:`_counting_loads` wraps)."""
    try:
        from triton.runtime.interpreter import InterpretedFunction, InterpreterBuilder
    except ImportError:  # pragma: no cover - a Triton without its interpreter
        return False
    return isinstance(kernel, InterpretedFunction) and hasattr(InterpreterBuilder,
                                                               "create_masked_load")


@contextlib.contextmanager
def _interpreted_twin(kernel: object) -> Iterator[Any]:
    """Yield a compiled ``@triton.jit`` kernel as Triton's interpreter runs it (``None`` where
    that cannot be made), so that its loads can be counted on a GPU too.

    The twin is the kernel's own code over a copy of its globals in which every ``@triton.jit``
    function is replaced by its twin in turn: the helpers a kernel calls run under the
    interpreter with it, and so, while the twin is out, do the language's own device functions
    (``tl.max``, ``tl.sum``, ...), swapped into ``triton.language`` for that long. The
    learner's namespace is not touched; on leaving, the language is as it was and the
    interpreter's cache of rewritten functions forgets the twins."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:  # pragma: no cover - a Triton without its interpreter
        yield None
        return
    made: dict[int, Any] = {}

    def twinned(value: object) -> bool:
        return isinstance(value, JITFunction) and isinstance(getattr(value, "fn", None),
                                                             types.FunctionType)

    def twin(jit: Any) -> Any:
        fn = jit.fn
        if id(fn) not in made:
            names = dict(fn.__globals__)
            copy = types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__,
                                      fn.__closure__)
            copy.__kwdefaults__ = fn.__kwdefaults__
            copy.__annotations__ = dict(fn.__annotations__)
            copy.__qualname__ = fn.__qualname__
            copy.__module__ = fn.__module__
            made[id(fn)] = InterpretedFunction(copy)
            for name, value in fn.__globals__.items():
                if twinned(value):
                    names[name] = twin(value)
        return made[id(fn)]

    if not twinned(kernel):
        yield None
        return
    owners = _language_owners()
    with _language_kept(owners):
        try:
            for owner in owners:
                for name, value in list(vars(owner).items()):
                    if twinned(value):  # on a class (``x.max(0)``), a function binds ``x``
                        setattr(owner, name, _member(twin(value)) if isinstance(owner, type)
                                else twin(value))
            yield twin(kernel)
        finally:
            rewritten = getattr(InterpretedFunction, "rewritten_fn", {})
            for interpreted in made.values():
                rewritten.pop(interpreted.fn, None)


def _member(fn: Any) -> Callable[..., Any]:
    """``fn`` as a method: a plain function, which binds its instance as the first argument
    (as Triton's interpreter sets the tensor's members)."""

    def member(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return member


def _language_owners() -> list[object]:
    """The modules of ``triton.language`` and its classes whose attributes the interpreter
    swaps (the tensor's methods and operators, ``dtype.to_ir``)."""
    import sys

    import triton.language as tl

    modules = [module for name, module in list(sys.modules.items()) if module is not None
               and (name == "triton.language" or name.startswith("triton.language."))]
    classes = [tl.core.tensor, tl.core.dtype, getattr(tl.core, "tensor_descriptor_base", None)]
    return modules + [cls for cls in classes if cls is not None]


@contextlib.contextmanager
def _language_kept(owners: list[object]) -> Iterator[None]:
    """Put back the values ``owners`` (:func:`_language_owners`) held on entering. To run a
    kernel, Triton's interpreter swaps its own versions into the language (``tl.load``,
    ``tl.range``, ``tl.tensor.__add__``, ...), and for the device functions a kernel calls
    (``tl.max`` and the like among them) it leaves them there. Under the interpreter that does
    no harm; on a GPU the compiler would find them in every kernel compiled afterwards. Names
    it adds (the interpreter's own, which its rewritten functions read) stay."""
    kept = [(owner, dict(vars(owner))) for owner in owners]
    try:
        yield
    finally:
        missing = object()
        for owner, names in kept:
            now = vars(owner)
            for name, value in names.items():
                if now.get(name, missing) is not value:
                    setattr(owner, name, value)


@contextlib.contextmanager
def _counting_loads(buffers: tuple[torch.Tensor, ...]) -> Iterator[list[np.ndarray]]:
    """While the block runs, count how many times a kernel run by Triton's interpreter loads
    each element of each of ``buffers`` (CPU tensors, which the interpreter reads in place).
    Yields one array of counts per buffer, of the buffer's shape, filled as the loads happen."""
    from triton.runtime.interpreter import InterpreterBuilder

    counts = [np.zeros(b.shape, dtype=np.int64) for b in buffers]
    spans = [(b.data_ptr(), b.element_size(), b.numel()) for b in buffers]
    original = InterpreterBuilder.create_masked_load

    def counted(self: object, ptrs: Any, mask: Any, *args: Any, **kwargs: Any) -> Any:
        addresses = np.asarray(ptrs.data, dtype=np.uint64)
        taken = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        addresses = addresses[taken].astype(np.int64)
        for (start, size, numel), count in zip(spans, counts, strict=True):
            offsets = addresses - start
            inside = offsets[(offsets >= 0) & (offsets < size * numel)]
            np.add.at(count.reshape(-1), inside // size, 1)
        return original(self, ptrs, mask, *args, **kwargs)

    InterpreterBuilder.create_masked_load = counted
    try:
        yield counts
    finally:
        InterpreterBuilder.create_masked_load = original
