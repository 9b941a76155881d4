"""What a solver returns: :class:`SolveResult`, its :class:`Status` and produce requests.

The JSON form is a public contract::

    {"solver": "kv-stable", "status": "feasible",
     "frontier": {"m0": 1, "m1": 1}, "tokens": 2400, "kv_cost": 300,
     "produce": [{"level": 2, "first": "m0", "last": "m11"}],
     "message": null, "objective": null, "bound": null, "floor_tokens": null,
     "decision": "hold", "conflicts": null,
     "diagnostics": {...}, "stats": {"solve_ms": 1.2, ...}}
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

if TYPE_CHECKING:
    from .render import Layout

__all__ = ["ProduceRequest", "SolveResult", "Status"]


class Status(StrEnum):
    """Outcome of a solve."""

    OPTIMAL = "optimal"
    """The frontier fits the wall and is proven optimal for the solver's objective."""
    FEASIBLE = "feasible"
    """The frontier fits the wall (``tokens <= budget.total``) and passes ``check_plan``."""
    OVER_BUDGET = "over_budget"
    """Even the cheapest reachable frontier exceeds the wall: it is returned, with produce
    requests for the summaries that would make it fit."""
    INFEASIBLE = "infeasible"
    """The constraints contradict each other: no frontier; the diagnostics name each leaf."""

    @classmethod
    def with_plan(cls) -> frozenset[Status]:
        """The statuses whose frontier fits the wall and passes ``check_plan``."""
        return frozenset({cls.OPTIMAL, cls.FEASIBLE})


class ProduceRequest(BaseModel):
    """Ask the compression pipeline for a summary at ``level`` over leaves ``first..last``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    level: int = Field(ge=1)
    first: str
    last: str


class SolveResult(BaseModel):
    """The outcome of one solve.

    ``tokens`` and ``kv_cost`` always come from the one renderer
    (:func:`folding.render` and :func:`folding.kv_cost`), never from a
    solver's own sum. When ``status`` is ``optimal`` or ``feasible``,
    ``tokens <= budget.total`` and the frontier passes ``check_plan``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    solver: str
    status: Status
    frontier: dict[str, int] = Field(default_factory=dict)
    tokens: int | None = None
    kv_cost: int | None = None
    produce: list[ProduceRequest] = Field(default_factory=list)
    message: str | None = None
    """What to do about the outcome, when there is something to do (over budget,
    infeasible): in words, for a person."""
    objective: float | None = None
    """The value of the solver's objective at ``frontier`` (the searching solvers)."""
    bound: float | None = None
    """The best bound proven on the objective (CP-SAT solvers); equal to ``objective``
    when optimality is proven."""
    floor_tokens: int | None = None
    """Tokens of the cheapest valid frontier, when the solver computed it."""
    decision: str | None = None
    """What a receding-horizon solver did with the previous frontier (``hold``, ``adopt``,
    ``suffix``, ``bootstrap``...)."""
    conflicts: list[dict[str, Any]] | None = None
    """For ``infeasible``: each leaf whose constraints leave no level, with the levels
    available and the constraints on it."""
    diagnostics: dict[str, Any] = Field(default_factory=dict)
    """Solver-specific extras beyond the typed fields."""
    stats: dict[str, Any] = Field(default_factory=dict)

    _layout: Layout | None = PrivateAttr(default=None)

    @property
    def layout(self) -> Layout | None:
        """The rendered layout of ``frontier`` when the solver made it (the render that
        priced ``tokens``), so callers need not render again; None on a result read
        back from JSON."""
        return self._layout

    def __eq__(self, other: object) -> bool:
        # Compare the fields only: the layout is a cache of rendering the frontier.
        if not isinstance(other, SolveResult):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    def with_layout(self, layout: Layout) -> SolveResult:
        """This result carrying ``layout``, the render of its frontier."""
        self._layout = layout
        return self

    @property
    def has_plan(self) -> bool:
        """True when the frontier fits the wall (status optimal or feasible)."""
        return self.status in Status.with_plan()
