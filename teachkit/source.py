"""Show a teachkit function's source in a notebook, so notebooks never paste copies of code."""

from __future__ import annotations

import inspect
import textwrap

__all__ = ["SourceCode", "show_source"]


class SourceCode:
    """Source text shown as a highlighted Python block in Jupyter, as plain text elsewhere.

    Attributes
    ----------
    text : str
        The source code.
    origin : str
        ``module.qualname`` of the object it came from.
    """

    def __init__(self, text: str, origin: str) -> None:
        self.text = text
        self.origin = origin

    def _repr_markdown_(self) -> str:
        return f"`{self.origin}`\n\n```python\n{self.text}\n```"

    def __repr__(self) -> str:
        return f"# {self.origin}\n{self.text}"

    def __str__(self) -> str:
        return self.text


def show_source(obj: object, docstring: bool = True) -> SourceCode:
    """Return the source of a function, class or module, ready to display as a cell's result.

    Parameters
    ----------
    obj
        Anything :func:`inspect.getsource` accepts (a teachkit function, a kernel, a module).
    docstring : bool
        Keep the docstring (``True``) or drop it to show only the code (``False``).

    Examples
    --------
    >>> from teachkit.softmax import merge_stats
    >>> print(show_source(merge_stats, docstring=False))  # doctest: +ELLIPSIS
    def merge_stats(...
    """
    target = getattr(obj, "fn", obj)  # a Triton JITFunction keeps the Python function in .fn
    text = textwrap.dedent(inspect.getsource(target)).rstrip()
    if not docstring:
        text = _drop_docstring(text, target)
    origin = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
    return SourceCode(text, origin)


def _drop_docstring(text: str, target: object) -> str:
    doc = inspect.getdoc(target)
    if not doc:
        return text
    lines = text.splitlines()
    for start, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(('"""', "r\"\"\"", "'''")):
            quote = '"""' if '"""' in stripped else "'''"
            end = start
            if stripped.count(quote) < 2:
                end = next(i for i in range(start + 1, len(lines)) if quote in lines[i])
            return "\n".join(lines[:start] + lines[end + 1 :])
    return text
