"""Exercise checkers, one module per notebook (``ex01`` for ``01_naive_softmax`` and so on).

Each module holds, for every exercise, a checker ``check_<name>(fn)``; the solution
``solution_<name>`` a learner may ask for lives apart, in :mod:`teachkit.exercises.solutions`
(``solutions.ex01`` and so on). Checkers never call the solutions: each compares with its own
float64 reference and its own wrong formulas, so the two cannot agree on a shared bug. See
:mod:`teachkit.exercises.checking` for how a checker reports and what it forbids,
:mod:`~teachkit.exercises.launching` for how the checkers of Triton-writing exercises launch
the learner's kernel, :mod:`~teachkit.exercises.load_counting` for how they count its loads
(the same under the interpreter and compiled), and :func:`show_solution` for showing a solution
collapsed in a notebook.
"""

from .checking import ExerciseFailed, show_solution

__all__ = ["ExerciseFailed", "show_solution"]
