"""The notebooks as committed: stamped from the repository URL, one clean run, nothing personal.

The committed outputs are what a learner sees on GitHub before running anything, so they come
from one top-to-bottom run (``python scripts/execute_notebooks.py``), carry no execution
timestamps (which churn every cell on every run) and print no machine paths.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MACHINE_PATH = re.compile(r"(/work/|/tmp/|/home/|/root/|/Users/|/content/|[A-Z]:\\\\)")


def load_script(name: str):
    """``scripts/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 11


def test_every_notebook_carries_the_link_and_setup_cell_of_the_repository_url():
    stamp = load_script("stamp_notebooks")
    url = stamp.repository_url()
    assert url.startswith("https://github.com/"), url
    assert stamp.disagreements(url) == [], "run: python scripts/stamp_notebooks.py"


def test_the_setup_cell_installs_from_the_url_only_where_teachkit_is_missing():
    stamp = load_script("stamp_notebooks")
    url = "https://github.com/someone/fork"
    source = stamp.setup_source(url)
    assert f"git+{url}" in source and 'find_spec("teachkit") is None' in source
    assert "-e" not in source.split()  # a regular install imports without a restart
    assert stamp.colab_badge(url, "01_x.ipynb").endswith(
        "(https://colab.research.google.com/github/someone/fork/blob/main/notebooks/01_x.ipynb)")
    with pytest.raises(ValueError, match="OWNER/NAME"):
        stamp.colab_badge("https://example.org/x", "01_x.ipynb")


def test_the_setup_cell_does_nothing_where_teachkit_imports(capsys):
    stamp = load_script("stamp_notebooks")
    exec(compile(stamp.setup_source("https://github.com/someone/fork"), "setup", "exec"), {})
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_committed_from_one_clean_run(path):
    cells = code_cells(path)
    counts = [c["execution_count"] for c in cells if "".join(c["source"]).strip()]
    assert counts == list(range(1, len(counts) + 1)), "execution counts not 1, 2, 3, ..."
    errors = [o.get("ename") for c in cells for o in c["outputs"] if o["output_type"] == "error"]
    assert errors == []


def test_a_run_of_prints_to_one_stream_is_committed_as_one_output():
    nbformat = pytest.importorskip("nbformat")
    out = nbformat.v4.new_output
    outputs = [out("stream", name="stdout", text="a\n"),
               out("stream", name="stdout", text="b"),
               out("stream", name="stderr", text="warn\n"),
               out("stream", name="stdout", text="c\n"),
               out("execute_result", data={"text/plain": "1"}, execution_count=1),
               out("stream", name="stdout", text="d\n")]
    merged = load_script("execute_notebooks").merge_streams(outputs)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in merged] == [
        ("stream", "stdout", "a\nb"), ("stream", "stderr", "warn\n"),
        ("stream", "stdout", "c\n"), ("execute_result", None, None),
        ("stream", "stdout", "d\n")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_a_cells_prints_are_not_cut_by_the_kernels_timing(path):
    """Consecutive prints to one stream are one output, as ``scripts/execute_notebooks.py``
    joins them, so a re-run changes only what the code prints."""
    cut = [i for i, c in enumerate(code_cells(path))
           for a, b in zip(c["outputs"], c["outputs"][1:], strict=False)
           if a["output_type"] == b["output_type"] == "stream" and a["name"] == b["name"]]
    assert cut == [], f"code cells {cut}: run scripts/execute_notebooks.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_no_timestamps_and_no_machine_paths(path):
    cells = code_cells(path)
    stamped = [i for i, c in enumerate(cells) if "execution" in c.get("metadata", {})]
    assert stamped == [], "strip metadata.execution (scripts/execute_notebooks.py does)"
    leaks = [i for i, c in enumerate(cells) if MACHINE_PATH.search(json.dumps(c["outputs"]))]
    assert leaks == [], f"code cells {leaks} print a machine path"
    traced = [i for i, c in enumerate(cells) if "USDT:" in json.dumps(c["outputs"])]
    assert traced == [], f"code cells {traced} keep the profiler's dated start/stop lines"
    bars = [i for i, c in enumerate(cells) if "widget-view" in json.dumps(c["outputs"])]
    assert bars == [], f"code cells {bars} keep a progress bar's widget (dropped on execution)"
    assert "widgets" not in json.loads(path.read_text())["metadata"], "widget state stored"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_valid_nbformat(path):
    """Jupyter opens the file: markdown cells carry no outputs, every field is nbformat's."""
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.read(path, as_version=4))


@functools.cache
def private_names() -> frozenset[str]:
    """The module-level names of ``teachkit`` that start with one underscore: what a module
    keeps to itself, so what the prose must not send a learner to."""
    import ast

    names = set()
    for path in (ROOT / "teachkit").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            targets = [node] if isinstance(node, ast.FunctionDef | ast.ClassDef) else (
                node.targets if isinstance(node, ast.Assign)
                else [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                name = getattr(target, "name", None) or getattr(target, "id", None)
                if name and name.startswith("_") and not name.startswith("__"):
                    names.add(name)
    return frozenset(names)


PROSE = [*NOTEBOOKS, ROOT / "README.md", ROOT / "gpu_checks" / "README.md"]


@pytest.mark.parametrize("path", PROSE, ids=lambda p: p.name[:2] if p.suffix == ".ipynb"
                         else str(p.relative_to(ROOT)))
def test_the_prose_names_no_private_name_of_teachkit(path):
    """A name the text points a learner to is public: the code taught is the code shipped."""
    if path.suffix == ".ipynb":
        texts = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                 if c["cell_type"] == "markdown"]
    else:
        texts = [path.read_text()]
    private = private_names()
    named = sorted({word for text in texts for word in re.findall(r"\b_?\w+", text)
                    if word in private})
    assert named == [], f"{path.name} names private {named}: make them public or say it in words"
