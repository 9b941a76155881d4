"""The solver conformance suite: every solver must pass it.

Subclass :class:`SolverConformance` in a pytest module and implement
:meth:`~SolverConformance.run`; pytest collects the inherited tests::

    class TestMySolver(SolverConformance):
        def run(self, problem, **kw):
            return my_solver.solve(problem, **kw)

Exact solvers subclass :class:`ExactConformance` as well, which also checks
``optimal`` results against :meth:`~ExactConformance.oracle` (the brute-force
minimum of :func:`folding.fidelity_loss`). Known gaps are declared in
``conformance_overrides`` (test name -> reason) and reported as expected
failures, never silently skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..frontiers import enumerate_frontiers
from ..kv import kv_cost
from ..model import FoldProblem
from ..objectives import fidelity_loss
from ..render import previous_layout, render
from ..result import SolveResult, Status
from ..validate import check_plan
from .strategies import problems

__all__ = ["ExactConformance", "SolverConformance", "contradict"]


def contradict(problem: FoldProblem, leaf: str) -> FoldProblem:
    """``problem`` plus a raw pin and a ``min_level=1`` pin on ``leaf``: no frontier exists
    when ``leaf`` has a summary over it."""
    data = problem.model_dump(mode="json")
    data["pins"] = [*data["pins"], {"leaves": [leaf]}, {"leaves": [leaf], "min_level": 1}]
    return FoldProblem.model_validate(data)


PropertyTest = Callable[[Any, st.DataObject], None]


def _property(check: PropertyTest) -> PropertyTest:
    """Mark a check as a hypothesis test; each subclass gets its own ``@given`` wrapper."""
    check._conformance_property = True  # type: ignore[attr-defined]
    return check


def _given(check: PropertyTest) -> PropertyTest:
    @given(st.data())
    def test(self: Any, data: st.DataObject) -> None:
        check(self, data)

    test.__name__ = check.__name__
    test.__doc__ = check.__doc__
    return test


class SolverConformance:
    """Behaviour every registered solver must show."""

    max_leaves: ClassVar[int] = 10
    """Largest problems drawn."""
    conformance_overrides: ClassVar[dict[str, str]] = {}
    """Test name -> reason, for declared gaps (run as expected failures)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Hypothesis ties a test function to one executor: give every subclass
        # (every solver) its own wrapped copy of each property test.
        super().__init_subclass__(**kwargs)
        for name in dir(cls):
            check = getattr(cls, name)
            if name.startswith("test_") and getattr(check, "_conformance_property", False):
                setattr(cls, name, _given(check))

    def run(self, problem: FoldProblem, **kwargs: Any) -> SolveResult:
        """Solve ``problem`` with the solver under test."""
        raise NotImplementedError

    def _override(self, name: str) -> None:
        reason = self.conformance_overrides.get(name)
        if reason is not None:
            pytest.xfail(reason)

    # ------------------------------------------------------------------ tests
    @_property
    def test_plan_fits_the_wall_and_passes_check_plan(self, data: st.DataObject) -> None:
        self._override("test_plan_fits_the_wall_and_passes_check_plan")
        problem = data.draw(problems(max_leaves=self.max_leaves, dag=True, feasible=True))
        result = self.run(problem)
        assert result.status in Status.with_plan(), result
        layout = check_plan(problem, result.frontier)
        assert result.tokens == layout.total <= problem.budget.total
        assert result.kv_cost == kv_cost(previous_layout(problem), layout)
        assert all(level > 0 for level in result.frontier.values())

    @_property
    def test_over_budget_returns_the_floor_with_diagnostics(self, data: st.DataObject) -> None:
        self._override("test_over_budget_returns_the_floor_with_diagnostics")
        problem = data.draw(problems(max_leaves=self.max_leaves, feasible=False))
        result = self.run(problem)
        if result.status is Status.INFEASIBLE:
            assert not list(enumerate_frontiers(problem))
            assert result.conflicts
            return
        assert result.status is Status.OVER_BUDGET, result
        layout = check_plan(problem, result.frontier, enforce_budget=False)
        assert result.tokens == layout.total > problem.budget.total
        floor = min(render(problem, f).total for f in enumerate_frontiers(problem))
        assert result.tokens == floor == result.floor_tokens
        assert result.diagnostics["required_additional"] == floor - problem.budget.total

    @_property
    def test_contradictory_constraints_are_infeasible(self, data: st.DataObject) -> None:
        self._override("test_contradictory_constraints_are_infeasible")
        problem = data.draw(problems(max_leaves=self.max_leaves, feasible=None))
        covered = [leaf.id for i, leaf in enumerate(problem.leaves) if problem.index.avail[i] >= 1]
        if not covered:
            return
        leaf = data.draw(st.sampled_from(covered))
        bad = contradict(problem, leaf)
        result = self.run(bad)
        assert result.status is Status.INFEASIBLE
        assert result.frontier == {} and result.tokens is None
        conflicts = result.conflicts or []
        assert any(c["leaf"] == leaf and "pin(raw)" in c["constraints"] for c in conflicts)

    @_property
    def test_deterministic_and_does_not_mutate(self, data: st.DataObject) -> None:
        self._override("test_deterministic_and_does_not_mutate")
        problem = data.draw(problems(max_leaves=self.max_leaves, dag=True, feasible=None))
        before = problem.model_dump_json()
        first = self.run(problem).model_dump(exclude={"stats"})
        second = self.run(problem).model_dump(exclude={"stats"})
        assert first == second
        assert problem.model_dump_json() == before

    @_property
    def test_result_json_round_trip(self, data: st.DataObject) -> None:
        self._override("test_result_json_round_trip")
        problem = data.draw(problems(max_leaves=self.max_leaves, feasible=None))
        result = self.run(problem)
        again = SolveResult.model_validate_json(result.model_dump_json())
        assert again == result
        assert set(result.model_dump()) == {
            "solver",
            "status",
            "frontier",
            "tokens",
            "kv_cost",
            "produce",
            "message",
            "objective",
            "bound",
            "floor_tokens",
            "decision",
            "conflicts",
            "diagnostics",
            "stats",
        }
        assert "solve_ms" in result.stats

    @_property
    def test_fidelity_no_better_than_the_optimum_under_the_wall(self, data: st.DataObject) -> None:
        self._override("test_fidelity_no_better_than_the_optimum_under_the_wall")
        problem = data.draw(problems(max_leaves=min(self.max_leaves, 9), feasible=True))
        result = self.run(problem)
        assert result.status in Status.with_plan()
        best = min(
            fidelity_loss(problem, f)
            for f in enumerate_frontiers(problem)
            if render(problem, f).total <= problem.budget.total
        )
        assert fidelity_loss(problem, result.frontier) >= best - 1e-9 * max(1.0, best)

    def test_empty_problem(self) -> None:
        self._override("test_empty_problem")
        problem = FoldProblem.model_validate(
            {"leaves": [], "budget": {"total": 100}, "fixed_tokens": 40}
        )
        result = self.run(problem)
        assert result.status in Status.with_plan()
        assert result.frontier == {} and result.tokens == 40

    def test_time_limit_must_be_positive(self) -> None:
        self._override("test_time_limit_must_be_positive")
        problem = FoldProblem.model_validate({"leaves": [], "budget": {"total": 100}})
        for bad in (0, -1.0):
            with pytest.raises(ValueError, match="time_limit"):
                self.run(problem, time_limit=bad)


class ExactConformance(SolverConformance):
    """Extra checks for solvers that claim proven optima of the fidelity loss."""

    alpha: ClassVar[float] = 0.7

    @_property
    def test_optimal_equals_the_enumerated_optimum(self, data: st.DataObject) -> None:
        self._override("test_optimal_equals_the_enumerated_optimum")
        problem = data.draw(problems(max_leaves=min(self.max_leaves, 9), dag=True, feasible=True))
        result = self.run(problem)
        assert result.status is Status.OPTIMAL
        frontiers = list(enumerate_frontiers(problem))
        floor = min(render(problem, f).total for f in frontiers)
        cap = problem.budget.target if floor <= problem.budget.target else problem.budget.total
        best = min(
            fidelity_loss(problem, f, self.alpha)
            for f in frontiers
            if render(problem, f).total <= cap
        )
        got = fidelity_loss(problem, result.frontier, self.alpha)
        assert result.tokens is not None and result.tokens <= cap
        tolerance = float(result.diagnostics.get("objective_error_bound", 0.0)) + 1e-9
        assert math.isclose(got, best, rel_tol=1e-9, abs_tol=tolerance), (got, best)
