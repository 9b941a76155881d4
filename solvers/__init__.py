"""solvers: fold-depth algorithms over :mod:`folding` problems.

``solve(problem, method=...)`` runs a registered solver; ``names()`` lists them.

>>> import solvers
>>> solvers.names()
['brute-force', 'exact', 'flat-profile', 'kv-stable', 'kv-unified', 'oldest-first']
"""

from . import exact, greedy, kv_stable, kv_unified
from ._base import Plan, Solver, SolverConfig, get, names, register, solve

__all__ = [
    "Plan",
    "Solver",
    "SolverConfig",
    "exact",
    "get",
    "greedy",
    "kv_stable",
    "kv_unified",
    "names",
    "register",
    "solve",
]
