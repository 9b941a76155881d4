"""The solver interface, the registry and the shared finishing step.

Every solver is a class with a ``name``, a pydantic ``Config`` and a
``_plan`` method returning a :class:`Plan` (levels plus intent). The base
class turns a plan into a :class:`~folding.SolveResult`: it renders the
levels with the one renderer, prices the KV cost against the previous
frontier, checks the plan when its status promises one, and times the work.
Infeasible constraints are detected before any solver runs.
"""

from __future__ import annotations

import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, ValidationError

from folding import (
    FoldProblem,
    Layout,
    PlanViolation,
    SolveResult,
    Status,
    check_levels,
    frontier_from_levels,
    kv_cost,
    previous_layout,
    render_levels,
)

from ._common import infeasible_diagnostics, over_budget_plan
from ._plan import Plan

IntArray = npt.NDArray[np.int64]

__all__ = [
    "Capabilities",
    "Plan",
    "Solver",
    "SolverConfig",
    "SolverConfigError",
    "capabilities",
    "configure",
    "get",
    "names",
    "register",
    "solve",
    "window_options",
]


class SolverConfigError(ValueError):
    """A solver name or option is invalid: the message names the field and the fix.

    Attributes
    ----------
    method : str
        The solver name given.
    field : str or None
        The offending option (None for an unknown solver).
    """

    def __init__(self, message: str, *, method: str, field: str | None = None) -> None:
        super().__init__(message)
        self.method = method
        self.field = field


@dataclass(frozen=True)
class Capabilities:
    """What a solver can do, so callers never special-case solver names.

    Attributes
    ----------
    exact : bool
        ``optimal`` is a proven claim about :func:`folding.fidelity_loss`.
    oracle : bool
        It enumerates: the reference answer in tests, for tiny problems only.
    max_leaves : int or None
        The largest problem it accepts (None: no limit).
    uses_time_limit : bool
        It honours ``time_limit``: when the limit runs out it stops and returns the
        best valid plan it has (``stats["time_limit_hit"]`` says so).
    searches_slowly : bool
        Its cost can grow steeply with the problem: long runs may leave it out.
    example_options : mapping
        Options a demonstration may use when the caller gives none (a required
        option's documented preset); empty when none are needed.
    settles : bool
        Solving again, with its own answer as the previous frontier and nothing else
        changed, returns the same answer. The greedy baselines do not: they resume
        folding from the carried frontier, so a plan left above the target (a summary
        they asked for is missing) can take one more step on the next call.
    windowed : bool
        Built for a long-lived agent: a caller may give it only the part of history
        the last frontier can reach, older memories stated as single leaves (the
        autobiographical strategy's ``fold_window``), and its plans stay those of the
        whole history within the gap its benchmark reports (``benchmarks/window_gap.py``).
    """

    exact: bool = False
    oracle: bool = False
    max_leaves: int | None = None
    uses_time_limit: bool = False
    searches_slowly: bool = False
    example_options: Mapping[str, Any] = field(default_factory=dict)
    settles: bool = True
    windowed: bool = False

    def accepts(self, n_leaves: int) -> bool:
        """True when a problem of ``n_leaves`` leaves is within its size limit."""
        return self.max_leaves is None or n_leaves <= self.max_leaves


class SolverConfig(BaseModel):
    """Base of every solver's configuration: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class _DeprecatedExact:
    """``Solver.exact``, deprecated: the solver's ``capabilities.exact``, with a warning."""

    def __get__(self, instance: object, owner: type[Solver]) -> bool:
        warnings.warn(
            "Solver.exact is deprecated and will be removed in the next release; "
            "read the solver's capabilities.exact (or solvers.capabilities(name).exact)",
            DeprecationWarning,
            stacklevel=2,
        )
        return owner.capabilities.exact


class Solver(ABC):
    """A fold solver. Constructors only store the configuration.

    Subclasses set ``name``, ``Config`` and implement :meth:`_plan`.
    """

    name: ClassVar[str]
    Config: ClassVar[type[SolverConfig]] = SolverConfig
    capabilities: ClassVar[Capabilities] = Capabilities()
    exact = _DeprecatedExact()
    """Deprecated: read ``capabilities.exact`` (this alias warns with
    :class:`DeprecationWarning` and returns it)."""

    def __init__(self, config: SolverConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise TypeError("pass either a config object or keyword options, not both")
        self.config = config if config is not None else self.Config(**options)
        if not isinstance(self.config, self.Config):
            raise TypeError(
                f"{self.name} expects a {self.Config.__name__}, got {type(self.config).__name__}"
            )

    @classmethod
    def window_options(cls, window: int, band_top: float) -> dict[str, Any]:
        """Options sized for a context window of ``window`` tokens whose caller keeps
        requests at or below ``band_top`` x the window (empty: the defaults fit)."""
        return {}

    @classmethod
    def option_hint(cls, name: str) -> str:
        """How to give the required option ``name`` (appended to a missing-option error)."""
        return ""

    def solve(self, problem: FoldProblem, *, time_limit: float | None = None) -> SolveResult:
        """Solve ``problem``; never mutates it.

        Parameters
        ----------
        problem : FoldProblem
        time_limit : float, optional
            Seconds for the solve. A solver whose capabilities say ``uses_time_limit``
            stops when it runs out and returns the best valid plan it has: a
            ``feasible`` plan that fits the wall (at worst the floor), or
            ``over_budget`` when even the floor does not fit. ``stats["time_limit_hit"]``
            is True then (False otherwise). Work before the search starts (reading the
            hierarchy, the floor) is linear in the problem and not interrupted.

        Returns
        -------
        SolveResult
            ``optimal`` / ``feasible`` (fits the wall, passes ``check_plan``),
            ``over_budget`` (the cheapest frontier, with produce requests) or
            ``infeasible`` (no frontier; diagnostics name each conflicting leaf).

        Raises
        ------
        SolverConfigError
            If ``time_limit`` is not a positive number (a :class:`ValueError`).
        """
        if time_limit is not None and (
            isinstance(time_limit, bool)
            or not isinstance(time_limit, int | float)
            or not time_limit > 0
        ):
            raise SolverConfigError(
                f"time_limit must be a positive number of seconds, got {time_limit!r}",
                method=self.name,
                field="time_limit",
            )
        start = time.perf_counter()
        diagnostics = infeasible_diagnostics(problem)
        if diagnostics is not None:
            plan = Plan(None, Status.INFEASIBLE, diagnostics=diagnostics)
        else:
            if time_limit is not None:  # what is left of it for the solver itself
                time_limit = max(1e-6, time_limit - (time.perf_counter() - start))
            plan = self._plan(problem, time_limit)
            if plan.status is Status.OVER_BUDGET and plan.levels is None:
                plan = over_budget_plan(problem, plan)
        return self._finish(problem, plan, start)

    @abstractmethod
    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        """Decide the levels. Called only when the constraints admit a frontier."""

    def _finish(self, problem: FoldProblem, plan: Plan, start: float) -> SolveResult:
        stats = dict(plan.stats)
        stats.setdefault("time_limit_hit", False)
        if plan.levels is None:
            stats["solve_ms"] = (time.perf_counter() - start) * 1000.0
            return SolveResult(
                solver=self.name,
                status=plan.status,
                produce=plan.produce,
                **_typed(plan.diagnostics),
                stats=stats,
            )
        frontier = frontier_from_levels(problem, plan.levels)
        layout: Layout
        if plan.status in Status.with_plan():
            try:
                layout = check_levels(problem, plan.levels)
            except PlanViolation as exc:
                raise AssertionError(
                    f"solver {self.name!r} returned an invalid plan with status "
                    f"{plan.status.value}: {exc}"
                ) from exc
        else:
            layout = render_levels(problem, plan.levels)
        stats["solve_ms"] = (time.perf_counter() - start) * 1000.0
        result = SolveResult(
            solver=self.name,
            status=plan.status,
            tokens=layout.total,
            kv_cost=kv_cost(previous_layout(problem), layout),
            produce=plan.produce,
            **_typed(plan.diagnostics),
            stats=stats,
        )
        # the frontier is str -> int by construction (frontier_from_levels): set it
        # without validating every entry again (tens of ms at 75k leaves)
        return result.model_copy(update={"frontier": frontier}).with_layout(layout)


_TYPED = {
    "suggestion": "message",
    "objective": "objective",
    "bound": "bound",
    "floor_tokens": "floor_tokens",
    "decision": "decision",
    "conflicts": "conflicts",
}
"""Diagnostics keys a solver reports that :class:`SolveResult` carries as typed fields."""


def _typed(diagnostics: dict[str, Any]) -> dict[str, Any]:
    """The typed fields of a result from a solver's diagnostics, and the extras left."""
    extras = {k: v for k, v in diagnostics.items() if k not in _TYPED}
    typed = {_TYPED[k]: v for k, v in diagnostics.items() if k in _TYPED}
    return {**typed, "diagnostics": extras}


_REGISTRY: dict[str, type[Solver]] = {}


def register(cls: type[Solver]) -> type[Solver]:
    """Class decorator adding a solver to the registry under ``cls.name``.

    Raises
    ------
    ValueError
        If the name is already taken.
    """
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"a solver named {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Registered solver names, sorted."""
    return sorted(_REGISTRY)


def get(name: str, **options: Any) -> Solver:
    """An instance of the solver called ``name`` configured with ``options``.

    Raises
    ------
    KeyError
        For an unknown name; the message lists the valid ones.
    pydantic.ValidationError
        For an unknown or invalid option.
    """
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown solver {name!r}; registered solvers: {', '.join(names())}"
        ) from None
    return cls(**options)


def capabilities(name: str) -> Capabilities:
    """The :class:`Capabilities` of the solver called ``name``.

    Examples
    --------
    >>> import solvers
    >>> solvers.capabilities("exact").exact, solvers.capabilities("kv-stable").exact
    (True, False)

    Raises
    ------
    SolverConfigError
        For an unknown name.
    """
    if name not in _REGISTRY:
        raise SolverConfigError(
            f"unknown solver {name!r}; registered solvers: {', '.join(names())}", method=name
        )
    return _REGISTRY[name].capabilities


def window_options(name: str, window: int, band_top: float) -> dict[str, Any]:
    """The options of solver ``name`` sized for a ``window``-token context kept at or
    below ``band_top`` x the window: what a host running it on that window passes.

    Examples
    --------
    >>> import solvers
    >>> solvers.window_options("kv-stable", 8000, 0.7)
    {}
    >>> sorted(solvers.window_options("kv-unified", 8000, 0.7))
    ['policy']
    """
    return _REGISTRY[name].window_options(window, band_top) if name in _REGISTRY else {}


def configure(method: str, options: Mapping[str, Any] | None = None) -> Solver:
    """Validate a solver name and its options once, and return the configured solver.

    Parameters
    ----------
    method : str
        One of :func:`names`.
    options : mapping, optional
        The solver's configuration fields.

    Returns
    -------
    Solver
        Call ``.solve(problem)`` on it for each problem.

    Raises
    ------
    SolverConfigError
        For an unknown solver, or an unknown, missing or invalid option; the message
        names each offending field and, for ``kv-unified``'s ``policy``, the presets.

    Examples
    --------
    >>> import solvers
    >>> solvers.configure("kv-stable").name
    'kv-stable'
    >>> try:
    ...     solvers.configure("kv-unified")
    ... except solvers.SolverConfigError as exc:
    ...     print(exc.field)
    policy
    """
    if method not in _REGISTRY:
        raise SolverConfigError(
            f"unknown solver {method!r}; registered solvers: {', '.join(names())}",
            method=method,
        )
    cls = _REGISTRY[method]
    try:
        return cls(**dict(options or {}))
    except ValidationError as exc:
        problems = []
        first: str | None = None
        for err in exc.errors():
            name = ".".join(str(x) for x in err["loc"]) or "options"
            first = first or name
            hint = cls.option_hint(name) if err["type"] == "missing" else ""
            what = "is required" if err["type"] == "missing" else err["msg"]
            if err["type"] == "extra_forbidden":
                known = ", ".join(sorted(cls.Config.model_fields))
                what = f"is not an option of {method} (its options: {known})"
            problems.append(f"option {name!r} {what}{hint}")
        raise SolverConfigError(
            f"{method}: {'; '.join(problems)}", method=method, field=first
        ) from None


def solve(
    problem: FoldProblem,
    method: str = "kv-stable",
    *,
    time_limit: float | None = None,
    **options: Any,
) -> SolveResult:
    """Solve ``problem`` with the solver ``method``.

    Parameters
    ----------
    problem : FoldProblem
    method : str, default "kv-stable"
        One of :func:`names`.
    time_limit : float, optional
        Seconds; a solver whose capabilities say ``uses_time_limit`` (every registered
        one) returns its best valid plan when it runs out, with
        ``stats["time_limit_hit"]`` True (see :meth:`Solver.solve`).
    **options
        The solver's configuration fields.

    Returns
    -------
    SolveResult

    Examples
    --------
    >>> import solvers
    >>> from folding.testing import chronicle
    >>> result = solvers.solve(chronicle(36, total=12_000), method="flat-profile")
    >>> result.status.value, result.tokens <= 12_000
    ('feasible', True)
    """
    return get(method, **options).solve(problem, time_limit=time_limit)
