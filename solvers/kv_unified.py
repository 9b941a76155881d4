"""``kv-unified``: one explicit welfare score, minimised exactly with CP-SAT.

For a candidate frontier with rendered tokens R the score (lower is better) is::

    score = F + B(R) + lambda_K * (max(0, K - K_floor) / S_K)**2
                     + rho * lambda_C * (max(0, C - C_floor) / S_C)**2

* ``F``: fidelity loss, ``sum_i salience_i * age_i**-alpha * raw_i * level_i``.
* ``B``: the comfort band inside the wall: zero on ``[low, high] x W``,
  quadratic below ``low`` (weight ``budget_under_lambda``) and above ``high``
  (weight ``budget_over_lambda``). ``R <= W`` is a hard constraint.
* ``K``: avoidable cache churn against the previous request's layout and its
  breakpoints: ``(write - read) x (R - cached prefix)``.
* ``C``: avoidable change against the previous frontier: for every leaf whose
  level changes, ``salience x raw x recency x stability x max(1, |level -
  previous|)``, recency decaying with the raw tokens between the leaf and the
  live edge (``q_min + (1 - q_min) 2**(-mid_age / H_C)``) and stability with the
  accepted presentations the leaf has stayed unchanged
  (``g_min + (1 - g_min) 2**(-tau / H_tau)``, tau from
  ``KvUnifiedConfig.stable_for``; 1 when not given).
* ``rho``: the continuity multiplier in [0, 1] (``continuity_multiplier``, 1 by
  default; see :class:`ContinuityRelaxation`). The cache term is never relaxed.
* ``K_floor`` and ``C_floor``: the least churn and change any frontier under
  the wall can have, so only *avoidable* churn and change are penalised. The
  churn floor is exact without a search (one least-tokens sweep per breakpoint of
  the previous layout); the change floor comes from the Lagrangian relaxation of
  the wall, proven when its bound meets its best frontier, else by a CP-SAT solve
  over the edges the bound leaves open, warm-started from that frontier.

The squares are modelled as maxima of tangent lines (a piecewise-linear
under-estimator, exact at the tangent points); every candidate is then
re-scored exactly, and the worst under-estimate is reported in
``diagnostics["pwl_error_bound"]``. Candidates: the CP-SAT optimum, the
floor (min-token) frontier, the kv-stable ideal cut, the best vertex of the
(tokens, fidelity) hull and the carried frontier. Hysteresis: the carried
frontier is kept when its exact score is within ``adopt_epsilon`` of the best.
With ``hysteresis_certificate``, a tangent lower bound on every frontier's score
(one shortest-path sweep per tangent point) can prove that hold before any search,
which is then skipped. With ``latent_demand``, the plan also asks for the merges it
would use: each candidate merge is solved again as if it existed, and those that
improve the best score by more than ``adopt_epsilon`` become produce requests.

The integer model holds variables only where a choice exists: edges no frontier
under the wall can use are closed, edges the one-representation rows force are
constants, and edges whose Lagrangian lower bound exceeds the best hint's value
are closed (reduced-cost fixing); none of this changes the model's optimum
value. The hint and incumbent is the best by the main objective of the carried
frontier (when it fits), the ideal cut and the best vertex of the lower convex
hull of (tokens, fidelity), found by a parametric shortest-path search
(``stats["hint"]``, ``stats["hint_kept"]``). A near-optimal incumbent is what
makes the bound close most edges: on a 75,000-leaf history it takes the model
from 5,900 variables to about 2,000.

The policy is explicit: every field is required and there are no live
defaults. Pass a :class:`KvUnifiedPolicy` or the name of a shipped preset
(``PRESETS``); a missing or invalid field fails closed, naming the field.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from folding import (
    FoldProblem,
    Layout,
    ProduceRequest,
    Status,
    Summary,
    fidelity_weights,
    previous_layout,
    render_levels,
)
from folding.render import first_nonhole, resolve_units

from ._atoms import (
    AtomModel,
    Choices,
    build_atoms,
    every_choice,
    open_choices,
    path_argmin,
    path_bounds,
    path_least_after,
    path_min,
    summary_atoms,
)
from ._base import Capabilities, Plan, Solver, SolverConfig, register
from ._common import carried_levels, cheapest_levels
from ._cpsat import MAX_SEED, MAX_WORKERS, import_cp_model, make_solver, translate_status
from ._forest import Forest
from ._plan import Deadline
from .kv_stable import ideal_cut

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

__all__ = [
    "PRESETS",
    "ContinuityRelaxation",
    "KvUnifiedConfig",
    "KvUnifiedPolicy",
    "LatentDemand",
    "continuity_multiplier",
]


class KvUnifiedPolicy(BaseModel):
    """The welfare policy of ``kv-unified``. Every field is required.

    Examples
    --------
    >>> from solvers.kv_unified import PRESETS, KvUnifiedPolicy
    >>> custom = KvUnifiedPolicy(**{**PRESETS["reference"].model_dump(), "alpha": 0.5})
    >>> custom.alpha, custom.continuity_stable_half_life, custom.continuity_stable_floor
    (0.5, 16.0, 0.25)
    """

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
    continuity_stable_half_life: float = Field(gt=0.0, allow_inf_nan=False)
    """H_tau: accepted presentations over which a leaf's change weight halves towards
    ``continuity_stable_floor`` while its representation stays unchanged."""
    continuity_stable_floor: float = Field(ge=0.0, le=1.0)
    """g_min: the least share of its change weight a long-stable leaf keeps."""
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
        continuity_stable_half_life=16.0,
        continuity_stable_floor=0.25,
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
        continuity_stable_half_life=16.0,
        continuity_stable_floor=0.25,
        adopt_epsilon=2_000.0,
    ),
}


RelaxationReason = Literal["surgery", "budget-transition", "infrastructure"]


class ContinuityRelaxation(BaseModel):
    """An audited, expiring relaxation of the continuity term: the multiplier rho.

    The score's continuity penalty is multiplied by rho in [0, 1] (the cache term
    never is). A host that has a reason to let the layout change more freely for a
    while (history surgery, a budget transition, an infrastructure change) records
    one of these and passes its :meth:`multiplier_at` the current time as
    ``KvUnifiedConfig.continuity_multiplier``. :func:`continuity_multiplier` reads a
    record that may be malformed and fails closed (rho = 1).

    Parameters
    ----------
    reason : {"surgery", "budget-transition", "infrastructure"}
        Why continuity is relaxed (the audit trail).
    multiplier : float
        rho while the relaxation holds, finite in [0, 1].
    expires_at : float
        When it stops holding, on the caller's clock (e.g. Unix seconds); from this
        instant on rho is 1.

    Examples
    --------
    >>> from solvers.kv_unified import ContinuityRelaxation
    >>> r = ContinuityRelaxation(reason="surgery", multiplier=0.25, expires_at=1000.0)
    >>> r.multiplier_at(999.0), r.multiplier_at(1000.0)
    (0.25, 1.0)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: RelaxationReason
    multiplier: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    expires_at: float = Field(allow_inf_nan=False)

    def multiplier_at(self, now: float) -> float:
        """rho at time ``now``: the multiplier before ``expires_at``, else 1 (also for a
        ``now`` that is not a finite number)."""
        if not isinstance(now, int | float) or not math.isfinite(now) or now >= self.expires_at:
            return 1.0
        return self.multiplier


def continuity_multiplier(relaxation: object, now: float) -> float:
    """rho for a relaxation record at time ``now``, failing closed.

    Parameters
    ----------
    relaxation : ContinuityRelaxation, mapping or None
        The record (a mapping is validated as a :class:`ContinuityRelaxation`).
    now : float
        The current time on the record's clock.

    Returns
    -------
    float
        The record's multiplier while it is valid and unexpired; 1 when there is no
        record, when it is malformed (an unknown reason, a multiplier outside [0, 1]
        or not a number, a missing field) or when it has expired.

    Examples
    --------
    >>> from solvers.kv_unified import continuity_multiplier
    >>> record = {"reason": "surgery", "multiplier": 0.25, "expires_at": 100.0}
    >>> continuity_multiplier(record, 50.0), continuity_multiplier(record, 150.0)
    (0.25, 1.0)
    >>> continuity_multiplier({**record, "multiplier": float("nan")}, 50.0)
    1.0
    """
    if relaxation is None:
        return 1.0
    if not isinstance(relaxation, ContinuityRelaxation):
        if not isinstance(relaxation, Mapping):
            return 1.0
        try:
            relaxation = ContinuityRelaxation.model_validate(dict(relaxation))
        except ValidationError:
            return 1.0
    return relaxation.multiplier_at(now)


class LatentDemand(BaseModel):
    """Options of latent merge demand: which missing merges the solver would use.

    After a plan that fits the wall, each window of ``merge_threshold`` adjacent
    parentless summaries of one level is a possible merge one level up. Its cost is
    estimated from the summaries that exist at that level (the median, and
    conservatively the 80th percentile, never below ``fallback_recall_tokens``;
    ``fallback_recall_tokens`` alone when there are none). The candidates that would
    save tokens are solved again with the merge in place; those whose best score
    improves on the plan's by more than ``adopt_epsilon`` become produce requests,
    the largest improvement first.

    Parameters
    ----------
    merge_threshold : int
        Siblings per merge (at least 2).
    fallback_recall_tokens : int
        Estimated tokens of a merge at a level where no summary exists yet.
    max_candidates : int, default 16
        Most candidates solved again (each is one more solve).

    Examples
    --------
    >>> from solvers.kv_unified import LatentDemand
    >>> LatentDemand(merge_threshold=2, fallback_recall_tokens=30).max_candidates
    16
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    merge_threshold: int = Field(ge=2, le=1024)
    fallback_recall_tokens: int = Field(ge=0, le=2**40)
    max_candidates: int = Field(default=16, ge=1, le=256)


class KvUnifiedConfig(SolverConfig):
    """Options of ``kv-unified``. ``policy`` is required (a policy or a preset name).

    Besides the policy and the search's settings, it carries the per-call inputs of
    the score that are not part of the fold problem: the previous request's cache
    ``breakpoints``, how long each leaf has been stable (``stable_for``) and the
    continuity multiplier rho. The continuity baseline itself is the problem's
    ``previous`` frontier, a plain input: a host sets it from the last request the
    provider accepted.

    Examples
    --------
    >>> from solvers.kv_unified import KvUnifiedConfig
    >>> cfg = KvUnifiedConfig(policy="reference", stable_for={"m0": 32})
    >>> cfg.continuity_multiplier, cfg.hysteresis_certificate, cfg.latent_demand
    (1.0, False, None)
    """

    policy: KvUnifiedPolicy
    breakpoints: tuple[int, ...] | None = None
    """Cache breakpoints of the previous request, as unit counts; None: every unit."""
    stable_for: dict[str, Annotated[int, Field(ge=0)]] | None = None
    """tau per leaf id: how many accepted presentations each leaf's representation has
    stayed unchanged (the reference's ``currentSeq - lastChangedSeq``). A leaf's
    change weight is multiplied by ``g_min + (1 - g_min) * 2**(-tau / H_tau)`` (the
    policy's ``continuity_stable_floor`` and ``continuity_stable_half_life``), so a
    long-stable region may move more cheaply than one that just changed. Leaves not
    named (and ids that are not leaves of the problem) have tau = 0: full weight,
    as without this input."""
    continuity_multiplier: float = 1.0
    """rho: the continuity penalty is multiplied by it (the cache penalty never is).
    It fails closed: a value that is not a finite number in [0, 1] counts as 1 and
    ``diagnostics["continuity_multiplier_ignored"]`` says so. Use
    :func:`continuity_multiplier` to read an audited, expiring
    :class:`ContinuityRelaxation`."""
    hysteresis_certificate: bool = False
    """Before the search, try to prove that the hysteresis rule would keep the carried
    frontier (a lower bound on every frontier's score within ``adopt_epsilon`` of
    the carried score); when the proof succeeds the search is skipped and the carried
    frontier is returned with ``diagnostics["certificate"]``. It selects what the
    full solve would select; it only applies with ``adopt_epsilon > 0`` and a carried
    frontier that fits the wall and that the previous request's cache fully covers."""
    latent_demand: LatentDemand | None = None
    """Rank the missing merges the plan would use (see :class:`LatentDemand`); None:
    produce requests only when the wall cannot be met."""
    pieces: int = Field(default=24, ge=2, le=512)
    """Tangent lines per quadratic term."""
    time_limit: float = Field(default=30.0, gt=0.0)
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    presolve: bool = False
    """Run CP-SAT's presolve (slower on these models)."""
    probe_dtime: float = Field(default=0.1, ge=0.0, allow_inf_nan=False)
    """Deterministic-time budget (CP-SAT units, the same on every machine) of a first
    main solve without cutting planes or probing, on a reduced model or one of at most
    ``PROBE_VARIABLES`` variables; when it does not prove the optimum, the solve runs
    again with them. On these models the tangent rows' large coefficients make cut
    generation and probing most of the solve (a 75k-leaf history: 0.45 s with cuts,
    0.09 s without; a windowed compile at 20k messages, 125 variables: 30-70 ms with
    both, 10-12 ms without; the same optimum); a model that needs cuts to prove its
    optimum loses at most the probe. 0: no probe."""
    floor_time_limit: float = Field(default=0.5, gt=0.0)
    """Seconds for a floor's CP-SAT solve, when one is needed (the change floor when its
    relaxation does not prove it; the churn floor when the previous layout's prefix
    does not tile the atoms). A floor found within the limit but not proven is an
    upper bound; ``diagnostics["floors_proven"]`` says."""

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
    rho: float = 1.0  # the continuity multiplier in force


def _recency(problem: FoldProblem, policy: KvUnifiedPolicy) -> FloatArray:
    tokens = problem.index.leaf_tokens.astype(np.float64)
    after = np.cumsum(tokens[::-1])[::-1] - tokens  # raw tokens newer than each leaf
    mid_age = after + tokens / 2.0
    q = policy.continuity_recency_floor
    return q + (1.0 - q) * np.exp2(-mid_age / policy.continuity_recency_half_life_tokens)


def _stability(problem: FoldProblem, cfg: KvUnifiedConfig) -> FloatArray | None:
    """``g_min + (1 - g_min) * 2**(-tau / H_tau)`` per leaf (None: every tau is 0, a
    factor of 1)."""
    if not cfg.stable_for:
        return None
    index = problem.hierarchy.leaf_index
    tau = np.zeros(problem.index.n, dtype=np.float64)
    for leaf, value in cfg.stable_for.items():
        i = index.get(leaf)
        if i is not None:
            tau[i] = value
    g = cfg.policy.continuity_stable_floor
    return g + (1.0 - g) * np.exp2(-tau / cfg.policy.continuity_stable_half_life)


def _rho(cfg: KvUnifiedConfig) -> float:
    """The continuity multiplier in force: the given one when it is a finite number in
    [0, 1], else 1 (fails closed)."""
    rho = cfg.continuity_multiplier
    return rho if math.isfinite(rho) and 0.0 <= rho <= 1.0 else 1.0


def _terms(problem: FoldProblem, cfg: KvUnifiedConfig) -> _Terms:
    policy = cfg.policy
    idx = problem.index
    weights = fidelity_weights(problem, policy.alpha)
    change = None
    if problem.previous is not None:
        change = idx.salience * idx.leaf_tokens * _recency(problem, policy)
        stability = _stability(problem, cfg)
        if stability is not None:
            change = change * stability
    before = previous_layout(problem)
    markers: list[int] = []
    if before is not None:
        if cfg.breakpoints is None:
            markers = list(range(1, len(before) + 1))
        else:
            markers = sorted({m for m in cfg.breakpoints if 0 < m <= len(before)})
    return _Terms(weights, change, idx.previous, before, markers, _rho(cfg))


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
        fidelity
        + band
        + policy.cache_lambda * k_excess**2
        + terms.rho * policy.continuity_lambda * c_excess**2
    )
    return _Score(total, fidelity, band, churn, change, r)


@dataclass(frozen=True)
class _Epigraph:
    """``q * t >= a * x + b`` for every line, ``t`` in ``[0, bound]``: the tangents of
    one quadratic penalty (see :func:`_tangents`)."""

    bound: int
    q: int
    lines: tuple[tuple[int, int], ...]
    error: float

    def least(self, x: int) -> int:
        """The least integer ``t`` the lines allow at ``x`` (may exceed ``bound``)."""
        t = 0
        for a, b in self.lines:
            t = max(t, -((-(a * x + b)) // self.q))
        return t


def _tangents(upper: float, weight: float, scale_x: float, pieces: int, name: str) -> _Epigraph:
    """Tangents of ``weight * (x / scale_x)**2`` on ``x`` in ``[0, upper]``, in score
    units x SCORE, and the worst under-estimate in score units."""
    peak = weight * (upper / scale_x) ** 2 * SCORE
    _check_magnitude(peak, f"the penalty {name}")
    bound = math.ceil(peak) + 1
    if upper <= 0 or weight == 0:
        return _Epigraph(max(1, bound), 1, (), 0.0)
    step = upper / pieces
    max_slope = 2.0 * weight * upper / scale_x**2
    # q * t >= q * SCORE * (f(x0) + f'(x0) * (x - x0)); q keeps the slopes integral
    q = int(min(1e9, max(1.0, 1e4 / (SCORE * max_slope))))
    # rounding a slope moves a tangent by up to upper / (2 q) at the far end: t's
    # bound leaves room for it, or the largest excess would have no feasible t
    bound += math.ceil(upper / (2 * q)) + 1
    _check_magnitude(q * (bound + SCORE * max_slope * upper + peak), f"the tangents of {name}")
    lines = []
    for p in range(pieces + 1):
        x0 = p * step
        slope = 2.0 * weight * x0 / scale_x**2
        value = weight * (x0 / scale_x) ** 2
        lines.append((round(q * SCORE * slope), round(q * SCORE * (value - slope * x0))))
    return _Epigraph(bound, q, tuple(lines), weight * (step / scale_x) ** 2 / 4.0)


@dataclass(frozen=True)
class _Penalty:
    """One penalised quantity of the main objective: ``excess >= expr - offset`` in
    ``[0, top]``, priced by the tangents ``epi``."""

    name: str
    offset: int
    top: int
    epi: _Epigraph


class _Space:
    """The choices of a problem: atoms, their edges and every coefficient of the score.

    Edges are the selectable summaries (``z``, in ``AtomModel.selectable`` order) and
    the raw atoms (``r``). The coefficients are those of the original model over
    every edge, so the scaled terms and their ranges do not depend on which edges a
    bound closes.
    """

    def __init__(self, problem: FoldProblem, terms: _Terms) -> None:
        h = problem.hierarchy
        idx = problem.index
        atoms: AtomModel = build_atoms(problem)
        self.problem = problem
        self.atoms = atoms
        sel = atoms.selectable
        self.sel = sel
        self.z_start, self.z_end = summary_atoms(atoms, problem)
        self.z_tokens = h.summary_tokens[sel]
        self.z_level = h.summary_level[sel]
        self.r_tokens = atoms.raw_tokens
        first = h.span_first[sel]
        stop = h.span_last[sel] + 1
        # coefficients, summed exactly as over each span's non-protected members (a
        # span without holes sums its slice: the same values in the same order)
        free = ~idx.protected
        holes = np.concatenate([[0], np.cumsum(idx.protected)])
        whole = (holes[stop] - holes[first] == 0).tolist()
        weights = terms.weights
        spans = list(zip(first.tolist(), stop.tolist(), whole, strict=True))
        levels = self.z_level.tolist()
        self.fidelity = [
            float(lv) * float((weights[a:b] if w else weights[a:b][free[a:b]]).sum())
            for lv, (a, b, w) in zip(levels, spans, strict=True)
        ]
        self.change_z: list[float] = []
        self.change_r: list[float] = []
        if terms.change is not None:
            prev = terms.previous
            change = terms.change
            # per level: where the previous level equals it (prefix counts), and the
            # products change x max(1, |level - previous|) the sums take
            same: dict[int, IntArray] = {}
            product: dict[int, FloatArray] = {}
            for lv in sorted(set(levels)):
                same[lv] = np.concatenate([[0], np.cumsum(prev == lv)])
                product[lv] = change * np.maximum(1, np.abs(lv - prev))
            out = []
            for lv, (a, b, w) in zip(levels, spans, strict=True):
                if w:
                    kept = int(same[lv][b] - same[lv][a])
                    if kept == b - a:
                        out.append(0.0)
                        continue
                    if kept == 0:
                        out.append(float(product[lv][a:b].sum()))
                        continue
                seg = slice(a, b)
                p = prev[seg] if w else prev[seg][free[seg]]
                c = change[seg] if w else change[seg][free[seg]]
                moved = p != lv
                factor = np.maximum(1, np.abs(lv - p))
                out.append(float((c * factor)[moved].sum()))
            self.change_z = out
            raw_changed = np.concatenate([[0], np.cumsum(prev != 0)])
            moved_product = change * prev
            r = [0.0] * atoms.n_atoms
            starts, stops = atoms.atom_start.tolist(), atoms.atom_stop.tolist()
            for a in np.flatnonzero(atoms.raw_ok).tolist():
                lo, hi = starts[a], stops[a]
                moved_count = int(raw_changed[hi] - raw_changed[lo])
                if moved_count == 0:
                    continue
                if moved_count == hi - lo:
                    r[a] = float(moved_product[lo:hi].sum())
                    continue
                p = prev[lo:hi]
                r[a] = float((change[lo:hi] * p)[p != 0].sum())
            self.change_r = r
        self.budget = open_choices(
            atoms, self.z_start, self.z_end, self.z_tokens, problem.budget.total
        )
        self.everything = every_choice(atoms, self.z_start, self.z_end)

    def assignment(self, levels: IntArray) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """The edges a frontier chooses (summaries in ``sel`` order, raw atoms)."""
        nodes, _ = resolve_units(self.problem, levels)
        n = self.problem.index.n
        shown = np.zeros(self.problem.index.n_summaries, dtype=np.bool_)
        shown[nodes[nodes >= n] - n] = True
        first_leaf = self.atoms.atom_start
        raw = (levels[first_leaf] == 0) if first_leaf.size else np.zeros(0, dtype=np.bool_)
        return shown[self.sel], raw & self.atoms.raw_ok


class _Model:
    """The CP-SAT model over the open choices, with the score's pieces as expressions.

    Only edges still to decide become variables; forced edges are constants and
    closed ones are absent (their literal is false), so the model's solutions and
    objective values are those of the model over every atom.
    """

    def __init__(
        self, space: _Space, cfg: KvUnifiedConfig, terms: _Terms, choices: Choices
    ) -> None:
        cp_model = import_cp_model()
        self.cp_model = cp_model
        self.limit_hit = False
        self.probed = False
        self.space = space
        self.problem = problem = space.problem
        self.cfg = cfg
        self.choices = choices
        atoms = space.atoms
        self.atoms = atoms
        m = cp_model.CpModel()
        self.m = m
        wall = problem.budget.total
        z_ids = np.flatnonzero(choices.free_z())
        r_ids = np.flatnonzero(choices.free_r())
        self.z_ids, self.r_ids = z_ids, r_ids
        self.zv = [m.new_bool_var(f"z{int(space.sel[k])}") for k in z_ids.tolist()]
        self.rv = [m.new_bool_var(f"r{a}") for a in r_ids.tolist()]
        self.z = dict(zip(z_ids.tolist(), self.zv, strict=True))
        self.raw = dict(zip(r_ids.tolist(), self.rv, strict=True))
        # exactly one option per atom not settled by a forced edge
        rows: list[list[Any]] = [[] for _ in range(atoms.n_atoms)]
        starts, ends = space.z_start.tolist(), space.z_end.tolist()
        for k, v in zip(z_ids.tolist(), self.zv, strict=True):
            for a in range(starts[k], ends[k]):
                rows[a].append(v)
        for a, v in zip(r_ids.tolist(), self.rv, strict=True):
            rows[a].append(v)
        # atoms whose open options are the same share one row (closing edges merges atoms)
        seen: set[tuple[int, ...]] = set()
        for a in np.flatnonzero(~choices.settled).tolist():
            key = tuple(v.index for v in rows[a])
            if key not in seen:
                seen.add(key)
                m.add_exactly_one(rows[a])
        forced_z = np.flatnonzero(choices.z_forced)
        forced_r = np.flatnonzero(choices.r_forced)
        self.forced_z = forced_z
        constant = (
            atoms.constant_tokens
            + int(space.z_tokens[forced_z].sum())
            + int(space.r_tokens[forced_r].sum())
        )
        self.tokens = m.new_int_var(0, wall, "R")
        m.add(
            self.tokens
            == cp_model.LinearExpr.weighted_sum(
                self.zv + self.rv,
                space.z_tokens[z_ids].tolist() + space.r_tokens[r_ids].tolist(),
            )
            + constant
        )
        # cache: prefix booleans over the previous layout's markers
        self.cached_expr: Any = 0
        if terms.before is not None:
            self._cache_prefix(terms)

    def _cache_prefix(self, terms: _Terms) -> None:
        """cached = tokens up to the last breakpoint whose whole prefix is still shown.

        One boolean per run of breakpoints needing the same new literals (see
        :func:`_cache_plan`): protected raw units and forced units are always intact
        and add no variable; a unit that can no longer be shown ends the prefix.
        """
        m = self.m
        groups, literal_groups, _ = _cache_plan(self.space, terms, self.choices)
        ks: list[Any] = []
        current: Any = None
        for g, literals in enumerate(literal_groups):
            var = m.new_bool_var(f"k{g}")
            for kind, key in literals:
                m.add_implication(var, self.z[key] if kind == "z" else self.raw[key])
            if current is not None:
                m.add_implication(var, current)
            current = var
            ks.append(var)
        constant = sum(seg for seg, g in groups if g < 0)
        used = [(seg, g) for seg, g in groups if g >= 0]
        self.cached_expr = _cp_sum(
            self.cp_model, [ks[g] for _, g in used], [seg for seg, _ in used], constant
        )

    # ----------------------------------------------------------- expressions
    def scaled(self, z_coefs: list[float], r_coefs: list[float], scale: float) -> Any:
        """The expression sum(round(c * scale) x) over every edge, closed ones false."""
        zc = [round(c * scale) for c in z_coefs]
        rc = [round(c * scale) for c in r_coefs]
        _check_magnitude(
            sum(abs(c) for c in zc) + sum(abs(c) for c in rc), "a scaled objective term"
        )
        return self._linear(zc, rc)

    def _linear(self, zc: list[int], rc: list[int]) -> Any:
        ch = self.choices
        constant = sum(zc[k] for k in self.forced_z.tolist())
        if rc:
            constant += sum(rc[a] for a in np.flatnonzero(ch.r_forced).tolist())
        variables = list(self.zv)
        coefs = [zc[k] for k in self.z_ids.tolist()]
        if rc:
            variables += self.rv
            coefs += [rc[a] for a in self.r_ids.tolist()]
        keep = [i for i, c in enumerate(coefs) if c]
        return _cp_sum(
            self.cp_model, [variables[i] for i in keep], [coefs[i] for i in keep], constant
        )

    def fidelity_expr(self, scale: float) -> Any:
        """Integer expression ~ scale x fidelity loss."""
        return self.scaled(self.space.fidelity, [], scale)

    def churn_expr(self, scale: float) -> Any:
        """Integer expression ~ scale x churn (cache price x re-read tokens)."""
        policy = self.cfg.policy
        price = max(0.0, policy.cache_write_price - policy.cache_read_price)
        factor = round(price * scale)
        return factor * (self.tokens - self.cached_expr)

    def change_expr(self, scale: float) -> Any:
        """Integer expression ~ scale x continuity change."""
        return self.scaled(self.space.change_z, self.space.change_r, scale)

    def solve(
        self, objective: Any, time_limit: float, *, probe: float = 0.0
    ) -> tuple[Status | None, Any]:
        """Minimise ``objective`` within ``time_limit`` seconds.

        With ``probe`` > 0, first without cutting planes for at most ``probe`` units
        of deterministic time; the answer stands when that proves the optimum, and
        otherwise the solve runs again with cuts in what is left of the time.
        """
        self.m.minimize(objective)
        problem = self.m.validate()
        if problem:
            self.m.clear_objective()
            raise _ScaleError(problem)
        start = time.perf_counter()

        def configured(limit: float, *, cuts: bool = True) -> Any:
            return make_solver(
                self.cp_model,
                time_limit=limit,
                workers=self.cfg.workers,
                seed=self.cfg.seed,
                presolve=self.cfg.presolve,
                cuts=cuts,
            )

        if probe > 0:
            solver = configured(time_limit, cuts=False)
            solver.parameters.max_deterministic_time = probe
            code = solver.solve(self.m)
            if code == self.cp_model.OPTIMAL:
                self.m.clear_objective()
                self.last_status = solver.status_name(code)
                self.probed = True
                return translate_status(code, self.cp_model), solver
            time_limit = max(1e-6, time_limit - (time.perf_counter() - start))
        solver = configured(time_limit)
        code = solver.solve(self.m)
        self.m.clear_objective()
        self.last_status = solver.status_name(code)
        # CP-SAT stops without a proof (feasible or unknown) only on its limit
        self.limit_hit |= code in (self.cp_model.FEASIBLE, self.cp_model.UNKNOWN)
        return translate_status(code, self.cp_model), solver

    def levels(self, solver: Any) -> IntArray:
        chosen = [int(self.space.sel[k]) for k, v in self.z.items() if solver.value(v)]
        chosen += self.space.sel[self.forced_z].tolist()
        return self.atoms.levels(self.problem, [], chosen)

    def chosen(self, solver: Any) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """The edges of a solution (summaries in ``sel`` order, raw atoms)."""
        z = self.choices.z_forced.copy()
        r = self.choices.r_forced.copy()
        for k, v in self.z.items():
            z[k] |= bool(solver.value(v))
        for a, v in self.raw.items():
            r[a] |= bool(solver.value(v))
        return z, r

    def hint(self, z_on: npt.NDArray[np.bool_], r_on: npt.NDArray[np.bool_]) -> None:
        """Hint the assignment choosing exactly the given edges."""
        self.m.clear_hints()
        for k, v in self.z.items():
            self.m.add_hint(v, bool(z_on[k]))
        for a, v in self.raw.items():
            self.m.add_hint(v, bool(r_on[a]))

    # ------------------------------------------------------------ evaluation
    def feasible(self, z_on: npt.NDArray[np.bool_], r_on: npt.NDArray[np.bool_]) -> bool:
        """The edges are a solution of this model (every atom covered once, open edges
        only, forced edges chosen, the wall kept)."""
        ch = self.choices
        if (z_on & ~ch.z_live).any() or (r_on & ~ch.r_live).any():
            return False
        if (ch.z_forced & ~z_on).any() or (ch.r_forced & ~r_on).any():
            return False
        n_atoms = self.atoms.n_atoms
        mark = np.zeros(n_atoms + 1, dtype=np.int64)
        on = np.flatnonzero(z_on)
        np.add.at(mark, self.space.z_start[on], 1)
        np.add.at(mark, self.space.z_end[on], -1)
        if not (np.cumsum(mark)[:n_atoms] + r_on == 1).all():
            return False
        return self.tokens_of(z_on, r_on) <= self.problem.budget.total

    def tokens_of(self, z_on: npt.NDArray[np.bool_], r_on: npt.NDArray[np.bool_]) -> int:
        """R of an assignment."""
        space = self.space
        return (
            self.atoms.constant_tokens
            + int(space.z_tokens[z_on].sum())
            + int(space.r_tokens[r_on].sum())
        )


def _cp_sum(cp_model: Any, variables: list[Any], coefs: list[int], constant: int) -> Any:
    """``sum(c * v) + constant`` as one CP-SAT linear expression."""
    if not variables:
        return constant
    return cp_model.LinearExpr.weighted_sum(variables, coefs) + constant


SCORE = 1000  # score units are multiplied by this in the integer model
PROBE_VARIABLES = 1000
"""A main model this small gets the light first pass (``KvUnifiedConfig.probe_dtime``)
even when no bound reduced it."""

_MAGNITUDE = float(2**61)
"""Largest magnitude one bound, coefficient or term of the integer model may reach:
CP-SAT's arithmetic is 64-bit, its domains must lie within half of it, and it
rejects a model whose sums could overflow (checked before every solve)."""


class _ScaleError(Exception):
    """The integer model's numbers would not fit CP-SAT's 64-bit arithmetic."""


def _check_magnitude(value: float, what: str) -> None:
    if not math.isfinite(value) or abs(value) > _MAGNITUDE:
        raise _ScaleError(f"{what} reaches {value:.3g}, beyond 64-bit integer arithmetic")


def _cache_plan(
    space: _Space, terms: _Terms, choices: Choices
) -> tuple[list[tuple[int, int]], list[list[tuple[str, int]]], int]:
    """The cacheable prefix of the previous layout as groups of literals.

    Returns one ``(segment tokens, group)`` per breakpoint reached (group -1: intact
    in every frontier), the literal groups (a group holds when its literals and
    every earlier group's hold), and the segments' total.
    """
    before = terms.before
    assert before is not None
    idx = space.problem.index
    n = idx.n
    atom_of = space.atoms.atom_of(n)
    z_pos = np.full(idx.n_summaries, -1, dtype=np.int64)
    z_pos[space.sel] = np.arange(space.sel.size)
    ends = np.append(before.offsets, before.total).tolist()
    nodes = before.nodes.tolist()
    protected = idx.protected.tolist()
    r_live, r_forced = choices.r_live.tolist(), choices.r_forced.tolist()
    z_live, z_forced = choices.z_live.tolist(), choices.z_forced.tolist()
    atom_list, z_list = atom_of.tolist(), z_pos.tolist()
    groups: list[tuple[int, int]] = []
    literal_groups: list[list[tuple[str, int]]] = []
    current = -1
    start = 0
    total = 0
    limit = _units_in_place(space.problem, before)
    for count in terms.markers:
        if count > limit:
            break
        literals: list[tuple[str, int]] = []
        broken = False
        for node in nodes[start:count]:
            if node < n:
                if protected[node]:
                    continue
                a = atom_list[node]
                if a < 0 or not r_live[a]:
                    broken = True
                    break
                if not r_forced[a]:
                    literals.append(("r", a))
            else:
                k = z_list[node - n]
                if k < 0 or not z_live[k]:
                    broken = True
                    break
                if not z_forced[k]:
                    literals.append(("z", k))
        if broken:
            break
        if literals:
            literal_groups.append(list(dict.fromkeys(literals)))
            current = len(literal_groups) - 1
        segment = ends[count] - (ends[start] if start else 0)
        groups.append((segment, current))
        total += segment
        start = count
    return groups, literal_groups, total


def _units_in_place(problem: FoldProblem, before: Layout) -> int:
    """How many leading units of the previous layout a frontier of ``problem`` can
    still show at the same place.

    A leaf protected now but folded in the previous frontier is raw in every frontier
    (a hole its summary sits around), a unit the previous layout did not have: the
    units before it are all a frontier can keep in place.
    """
    idx = problem.index
    newly = np.flatnonzero(idx.protected & (idx.previous > 0))
    if newly.size == 0:
        return len(before)
    # where each unit of the previous layout sits: a raw leaf at itself, a summary at
    # the first leaf of its span that was not a hole (render's placement)
    nodes = before.nodes
    n = idx.n
    hole = idx.protected & (idx.previous == 0)
    nonhole = np.concatenate([[0], np.cumsum(~hole)])
    summary = nodes >= n
    slots = nodes.copy()
    slots[summary] = first_nonhole(problem.hierarchy.span_first[nodes[summary] - n], nonhole)
    return int(np.searchsorted(slots, newly[0], side="left"))


@dataclass(frozen=True)
class _Objective:
    """The main objective's integer pieces, independent of the model they go into."""

    fidelity_z: list[int]  # round(SCORE x fidelity) per summary edge
    change_z: list[int]
    change_r: list[int]
    under_offset: int  # under >= under_offset - SCORE * R
    under_top: int
    under: _Epigraph
    over_offset: int  # over >= SCORE * R - over_offset
    over_top: int
    over: _Epigraph
    churn_factor: int
    penalties: tuple[_Penalty, ...]


def _objective(
    space: _Space, cfg: KvUnifiedConfig, terms: _Terms, floors: tuple[float, float]
) -> _Objective:
    """The tangents and offsets of the main solve (raises :class:`_ScaleError`)."""
    policy = cfg.policy
    wall = space.problem.budget.total
    low, high = policy.budget_low_ratio * wall, policy.budget_high_ratio * wall
    under = _tangents(
        low * SCORE, policy.budget_under_lambda, max(low, 1e-9) * SCORE, cfg.pieces, "t_under"
    )
    over = _tangents(
        (wall - high) * SCORE,
        policy.budget_over_lambda,
        max(wall - high, 1e-9) * SCORE,
        cfg.pieces,
        "t_over",
    )
    fidelity = [round(c * SCORE) for c in space.fidelity]
    _check_magnitude(sum(abs(c) for c in fidelity), "a scaled objective term")
    change_z = [round(c * SCORE) for c in space.change_z]
    change_r = [round(c * SCORE) for c in space.change_r]
    price = max(0.0, policy.cache_write_price - policy.cache_read_price)
    penalties = []
    if terms.before is not None and policy.cache_lambda > 0:
        penalties.append(
            ("churn", floors[0], price * wall, policy.cache_lambda, policy.cache_scale)
        )
    continuity_weight = terms.rho * policy.continuity_lambda
    if terms.change is not None and continuity_weight > 0:
        _check_magnitude(
            sum(abs(c) for c in change_z) + sum(abs(c) for c in change_r),
            "a scaled objective term",
        )
        most = sum(space.change_z) + sum(space.change_r)
        penalties.append(("change", floors[1], most, continuity_weight, policy.continuity_scale))
    specs = []
    for name, floor_value, most, weight, scale in penalties:
        # weight * (max(0, value - floor) / scale)**2, by tangents of the excess
        _check_magnitude(most * SCORE, f"the {name} penalty's range")
        epi = _tangents(most * SCORE, weight, scale * SCORE, cfg.pieces, f"t_{name}")
        specs.append(_Penalty(name, round(floor_value * SCORE), int(most * SCORE) + SCORE, epi))
    return _Objective(
        fidelity,
        change_z,
        change_r,
        round(low * SCORE),
        math.ceil(low) * SCORE + SCORE,
        under,
        round(high * SCORE),
        math.ceil(wall - high) * SCORE + SCORE,
        over,
        round(price * SCORE),
        tuple(specs),
    )


def _value(
    space: _Space,
    obj: _Objective,
    cache: tuple[list[tuple[int, int]], list[list[tuple[str, int]]], int] | None,
    z_on: npt.NDArray[np.bool_],
    r_on: npt.NDArray[np.bool_],
) -> tuple[float, dict[str, int]]:
    """The least objective value the main model allows for an assignment (inf when
    one of its integer variables would leave its domain), and the excess of each
    penalised quantity."""
    tokens = (
        space.atoms.constant_tokens
        + int(space.z_tokens[z_on].sum())
        + int(space.r_tokens[r_on].sum())
    )
    zs, rs = np.flatnonzero(z_on).tolist(), np.flatnonzero(r_on).tolist()
    total = sum(obj.fidelity_z[k] for k in zs)
    xs: dict[str, int] = {
        "under": max(0, obj.under_offset - SCORE * tokens),
        "over": max(0, SCORE * tokens - obj.over_offset),
    }
    tops = {"under": obj.under_top, "over": obj.over_top}
    epis = {"under": obj.under, "over": obj.over}
    for pen in obj.penalties:
        if pen.name == "churn":
            cached = 0
            if cache is not None:
                groups, literal_groups, _ = cache
                ok: list[bool] = []
                alive = True
                for literals in literal_groups:
                    alive = alive and all(
                        bool(z_on[key]) if kind == "z" else bool(r_on[key])
                        for kind, key in literals
                    )
                    ok.append(alive)
                cached = sum(seg for seg, g in groups if g < 0 or ok[g])
            expr = obj.churn_factor * (tokens - cached)
        else:
            expr = sum(obj.change_z[k] for k in zs) + (
                sum(obj.change_r[a] for a in rs) if obj.change_r else 0
            )
        xs[pen.name] = max(0, expr - pen.offset)
        tops[pen.name] = pen.top
        epis[pen.name] = pen.epi
    for name, x in xs.items():
        if x > tops[name]:
            return math.inf, xs
        t = epis[name].least(x)
        if t > epis[name].bound:
            return math.inf, xs
        total += t
    return float(total), xs


@dataclass(frozen=True)
class _Edges:
    """The live edges of some choices as arrays, the summaries (``live_z``, indices in
    ``sel`` order) before the raw atoms (``live_r``): their atom boundaries
    ``[start, end)`` and tokens."""

    live_z: IntArray
    live_r: IntArray
    start: IntArray
    end: IntArray
    tokens: FloatArray

    @classmethod
    def of(cls, space: _Space, choices: Choices) -> _Edges:
        live_z = np.flatnonzero(choices.z_live)
        live_r = np.flatnonzero(choices.r_live)
        return cls(
            live_z,
            live_r,
            np.concatenate([space.z_start[live_z], live_r]),
            np.concatenate([space.z_end[live_z], live_r + 1]),
            np.concatenate([space.z_tokens[live_z], space.r_tokens[live_r]]).astype(np.float64),
        )

    def fidelity(self, obj: _Objective) -> FloatArray:
        """Each edge's scaled fidelity loss (raw atoms lose none)."""
        z = np.asarray(obj.fidelity_z, dtype=np.float64)[self.live_z]
        return np.concatenate([z, np.zeros(self.live_r.size)])


def _bound_kills(
    space: _Space,
    obj: _Objective,
    choices: Choices,
    cache_total: int,
    incumbent: float,
    xs: dict[str, int],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Edges no solution within ``incumbent`` can use (reduced-cost fixing).

    Every tangent line under-estimates its penalty, and each penalised quantity is at
    least a linear function of the edges (the band and churn of R, the change of
    the edges' coefficients), so for a choice of one line per penalty the objective
    is at least a sum of edge weights plus a constant. The least such sum over the
    frontiers through an edge (:func:`path_bounds`) bounds every solution using it;
    an edge whose bound exceeds the incumbent's value is in no optimum. Lines are
    tried around the ones active at the incumbent; the best bound counts.
    """
    edges = _Edges.of(space, choices)
    live_z, live_r, start, end, tokens = (
        edges.live_z,
        edges.live_r,
        edges.start,
        edges.end,
        edges.tokens,
    )
    z_dead = np.zeros(space.sel.size, dtype=np.bool_)
    r_dead = np.zeros(space.atoms.n_atoms, dtype=np.bool_)
    if not live_z.size + live_r.size:
        return z_dead, r_dead
    fid = edges.fidelity(obj)
    change = np.zeros(start.size)
    if any(p.name == "change" for p in obj.penalties):
        zc = np.asarray(obj.change_z, dtype=np.float64)[live_z]
        rc = (
            np.asarray(obj.change_r, dtype=np.float64)[live_r]
            if obj.change_r
            else np.zeros(live_r.size)
        )
        change = np.concatenate([zc, rc])
    names = ["under", "over"] + [p.name for p in obj.penalties]
    epis = {"under": obj.under, "over": obj.over} | {p.name: p.epi for p in obj.penalties}

    def active(name: str) -> int:
        lines = epis[name].lines
        x = xs[name]
        return max(range(len(lines)), key=lambda i: lines[i][0] * x + lines[i][1])

    picks = [{name: active(name) for name in names if epis[name].lines}]
    for name in list(picks[0]):
        for step in (-1, 1):
            p = picks[0][name] + step
            if 0 <= p < len(epis[name].lines):
                picks.append({**picks[0], name: p})
    best = np.full(start.size, -math.inf)
    n_atoms = space.atoms.n_atoms
    order = np.argsort(start, kind="stable").tolist()
    starts, ends = start.tolist(), end.tolist()
    offsets = {p.name: p.offset for p in obj.penalties}
    wall = space.problem.budget.total
    # the multiplier's range: a token is worth at most the dearest fidelity per token
    scale = max(
        1.0, float(fid.max(initial=0.0)) / max(1.0, float(tokens[tokens > 0].min(initial=1.0)))
    )
    for pick in picks:
        slope_r = 0.0  # per token of R
        slope_c = 0.0  # per unit of scaled change
        constant = 0.0
        for name, p in pick.items():
            a, b = epis[name].lines[p]
            q = epis[name].q
            if name == "under":  # under >= offset - SCORE R
                slope_r -= a * SCORE / q
                constant += (a * obj.under_offset + b) / q
            elif name == "over":  # over >= SCORE R - offset
                slope_r += a * SCORE / q
                constant += (b - a * obj.over_offset) / q
            elif name == "churn":  # excess >= factor (R - cached) - offset, cached <= all
                slope_r += a * obj.churn_factor / q
                constant += (b - a * (obj.churn_factor * cache_total + offsets[name])) / q
            else:  # excess >= sum(change) - offset
                slope_c += a / q
                constant += (b - a * offsets[name]) / q
        base_weight = fid + slope_r * tokens + slope_c * change
        constant += slope_r * space.atoms.constant_tokens

        def bounds(
            lam: float, base: FloatArray = base_weight, lift0: float = constant
        ) -> FloatArray:
            # the wall's multiplier: lam * (R - W) <= 0 on every solution
            weight = base + lam * tokens
            lift = lift0 + lam * (space.atoms.constant_tokens - wall)
            return path_bounds(space.atoms.n_atoms, start, end, weight) + lift

        def dual(lam: float, base: FloatArray = base_weight, lift0: float = constant) -> float:
            weight = (base + lam * tokens).tolist()
            lift = lift0 + lam * (space.atoms.constant_tokens - wall)
            return path_min(n_atoms, order, starts, ends, weight) + lift

        lam = _best_multiplier(dual, scale)
        np.maximum(best, bounds(lam), out=best)
    dead = best > incumbent + 1.0 + 1e-9 * abs(incumbent)
    z_dead[live_z] = dead[: live_z.size]
    r_dead[live_r] = dead[live_z.size :]
    return z_dead, r_dead


@dataclass(frozen=True)
class _Relaxed:
    """What the Lagrangian relaxation of a floor found (see :func:`_change_floor`)."""

    upper: int  # the least scaled value of a frontier found under the wall
    lower: int  # no frontier under the wall has less
    z_on: npt.NDArray[np.bool_]  # that frontier's edges
    r_on: npt.NDArray[np.bool_]
    z_dead: npt.NDArray[np.bool_]  # edges in no frontier under the wall below upper
    r_dead: npt.NDArray[np.bool_]


def _change_floor(space: _Space, choices: Choices) -> _Relaxed | None:
    """The least scaled change of a frontier of ``choices`` under the wall, by the
    Lagrangian relaxation of the wall. ``lower >= upper`` proves the floor; otherwise
    the edges whose bound exceeds ``upper`` are closed for the search that proves it.
    None when no frontier the sweeps met keeps the wall.

    The change is a sum over the edges, in the integer coefficients of
    :meth:`_Model.change_expr`, so each multiplier costs one shortest-path sweep. The
    dual is concave in the multiplier with slope (tokens - room): the multiplier is
    doubled until the path keeps the wall, then bisected (:data:`FLOOR_SWEEPS`).
    """
    edges = _Edges.of(space, choices)
    n_z, n_atoms = edges.live_z.size, space.atoms.n_atoms
    if not n_atoms:  # nothing to choose: the one frontier changes nothing
        z_none, r_none = np.zeros(space.sel.size, dtype=np.bool_), np.zeros(0, dtype=np.bool_)
        return _Relaxed(0, 0, z_none, r_none, z_none, r_none)
    if not edges.live_z.size + edges.live_r.size:
        return None
    zc = [round(c * SCORE) for c in space.change_z]
    rc = [round(c * SCORE) for c in space.change_r]
    weight = np.asarray(
        [zc[k] for k in edges.live_z.tolist()]
        + [rc[a] if rc else 0 for a in edges.live_r.tolist()],
        dtype=np.float64,
    )
    tokens = edges.tokens
    room = space.problem.budget.total - space.atoms.constant_tokens
    order = np.argsort(edges.start, kind="stable").tolist()
    starts, ends = edges.start.tolist(), edges.end.tolist()
    best: tuple[float, IntArray] | None = None  # the least change under the wall met
    lower, at_lower = -math.inf, 0.0

    def sweep(lam: float) -> bool | None:
        """The dual at ``lam`` (into ``lower``; its path into ``best`` when it keeps the
        wall); whether its path keeps the wall (None: no path at all)."""
        nonlocal best, lower, at_lower
        picked = path_argmin(n_atoms, order, starts, ends, (weight + lam * tokens).tolist())
        if not picked:
            return None
        at = np.asarray(picked, dtype=np.int64)
        change, used = float(weight[at].sum()), float(tokens[at].sum())
        if change + lam * (used - room) > lower:
            lower, at_lower = change + lam * (used - room), lam
        if used > room:
            return False
        if best is None or change < best[0]:
            best = (change, at)
        return True

    kept = sweep(0.0)
    if kept is None:
        return None
    lo, hi = 0.0, 1.0
    top = float(np.abs(weight).sum()) + 1.0  # past it, no change is worth one token
    while not kept and hi <= top:
        kept = sweep(hi)
        if not kept:
            lo, hi = hi, 2.0 * hi
    if best is None:
        return None
    for _ in range(FLOOR_SWEEPS):
        if lo >= hi or _floor_bound(lower) >= best[0]:
            break
        mid = (lo + hi) / 2.0
        if sweep(mid):
            hi = mid
        else:
            lo = mid
    change, at = best
    z_on = np.zeros(space.sel.size, dtype=np.bool_)
    r_on = np.zeros(n_atoms, dtype=np.bool_)
    z_on[edges.live_z[at[at < n_z]]] = True
    r_on[edges.live_r[at[at >= n_z] - n_z]] = True
    bound = path_bounds(n_atoms, edges.start, edges.end, weight + at_lower * tokens)
    dead = bound - at_lower * room > change + 0.5
    z_dead = np.zeros(space.sel.size, dtype=np.bool_)
    r_dead = np.zeros(n_atoms, dtype=np.bool_)
    z_dead[edges.live_z] = dead[:n_z]
    r_dead[edges.live_r] = dead[n_z:]
    return _Relaxed(round(change), _floor_bound(lower), z_on, r_on, z_dead, r_dead)


def _churn_floor(space: _Space, terms: _Terms, choices: Choices) -> int | None:
    """The least re-read tokens ``R - cached`` of a frontier of ``choices`` under the
    wall, exactly, without a search; None when the previous layout's prefix does not
    tile the atoms as expected (the caller searches instead) or no frontier keeps the
    wall.

    ``cached`` is the previous layout up to the last breakpoint whose prefix is still
    shown (:func:`_cache_plan`). For each choice of that breakpoint, the frontier that
    shows the prefix and then the fewest tokens (one backward sweep of least tokens
    from every atom boundary) re-reads the least; the floor is the least over the
    breakpoints. A frontier's own churn is at most that of the breakpoint it keeps.
    """
    groups, literal_groups, _ = _cache_plan(space, terms, choices)
    edges = _Edges.of(space, choices)
    n_atoms = space.atoms.n_atoms
    room = space.problem.budget.total - space.atoms.constant_tokens
    behind = path_least_after(n_atoms, edges.start, edges.end, edges.tokens)
    # the forced edges, by start: part of every frontier, so of every prefix
    forced = sorted(
        [
            (int(space.z_start[k]), int(space.z_end[k]), float(space.z_tokens[k]))
            for k in np.flatnonzero(choices.z_forced).tolist()
        ]
        + [(a, a + 1, float(space.r_tokens[a])) for a in np.flatnonzero(choices.r_forced).tolist()]
    )
    constant = float(space.atoms.constant_tokens)
    cached = [0.0] * (len(literal_groups) + 1)  # cached[g + 1]: the prefix while g holds
    for seg, g in groups:
        cached[g + 1] += seg
    best = math.inf
    if behind[0] <= room:  # no group holds: the fewest tokens anywhere
        best = constant + behind[0] - cached[0]
    seen: set[tuple[str, int]] = set()
    covered, shown, f = 0, 0.0, 0  # the prefix tiles atoms [0, covered) with shown tokens
    held = cached[0]
    for g, literals in enumerate(literal_groups):
        held += cached[g + 1]
        for kind, key in literals:
            if (kind, key) in seen:
                continue
            seen.add((kind, key))
            if kind == "z":
                a, b, t = int(space.z_start[key]), int(space.z_end[key]), float(space.z_tokens[key])
            else:
                a, b, t = key, key + 1, float(space.r_tokens[key])
            while f < len(forced) and forced[f][0] == covered and forced[f][1] <= a:
                covered, shown, f = forced[f][1], shown + forced[f][2], f + 1
            if a != covered:
                return None  # not a tiling from the start: let the search decide
            covered, shown = b, shown + t
        total = shown + behind[covered]
        if total <= room:
            best = min(best, constant + total - held)
    return None if math.isinf(best) else round(best)


def _floor_bound(lower: float) -> int:
    """The integer bound a float dual value proves: its ceiling, less the rounding a
    sum of large scaled weights can carry (relative, so a bound never over-claims)."""
    return math.ceil(lower - 1e-9 * max(1.0, abs(lower)) - 1e-6)


FLOOR_SWEEPS = 40
"""Most bisection sweeps :func:`_change_floor` spends on its multiplier."""


HULL_SOLVES = 48
"""Most shortest-path solves :func:`_hull_hint` spends."""


@dataclass(frozen=True)
class _Vertex:
    """A frontier on the lower convex hull of (tokens, fidelity), by its edges."""

    tokens: float
    fidelity: float
    value: float  # the main objective's least value (inf: outside its domain)
    z_on: npt.NDArray[np.bool_]
    r_on: npt.NDArray[np.bool_]


def _hull_hint(
    space: _Space,
    obj: _Objective,
    cache: tuple[list[tuple[int, int]], list[list[tuple[str, int]]], int] | None,
    choices: Choices,
) -> _Vertex | None:
    """The best frontier by the main objective among the vertices of the lower convex
    hull of (tokens, fidelity) over the open choices.

    For a multiplier ``lam >= 0`` the least-weight frontier under ``fidelity + lam x
    tokens`` is such a vertex (one shortest-path sweep). Between two known vertices,
    the multiplier at which they tie finds a vertex between them when there is one
    (Eisner and Severance's parametric search). When the objective depends on the
    frontier only through its fidelity and its tokens (no churn or change term) it
    is convex along the vertices, so the search follows only the side that can hold
    the best one; otherwise the search is a heuristic. Every vertex is a valid
    frontier of ``choices``: the answer is a hint and an incumbent, never a claim of
    optimality. At most :data:`HULL_SOLVES` sweeps.
    """
    edges = _Edges.of(space, choices)
    live_z, live_r, tokens = edges.live_z, edges.live_r, edges.tokens
    if not live_z.size + live_r.size:
        return None
    n_z, n_atoms = live_z.size, space.atoms.n_atoms
    fid = edges.fidelity(obj)
    order = np.argsort(edges.start, kind="stable").tolist()
    starts, ends = edges.start.tolist(), edges.end.tolist()

    def vertex(lam: float) -> _Vertex | None:
        edges = path_argmin(n_atoms, order, starts, ends, (fid + lam * tokens).tolist())
        if not edges:
            return None
        picked = np.asarray(edges, dtype=np.int64)
        z_on = np.zeros(space.sel.size, dtype=np.bool_)
        r_on = np.zeros(n_atoms, dtype=np.bool_)
        z_on[live_z[picked[picked < n_z]]] = True
        r_on[live_r[picked[picked >= n_z] - n_z]] = True
        value, _ = _value(space, obj, cache, z_on, r_on)
        return _Vertex(float(tokens[picked].sum()), float(fid[picked].sum()), value, z_on, r_on)

    # a multiplier above every fidelity sum trades any fidelity for one token
    top = vertex(0.0)
    bottom = vertex(float(np.abs(fid).sum()) + 1.0)
    if top is None or bottom is None:
        return None
    best = min((top, bottom), key=lambda v: v.value)
    stack = [(top, bottom)]
    solves = 2
    while stack and solves < HULL_SOLVES:
        a, b = stack.pop()  # a has more tokens and less fidelity loss than b
        if a.tokens <= b.tokens:
            continue
        m = vertex(max(0.0, (b.fidelity - a.fidelity) / (a.tokens - b.tokens)))
        solves += 1
        if m is None or not b.tokens < m.tokens < a.tokens:
            continue  # a and b are neighbours on the hull
        if m.value < best.value:
            best = m
        if math.isinf(m.value):  # outside the domain: too many tokens or too few
            if math.isinf(a.value):
                stack.append((m, b))
            elif math.isinf(b.value):
                stack.append((a, m))
            else:
                stack += [(m, b), (a, m)]
        elif a.value <= m.value:
            stack.append((a, m))
        elif b.value <= m.value:
            stack.append((m, b))
        else:
            stack += [(m, b), (a, m)]
    return best if math.isfinite(best.value) else None


def _ranges(
    space: _Space,
    obj: _Objective,
    choices: Choices,
    cache: tuple[list[tuple[int, int]], list[list[tuple[str, int]]], int] | None,
) -> dict[str, tuple[int, int]]:
    """For each penalised quantity, bounds ``[lo, hi]`` on its least value (the
    excess at the lower bound of its constraint) over every solution of ``choices``."""
    edges = _Edges.of(space, choices)
    live_z, live_r, start, end = edges.live_z, edges.live_r, edges.start, edges.end
    n_atoms = space.atoms.n_atoms

    def extremes(weight: npt.NDArray[np.float64]) -> tuple[int, int]:
        low = path_bounds(n_atoms, start, end, weight).min(initial=0.0)
        high = -path_bounds(n_atoms, start, end, -weight).min(initial=0.0)
        return math.floor(low), math.ceil(high)

    r_lo, r_hi = extremes(edges.tokens)
    base = space.atoms.constant_tokens
    r_lo, r_hi = r_lo + base, min(r_hi + base, space.problem.budget.total)
    out = {
        "under": (max(0, obj.under_offset - SCORE * r_hi), max(0, obj.under_offset - SCORE * r_lo)),
        "over": (max(0, SCORE * r_lo - obj.over_offset), max(0, SCORE * r_hi - obj.over_offset)),
    }
    for pen in obj.penalties:
        if pen.name == "churn":
            least_cached = sum(seg for seg, g in cache[0] if g < 0) if cache else 0
            most_cached = cache[2] if cache else 0
            e_lo = obj.churn_factor * (r_lo - most_cached)
            e_hi = obj.churn_factor * (r_hi - least_cached)
        else:
            zc = np.asarray(obj.change_z, dtype=np.float64)[live_z]
            rc = np.asarray(obj.change_r, dtype=np.float64)[live_r] if obj.change_r else None
            change = np.concatenate([zc, rc if rc is not None else np.zeros(live_r.size)])
            e_lo, e_hi = extremes(change)
        out[pen.name] = (max(0, e_lo - pen.offset), max(0, e_hi - pen.offset))
    return out


def _envelope(lines: tuple[tuple[int, int], ...], lo: int, hi: int) -> list[tuple[int, int]]:
    """The tangent lines not dominated on ``[lo, hi]``: a line another one meets or
    exceeds at both ends (so everywhere between) adds nothing there. Exact in
    integers; ties keep the first line."""
    kept: list[tuple[int, int]] = []
    for j, (a, b) in enumerate(lines):
        at_lo, at_hi = a * lo + b, a * hi + b
        dominated = False
        for i, (c, d) in enumerate(lines):
            if i == j:
                continue
            o_lo, o_hi = c * lo + d, c * hi + d
            if o_lo >= at_lo and o_hi >= at_hi and (o_lo > at_lo or o_hi > at_hi or i < j):
                dominated = True
                break
        if not dominated:
            kept.append((a, b))
    return kept


def _best_multiplier(dual: Callable[[float], float], top: float, steps: int = 24) -> float:
    """The multiplier in ``[0, top]`` maximising a concave ``dual`` (golden section;
    0 when the dual does not grow from there)."""
    if dual(top * 1e-6) <= dual(0.0):
        return 0.0
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    lo, hi = 0.0, top
    x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    f1, f2 = dual(x1), dual(x2)
    for _ in range(steps):
        if f1 < f2:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + ratio * (hi - lo)
            f2 = dual(x2)
        else:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - ratio * (hi - lo)
            f1 = dual(x1)
    return x1 if f1 >= f2 else x2


REDUCTION_WORTH = 0.5
"""The bounds are applied only when they leave at most this share of the variables:
a model barely smaller than the full one searches differently for little gain (a
CP-SAT search is sensitive to any change of the model), so it is built whole."""


def _worth_it(space: _Space, choices: Choices) -> bool:
    """The open choices leave few enough variables to build the reduced model."""
    full = space.sel.size + int(space.atoms.raw_ok.sum())
    left = int(choices.free_z().sum() + choices.free_r().sum())
    return left <= REDUCTION_WORTH * full


def _search(
    problem: FoldProblem,
    cfg: KvUnifiedConfig,
    terms: _Terms,
    space: _Space,
    hints: list[tuple[str, IntArray]],
    deadline: Deadline,
    carried_fits: bool,
    diag: dict[str, Any],
    stats: dict[str, Any],
) -> tuple[Status | None, Any, _Model | None, float, float, list[tuple[str, IntArray]]]:
    """The CP-SAT solves: the churn and change floors, then the score.

    ``hints`` are valid frontiers under the wall; the best of them by the main
    objective, with the best vertex of the (tokens, fidelity) hull
    (:func:`_hull_hint`), warm-starts the solves and bounds the main model. Returns
    the main solve's status, solver and model, the two floors, and the frontiers
    found on the way (the hull vertex) for the final ranking. Raises :class:`_ScaleError`
    when the numbers of the integer model would not fit.
    """
    # floors of avoidable churn and change: zero when the carried frontier fits,
    # since it re-reads nothing and changes nothing
    k_floor = c_floor = 0.0
    floors_proven = True
    budget = deadline.remaining(cfg.time_limit)
    floor_limit = min(cfg.floor_time_limit, budget * 0.2)
    assigned = [(label, *space.assignment(levels)) for label, levels in hints]
    open_ = space.budget
    if not carried_fits and (terms.before is not None or terms.change is not None):
        whole = open_ if _worth_it(space, open_) else space.everything
        floors = [0.0, 0.0]

        def floor(at: int, model: _Model, expr: Any) -> None:
            nonlocal floors_proven
            status, solver = model.solve(expr, floor_limit)
            stats["time_limit_hit"] |= model.limit_hit
            floors_proven &= status is Status.OPTIMAL
            if status is not None:
                found = solver.objective_value / SCORE
                floors[at] = found if not floors[at] else min(floors[at], found)

        if terms.before is not None:
            least = _churn_floor(space, terms, whole)
            if least is not None:  # exact: the least re-read tokens, priced
                price = max(0.0, cfg.policy.cache_write_price - cfg.policy.cache_read_price)
                floors[0] = round(price * SCORE) * least / SCORE
            else:
                base = _Model(space, cfg, terms, whole)
                usable = [(z, r) for _, z, r in assigned if base.feasible(z, r)]
                if usable:
                    base.hint(*usable[0])
                floor(0, base, base.churn_expr(SCORE))
        if terms.change is not None:
            # a path objective under the wall: its Lagrangian relaxation bounds it, and
            # what the bound leaves open is a small model warm-started from its best path
            relaxed = _change_floor(space, whole)
            if relaxed is None:
                model = _Model(space, cfg, terms, whole)
                floor(1, model, model.change_expr(SCORE))
            else:
                floors[1] = relaxed.upper / SCORE
                if relaxed.lower < relaxed.upper:
                    left = whole.copy()
                    left.kill(relaxed.z_dead & ~relaxed.z_on, relaxed.r_dead & ~relaxed.r_on)
                    model = _Model(space, cfg, terms, left)
                    model.hint(relaxed.z_on, relaxed.r_on)
                    floor(1, model, model.change_expr(SCORE))
        k_floor, c_floor = floors
    diag["churn_floor"], diag["change_floor"] = k_floor, c_floor
    diag["floors_proven"] = floors_proven
    obj = _objective(space, cfg, terms, (k_floor, c_floor))
    cache = _cache_plan(space, terms, open_) if terms.before is not None else None
    hull = _hull_hint(space, obj, cache, open_)
    found: list[tuple[str, IntArray]] = []
    if hull is not None:
        assigned.append(("hull", hull.z_on, hull.r_on))
        chosen_ids = space.sel[hull.z_on].tolist()
        found.append(("hull", space.atoms.levels(problem, [], chosen_ids)))
    # the incumbent: the best hint by the main objective
    incumbent = math.inf
    chosen: tuple[str, npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None = None
    excess: dict[str, int] = {}
    for label, z_on, r_on in assigned:
        ok = not ((z_on & ~open_.z_live).any() or (r_on & ~open_.r_live).any())
        if not ok:
            continue
        value, xs = _value(space, obj, cache, z_on, r_on)
        if value < incumbent:
            incumbent, chosen, excess = value, (label, z_on, r_on), xs
    choices = open_
    if chosen is not None and math.isfinite(incumbent):
        z_dead, r_dead = _bound_kills(
            space, obj, open_, cache[2] if cache else 0, incumbent, excess
        )
        z_dead &= ~chosen[1]
        r_dead &= ~chosen[2]
        choices = open_.copy()
        choices.kill(z_dead, r_dead)
    reduced = _worth_it(space, choices)
    if not reduced:  # the model over every atom, as built without any bound
        choices = space.everything
    model = _Model(space, cfg, terms, choices)
    if chosen is not None and not model.feasible(chosen[1], chosen[2]):
        reduced, choices = False, space.everything  # never expected: the bound keeps it
        model = _Model(space, cfg, terms, choices)
    stats["reduced"] = reduced
    stats["variables"] = len(model.z) + len(model.raw)
    stats["fixed"] = int(choices.z_forced.sum() + choices.r_forced.sum())
    stats["hint"] = chosen[0] if chosen is not None else None
    if chosen is not None:
        model.hint(chosen[1], chosen[2])
    m = model.m
    r = model.tokens
    objective: list[Any] = [model.fidelity_expr(SCORE)]
    # the range each penalised quantity can reach over the open choices: tight domains
    # and only the tangents that matter there (the same feasible values, a smaller LP)
    reach = _ranges(space, obj, choices, cache)

    def epigraph(name: str, epi: _Epigraph, x: Any) -> None:
        lo, hi = reach[name]
        lines = _envelope(epi.lines, lo, hi)
        top = min(epi.bound, epi.least(hi)) if lines else epi.bound
        t = m.new_int_var(0, top, f"t_{name}")
        for a, b in lines:
            m.add(epi.q * t >= a * x + b)
        objective.append(t)

    # built in the order of the model over every atom: the same search when nothing
    # is fixed
    under = m.new_int_var(0, min(obj.under_top, reach["under"][1]), "under")
    m.add(under >= obj.under_offset - SCORE * r)
    epigraph("under", obj.under, under)
    over = m.new_int_var(0, min(obj.over_top, reach["over"][1]), "over")
    m.add(over >= SCORE * r - obj.over_offset)
    epigraph("over", obj.over, over)
    for pen in obj.penalties:
        expr = model.churn_expr(SCORE) if pen.name == "churn" else model.change_expr(SCORE)
        excess_var = m.new_int_var(0, min(pen.top, reach[pen.name][1]), f"excess_{pen.name}")
        m.add(excess_var >= expr - pen.offset)
        epigraph(pen.name, pen.epi, excess_var)
    epis = [("under", obj.under), ("over", obj.over)] + [(p.name, p.epi) for p in obj.penalties]
    status, solver = model.solve(
        _cp_sum(model.cp_model, objective, [1] * len(objective), 0),
        min(budget * 0.6, deadline.remaining(budget)),
        probe=cfg.probe_dtime if reduced or stats["variables"] <= PROBE_VARIABLES else 0.0,
    )
    stats["cut_free"] = model.probed
    stats["cpsat_status"] = model.last_status
    stats["time_limit_hit"] |= model.limit_hit
    if status is not None:
        stats["model_objective"] = round(solver.objective_value)
    if chosen is not None and status is not None:
        z_on, r_on = model.chosen(solver)
        stats["hint_kept"] = bool(
            np.array_equal(z_on, chosen[1]) and np.array_equal(r_on, chosen[2])
        )
    diag["pwl_error_bound"] = sum(epi.error for _, epi in epis)
    return status, solver, model, k_floor, c_floor, found


@register
class KvUnified(Solver):
    """Minimise the explicit welfare score exactly (CP-SAT), with hysteresis."""

    name = "kv-unified"
    capabilities = Capabilities(
        uses_time_limit=True, example_options={"policy": "reference"}, windowed=True
    )

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
        deadline = Deadline.after(time_limit if time_limit is not None else cfg.time_limit)
        plan, pool = _decide(problem, cfg, deadline, certify=cfg.hysteresis_certificate)
        if cfg.latent_demand is not None and pool is not None:
            plan = _with_demand(problem, cfg, cfg.latent_demand, plan, pool, deadline)
        return plan


@dataclass(frozen=True)
class _Pool:
    """The frontiers one solve ranked, to score them again against other floors."""

    problem: FoldProblem
    terms: _Terms
    floors: tuple[float, float]
    candidates: list[tuple[str, IntArray]]  # every one under the wall
    certified: bool


def _decide(
    problem: FoldProblem, cfg: KvUnifiedConfig, deadline: Deadline, *, certify: bool
) -> tuple[Plan, _Pool | None]:
    """One solve: the plan and the frontiers it ranked (None when over budget)."""
    policy = cfg.policy
    wall = problem.budget.total
    floor = cheapest_levels(problem)
    assert floor is not None
    floor_tokens = render_levels(problem, floor).total
    if floor_tokens > wall:
        return Plan(None, Status.OVER_BUDGET), None
    terms = _terms(problem, cfg)
    space = _Space(problem, terms)
    diag: dict[str, Any] = {"floor_tokens": floor_tokens}
    stats: dict[str, Any] = {"atoms": space.atoms.n_atoms, "time_limit_hit": False}
    if terms.change is not None:
        diag["continuity_multiplier"] = terms.rho
        if terms.rho != cfg.continuity_multiplier:
            diag["continuity_multiplier_ignored"] = repr(cfg.continuity_multiplier)
    carried = carried_levels(problem)
    if certify:
        stats["certified"] = False
    if certify and carried is not None:
        proof = _certify(problem, cfg, terms, space, carried)
        stats["certified"] = proof is not None
        if proof is not None:
            held = _exact_score(problem, cfg, terms, carried, (0.0, 0.0))
            diag.update(
                churn_floor=0.0,
                change_floor=0.0,
                floors_proven=True,
                carried_score=held.total,
                certificate=proof,
                decision="carried",
                score=held.total,
                fidelity=held.fidelity,
                band=held.band,
                churn=held.churn,
                change=held.change,
            )
            stats["cpsat_status"] = "not run"
            pool = _Pool(problem, terms, (0.0, 0.0), [("carried", carried)], True)
            return Plan(carried, Status.FEASIBLE, diagnostics=diag, stats=stats), pool
    # the kv-stable ideal cut is a strong, valid incumbent for every solve
    ideal = ideal_cut(problem, Forest(problem), deadline=deadline).levels
    if render_levels(problem, ideal).total > wall:
        ideal = floor
    proven = True
    carried_fits = carried is not None and render_levels(problem, carried).total <= wall
    # warm start: the carried frontier when it fits, else the ideal cut
    hints: list[tuple[str, IntArray]] = [("ideal", ideal)]
    if carried_fits:
        assert carried is not None
        hints.insert(0, ("carried", carried))
    status: Status | None
    model: _Model | None
    try:
        status, solver, model, k_floor, c_floor, found = _search(
            problem, cfg, terms, space, hints, deadline, carried_fits, diag, stats
        )
    except _ScaleError as exc:
        # Beyond 64-bit integer arithmetic (walls near the model's limit with a
        # steep policy): the exact score still ranks the other candidates.
        status, solver, model, k_floor, c_floor = None, None, None, 0.0, 0.0
        found = []
        diag["fallback"] = (
            f"no integer search ({exc}); the best of the floor, the ideal cut and the "
            "carried frontier by the exact score"
        )
        diag["floors_proven"] = False
        stats["cpsat_status"] = "not run"
    proven &= status is Status.OPTIMAL
    floors = (k_floor, c_floor)
    candidates: list[tuple[str, IntArray]] = [("floor", floor), ("ideal", ideal), *found]
    if status is not None:
        assert model is not None
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
    ranked = [(label, levels) for *_, label, levels, _ in scored]
    if carried_fits:
        assert carried is not None
        ranked.append(("carried", carried))
    pool = _Pool(problem, terms, floors, ranked, False)
    return Plan(choice[4], final_status, diagnostics=diag, stats=stats), pool


CERTIFICATE_PASSES = 32
"""Most tangent points :func:`_certify` tries."""


def _band_slope(policy: KvUnifiedPolicy, wall: int, r: float) -> float:
    """The derivative of :func:`_band` at ``r`` (0 inside the band)."""
    low, high = policy.budget_low_ratio * wall, policy.budget_high_ratio * wall
    if r < low and low > 0:
        return -2.0 * policy.budget_under_lambda * (low - r) / low**2
    if r > high and wall > high:
        return 2.0 * policy.budget_over_lambda * (r - high) / (wall - high) ** 2
    return 0.0


def _certify(
    problem: FoldProblem,
    cfg: KvUnifiedConfig,
    terms: _Terms,
    space: _Space,
    carried: IntArray,
) -> dict[str, Any] | None:
    """A proof that the hysteresis rule keeps ``carried``, or None.

    The churn and change penalties are never negative, so every frontier scores at
    least ``F + B(R)``; ``B`` is convex, so each tangent ``B(t) + B'(t) (R - t)``
    bounds it from below, and ``min over frontiers of F + B'(t) R`` is one
    shortest-path sweep over the atoms (the wall ignored, which only lowers it).
    ``LB(t) = that minimum + B(t) - B'(t) t`` is then a lower bound on the best score;
    when the carried score is within ``adopt_epsilon`` of it, the full solve would keep
    the carried frontier too. The tangent point starts at the carried tokens and is
    bisected on ``[0, W]`` by whether the sweep's minimiser has more tokens than it
    (at most :data:`CERTIFICATE_PASSES` sweeps).

    It applies only where the full solve's floors are provably zero and the carried
    frontier is the one it would compare: ``adopt_epsilon > 0``, the carried frontier
    is the previous one unchanged (no change), fits the wall and re-reads nothing
    from the previous request's cache (no churn). Each bound is lowered by a roundoff
    allowance (relative 1e-9 of the magnitudes summed) so float sums never over-claim.
    """
    policy = cfg.policy
    eps = policy.adopt_epsilon
    wall = problem.budget.total
    n_atoms = space.atoms.n_atoms
    if eps <= 0 or n_atoms == 0:
        return None
    held = _exact_score(problem, cfg, terms, carried, (0.0, 0.0))
    if held.tokens > wall or held.churn > 0 or held.change > 0:
        return None
    edges = _Edges.of(space, space.everything)
    fid = np.concatenate(
        [np.asarray(space.fidelity, dtype=np.float64)[edges.live_z], np.zeros(edges.live_r.size)]
    )
    tokens = edges.tokens
    order = np.argsort(edges.start, kind="stable").tolist()
    starts, ends = edges.start.tolist(), edges.end.tolist()
    constant = float(space.atoms.constant_tokens)
    lo, hi = 0.0, float(wall)
    t = float(held.tokens)
    best = -math.inf
    worst_roundoff = 0.0
    for passes in range(1, CERTIFICATE_PASSES + 1):
        g = _band_slope(policy, wall, t)
        picked = path_argmin(n_atoms, order, starts, ends, (fid + g * tokens).tolist())
        if not picked:
            return None
        at = np.asarray(picked, dtype=np.int64)
        r = constant + float(tokens[at].sum())
        f = float(fid[at].sum())
        b = _band(policy, wall, t)
        roundoff = 1e-9 * (abs(f) + abs(g) * (r + t) + b + abs(held.total) + 1.0)
        worst_roundoff = max(worst_roundoff, roundoff)
        best = max(best, f + g * r + b - g * t - roundoff)
        if held.total - best <= eps:
            return {
                "lower_bound": best,
                "carried_score": held.total,
                "max_improvement": held.total - best,
                "passes": passes,
                "roundoff": worst_roundoff,
            }
        if r > t:
            lo = t
        else:
            hi = t
        t = (lo + hi) / 2.0
    return None


@dataclass(frozen=True)
class _Merge:
    """A merge that does not exist yet: a summary one level above ``children``."""

    level: int
    children: tuple[str, ...]  # parentless summaries of level ``level - 1``, in order
    first: int  # leaf positions of the span
    last: int
    expected: int  # estimated tokens (median of the level's summaries)
    conservative: int  # the 80th percentile, at least the median and the fallback
    saving: int  # the children's tokens less ``conservative``


def _quantile(sorted_values: list[int], q: float) -> int:
    """The nearest-rank quantile: the least value with at least a share ``q`` at or
    below it."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def _merges(problem: FoldProblem, demand: LatentDemand) -> list[_Merge]:
    """The merges latent demand considers, best saving first (at most ``max_candidates``).

    Parentless summaries are taken in leaf order (then by their last leaf, level and
    id); a run is a sequence of them at one level, each starting right after the one
    before ends (one that overlaps the run's end is passed over); each run gives its
    consecutive, non-overlapping windows of ``merge_threshold`` summaries. A merge is
    kept when its children cost more tokens than its conservative estimate.
    """
    h = problem.hierarchy
    idx = problem.index
    if not idx.n_summaries:
        return []
    has_parent = np.zeros(idx.n_summaries, dtype=np.bool_)
    for s in h.summaries:
        for child in s.children:
            j = h.summary_index.get(child)
            if j is not None:
                has_parent[j] = True
    level = h.summary_level.tolist()
    first, last = h.span_first.tolist(), h.span_last.tolist()
    tokens = h.summary_tokens.tolist()
    ids = [s.id for s in h.summaries]
    by_level: dict[int, list[int]] = {}
    for j, lv in enumerate(level):
        by_level.setdefault(lv, []).append(tokens[j])
    for values in by_level.values():
        values.sort()
    roots = sorted(
        (j for j in range(idx.n_summaries) if not has_parent[j]),
        key=lambda j: (first[j], last[j], level[j], ids[j]),
    )
    runs: list[list[int]] = []
    for j in roots:
        run = runs[-1] if runs else None
        if run is not None and level[j] == level[run[-1]] and first[j] == last[run[-1]] + 1:
            run.append(j)
        elif run is not None and first[j] <= last[run[-1]]:
            continue  # overlaps the run: another cut of the same messages
        else:
            runs.append([j])
    m = demand.merge_threshold
    out: list[_Merge] = []
    for run in runs:
        for k in range(0, len(run) - m + 1, m):
            window = run[k : k + m]
            parent = level[window[0]] + 1
            samples = by_level.get(parent, [])
            if samples:
                expected = _quantile(samples, 0.5)
                conservative = max(_quantile(samples, 0.8), expected, demand.fallback_recall_tokens)
            else:
                expected = conservative = demand.fallback_recall_tokens
            saving = sum(tokens[j] for j in window) - conservative
            if saving > 0:
                out.append(
                    _Merge(
                        parent,
                        tuple(ids[j] for j in window),
                        first[window[0]],
                        last[window[-1]],
                        expected,
                        conservative,
                        saving,
                    )
                )
    out.sort(key=lambda x: (-x.saving, x.first, x.level))
    return out[: demand.max_candidates]


def _with_summary(problem: FoldProblem, merge: _Merge, tokens: int) -> FoldProblem:
    """``problem`` with the merge in place at ``tokens``."""
    taken = set(problem.hierarchy.leaf_index) | set(problem.hierarchy.summary_index)
    sid = f"latent:L{merge.level}:{merge.children[0]}:{merge.children[-1]}"
    while sid in taken:
        sid += "'"
    summary = Summary(id=sid, level=merge.level, tokens=tokens, children=merge.children)
    return FoldProblem(
        leaves=problem.leaves,
        summaries=(*problem.summaries, summary),
        pins=problem.pins,
        locks=problem.locks,
        budget=problem.budget,
        previous=problem.previous,
        fixed_tokens=problem.fixed_tokens,
    )


def _pool_best(cfg: KvUnifiedConfig, pool: _Pool, frame: tuple[float, float]) -> float:
    """The best score of a pool's frontiers against the common floors ``frame``."""
    return min(
        _exact_score(pool.problem, cfg, pool.terms, levels, frame).total
        for _, levels in pool.candidates
    )


def _with_demand(
    problem: FoldProblem,
    cfg: KvUnifiedConfig,
    demand: LatentDemand,
    plan: Plan,
    base: _Pool,
    deadline: Deadline,
) -> Plan:
    """The plan with the merges it would use as produce requests (see :class:`LatentDemand`).

    Each candidate of :func:`_merges` is solved again with the merge in place at its
    conservative cost (a what-if). Every pool (the plan's and each what-if's) is
    scored again against common floors: the least churn and change floors over all
    of them, so the improvements compare like with like. A merge whose best score
    improves on the plan's best by more than ``adopt_epsilon`` is solved once more at
    its expected cost (when that differs) and requested; requests are ranked by the
    conservative improvement, then the expected one, then level and position. The
    improvements are each merge's alone, not those of several merges together.
    """
    merges = _merges(problem, demand)
    diag = plan.diagnostics
    stats = plan.stats
    evaluations = 0
    if not merges:
        diag["latent_demand"] = []
        stats["latent_evaluations"] = 0
        return plan
    sub = cfg.model_copy(update={"latent_demand": None, "hysteresis_certificate": False})
    if base.certified:  # the certificate ranked no frontier but the carried one
        _, full = _decide(problem, sub, deadline, certify=False)
        assert full is not None
        base = full

    def what_if(merge: _Merge, tokens: int, left: int) -> _Pool | None:
        nonlocal evaluations
        if deadline.expired():
            return None
        share = Deadline.after(deadline.remaining(cfg.time_limit) / left)
        evaluations += 1
        return _decide(_with_summary(problem, merge, tokens), sub, share, certify=False)[1]

    conservative = [what_if(x, x.conservative, len(merges) - k) for k, x in enumerate(merges)]
    pools = [base, *(p for p in conservative if p is not None)]

    def frame() -> tuple[float, float]:
        return min(p.floors[0] for p in pools), min(p.floors[1] for p in pools)

    eps = cfg.policy.adopt_epsilon
    common = frame()
    survivors = [
        k
        for k, p in enumerate(conservative)
        if p is not None and _pool_best(cfg, base, common) - _pool_best(cfg, p, common) > eps
    ]
    expected: dict[int, _Pool | None] = {}
    for n, k in enumerate(survivors):
        x = merges[k]
        if x.expected == x.conservative:
            expected[k] = conservative[k]
        else:
            expected[k] = what_if(x, x.expected, len(survivors) - n)
            if expected[k] is not None:
                pools.append(expected[k])  # type: ignore[arg-type]
    common = frame()
    base_best = _pool_best(cfg, base, common)
    rows: list[tuple[float, float, int, int, int]] = []
    report: list[dict[str, Any]] = []
    for k, x in enumerate(merges):
        p = conservative[k]
        gain = base_best - _pool_best(cfg, p, common) if p is not None else None
        e = expected.get(k)
        gain_expected = base_best - _pool_best(cfg, e, common) if e is not None else None
        wanted = gain is not None and gain > eps
        if wanted:
            assert gain is not None
            rows.append(
                (
                    -gain,
                    -(gain_expected if gain_expected is not None else gain),
                    x.level,
                    x.first,
                    k,
                )
            )
        report.append(
            {
                "level": x.level,
                "children": list(x.children),
                "expected_cost": x.expected,
                "conservative_cost": x.conservative,
                "improvement": gain,
                "expected_improvement": gain_expected,
                "requested": wanted,
            }
        )
    rows.sort()
    ids = problem.hierarchy.leaf_ids
    produce = list(plan.produce)
    for *_, k in rows:
        x = merges[k]
        request = ProduceRequest(level=x.level, first=ids[x.first], last=ids[x.last])
        if request not in produce:
            produce.append(request)
    diag["latent_demand"] = report
    stats["latent_evaluations"] = evaluations
    if evaluations < len(merges) + sum(
        1 for k in survivors if merges[k].expected != merges[k].conservative
    ):
        diag["latent_demand_incomplete"] = "the time limit ran out before every what-if"
    return Plan(plan.levels, plan.status, produce, diag, stats)
