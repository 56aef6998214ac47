"""Fixtures shared by the unit tests."""

from __future__ import annotations

import matplotlib
import pytest
import torch

import teachkit  # noqa: F401  decides the world (TRITON_INTERPRET) before any test imports triton

matplotlib.use("Agg")


@pytest.fixture
def gen() -> torch.Generator:
    """A generator with a fresh seed: every run checks new inputs."""
    g = torch.Generator()
    g.seed()
    return g


@pytest.fixture
def unwatched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn off the checkers' watch for forbidden calls, for tests that build wrong answers out of
    the stored solutions or the library (a learner's check keeps the watch on)."""
    import contextlib

    from teachkit.exercises import checking

    monkeypatch.setattr(checking, "forbidden_calls",
                        lambda *args, **kwargs: contextlib.nullcontext())


@pytest.fixture(autouse=True)
def figures_elsewhere(tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures a test saves go to a temporary folder, not to the checkout's ``figures/``: the
    committed ones come from a clean run of the notebooks (``scripts/execute_notebooks.py``)."""
    monkeypatch.setenv("TEACHKIT_FIGURES", str(tmp_path_factory.getbasetemp() / "figures"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The compile check of every configuration first: it is the longest test file by far, and
    pytest-xdist's ``--dist loadfile`` hands files to its workers in the order collected, so a
    file that starts last would end last, with the other workers idle."""
    items.sort(key=lambda item: item.path.name != "test_compile_check.py")
