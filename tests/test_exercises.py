"""The contract every exercise keeps: its checker accepts the solution, and an unfilled stub gets
a hint without failing. Each ``check_<name>`` in ``teachkit.exercises.exNN`` has a documented
``solution_<name>`` in ``teachkit.exercises.solutions.exNN``, and no checker module imports the
solutions (a checker that compared with the stored solution would agree with its bugs); the
per-notebook test files check the wrong answers."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil

import pytest

import teachkit.exercises as exercises

MODULES = sorted(m.name for m in pkgutil.iter_modules(exercises.__path__)
                 if m.name.startswith("ex"))
PAIRS = [(mod, name[len("check_"):]) for mod in MODULES
         for name in dir(importlib.import_module(f"teachkit.exercises.{mod}"))
         if name.startswith("check_")]


def stub(*args, **kwargs):
    raise NotImplementedError


def test_every_notebook_has_at_least_two_exercises():
    assert MODULES == [f"ex{i:02d}" for i in range(1, len(MODULES) + 1)]
    for mod in MODULES:
        assert sum(m == mod for m, _ in PAIRS) >= 2, mod


@pytest.mark.parametrize(("mod", "name"), PAIRS, ids=[f"{m}.{n}" for m, n in PAIRS])
def test_checker_accepts_solution_and_hints_on_stub(mod, name, capsys):
    module = importlib.import_module(f"teachkit.exercises.{mod}")
    solutions = importlib.import_module(f"teachkit.exercises.solutions.{mod}")
    check, solution = getattr(module, f"check_{name}"), getattr(solutions, f"solution_{name}")
    doc = getattr(getattr(solution, "fn", solution), "__doc__", None)  # .fn: a Triton function
    assert doc and len(doc) > 40, f"solution_{name} needs a docstring"
    assert check(solution) is None
    assert "[correct]" in capsys.readouterr().out
    assert check(stub) is None
    out = capsys.readouterr().out
    assert "[not attempted]" in out and "Hint:" in out


@pytest.mark.parametrize("mod", MODULES)
def test_checkers_never_import_the_solutions(mod):
    module = importlib.import_module(f"teachkit.exercises.{mod}")
    assert not [n for n in dir(module) if n.startswith("solution_")]
    tree = ast.parse(inspect.getsource(module))
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for a in node.names]
    assert not [name for name in imported if "solutions" in name], imported


@pytest.mark.parametrize("mod", MODULES)
def test_solution_modules_hold_only_solutions(mod):
    solutions = importlib.import_module(f"teachkit.exercises.solutions.{mod}")
    checks = {name for m, name in PAIRS if m == mod}
    assert sorted(solutions.__all__) == sorted(f"solution_{n}" for n in checks)
