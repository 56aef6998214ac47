"""The machinery every exercise checker shares.

A checker calls the learner's function on fresh random inputs (odd sizes, extreme values, masks)
and compares with a float64 reference. Three outcomes:

* the stub is still unfilled (it raises ``NotImplementedError``): a hint is printed and the
  checker returns ``False`` without failing the notebook;
* the answer is wrong: :class:`ExerciseFailed` is raised with an explanation of what is off and
  what usually causes it;
* the answer is right: a short confirmation is printed and the checker returns ``True``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch

from ..compare import describe_mismatch, relative_error

__all__ = ["ExerciseFailed", "exercise", "expect_close", "expect", "fresh_generator",
           "call_learner", "random_int", "random_normal", "matching_mistake", "expect_stats_pair"]

F = TypeVar("F", bound=Callable[..., Any])


class ExerciseFailed(AssertionError):
    """A learner's answer is wrong; the message explains what was checked and what is off."""


def exercise(title: str, hint: str) -> Callable[[F], F]:
    """Turn ``checker(fn, ...)`` into an exercise check with the three outcomes above.

    Parameters
    ----------
    title : str
        What the exercise asks, for the messages.
    hint : str
        Printed when the learner's function still raises ``NotImplementedError``.
    """

    def wrap(checker: F) -> F:
        @functools.wraps(checker)
        def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
            try:
                checker(fn, *args, **kwargs)
            except NotImplementedError:
                print(f"[not attempted] {title}\n  Hint: {hint}")
                return False
            print(f"[correct] {title}")
            return True

        return run  # type: ignore[return-value]

    return wrap


def expect(condition: bool, message: str) -> None:
    """Raise :class:`ExerciseFailed` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ExerciseFailed(message)


def expect_close(
    got: object, ref: torch.Tensor, case: str, rtol: float = 1e-5, advice: str = ""
) -> None:
    """Check ``got`` against the reference ``ref`` by relative error, explaining any failure.

    Parameters
    ----------
    got
        What the learner's function returned (checked to be a tensor of ``ref``'s shape).
    ref : torch.Tensor
        The float64 (or otherwise trusted) reference.
    case : str
        The input it came from, e.g. ``"a row of 37 values times 1000"``.
    rtol : float
        Largest relative error accepted (see :func:`teachkit.compare.relative_error`).
    advice : str
        What usually causes a failure on this case.
    """
    if not isinstance(got, torch.Tensor):
        raise ExerciseFailed(f"On {case}: expected a torch.Tensor, got {type(got).__name__}.")
    if got.shape != ref.shape:
        raise ExerciseFailed(
            f"On {case}: expected shape {tuple(ref.shape)}, got {tuple(got.shape)}. "
            "Reduce with keepdim=True (or unsqueeze) so the result keeps the input's shape."
        )
    err = relative_error(got, ref)
    if not err <= rtol:
        raise ExerciseFailed(
            f"On {case}: relative error {err:.3g} (allowed {rtol:g}); "
            f"{describe_mismatch(got, ref)}." + (f"\n  {advice}" if advice else "")
        )


def fresh_generator() -> torch.Generator:
    """A generator seeded from fresh entropy, so every check sees new random inputs."""
    g = torch.Generator()
    g.seed()
    return g


def _describe(arg: object) -> str:
    if isinstance(arg, torch.Tensor):
        return f"{tuple(arg.shape)} {str(arg.dtype).replace('torch.', '')}"
    if isinstance(arg, (list, tuple)) and len(arg) > 4:
        return f"a {type(arg).__name__} of {len(arg)} items"
    text = repr(arg)
    return text if len(text) <= 60 else text[:57] + "..."


def call_learner(fn: Callable[..., Any], case: str, *args: Any, advice: str = "",
                 **kwargs: Any) -> Any:
    """Call the learner's ``fn(*args, **kwargs)``; turn any error but ``NotImplementedError``
    into an :class:`ExerciseFailed` that names the case, the error, the arguments (tensors by
    shape and dtype) and, if given, ``advice`` on the usual cause."""
    try:
        return fn(*args, **kwargs)
    except (NotImplementedError, ExerciseFailed):
        raise
    except Exception as err:  # the learner's code failed: say where, keep the message
        shown = ", ".join([_describe(a) for a in args]
                          + [f"{k}={_describe(v)}" for k, v in kwargs.items()])
        raise ExerciseFailed(
            f"On {case}: your function raised {type(err).__name__}: {err}\n"
            f"  It was called with: {shown}." + (f"\n  {advice}" if advice else "")
        ) from err


def random_int(lo: int, hi: int, gen: torch.Generator) -> int:
    """A fresh integer in ``[lo, hi]`` (both included) from ``gen``."""
    return int(torch.randint(lo, hi + 1, (), generator=gen))


def random_normal(*shape: int, gen: torch.Generator, scale: float = 1.0, shift: float = 0.0,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Fresh normal values times ``scale`` plus ``shift``, drawn in float64 and rounded once to
    ``dtype``."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift).to(dtype)


def matching_mistake(got: object, mistakes: Mapping[str, torch.Tensor],
                     rtol: float = 1e-3) -> str | None:
    """The explanation of the first known wrong answer that ``got`` reproduces, if any.

    Parameters
    ----------
    got
        What the learner's function returned.
    mistakes : Mapping[str, torch.Tensor]
        Explanation of a usual mistake -> the answer that mistake gives on the same inputs
        (NaN where it gives NaN: a NaN matches a NaN).
    rtol : float
        Largest relative error at which ``got`` counts as that wrong answer.
    """
    if not isinstance(got, torch.Tensor):
        return None
    for explanation, wrong in mistakes.items():
        if wrong.shape == got.shape and relative_error(got, wrong) <= rtol:
            return explanation
    return None


def expect_stats_pair(out: object, case: str,
                      what: str = "your function") -> tuple[torch.Tensor, torch.Tensor]:
    """Check that ``out``, what ``what`` returned on ``case``, is a pair of tensors ``(m, d)``;
    return it."""
    expect(isinstance(out, tuple | list) and len(out) == 2,
           f"On {case}: {what} should return a pair (m, d), got {type(out).__name__}.")
    m, d = out
    for name, t in (("m", m), ("d", d)):
        expect(isinstance(t, torch.Tensor),
               f"On {case}: {what} returned {name} of type {type(t).__name__}; return torch "
               "tensors.")
    return m, d
