"""folding: the pure model of a fold problem.

Leaves (messages) and summaries form a hierarchy; a frontier picks, for every
leaf, the level it is shown at; :func:`render` turns a frontier into the
ordered units of a request and is the only place tokens are summed;
:func:`check_plan` is the executable definition of a valid frontier;
:func:`kv_cost` and :class:`CacheSimulator` price prompt-cache reuse.

This package imports neither ``solvers`` nor ``context_manager``.
"""

from .costs import CostTable
from .exceptions import (
    BudgetError,
    ContiguityError,
    CycleError,
    DuplicateIdError,
    FoldingError,
    InvalidProblemError,
    LevelError,
    PinConflictError,
    PlanViolation,
    TokenCostError,
    UnknownIdError,
    Violation,
    ZoneError,
)
from .frontiers import BoundaryGraph, cheapest_frontier, enumerate_frontiers, finest_frontier
from .hierarchy import Hierarchy
from .kv import (
    AUTOMATIC_PRICES,
    CachePrices,
    CacheRequest,
    CacheSimulator,
    CacheTotals,
    PrefixCacheSimulator,
    divergence_index,
    kv_cost,
)
from .model import (
    MAX_GRACE,
    MAX_LEVEL,
    MAX_TOKENS,
    MAX_TOTAL_TOKENS,
    Budget,
    Conflict,
    FoldProblem,
    Frontier,
    Leaf,
    Pin,
    Summary,
)
from .objectives import fidelity_loss, fidelity_weights
from .reductions import ReductionError, RunReduction, merge_runs
from .render import (
    Layout,
    Unit,
    frontier_from_levels,
    levels_from_frontier,
    previous_layout,
    render,
    render_levels,
)
from .result import ProduceRequest, SolveResult, Status
from .schema import fold_problem_schema
from .validate import check_levels, check_plan, is_valid

__all__ = [
    "AUTOMATIC_PRICES",
    "MAX_GRACE",
    "MAX_LEVEL",
    "MAX_TOKENS",
    "MAX_TOTAL_TOKENS",
    "BoundaryGraph",
    "Budget",
    "BudgetError",
    "CachePrices",
    "CacheRequest",
    "CacheSimulator",
    "CacheTotals",
    "Conflict",
    "ContiguityError",
    "CostTable",
    "CycleError",
    "DuplicateIdError",
    "FoldProblem",
    "FoldingError",
    "Frontier",
    "Hierarchy",
    "InvalidProblemError",
    "Layout",
    "Leaf",
    "LevelError",
    "Pin",
    "PinConflictError",
    "PlanViolation",
    "PrefixCacheSimulator",
    "ProduceRequest",
    "ReductionError",
    "RunReduction",
    "SolveResult",
    "Status",
    "Summary",
    "TokenCostError",
    "Unit",
    "UnknownIdError",
    "Violation",
    "ZoneError",
    "cheapest_frontier",
    "check_levels",
    "check_plan",
    "divergence_index",
    "enumerate_frontiers",
    "fidelity_loss",
    "fidelity_weights",
    "finest_frontier",
    "fold_problem_schema",
    "frontier_from_levels",
    "is_valid",
    "kv_cost",
    "levels_from_frontier",
    "merge_runs",
    "previous_layout",
    "render",
    "render_levels",
]
