"""solvers: fold-depth algorithms over :mod:`folding` problems.

``solve(problem, method=...)`` runs a registered solver; ``names()`` lists them.

>>> import solvers
>>> len(solvers.names()), solvers.names()[:3]
(7, ['brute-force', 'exact', 'flat-profile'])
"""

from . import exact, greedy, kv_stable, kv_unified, pyramid
from ._base import (
    Capabilities,
    Plan,
    Solver,
    SolverConfig,
    SolverConfigError,
    capabilities,
    configure,
    get,
    names,
    register,
    solve,
    window_options,
)

__all__ = [
    "Capabilities",
    "Plan",
    "Solver",
    "SolverConfig",
    "SolverConfigError",
    "capabilities",
    "configure",
    "exact",
    "get",
    "greedy",
    "kv_stable",
    "kv_unified",
    "names",
    "pyramid",
    "register",
    "solve",
    "window_options",
]
