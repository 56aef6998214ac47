"""Progress bars for loops that take more than a few seconds (benchmarks, sweeps, autotuning).

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

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["each_job", "progress_bar"]

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
