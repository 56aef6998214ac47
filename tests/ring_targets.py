"""Targets for the launcher's tests, run inside spawned ranks.

``tests/`` is on the path of the test run (and of the processes it spawns), so the ranks import
this module as ``ring_targets``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from teachkit.ring import RingContext


def mark_and_hang(ctx: RingContext, marker_dir: str, seconds: float = 60.0) -> None:
    """Write ``rank{r}.pid`` (this process's id) into ``marker_dir``, then hang for ``seconds``."""
    path = Path(marker_dir) / f"rank{ctx.rank}.pid"
    partial = path.with_suffix(".partial")
    partial.write_text(str(os.getpid()))
    partial.replace(path)  # the file appears whole
    time.sleep(seconds)
