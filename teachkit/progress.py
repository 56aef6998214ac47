"""Progress bars for loops that take more than a few seconds (benchmarks, sweeps, autotuning),
and for commands a notebook runs in a fresh process (:func:`run_command`).

A leaf module: it imports no other part of teachkit, so kernels (autotuning) and benchmarks alike
can draw the same ``tqdm.auto`` bar: a widget in Jupyter and Colab, text on stderr elsewhere.

Examples
--------
>>> with progress_bar(3, enabled=False) as bar:  # enabled=False: draws nothing
...     done = [x.upper() for x in each_job(bar, "abc", str)]
>>> done
['A', 'B', 'C']
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["each_job", "progress_bar", "run_command", "stop_process"]

T = TypeVar("T")


def progress_bar(total: int, enabled: bool = True, desc: str = "") -> tqdm:
    """A ``tqdm.auto`` bar over ``total`` jobs; ``enabled=False`` gives one that draws nothing.

    Name the current job with ``bar.set_description(label)`` and count it with ``bar.update()``
    (or loop with :func:`each_job`); close it at the end, or use it in a ``with`` block.
    """
    return tqdm(total=total, desc=desc, disable=not enabled, leave=True, dynamic_ncols=True,
                file=sys.stderr)


def each_job(bar: tqdm, items: Iterable[T], name: Callable[[T], str]) -> Iterator[T]:
    """Yield ``items`` one by one, showing ``name(item)`` on ``bar`` while each runs and counting
    it once the loop body is done (a ``continue`` counts too)."""
    for item in items:
        bar.set_description(name(item))
        yield item
        bar.update()


def run_command(args: Sequence[str], desc: str | None = None, enabled: bool = True,
                timeout: float | None = None) -> str:
    """Run ``args`` in a new process and return what it printed on stdout, with a bar that
    counts the seconds while it runs (``tqdm.auto``; gone once the command ends).

    The notebooks run the compiler's evidence this way (``python -m teachkit.kernels
    --exchange-evidence`` and the like): it compiles for several seconds, in a process of its own
    because the compiler needs Triton without the interpreter a notebook may have switched on.

    Parameters
    ----------
    args : sequence of str
        The command and its arguments, as for ``subprocess.run``.
    desc : str, optional
        The bar's label; by default the command, with ``python`` for the interpreter's path.
    enabled : bool
        ``False`` draws no bar.
    timeout : float, optional
        Seconds after which the command is stopped (:func:`stop_process`) and
        ``TimeoutError`` raised.

    Returns
    -------
    str
        The command's stdout.

    Raises
    ------
    RuntimeError
        If the command exits with a status other than 0; the message carries its stderr.

    Examples
    --------
    >>> run_command([sys.executable, "-c", "print(6 * 7)"], enabled=False)
    '42\\n'
    """
    args = [os.fspath(a) for a in args]
    if desc is None:
        desc = " ".join(["python" if a == sys.executable else a for a in args])
    bar = tqdm(total=None, desc=desc, bar_format="{desc}: {elapsed}", disable=not enabled,
               leave=False, dynamic_ncols=True, file=sys.stderr)
    start = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:  # still running: count the seconds, read on
                bar.update()
                if timeout is not None and time.monotonic() - start > timeout:
                    raise TimeoutError(f"{desc} still ran after {timeout:g} s; stopped") from None
    finally:
        bar.close()
        if proc.poll() is None:  # stopped early (a timeout, an interrupt): leave no process
            stop_process(proc)
    if proc.returncode:
        raise RuntimeError(f"{desc} exited with status {proc.returncode}:\n{err.strip()}")
    return out


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """End ``proc``: SIGTERM first, so that a command which stops processes of its own on it
    (``python -m teachkit.kernels`` ends its compile workers) can, then SIGKILL if it is still
    running after ``grace`` seconds. SIGKILL alone would leave such workers running."""
    proc.terminate()
    try:
        proc.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
