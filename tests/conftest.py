"""Fixtures shared by the unit tests."""

from __future__ import annotations

import matplotlib
import pytest
import torch

import teachkit  # noqa: F401  decides the world (TRITON_INTERPRET) before any test imports triton

matplotlib.use("Agg")

LONGEST_FIRST = ("test_compile_check.py",)
"""Test files collected first. The compile check takes most of two cores for minutes; under
``pytest -n auto --dist loadfile`` a file goes to one worker, and started last, this one would
keep the run going long after the other workers have finished."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the items of :data:`LONGEST_FIRST` to the front, keeping every other order."""
    items.sort(key=lambda item: item.path.name not in LONGEST_FIRST)  # a stable sort


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
