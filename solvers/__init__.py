"""solvers: fold-depth algorithms over :mod:`folding` problems.

``solve(problem, method=...)`` runs a registered solver; ``names()`` lists them.

>>> import solvers
>>> len(solvers.names()), solvers.names()[:3]
(7, ['brute-force', 'exact', 'flat-profile'])
"""

from . import exact, greedy, kv_stable, kv_unified, pyramid
from . import replay as replay_module
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
from .replay import ReplayReport, replay, sweep

__all__ = [
    "Capabilities",
    "Plan",
    "ReplayReport",
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
    "replay",
    "replay_module",
    "solve",
    "sweep",
    "window_options",
]
