"""The solutions of the exercises, one module per notebook (``ex01`` for ``01_naive_softmax``
and so on), each a plain function ``solution_<name>`` that :func:`teachkit.show_source` shows.

The checkers in :mod:`teachkit.exercises` never call these: each compares with its own
float64 reference, so a learner cannot pass by handing back what a solution returns.
"""
