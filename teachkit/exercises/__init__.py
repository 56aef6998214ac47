"""Exercise checkers, one module per notebook (``ex01`` for ``01_naive_softmax`` and so on).

Each module holds, for every exercise, a checker ``check_<name>(fn)`` and the solution
``solution_<name>``. See :mod:`teachkit.exercises.checking` for how a checker reports.
"""

from .checking import ExerciseFailed

__all__ = ["ExerciseFailed"]
