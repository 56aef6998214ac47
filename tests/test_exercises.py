"""The contract every exercise keeps: its checker accepts the solution, and an unfilled stub gets
a hint without failing. Each ``check_<name>`` in ``teachkit.exercises.exNN`` has a documented
``solution_<name>`` in ``teachkit.exercises.solutions.exNN``, and no checker module imports the
solutions (a checker that compared with the stored solution would agree with its bugs); the
per-notebook test files check the wrong answers."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re

import pytest
import torch
import triton

import teachkit.exercises as exercises
from teachkit.exercises.checking import ExerciseFailed, resolve_name

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
    assert capsys.readouterr().out.startswith("[correct]")
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


def _forwarding(target):
    """A learner's function that only forwards to ``target`` (a lambda around it)."""
    def forward(*args, **kwargs):
        return target(*args, **kwargs)
    return forward


@pytest.mark.parametrize(("mod", "name"), PAIRS, ids=[f"{m}.{n}" for m, n in PAIRS])
def test_checker_refuses_its_stored_solution_behind_a_call(mod, name):
    module = importlib.import_module(f"teachkit.exercises.{mod}")
    solutions = importlib.import_module(f"teachkit.exercises.solutions.{mod}")
    check, solution = getattr(module, f"check_{name}"), getattr(solutions, f"solution_{name}")
    if hasattr(solution, "fn"):  # a Triton function is handed over as it is: copy it by name
        pytest.skip("a Triton function cannot be wrapped in a Python call")
    with pytest.raises(ExerciseFailed, match=f"calls {solutions.__name__}.solution_{name}, the "
                                              "stored solution"):
        check(_forwarding(solution))
    with pytest.raises(ExerciseFailed, match="stored solution"):
        check(functools.partial(_forwarding(solution)))


FORBIDDEN = [(mod, name, dotted) for mod, name in PAIRS
             for dotted in getattr(importlib.import_module(f"teachkit.exercises.{mod}"),
                                   f"check_{name}").forbidden[1:]]


@pytest.mark.parametrize(("mod", "name", "dotted"), FORBIDDEN,
                         ids=[f"{m}.{n}-{d}" for m, n, d in FORBIDDEN])
def test_checker_refuses_the_library(mod, name, dotted):
    check = getattr(importlib.import_module(f"teachkit.exercises.{mod}"), f"check_{name}")
    try:
        target = resolve_name(dotted)
    except (ImportError, AttributeError):
        pytest.skip(f"{dotted} is not installed here")
    solution = getattr(importlib.import_module(f"teachkit.exercises.solutions.{mod}"),
                       f"solution_{name}")
    if getattr(target, "fn", target) is getattr(solution, "fn", solution):
        pytest.skip("the stored solution is this library function itself")
    with pytest.raises(ExerciseFailed, match=f"handed the checker {re.escape(dotted)}"):
        check(target)


# The examples and others whose library function takes the exercise's arguments: the
# learner's own function calls it (imported by name before the check began).
CALLED = [
    ("ex01", "naive_softmax", "torch.softmax"),
    ("ex01", "naive_softmax", "teachkit.softmax.naive_softmax"),
    ("ex01", "nan_rows", "teachkit.softmax.naive_softmax"),
    ("ex01", "overflow_threshold", "teachkit.numerics.overflow_threshold"),
    ("ex02", "safe_softmax", "torch.softmax"),
    ("ex02", "safe_softmax", "teachkit.softmax.safe_softmax"),
    ("ex02", "softmax_stats", "teachkit.softmax.softmax_stats"),
    ("ex03", "merge", "teachkit.softmax.merge_stats"),
    ("ex04", "merge_out_lse", "teachkit.attention.merge_partials"),
    ("ex04", "block_update", "teachkit.attention.attention_block_update"),
    ("ex05", "safe_traffic", "teachkit.exercises.solutions.ex05.solution_safe_traffic"),
    ("ex06", "row_softmax", "teachkit.kernels.teaching.row_softmax"),
    ("ex09", "num_splits", "teachkit.kernels.decode.choose_num_splits"),
    ("ex09", "last_wave_splits", "teachkit.kernels.decode.last_wave_splits"),
    ("ex09", "fullest_wave_tiles", "teachkit.kernels.decode.fullest_wave_tiles"),
    ("ex09", "fullest_wave_plan", "teachkit.kernels.decode.fullest_wave_plan"),
    ("ex09", "token_rows", "teachkit.paging.token_rows"),
    ("ex10", "ring_rank", "teachkit.exercises.solutions.ex10.solution_ring_rank"),
    ("ex11", "thread_elements", "teachkit.cute.simulate.elements_of_thread"),
    ("ex11", "block_merge", "teachkit.cute.simulate.block_merge"),
    ("ex12", "softmax_backward", "teachkit.attention_backward.softmax_delta"),
]


@pytest.mark.parametrize(("mod", "name", "dotted"), CALLED,
                         ids=[f"{m}.{n}-{d}" for m, n, d in CALLED])
def test_checker_refuses_a_function_that_calls_the_library(mod, name, dotted):
    check = getattr(importlib.import_module(f"teachkit.exercises.{mod}"), f"check_{name}")
    with pytest.raises(ExerciseFailed, match=f"calls {re.escape(dotted)}"):
        check(_forwarding(resolve_name(dotted)))


def test_checker_refuses_a_tensor_method_and_a_kernel_launch():
    from teachkit.exercises import ex06
    from teachkit.kernels import teaching

    with pytest.raises(ExerciseFailed, match="calls torch.Tensor.softmax"):
        importlib.import_module("teachkit.exercises.ex02").check_safe_softmax(
            lambda x, dim: x.float().softmax(dim).to(x.dtype))

    def launch(x):
        y = torch.empty_like(x)
        teaching.row_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                                   BLOCK=triton.next_power_of_2(x.shape[1]))
        return y

    with pytest.raises(ExerciseFailed, match="calls teachkit.kernels.teaching.row_softmax_kernel"):
        ex06.check_row_softmax(launch)


def test_the_watch_ends_with_the_check():
    import sys

    before = sys.getprofile()
    with pytest.raises(ExerciseFailed):
        importlib.import_module("teachkit.exercises.ex04").check_merge_out_lse(
            _forwarding(resolve_name("teachkit.attention.merge_partials")))
    assert sys.getprofile() is before


def test_show_solution_is_collapsed():
    from teachkit.exercises.checking import show_solution
    from teachkit.exercises.solutions import ex02

    shown = show_solution(ex02.solution_safe_softmax)
    html = shown._repr_html_()
    assert html.startswith("<details>") and "amax" in html
    assert "def solution_safe_softmax" in repr(shown)
