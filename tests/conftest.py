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
