#!/usr/bin/env python3
"""Run notebooks top to bottom in place, as they are committed: one clean run, no timestamps.

Each notebook is executed by a fresh kernel in its own folder (so the outputs are what a
learner who opens it sees), with cell timing switched off, so a re-run changes only what the
code prints; progress bars (widgets) are left out of the outputs. Figures the notebooks save
are regenerated in ``figures/``.

Usage, from the repository root::

    python scripts/execute_notebooks.py                    # every notebooks/NN_*.ipynb
    python scripts/execute_notebooks.py notebooks/05_*.ipynb --jobs 2

Needs ``nbclient`` and ``ipykernel`` (installed with the notebooks' requirements).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_tracer_lines(text: str) -> str:
    """``text`` without the lines PyTorch's profiler backend writes to stderr when it starts and
    stops (``USDT:<date> <time> <pid>... profiler_start``): a timestamp and a process id, not
    something the notebook printed."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith("USDT:"))


def execute(path: Path, timeout: int = 1800) -> tuple[str, float]:
    """Execute ``path`` in place; return its name and the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    start = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
        if cell.cell_type != "code":
            cell.pop("outputs", None)  # only code cells have outputs
            continue
        for output in cell.outputs:
            if output.output_type == "stream":
                output.text = strip_tracer_lines(output.text)
        # A progress bar (a tqdm widget) lives while its cell runs: the committed notebook keeps
        # what the cell printed, not the bar's first frame.
        cell.outputs = merge_streams([o for o in cell.outputs
                                      if (o.output_type != "stream" or o.text)
                                      and WIDGET_VIEW not in o.get("data", {})])
    nbformat.write(nb, path)
    return path.name, time.perf_counter() - start


def merge_streams(outputs: list) -> list:
    """``outputs`` with each run of stream outputs to one stream (stdout, stderr) joined into one:
    how a cell's prints are cut into messages depends on the kernel's timing, and joined they
    give the same committed notebook from one run to the next."""
    merged: list = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (output.output_type == "stream" and last is not None
                and last.output_type == "stream" and last.name == output.name):
            last.text += output.text
        else:
            merged.append(output)
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to run (default: every notebooks/NN_*.ipynb)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run side by side")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for name, seconds in pool.map(execute, [p.resolve() for p in paths]):
            print(f"{name}: {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
