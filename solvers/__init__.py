"""solvers: fold-depth algorithms over :mod:`folding` problems.

``solve(problem, method=...)`` runs a registered solver; ``names()`` lists them.

>>> import solvers
>>> solvers.names()
['brute-force', 'exact', 'flat-profile', 'kv-stable', 'kv-unified', 'oldest-first']
"""

from . import exact, greedy, kv_stable, kv_unified
from . import replay as replay_module
from ._base import Plan, Solver, SolverConfig, get, names, register, solve
from .replay import ReplayReport, replay, sweep

__all__ = [
    "Plan",
    "ReplayReport",
    "Solver",
    "SolverConfig",
    "exact",
    "get",
    "greedy",
    "kv_stable",
    "kv_unified",
    "names",
    "register",
    "replay",
    "replay_module",
    "solve",
    "sweep",
]
