"""What the checkers of Triton-writing exercises share: they take the learner's ``@triton.jit``
kernel itself and launch it on buffers they prepare.

* :func:`require_kernel` rejects anything but a Triton kernel written by the learner (a torch
  function, a launcher, or one of the library's own kernels);
* :func:`launch` runs it with NumPy's floating-point warnings silenced (the interpreter computes
  with NumPy, which warns on the NaN a wrong answer makes) and turns a failure into an
  :class:`~teachkit.exercises.checking.ExerciseFailed` that names the case;
* :data:`SENTINEL` is what the checkers write where no kernel may store, and
  :func:`expect_untouched` says so when a kernel stored there.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from .checking import call_learner, expect, raise_if_stub

__all__ = ["SENTINEL", "require_kernel", "launch", "expect_untouched"]

SENTINEL = 12345.0
"""Written past the end of outputs (and in the gaps between their rows): a store there shows."""


def require_kernel(kernel: object, signature: str) -> None:
    """Raise ``NotImplementedError`` for the unfilled stub, and
    :class:`~teachkit.exercises.checking.ExerciseFailed` unless ``kernel`` is a ``@triton.jit``
    function written outside the library (``teachkit.kernels`` holds the answers' models).

    Parameters
    ----------
    kernel
        What the learner passed.
    signature : str
        The kernel's expected arguments, for the message, e.g. ``"(X, Y, n_cols, ...)"``.
    """
    raise_if_stub(kernel)
    name = getattr(kernel, "__name__", None) or getattr(getattr(kernel, "fn", None), "__name__",
                                                        repr(kernel))
    expect(hasattr(kernel, "fn") and hasattr(kernel, "__getitem__"),
           f"{name!r} is not a Triton kernel: put @triton.jit above def {signature}, and pass "
           "the kernel itself (the checker launches it), not a function that computes or "
           "launches.")
    module = getattr(kernel.fn, "__module__", "") or ""
    expect(not module.startswith("teachkit.kernels"),
           f"{name!r} is the library's kernel ({module}); the exercise asks for your own.")


def launch(kernel: Any, grid: tuple[int, ...], case: str, *args: Any, advice: str = "",
           **kwargs: Any) -> None:
    """Launch ``kernel[grid](*args, **kwargs)`` quietly; a failure names ``case``."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        call_learner(kernel[grid], case, *args, advice=advice, **kwargs)


def expect_untouched(buffer: torch.Tensor, where: torch.Tensor, case: str, what: str) -> None:
    """Check that ``buffer`` still holds :data:`SENTINEL` at the boolean mask ``where``;
    otherwise fail, saying ``what`` the kernel did."""
    kept = buffer.detach().cpu()[where.cpu()]
    sentinel = torch.tensor(SENTINEL).to(buffer.dtype)  # as rounded to the buffer's dtype
    expect(bool((kept == sentinel).all()), f"On {case}: {what}")
