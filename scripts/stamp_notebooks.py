#!/usr/bin/env python3
"""Stamp every notebook with its "Open in Colab" link and its setup cell, from one URL.

The course's repository URL lives in one place, ``[project.urls] Repository`` in
``pyproject.toml``. This script writes, into each ``notebooks/NN_topic.ipynb``:

- a badge line under the title (the first line of the first cell) that opens the notebook in
  Colab from that repository's ``main`` branch;
- a first code cell that makes ``teachkit`` importable wherever the notebook runs: where it
  already imports (a local clone, CI) the cell does nothing; in a fresh Colab runtime it runs
  ``pip install git+<Repository>`` (a regular, non-editable install, so the package imports at
  once, with no restart) and prints what it did.

A fork re-points both by editing the URL in ``pyproject.toml`` and running, from the repository
root::

    python scripts/stamp_notebooks.py            # rewrite the notebooks
    python scripts/stamp_notebooks.py --check    # exit 1 if a notebook disagrees

``tests/test_notebook_hygiene.py`` runs the check, so a notebook that disagrees fails the tests.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SETUP_MARKER = "# Setup: make `teachkit` importable"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE_PATTERN = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)[ \t]*$", re.M)


def repository_url(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The ``Repository`` entry of ``[project.urls]``, without a trailing slash or ``.git``."""
    text = pyproject.read_text()
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # Python 3.10: the one line is enough
        match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.M)
        url = match[1] if match else ""
    else:
        url = tomllib.loads(text)["project"]["urls"]["Repository"]
    if not url:
        raise ValueError(f"{pyproject.name} has no Repository entry under [project.urls]")
    return url.rstrip("/").removesuffix(".git")


def colab_badge(url: str, notebook: str) -> str:
    """The Markdown badge that opens ``notebooks/<notebook>`` of ``url``'s main branch in Colab."""
    match = re.fullmatch(r"https://github\.com/([^/]+/[^/]+)", url)
    if match is None:
        raise ValueError(f"Repository must be a https://github.com/OWNER/NAME URL, got {url!r}")
    target = f"https://colab.research.google.com/github/{match[1]}/blob/main/notebooks/{notebook}"
    return f"[![Open In Colab]({BADGE_IMAGE})]({target})"


def setup_source(url: str) -> str:
    """The source of the setup cell: install teachkit from ``url`` only where it is missing."""
    return f'''{SETUP_MARKER} (does nothing where it already imports).
# In a fresh Colab runtime this installs the course's package from its repository; Colab
# already has PyTorch and Triton, so nothing else is downloaded and no restart is needed.
import importlib
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("teachkit") is None:
    TEACHKIT = "git+{url}"
    print(f"teachkit is not installed here: pip install {{TEACHKIT}}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", TEACHKIT], check=True)
    importlib.invalidate_caches()
    print("teachkit installed; the next cell imports it")'''


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + [parts[-1]]


def _with_badge(title: str, badge: str) -> str:
    if BADGE_PATTERN.search(title):
        return BADGE_PATTERN.sub(lambda _: badge, title, count=1)
    first, _, rest = title.partition("\n")
    return f"{first}\n\n{badge}\n" + (f"\n{rest.lstrip(chr(10))}" if rest.strip() else "")


def stamp(nb: dict, name: str, url: str) -> dict:
    """Return ``nb`` with its badge and setup cell made to agree with ``url`` (in place, too)."""
    cells = nb["cells"]
    title = "".join(cells[0]["source"])
    cells[0]["source"] = _lines(_with_badge(title, colab_badge(url, name)))
    source = _lines(setup_source(url))
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    if code and "".join(cells[code[0]]["source"]).startswith(SETUP_MARKER):
        cells[code[0]]["source"] = source
    else:
        cells.insert(1, {"cell_type": "code", "execution_count": None,
                         "id": uuid.uuid4().hex[:8], "metadata": {}, "outputs": [],
                         "source": source})
    return nb


def disagreements(url: str, folder: Path = NOTEBOOKS) -> list[str]:
    """Names of the notebooks whose badge or setup cell differs from what ``stamp`` writes."""
    bad = []
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text())
        before = json.dumps(nb["cells"])
        if json.dumps(stamp(nb, path.name, url)["cells"]) != before:
            bad.append(path.name)
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only report notebooks that disagree (exit 1 if any)")
    args = parser.parse_args(argv)
    url = repository_url()
    if args.check:
        bad = disagreements(url)
        for name in bad:
            print(f"{name}: badge or setup cell differs from {url}; "
                  "run python scripts/stamp_notebooks.py")
        return 1 if bad else 0
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        nb = stamp(json.loads(path.read_text()), path.name, url)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        print(f"stamped {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
