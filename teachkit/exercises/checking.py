"""The machinery every exercise checker shares.

A checker calls the learner's function on fresh random inputs (odd sizes, extreme values, masks)
and compares with a float64 reference. Three outcomes, each printed as one line (a checker
returns ``None``, so a notebook shows no ``True``/``False`` under the cell):

* the stub is still unfilled (it raises ``NotImplementedError``): ``[not attempted]`` and a nudge
  are printed, without failing the notebook;
* the answer is wrong: :class:`ExerciseFailed` is raised with an explanation of what is off and
  what usually causes it;
* the answer is right: ``[correct] <title>`` is printed.

Forbidden calls
---------------
An exercise asks the learner to write something the library (or the stored solution) already
has. ``@exercise(title, hint, forbid=(...))`` names those functions; during the check, a call to
one of them from the learner's code fails the check with a message naming the function, even
when the learner imported it by name long before (``from teachkit.attention import
merge_partials``). Every checker forbids its own stored solution
``teachkit.exercises.solutions.exNN.solution_<name>`` without saying so; it is looked up by name
when the check runs, so no checker module imports the solutions. An entry of ``forbid`` is a
dotted name (``"teachkit.attention.merge_partials"``, ``"torch.softmax"``,
``"torch.Tensor.softmax"``, ``"teachkit.kernels.teaching.row_softmax_kernel"``), resolved when
the check runs. It may name a Python function, a Triton kernel (its launches and, under the
interpreter, its device calls are watched), a builtin such as ``torch.softmax`` or a tensor
method.

How: while the checker runs, :func:`sys.setprofile` watches every call; a call to a forbidden
function counts when the nearest caller outside the installed libraries (torch, triton, the
standard library) is the learner's code (a notebook cell, a test, a solution module), not
teachkit's own code, so the checker's references and the library's own internals may still use
them. The profiler is restored on every way out. Handing the forbidden function itself (or a
``functools.partial`` of it) to a checker is caught before anything runs, and so is a Triton
kernel whose globals name a forbidden kernel. The stored solution handed to its own checker
(the notebook's ``exNN.check_x(solutions.solution_x)`` cell) runs unwatched: it is the answer.

For a new exercise: decorate ``check_<name>(fn)`` with ``@exercise(title, hint, forbid=...)``
where ``hint`` is a nudge (never the answer) and ``forbid`` lists the library functions that
compute what the exercise asks for; raise :class:`ExerciseFailed` (through :func:`expect`,
:func:`expect_close`, :func:`call_learner`) on a wrong answer; show the stored solution in the
notebook with :func:`show_solution`, which keeps it collapsed.
"""

from __future__ import annotations

import functools
import html
import importlib
import inspect
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..compare import describe_mismatch, relative_error
from ..source import SourceCode, show_source

__all__ = ["ExerciseFailed", "exercise", "expect_close", "expect", "fresh_generator",
           "call_learner", "random_int", "raise_if_stub", "random_normal", "matching_mistake",
           "expect_stats_pair", "SOFTMAX_FUNCTIONS", "forbidden_calls", "resolve_name",
           "show_solution", "SolutionCode", "LargestFloat"]

F = TypeVar("F", bound=Callable[..., Any])

SOFTMAX_FUNCTIONS: tuple[str, ...] = (
    "torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax",
    "torch.special.softmax", "torch.log_softmax", "torch.Tensor.log_softmax",
    "torch.nn.functional.log_softmax", "teachkit.softmax.naive_softmax",
    "teachkit.softmax.safe_softmax", "teachkit.softmax.online_softmax",
    "teachkit.softmax.chunked_softmax", "teachkit.kernels.softmax_kernels.softmax",
)
"""The softmaxes of PyTorch and of the library, for ``forbid=`` of the exercises that ask the
learner to write one."""


class LargestFloat(TorchDispatchMode):
    """Watch every torch operation run inside (``with LargestFloat() as watch:``) and keep
    the shape and size of the largest floating-point result: a checker compares it with the
    largest tensor the method it teaches ever holds (a tile of scores, one block of keys), since
    an answer that skips the method (a softmax over all the keys) makes a larger one."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0
        self.shape: tuple[int, ...] = ()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if (isinstance(t, torch.Tensor) and t.is_floating_point()
                    and t.numel() > self.numel):
                self.numel, self.shape = t.numel(), tuple(t.shape)
        return out


class ExerciseFailed(AssertionError):
    """A learner's answer is wrong; the message explains what was checked and what is off."""


def exercise(title: str, hint: str, forbid: Sequence[str] = ()) -> Callable[[F], F]:
    """Turn ``checker(fn, ...)`` into an exercise check with the three outcomes above.

    Parameters
    ----------
    title : str
        What the exercise asks, for the messages.
    hint : str
        A nudge printed when the learner's function still raises ``NotImplementedError``: a
        direction to think in, never the answer (the notebook's collapsed hints go further).
    forbid : Sequence[str]
        Dotted names of the functions that compute what the exercise asks the learner to write
        (see "Forbidden calls" above). The checker's own stored solution is always forbidden.
    """

    def wrap(checker: F) -> F:
        module = checker.__module__.rsplit(".", 1)[-1]
        name = checker.__name__.removeprefix("check_")
        solution_name = f"{__package__}.solutions.{module}.solution_{name}"
        names = (solution_name, *forbid)

        @functools.wraps(checker)
        def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
            try:
                if _is_stored(fn, solution_name):
                    checker(fn, *args, **kwargs)  # the stored answer itself: nothing to watch
                else:
                    with forbidden_calls(names, fn, title):
                        checker(fn, *args, **kwargs)
            except NotImplementedError:
                print(f"[not attempted] {title}\n  Hint: {hint}")
                return
            print(f"[correct] {title}")

        run.forbidden = names  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return wrap


# --------------------------------------------------------------------------------------------
# Forbidden calls
# --------------------------------------------------------------------------------------------

_TEACHKIT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SOLUTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "solutions") + os.sep


def _library_dirs() -> tuple[str, ...]:
    """Folders whose code is neither teachkit's nor the learner's: the standard library and the
    installed packages (torch, triton, numpy...), looked through to find the real caller."""
    dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    for mod in ("torch", "triton", "numpy"):
        found = sys.modules.get(mod)
        if found is not None and getattr(found, "__file__", None):
            dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(found.__file__))))
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


def resolve_name(dotted: str) -> Any:
    """The object a dotted name such as ``"teachkit.attention.merge_partials"`` or
    ``"torch.Tensor.softmax"`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"cannot resolve {dotted!r}")


def _unwrap(obj: object) -> object:
    """The plain Python function behind partials, bound methods, wrappers and Triton kernels."""
    for _ in range(16):
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif inspect.ismethod(obj):
            obj = obj.__func__
        elif hasattr(obj, "fn") and callable(obj.fn) and not inspect.isfunction(obj):
            obj = obj.fn  # a Triton JITFunction or InterpretedFunction
        elif inspect.isfunction(obj) and hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        else:
            return obj
    return obj


def _code_key(code: Any) -> tuple[str, str]:
    # Triton's interpreter recompiles a kernel from its source with the same file and name.
    return (os.path.abspath(code.co_filename), code.co_name)


class _Watch:
    """What one check forbids, split by how a call to it shows up in the profiler."""

    def __init__(self, names: Sequence[str]) -> None:
        self.codes: dict[tuple[str, str], str] = {}       # Python functions, by (file, name)
        self.builtins: dict[int, str] = {}               # builtins, by id
        self.methods: dict[str, str] = {}                # tensor methods, by name
        self.kernels: dict[int, str] = {}                # Triton kernels, by id
        for dotted in names:
            try:
                obj = resolve_name(dotted)
            except (ImportError, AttributeError):
                continue  # an optional library (or solution) that is not there
            self.add(obj, dotted)
        self.launchers = self._launch_codes() if self.kernels else set()
        self.co_names = {name for _, name in self.codes}
        self.found: str | None = None

    def add(self, obj: object, dotted: str) -> None:
        if hasattr(obj, "fn") and callable(obj.fn):
            self.kernels[id(obj)] = dotted
        target = _unwrap(obj)
        if inspect.isfunction(target):
            self.codes[_code_key(target.__code__)] = dotted
        elif type(target).__name__ == "method_descriptor":
            self.methods[target.__name__] = dotted
        elif callable(target):
            self.builtins[id(target)] = dotted

    @staticmethod
    def _launch_codes() -> set[Any]:
        """Code of the Python methods through which a Triton kernel is launched or called."""
        codes = set()
        try:
            from triton.runtime.jit import JITFunction
            codes.add(JITFunction.run.__code__)
        except ImportError:
            return codes
        try:
            from triton.runtime.interpreter import InterpretedFunction
            codes.update({InterpretedFunction.run.__code__,
                          InterpretedFunction.__call__.__code__})
        except ImportError:
            pass
        return codes

    def direct(self, fn: object) -> str | None:
        """The forbidden function ``fn`` is, or whose kernel it names, if any."""
        if id(fn) in self.kernels:
            return self.kernels[id(fn)]
        target = _unwrap(fn)
        if inspect.isfunction(target):
            hit = self.codes.get(_code_key(target.__code__))
            if hit:
                return hit
            if hasattr(fn, "fn"):  # a kernel: the kernels and device functions it names, as
                # a name or as an attribute of a module it names (compiled, they run no Python
                # the profiler could see)
                names = target.__code__.co_names
                for name in names:
                    ref = target.__globals__.get(name)
                    refs = ([getattr(ref, other, None) for other in names]
                            if inspect.ismodule(ref) else [ref])
                    for ref in refs:
                        if ref is not None and ref is not fn and id(ref) in self.kernels:
                            return self.kernels[id(ref)]
        elif id(target) in self.builtins:
            return self.builtins[id(target)]
        elif type(target).__name__ == "method_descriptor":
            return self.methods.get(target.__name__)
        return None

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.found is not None:
            return
        if event == "call":
            code = frame.f_code
            if code.co_name in self.co_names:
                hit = self.codes.get(_code_key(code))
                if hit and _learner_called(frame.f_back):
                    self.found = hit
            elif code in self.launchers:
                kernel = frame.f_locals.get("self")
                hit = self.kernels.get(id(kernel))
                if hit and _learner_called(frame.f_back):
                    self.found = hit
        elif event == "c_call":
            hit = self.builtins.get(id(arg))
            if hit is None and self.methods and isinstance(getattr(arg, "__self__", None),
                                                           torch.Tensor):
                hit = self.methods.get(getattr(arg, "__name__", ""))
            if hit and _learner_called(frame):
                self.found = hit


def _is_stored(fn: object, solution_name: str) -> bool:
    """Whether ``fn`` is the stored solution named ``solution_name`` itself."""
    try:
        return _unwrap(fn) is _unwrap(resolve_name(solution_name))
    except (ImportError, AttributeError):
        return False


_LIBRARY_DIRS: tuple[str, ...] | None = None


def _learner_called(frame: FrameType | None) -> bool:
    """Whether the nearest frame, up from ``frame``, that is not in an installed library is the
    learner's (a notebook cell, a test, a solution) rather than teachkit's own code."""
    global _LIBRARY_DIRS
    if _LIBRARY_DIRS is None:
        _LIBRARY_DIRS = _library_dirs()
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith("<"):
            path = os.path.abspath(path)
            if path.startswith(_SOLUTIONS):
                return True
            if path.startswith(_TEACHKIT):
                return False
            if not path.startswith(_LIBRARY_DIRS):
                return True
        elif not path.startswith("<frozen"):
            return True  # code typed in a cell or passed to exec: the learner's
        frame = frame.f_back
    return False


def _forbidden_message(name: str, title: str, direct: bool = False) -> str:
    what = "the stored solution" if ".solutions." in name else "the library's version"
    did = "You handed the checker" if direct else "Your function calls"
    return (f"{did} {name}, {what} of what this exercise asks you to write "
            f"({title}). Write it yourself from the notebook's formulas; the library is there to "
            "compare with afterwards.")


@contextmanager
def forbidden_calls(names: Sequence[str], fn: object = None,
                    title: str = "this exercise") -> Iterator[None]:
    """Fail with :class:`ExerciseFailed` if the learner's code calls any of ``names`` inside.

    Parameters
    ----------
    names : Sequence[str]
        Dotted names of the forbidden functions (see the module's docstring).
    fn
        The learner's function: if it is itself forbidden, fail before anything runs.
    title : str
        The exercise, for the message.
    """
    watch = _Watch(names)
    direct = watch.direct(fn) if fn is not None else None
    if direct:
        raise ExerciseFailed(_forbidden_message(direct, title, direct=True))
    previous = sys.getprofile()
    sys.setprofile(watch.profile)
    try:
        yield
    except BaseException as err:
        sys.setprofile(previous)
        if watch.found:
            raise ExerciseFailed(_forbidden_message(watch.found, title)) from err
        raise
    sys.setprofile(previous)
    if watch.found:
        raise ExerciseFailed(_forbidden_message(watch.found, title))


class SolutionCode(SourceCode):
    """A solution's source, shown in Jupyter collapsed under "Solution" (one click to open),
    and as plain text elsewhere."""

    def _repr_html_(self) -> str:
        return ("<details><summary><b>Solution</b> (click to show "
                f"<code>{html.escape(self.origin)}</code>)</summary>\n"
                f"<pre><code class=\"language-python\">{html.escape(self.text)}</code></pre>"
                "\n</details>")

    def _repr_markdown_(self) -> None:  # type: ignore[override]
        return None  # the HTML form, collapsed, is the one to show


def show_solution(obj: object, docstring: bool = True) -> SolutionCode:
    """Return a stored solution's source, displayed collapsed in a notebook.

    Parameters
    ----------
    obj
        A solution from :mod:`teachkit.exercises.solutions` (a function or a Triton kernel).
    docstring : bool
        Keep the docstring (``True``) or show only the code (``False``).

    Examples
    --------
    >>> from teachkit.exercises.solutions import ex02
    >>> show_solution(ex02.solution_safe_softmax).origin
    'teachkit.exercises.solutions.ex02.solution_safe_softmax'
    """
    code = show_source(obj, docstring=docstring)
    return SolutionCode(code.text, code.origin)


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


def raise_if_stub(kernel: object) -> None:
    """Raise ``NotImplementedError`` while a ``@triton.jit`` function's source still holds the
    stub's ``raise NotImplementedError`` line: a compiled Triton function cannot raise, so a
    checker reads the source before it launches the learner's kernel."""
    try:
        src = inspect.getsource(getattr(kernel, "fn", kernel))
    except (OSError, TypeError):
        return
    if "raise NotImplementedError" in src:
        raise NotImplementedError


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
