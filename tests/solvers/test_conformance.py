"""Every registered solver passes the conformance suite of folding.testing."""

from __future__ import annotations

from typing import Any, ClassVar

import solvers
from folding import FoldProblem, SolveResult
from folding.testing.conformance import ExactConformance, SolverConformance


class _Runner:
    method: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}

    def run(self, problem: FoldProblem, **kwargs: Any) -> SolveResult:
        return solvers.solve(problem, method=self.method, **self.options, **kwargs)


class TestOldestFirst(_Runner, SolverConformance):
    method = "oldest-first"


class TestFlatProfile(_Runner, SolverConformance):
    method = "flat-profile"


class TestKvStable(_Runner, SolverConformance):
    method = "kv-stable"


class TestThresholdPyramid(_Runner, SolverConformance):
    method = "threshold-pyramid"


class TestKvUnified(_Runner, SolverConformance):
    method = "kv-unified"
    options: ClassVar[dict[str, Any]] = {"policy": "reference"}


class TestExact(_Runner, ExactConformance):
    method = "exact"


class TestBruteForce(_Runner, ExactConformance):
    method = "brute-force"


def test_every_registered_solver_has_a_conformance_class() -> None:
    tested = {cls.method for cls in _Runner.__subclasses__()}
    assert tested == set(solvers.names())
