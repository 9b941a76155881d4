"""``kv-unified``: one explicit welfare score, minimised exactly with CP-SAT.

For a candidate frontier with rendered tokens R the score (lower is better) is::

    score = F + B(R) + lambda_K * (max(0, K - K_floor) / S_K)**2
                     + lambda_C * (max(0, C - C_floor) / S_C)**2

* ``F``: fidelity loss, ``sum_i salience_i * age_i**-alpha * raw_i * level_i``.
* ``B``: the comfort band inside the wall: zero on ``[low, high] x W``,
  quadratic below ``low`` (weight ``budget_under_lambda``) and above ``high``
  (weight ``budget_over_lambda``). ``R <= W`` is a hard constraint.
* ``K``: avoidable cache churn against the previous request's layout and its
  breakpoints: ``(write - read) x (R - cached prefix)``.
* ``C``: avoidable change against the previous frontier: for every leaf whose
  level changes, ``salience x raw x recency x max(1, |level - previous|)``,
  recency decaying with the raw tokens between the leaf and the live edge.
* ``K_floor`` and ``C_floor``: the least churn and change any frontier under
  the wall can have (two small CP-SAT solves), so only *avoidable* churn and
  change are penalised.

The squares are modelled as maxima of tangent lines (a piecewise-linear
under-estimator, exact at the tangent points); every candidate is then
re-scored exactly, and the worst under-estimate is reported in
``diagnostics["pwl_error_bound"]``. Candidates: the CP-SAT optimum, the
floor (min-token) frontier and the carried frontier. Hysteresis: the carried
frontier is kept when its exact score is within ``adopt_epsilon`` of the best.

The policy is explicit: every field is required and there are no live
defaults. Pass a :class:`KvUnifiedPolicy` or the name of a shipped preset
(``PRESETS``); a missing or invalid field fails closed, naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from folding import FoldProblem, Layout, Status, fidelity_weights, previous_layout, render_levels
from folding.render import resolve_units

from ._atoms import AtomModel, build_atoms
from ._base import Capabilities, Plan, Solver, SolverConfig, register
from ._common import carried_levels, cheapest_levels
from ._cpsat import MAX_SEED, MAX_WORKERS, import_cp_model, make_solver, translate_status
from ._forest import Forest
from ._plan import Deadline
from .kv_stable import ideal_cut

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

__all__ = ["PRESETS", "KvUnifiedConfig", "KvUnifiedPolicy"]


class KvUnifiedPolicy(BaseModel):
    """The welfare policy of ``kv-unified``. Every field is required."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alpha: float = Field(ge=0.0, allow_inf_nan=False)
    """Fidelity age exponent."""
    budget_low_ratio: float = Field(ge=0.0, le=1.0)
    """Bottom of the comfort band, as a fraction of the wall W."""
    budget_high_ratio: float = Field(ge=0.0, le=1.0)
    """Top of the comfort band, as a fraction of W."""
    budget_under_lambda: float = Field(ge=0.0, allow_inf_nan=False)
    """Band penalty at R = 0."""
    budget_over_lambda: float = Field(ge=0.0, allow_inf_nan=False)
    """Band penalty at R = W."""
    cache_lambda: float = Field(ge=0.0, allow_inf_nan=False)
    cache_scale: float = Field(gt=0.0, allow_inf_nan=False)
    cache_read_price: float = Field(ge=0.0, allow_inf_nan=False)
    cache_write_price: float = Field(ge=0.0, allow_inf_nan=False)
    continuity_lambda: float = Field(ge=0.0, allow_inf_nan=False)
    continuity_scale: float = Field(gt=0.0, allow_inf_nan=False)
    continuity_recency_half_life_tokens: float = Field(gt=0.0, allow_inf_nan=False)
    continuity_recency_floor: float = Field(ge=0.0, le=1.0)
    adopt_epsilon: float = Field(ge=0.0, allow_inf_nan=False)
    """Hysteresis margin in score units: keep the carried frontier within this of the best."""

    @model_validator(mode="after")
    def _band(self) -> KvUnifiedPolicy:
        if self.budget_low_ratio > self.budget_high_ratio:
            raise ValueError(
                f"budget_low_ratio={self.budget_low_ratio} must not exceed "
                f"budget_high_ratio={self.budget_high_ratio}"
            )
        return self


PRESETS: dict[str, KvUnifiedPolicy] = {
    # The reference's development policy (its oracle and test default).
    "reference": KvUnifiedPolicy(
        alpha=0.7,
        budget_low_ratio=0.6,
        budget_high_ratio=0.9,
        budget_under_lambda=1000.0,
        budget_over_lambda=4000.0,
        cache_lambda=1.0,
        cache_scale=100_000.0,
        cache_read_price=0.1,
        cache_write_price=1.25,
        continuity_lambda=1.0,
        continuity_scale=100_000.0,
        continuity_recency_half_life_tokens=100_000.0,
        continuity_recency_floor=0.2,
        adopt_epsilon=0.0,
    ),
    # Cache- and continuity-heavy: churn and change cost as much as fidelity.
    "cache-first": KvUnifiedPolicy(
        alpha=0.7,
        budget_low_ratio=0.6,
        budget_high_ratio=0.935,
        budget_under_lambda=1000.0,
        budget_over_lambda=4000.0,
        cache_lambda=10_000.0,
        cache_scale=100_000.0,
        cache_read_price=0.1,
        cache_write_price=1.25,
        continuity_lambda=1_000.0,
        continuity_scale=100_000.0,
        continuity_recency_half_life_tokens=100_000.0,
        continuity_recency_floor=0.2,
        adopt_epsilon=2_000.0,
    ),
}


class KvUnifiedConfig(SolverConfig):
    """Options of ``kv-unified``. ``policy`` is required (a policy or a preset name)."""

    policy: KvUnifiedPolicy
    breakpoints: tuple[int, ...] | None = None
    """Cache breakpoints of the previous request, as unit counts; None: every unit."""
    pieces: int = Field(default=24, ge=2, le=512)
    """Tangent lines per quadratic term."""
    time_limit: float = Field(default=30.0, gt=0.0)
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    presolve: bool = False
    """Run CP-SAT's presolve (slower on these models)."""
    floor_time_limit: float = Field(default=0.5, gt=0.0)
    """Seconds for each floor solve (least churn, least change). A floor found within
    the limit but not proven is an upper bound; ``diagnostics["floors_proven"]`` says."""

    @field_validator("policy", mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return PRESETS[value]
            except KeyError:
                raise ValueError(
                    f"unknown kv-unified preset {value!r}; presets: {', '.join(sorted(PRESETS))}"
                ) from None
        return value


@dataclass(frozen=True)
class _Terms:
    """Per-problem coefficients of the score."""

    weights: FloatArray  # fidelity weight per leaf
    change: FloatArray | None  # continuity base per leaf (None: no previous frontier)
    previous: IntArray
    before: Layout | None  # previous request's layout
    markers: list[int]  # breakpoints of the previous request (unit counts)


def _recency(problem: FoldProblem, policy: KvUnifiedPolicy) -> FloatArray:
    tokens = problem.index.leaf_tokens.astype(np.float64)
    after = np.cumsum(tokens[::-1])[::-1] - tokens  # raw tokens newer than each leaf
    mid_age = after + tokens / 2.0
    q = policy.continuity_recency_floor
    return q + (1.0 - q) * np.exp2(-mid_age / policy.continuity_recency_half_life_tokens)


def _terms(problem: FoldProblem, cfg: KvUnifiedConfig) -> _Terms:
    policy = cfg.policy
    idx = problem.index
    weights = fidelity_weights(problem, policy.alpha)
    change = None
    if problem.previous is not None:
        change = idx.salience * idx.leaf_tokens * _recency(problem, policy)
    before = previous_layout(problem)
    markers: list[int] = []
    if before is not None:
        if cfg.breakpoints is None:
            markers = list(range(1, len(before) + 1))
        else:
            markers = sorted({m for m in cfg.breakpoints if 0 < m <= len(before)})
    return _Terms(weights, change, idx.previous, before, markers)


def _band(policy: KvUnifiedPolicy, wall: int, r: float) -> float:
    low, high = policy.budget_low_ratio * wall, policy.budget_high_ratio * wall
    out = 0.0
    if r < low and low > 0:
        out += policy.budget_under_lambda * ((low - r) / low) ** 2
    if r > high and wall > high:
        out += policy.budget_over_lambda * ((r - high) / (wall - high)) ** 2
    return out


def _cached(terms: _Terms, layout: Layout) -> int:
    """Tokens of ``layout`` served from the previous request's cache (marker walk)."""
    before = terms.before
    if before is None or before.fixed_tokens != layout.fixed_tokens:
        return 0
    m = min(len(before), len(layout))
    diff = np.flatnonzero(before.keys[:m] != layout.keys[:m])
    intact = int(diff[0]) if diff.size else m
    reached = [c for c in terms.markers if c <= intact]
    if not reached:
        return 0
    c = reached[-1]
    return int(layout.offsets[c]) if c < len(layout) else layout.total


@dataclass(frozen=True)
class _Score:
    total: float
    fidelity: float
    band: float
    churn: float
    change: float
    tokens: int


def _exact_score(
    problem: FoldProblem,
    cfg: KvUnifiedConfig,
    terms: _Terms,
    levels: IntArray,
    floors: tuple[float, float],
) -> _Score:
    policy = cfg.policy
    layout = render_levels(problem, levels)
    r = layout.total
    fidelity = float(terms.weights @ levels)
    band = _band(policy, problem.budget.total, r)
    price = max(0.0, policy.cache_write_price - policy.cache_read_price)
    churn = price * (r - _cached(terms, layout)) if terms.before is not None else 0.0
    change = 0.0
    if terms.change is not None:
        moved = levels != terms.previous
        factor = np.maximum(1, np.abs(levels - terms.previous))
        change = float((terms.change * factor)[moved].sum())
    k_excess = max(0.0, churn - floors[0]) / policy.cache_scale
    c_excess = max(0.0, change - floors[1]) / policy.continuity_scale
    total = (
        fidelity + band + policy.cache_lambda * k_excess**2 + policy.continuity_lambda * c_excess**2
    )
    return _Score(total, fidelity, band, churn, change, r)


class _Model:
    """The CP-SAT model over atoms with the score's linear pieces as expressions."""

    def __init__(self, problem: FoldProblem, cfg: KvUnifiedConfig, terms: _Terms) -> None:
        cp_model = import_cp_model()
        self.cp_model = cp_model
        self.limit_hit = False
        self.problem = problem
        self.cfg = cfg
        h = problem.hierarchy
        idx = problem.index
        atoms: AtomModel = build_atoms(problem)
        self.atoms = atoms
        m = cp_model.CpModel()
        self.m = m
        wall = problem.budget.total
        self.z = {j: m.new_bool_var(f"z{j}") for j in atoms.selectable.tolist()}
        self.raw = {a: m.new_bool_var(f"r{a}") for a in np.flatnonzero(atoms.raw_ok).tolist()}
        for a, cover in enumerate(atoms.covers):
            terms_ = [self.z[j] for j in cover]
            if a in self.raw:
                terms_.append(self.raw[a])
            m.add_exactly_one(terms_)
        self.tokens = m.new_int_var(0, wall, "R")
        m.add(
            self.tokens
            == atoms.constant_tokens
            + sum(int(atoms.raw_tokens[a]) * v for a, v in self.raw.items())
            + sum(int(h.summary_tokens[j]) * v for j, v in self.z.items())
        )
        free = ~idx.protected
        members = {}
        for j in self.z:
            a, b = int(h.span_first[j]), int(h.span_last[j]) + 1
            members[j] = np.arange(a, b)[free[a:b]]
        self.members = members
        # fidelity, as float coefficients on z
        self.fidelity = {
            j: float(h.summary_level[j]) * float(terms.weights[members[j]].sum()) for j in self.z
        }
        # continuity, as float coefficients on z and raw atoms
        self.change_z: dict[int, float] = {}
        self.change_raw: dict[int, float] = {}
        if terms.change is not None:
            prev = terms.previous
            for j in self.z:
                lv = int(h.summary_level[j])
                mem = members[j]
                moved = prev[mem] != lv
                factor = np.maximum(1, np.abs(lv - prev[mem]))
                self.change_z[j] = float((terms.change[mem] * factor)[moved].sum())
            for a in self.raw:
                leaves = atoms.atom_leaves[a]
                moved = prev[leaves] != 0
                self.change_raw[a] = float((terms.change[leaves] * prev[leaves])[moved].sum())
        # cache: prefix booleans over the previous layout's markers
        self.cached_expr: Any = 0
        if terms.before is not None:
            self._cache_prefix(terms)

    def _cache_prefix(self, terms: _Terms) -> None:
        """cached = tokens up to the last breakpoint whose whole prefix is still shown.

        One boolean per run of breakpoints needing the same new literals: protected
        raw units are always intact and add no variable; a unit that can no longer
        be shown ends the cacheable prefix.
        """
        m = self.m
        before = terms.before
        assert before is not None
        idx = self.problem.index
        n = idx.n
        atom_of = np.full(n, -1, dtype=np.int64)
        for a, leaves in enumerate(self.atoms.atom_leaves):
            atom_of[leaves] = a
        ends = np.append(before.offsets, before.total)
        current: Any = None  # None: the prefix so far is intact in every frontier
        constant = 0
        expr: list[Any] = []
        start = 0
        for count in terms.markers:
            literals: list[Any] = []
            broken = False
            for node in before.nodes[start:count].tolist():
                if node < n:
                    if idx.protected[node]:
                        continue
                    var = self.raw.get(int(atom_of[node]))
                else:
                    var = self.z.get(node - n)
                if var is None:
                    broken = True
                    break
                literals.append(var)
            if broken:
                break
            if literals:
                k = m.new_bool_var(f"k{count}")
                for var in dict.fromkeys(literals):
                    m.add_implication(k, var)
                if current is not None:
                    m.add_implication(k, current)
                current = k
            segment = int(ends[count]) - (int(ends[start]) if start else 0)
            if current is None:
                constant += segment
            else:
                expr.append(segment * current)
            start = count
        self.cached_expr = constant + sum(expr)

    # ----------------------------------------------------------- expressions
    def scaled(
        self, coefficients: dict[int, float], variables: dict[int, Any], scale: float
    ) -> Any:
        coefs = {key: round(c * scale) for key, c in coefficients.items() if c}
        _check_magnitude(sum(abs(c) for c in coefs.values()), "a scaled objective term")
        return sum(c * variables[key] for key, c in coefs.items())

    def churn_expr(self, scale: float) -> Any:
        """Integer expression ~ scale x churn (cache price x re-read tokens)."""
        policy = self.cfg.policy
        price = max(0.0, policy.cache_write_price - policy.cache_read_price)
        factor = round(price * scale)
        return factor * (self.tokens - self.cached_expr)

    def change_expr(self, scale: float) -> Any:
        return self.scaled(self.change_z, self.z, scale) + self.scaled(
            self.change_raw, self.raw, scale
        )

    def solve(self, objective: Any, time_limit: float) -> tuple[Status | None, Any]:
        self.m.minimize(objective)
        problem = self.m.validate()
        if problem:
            self.m.clear_objective()
            raise _ScaleError(problem)
        solver = make_solver(
            self.cp_model,
            time_limit=time_limit,
            workers=self.cfg.workers,
            seed=self.cfg.seed,
            presolve=self.cfg.presolve,
        )
        code = solver.solve(self.m)
        self.m.clear_objective()
        self.last_status = solver.status_name(code)
        # CP-SAT stops without a proof (feasible or unknown) only on its limit
        self.limit_hit |= code in (self.cp_model.FEASIBLE, self.cp_model.UNKNOWN)
        return translate_status(code, self.cp_model), solver

    def levels(self, solver: Any) -> IntArray:
        chosen = [j for j, v in self.z.items() if solver.value(v)]
        return self.atoms.levels(self.problem, [], chosen)

    def hint(self, levels: IntArray) -> None:
        nodes, _ = resolve_units(self.problem, levels)
        n = self.problem.index.n
        shown = {int(x) - n for x in nodes[nodes >= n]}
        self.m.clear_hints()
        for j, v in self.z.items():
            self.m.add_hint(v, 1 if j in shown else 0)
        for a, v in self.raw.items():
            self.m.add_hint(v, 1 if levels[self.atoms.atom_leaves[a][0]] == 0 else 0)


def _quadratic_epigraph(
    model: _Model, excess: Any, upper: float, weight: float, scale_x: float, pieces: int, name: str
) -> tuple[Any, float]:
    """t >= weight * (x / scale_x)**2 for x = excess in [0, upper], by tangents.

    Returns the epigraph variable (in score units x SCORE) and the worst
    under-estimate in score units.
    """
    m = model.m
    peak = weight * (upper / scale_x) ** 2 * SCORE
    _check_magnitude(peak, f"the penalty {name}")
    bound = math.ceil(peak) + 1
    if upper <= 0 or weight == 0:
        return m.new_int_var(0, max(1, bound), name), 0.0
    step = upper / pieces
    max_slope = 2.0 * weight * upper / scale_x**2
    # q * t >= q * SCORE * (f(x0) + f'(x0) * (x - x0)); q keeps the slopes integral
    q = int(min(1e9, max(1.0, 1e4 / (SCORE * max_slope))))
    # rounding a slope moves a tangent by up to upper / (2 q) at the far end: t's
    # bound leaves room for it, or the largest excess would have no feasible t
    bound += math.ceil(upper / (2 * q)) + 1
    _check_magnitude(q * (bound + SCORE * max_slope * upper + peak), f"the tangents of {name}")
    t = m.new_int_var(0, bound, name)
    for p in range(pieces + 1):
        x0 = p * step
        slope = 2.0 * weight * x0 / scale_x**2
        value = weight * (x0 / scale_x) ** 2
        a = round(q * SCORE * slope)
        b = round(q * SCORE * (value - slope * x0))
        m.add(q * t >= a * excess + b)
    return t, weight * (step / scale_x) ** 2 / 4.0


SCORE = 1000  # score units are multiplied by this in the integer model

_MAGNITUDE = float(2**61)
"""Largest magnitude one bound, coefficient or term of the integer model may reach:
CP-SAT's arithmetic is 64-bit, its domains must lie within half of it, and it
rejects a model whose sums could overflow (checked before every solve)."""


class _ScaleError(Exception):
    """The integer model's numbers would not fit CP-SAT's 64-bit arithmetic."""


def _check_magnitude(value: float, what: str) -> None:
    if not math.isfinite(value) or abs(value) > _MAGNITUDE:
        raise _ScaleError(f"{what} reaches {value:.3g}, beyond 64-bit integer arithmetic")


def _search(
    problem: FoldProblem,
    cfg: KvUnifiedConfig,
    terms: _Terms,
    model: _Model,
    deadline: Deadline,
    carried_fits: bool,
    diag: dict[str, Any],
    stats: dict[str, Any],
) -> tuple[Status | None, Any, float, float]:
    """The CP-SAT solves: the churn and change floors, then the score.

    Returns the main solve's status and solver, and the two floors. Raises
    :class:`_ScaleError` when the numbers of the integer model would not fit.
    """
    policy = cfg.policy
    wall = problem.budget.total
    # floors of avoidable churn and change: zero when the carried frontier fits,
    # since it re-reads nothing and changes nothing
    k_floor = c_floor = 0.0
    floors_proven = True
    budget = deadline.remaining(cfg.time_limit)
    floor_limit = min(cfg.floor_time_limit, budget * 0.2)
    if terms.before is not None and not carried_fits:
        status, solver = model.solve(model.churn_expr(SCORE), floor_limit)
        floors_proven &= status is Status.OPTIMAL
        if status is not None:
            k_floor = solver.objective_value / SCORE
    if terms.change is not None and not carried_fits:
        status, solver = model.solve(model.change_expr(SCORE), floor_limit)
        floors_proven &= status is Status.OPTIMAL
        if status is not None:
            c_floor = solver.objective_value / SCORE
    diag["churn_floor"], diag["change_floor"] = k_floor, c_floor
    diag["floors_proven"] = floors_proven
    # main solve: F + B + K + C with tangent epigraphs
    m = model.m
    r = model.tokens
    low, high = policy.budget_low_ratio * wall, policy.budget_high_ratio * wall
    errors = []
    under = m.new_int_var(0, math.ceil(low) * SCORE + SCORE, "under")
    m.add(under >= round(low * SCORE) - SCORE * r)
    t_under, e1 = _quadratic_epigraph(
        model,
        under,
        low * SCORE,
        policy.budget_under_lambda,
        max(low, 1e-9) * SCORE,
        cfg.pieces,
        "t_under",
    )
    over = m.new_int_var(0, math.ceil(wall - high) * SCORE + SCORE, "over")
    m.add(over >= SCORE * r - round(high * SCORE))
    t_over, e2 = _quadratic_epigraph(
        model,
        over,
        (wall - high) * SCORE,
        policy.budget_over_lambda,
        max(wall - high, 1e-9) * SCORE,
        cfg.pieces,
        "t_over",
    )
    errors += [e1, e2]
    objective = [model.scaled(model.fidelity, model.z, SCORE), t_under, t_over]
    penalties = []
    if terms.before is not None and policy.cache_lambda > 0:
        price = max(0.0, policy.cache_write_price - policy.cache_read_price)
        penalties.append(
            (
                "churn",
                model.churn_expr(SCORE),
                k_floor,
                price * wall,
                policy.cache_lambda,
                policy.cache_scale,
            )
        )
    if terms.change is not None and policy.continuity_lambda > 0:
        most = sum(model.change_z.values()) + sum(model.change_raw.values())
        penalties.append(
            (
                "change",
                model.change_expr(SCORE),
                c_floor,
                most,
                policy.continuity_lambda,
                policy.continuity_scale,
            )
        )
    for name, expr, floor_value, most, weight, scale in penalties:
        # weight * (max(0, value - floor) / scale)**2, by tangents of the excess
        _check_magnitude(most * SCORE, f"the {name} penalty's range")
        excess = m.new_int_var(0, int(most * SCORE) + SCORE, f"excess_{name}")
        m.add(excess >= expr - round(floor_value * SCORE))
        t, err = _quadratic_epigraph(
            model, excess, most * SCORE, weight, scale * SCORE, cfg.pieces, f"t_{name}"
        )
        objective.append(t)
        errors.append(err)
    status, solver = model.solve(sum(objective), min(budget * 0.6, deadline.remaining(budget)))
    stats["cpsat_status"] = model.last_status
    diag["pwl_error_bound"] = sum(errors)
    return status, solver, k_floor, c_floor


@register
class KvUnified(Solver):
    """Minimise the explicit welfare score exactly (CP-SAT), with hysteresis."""

    name = "kv-unified"
    capabilities = Capabilities(uses_time_limit=True, example_options={"policy": "reference"})

    @classmethod
    def window_options(cls, window: int, band_top: float) -> dict[str, Any]:
        """The ``cache-first`` preset sized for small windows.

        The preset's churn and change scales are absolute tokens (sized for ~100k
        windows); here they are the window itself. Its band top (0.935) would hold the
        request at the wall, so each append would force a small refold; at the
        caller's band top a refold goes as deep as the other solvers'. The band keeps
        the preset's proportions below its new top.
        """
        preset, scale = PRESETS["cache-first"], float(window)
        policy = preset.model_copy(
            update={
                "cache_scale": scale,
                "continuity_scale": scale,
                "continuity_recency_half_life_tokens": scale,
                "budget_high_ratio": band_top,
                "budget_low_ratio": band_top * preset.budget_low_ratio / preset.budget_high_ratio,
            }
        )
        return {"policy": policy}

    @classmethod
    def option_hint(cls, name: str) -> str:
        if name != "policy":
            return ""
        return (
            f": give a preset name ({', '.join(sorted(PRESETS))}) or a KvUnifiedPolicy, e.g. "
            "solver_options={'policy': 'reference'} in Python, or --option policy=reference "
            "with ctxfold solve"
        )

    Config = KvUnifiedConfig

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        cfg = self.config
        assert isinstance(cfg, KvUnifiedConfig)
        policy = cfg.policy
        wall = problem.budget.total
        floor = cheapest_levels(problem)
        assert floor is not None
        floor_tokens = render_levels(problem, floor).total
        if floor_tokens > wall:
            return Plan(None, Status.OVER_BUDGET)
        deadline = Deadline.after(time_limit if time_limit is not None else cfg.time_limit)
        terms = _terms(problem, cfg)
        model = _Model(problem, cfg, terms)
        # the kv-stable ideal cut is a strong, valid incumbent for every solve
        ideal = ideal_cut(problem, Forest(problem), deadline=deadline).levels
        if render_levels(problem, ideal).total > wall:
            ideal = floor
        model.hint(ideal)
        diag: dict[str, Any] = {"floor_tokens": floor_tokens}
        stats: dict[str, Any] = {
            "atoms": model.atoms.n_atoms,
            "variables": len(model.z) + len(model.raw),
        }
        proven = True
        carried = carried_levels(problem)
        carried_fits = carried is not None and render_levels(problem, carried).total <= wall
        status: Status | None
        try:
            status, solver, k_floor, c_floor = _search(
                problem, cfg, terms, model, deadline, carried_fits, diag, stats
            )
        except _ScaleError as exc:
            # Beyond 64-bit integer arithmetic (walls near the model's limit with a
            # steep policy): the exact score still ranks the other candidates.
            status, solver, k_floor, c_floor = None, None, 0.0, 0.0
            diag["fallback"] = (
                f"no integer search ({exc}); the best of the floor, the ideal cut and the "
                "carried frontier by the exact score"
            )
            diag["floors_proven"] = False
            stats["cpsat_status"] = "not run"
        proven &= status is Status.OPTIMAL
        floors = (k_floor, c_floor)
        candidates: list[tuple[str, IntArray]] = [("floor", floor), ("ideal", ideal)]
        if status is not None:
            candidates.insert(0, ("optimum", model.levels(solver)))
        scored = []
        for label, levels in candidates:
            score = _exact_score(problem, cfg, terms, levels, floors)
            scored.append((score.total, score.tokens, tuple(levels.tolist()), label, levels, score))
        scored.sort(key=lambda s: s[:3])
        best = scored[0]
        choice = best
        if carried is not None:
            c_score = _exact_score(problem, cfg, terms, carried, floors)
            diag["carried_score"] = c_score.total
            if c_score.tokens <= wall and c_score.total <= best[0] + policy.adopt_epsilon:
                choice = (c_score.total, c_score.tokens, (), "carried", carried, c_score)
        score = choice[5]
        diag.update(
            decision=choice[3],
            score=score.total,
            best_score=best[0],
            fidelity=score.fidelity,
            band=score.band,
            churn=score.churn,
            change=score.change,
        )
        final_status = Status.OPTIMAL if proven and choice[3] == "optimum" else Status.FEASIBLE
        stats["time_limit_hit"] = model.limit_hit
        return Plan(choice[4], final_status, diagnostics=diag, stats=stats)
