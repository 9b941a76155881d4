"""``kv-stable``: receding-horizon control of the frontier with a KV-cache trust region.

By default (``fold="append"``) the frontier is a log: the memories shown, then the
raw history. While the carried frontier fits the wall it is held (a pure append,
whatever its fill: the budget is a cap, not a target). When it no longer fits,
the raw history after the last memory shown is folded into its level-1
memories, oldest first and as far as they reach (:func:`append_cut`; once a held
request passes the target the plan asks for the memories that fold will need,
so a host that writes memories only on demand has them in time): the front,
up to the first new memory, is byte for byte the previous request's, so the
provider re-reads only the new memories and the raw tail after them. The band,
the ideal cut and the trust region below run only when that cannot reach the
target (the memories shown must merge), at the first call, and under
``fold="ideal"``.

Why deep and late. Under a prompt cache that reads a cached token at ``r`` and
writes a new one at ``w`` (per uncached input token: ``r = 0.1``, ``w = 1.25``
for explicit breakpoints, ``r = 0.25``, ``w = 1`` for automatic prefix caching),
let the memory log hold ``P`` tokens, a fold leave the request at ``T`` and ``a``
tokens arrive per call. A cycle from one fold to the next lasts
``L = (W - T) / a`` calls and costs ``w (T - P)`` for the fold plus, per call,
``r`` times what is read and ``w a`` for what is appended, so per call

    ``c(T) = w a (T - P) / (W - T) + r (T + W - a) / 2 + w a``,

and ``c'(T) = w a (W - P) / (W - T)^2 + r / 2 > 0``: for any prices and any
arrival rate, folding to a lower ``T`` is cheaper. The floor of ``T`` is what the
host keeps raw (the strategy's recent window, pins, the head): what is worth its
tokens to the agent is a retention choice, not a price one, and appending folds
down to it. Folding only when forced is within a stated factor of the cheapest
schedule for any known arrival sequence: :mod:`solvers.schedule` states the
model, proves the bound and searches the cheapest schedule exactly.

With ``fold="ideal"``, each call:

1. **Hold.** If the carried frontier is valid, sits in the band
   ``[target, W]`` and is not misallocated (its fidelity loss is within
   ``quality_gap`` of the ideal's), keep it: the request is a pure append.
2. **Ideal cut.** Otherwise build the ideal frontier from scratch: starting
   from the finest frontier the constraints allow, fold whole summaries level
   by level, lowest salience and oldest first, until the tokens reach the
   target; then un-fold the newest folded summaries while that brings the
   tokens closer to the target without crossing the wall. Being built from
   scratch, the ideal both folds and un-folds (bidirectional).
3. **Trust region.** Adopt the ideal when re-reading it costs at most
   ``reach_tokens`` (P, default W). Otherwise adopt the oldest seam ``b`` such
   that the carried frontier before ``b`` and the ideal from ``b`` on fits P
   (a newest suffix of the ideal), else adopt the ideal and record the
   override.

Prepared-window transitions: ``goal_tokens`` aims the band (and the fold) at a
future window while ``W`` stays the hard wall, and ``strict_reach`` makes P a hard
pace (a change the wall does not force waits, decision ``"blocked"``, rather than
re-read more than P), so a move to a smaller window is made a suffix at a time.

When even the fully folded ideal exceeds the wall the result is
``over_budget`` with produce requests. The decision and its reason are in
``SolveResult.decision``.
"""

from __future__ import annotations

import heapq
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import Field

from folding import (
    FoldProblem,
    ProduceRequest,
    Status,
    fidelity_weights,
    kv_cost,
    previous_layout,
    render_levels,
)
from folding._arrays import unique_sorted

from ._base import Capabilities, Plan, Solver, SolverConfig, register
from ._common import (
    carried_levels,
    finest_levels,
    finish_greedy,
    is_valid_levels,
    produce_requests,
)
from ._forest import Forest, FrontierState
from ._plan import Deadline

IntArray = npt.NDArray[np.int64]


class KvStableConfig(SolverConfig):
    """Options of ``kv-stable``."""

    reach_tokens: int | None = Field(default=None, gt=0)
    """Trust region P: the most tokens a change may force the provider to re-read (None: W)."""
    quality_gap: float = Field(default=0.35, ge=0.0, allow_inf_nan=False)
    """Hold only while the carried fidelity loss <= (1 + gap) x the ideal's."""
    alpha: float = Field(default=0.7, ge=0.0, allow_inf_nan=False)
    """Age exponent of the fidelity loss used by the quality test."""
    strict_reach: bool = False
    """``reach_tokens`` as a hard pace: a change the wall does not force is made only
    when what it makes the provider re-read fits P (the ideal, else its largest suffix
    that fits); when none does, the carried frontier is held (decision ``"blocked"``,
    ``diagnostics["blocked"] == "reach-floor"``). A change the wall forces is still
    made, whatever it re-reads."""
    goal_tokens: int | None = Field(default=None, gt=0)
    """A prepared window: the input tokens of a window the agent will move to. The
    hold band and the fold are aimed at it (the wall ``min(W, goal)``, the target
    scaled by the same ratio) while ``W`` stays the hard wall, so a request is brought
    under the future window before it is used; with ``strict_reach`` the move is paced
    by ``reach_tokens``. None: the current window."""
    fold: Literal["append", "ideal"] = "append"
    """How a change is made. ``"append"``: hold the carried frontier while it fits and,
    when it must change, fold the raw history after the memories already shown into
    their memories, oldest first and as deep as they reach, leaving the front as it was
    (the ideal cut only when that cannot reach the target: the shown memories must
    merge). ``"ideal"``: the band, the ideal cut and the trust region alone."""


class Cut(NamedTuple):
    """A frontier as levels per leaf, and its rendered tokens."""

    levels: IntArray
    tokens: int
    cut_short: bool = False
    """The deadline stopped the fold or the refill early (the levels are still valid)."""


def ideal_cut(
    problem: FoldProblem,
    forest: Forest,
    alpha: float = 0.7,
    *,
    scalar: bool | None = None,
    deadline: Deadline | None = None,
    target: int | None = None,
    wall: int | None = None,
) -> Cut:
    """The ideal frontier, built from scratch: fold to the target, then refill.

    Starting from the finest frontier the constraints allow, repeatedly show
    the summary that costs the least fidelity per token saved (fidelity as in
    :func:`folding.fidelity_loss`: old and low-salience material is cheap to
    fold) until the tokens reach the target. Then un-fold the shown summaries
    that return the most fidelity per token added while that brings the total
    closer to the target without crossing the wall.

    The frontier is kept as flags per summary (shown, or under a shown one) with
    running per-summary totals of tokens and fidelity lost. ``scalar`` (default:
    whenever the forest is the whole hierarchy) takes each fold's token change from
    those totals alone; otherwise each fold is also checked against a per-leaf
    frontier state (the units it replaces must nest in its span), which a forest
    holding only part of the hierarchy needs. On a whole forest the answer is the
    same either way. When ``deadline`` passes, the fold and the refill stop where
    they are: the cut is valid, possibly above the target. ``target`` and ``wall``
    (default: the problem's) aim the cut at another band, such as a prepared window's.
    """
    if deadline is None:
        deadline = Deadline(None)
    short = False
    idx = problem.index
    target = problem.budget.target if target is None else target
    wall = problem.budget.total if wall is None else wall
    state = FrontierState(forest, finest_levels(problem))
    if scalar is None:
        scalar = forest.whole
    weights = np.where(idx.protected, 0.0, fidelity_weights(problem, alpha))
    first, stop = forest.first, forest.last + 1
    level = forest.level
    # Per summary, kept up to date as raises happen: the fidelity already lost in
    # its span and the tokens its span costs now. A key is then O(1).
    lost_prefix = np.concatenate([[0.0], np.cumsum(weights * state.levels)])
    cost_prefix = np.concatenate([[0], np.cumsum(state.cost_at)])
    lost_in = (lost_prefix[stop] - lost_prefix[first]).tolist()
    cost_in = (cost_prefix[stop] - cost_prefix[first]).tolist()
    weight_prefix = np.concatenate([[0.0], np.cumsum(weights)])
    full_loss = (level * (weight_prefix[stop] - weight_prefix[first])).tolist()
    tokens = forest.tokens.tolist()
    levels_of = level.tolist()
    firsts = first.tolist()
    eligible = forest.eligible.tolist()
    depth = forest.depth
    # the kept summaries over a leaf, level by level above a raised summary: on a
    # tree whose forest is whole they are its chain of parents; else looked up per level
    parent = forest.parent.tolist()
    nested = forest.whole and problem.hierarchy.is_laminar

    def above(j: int) -> list[int]:
        if nested:
            chain = []
            up = parent[j]
            while up >= 0:
                chain.append(up)
                up = parent[up]
            return chain
        ups = forest.cover_at(np.arange(levels_of[j] + 1, depth + 1), firsts[j])
        return [int(u) for u in ups if u >= 0]

    # The frontier: the summaries shown, and those under a shown one (the units of
    # the frontier are the shown summaries not under another, and raw leaves).
    shown = [False] * len(tokens)
    hidden = [False] * len(tokens)
    children = forest.children

    def show(j: int) -> None:
        shown[j] = True
        below = list(children[j])
        while below:
            c = below.pop()
            if not hidden[c]:
                hidden[c] = True
                below.extend(children[c])

    units = state.unit[~idx.protected]
    for node in unique_sorted(units[units >= idx.n]).tolist():
        show(node - idx.n)

    def key(j: int) -> tuple[float, int] | None:
        saved = cost_in[j] - tokens[j]
        if saved <= 0 or shown[j] or hidden[j]:
            return None
        return (full_loss[j] - lost_in[j]) / saved, firsts[j]

    heap: list[tuple[float, int, int]] = []
    for j in np.flatnonzero(forest.eligible).tolist():
        k = key(j)
        if k is not None:
            heap.append((k[0], k[1], j))
    heapq.heapify(heap)
    total = state.tokens
    while total > target and heap:
        if deadline.expired():
            short = True
            break
        ratio, start, j = heapq.heappop(heap)
        current = key(j)
        if current is None:
            continue
        if current != (ratio, start):
            heapq.heappush(heap, (current[0], current[1], j))
            continue
        if scalar:  # the span's cost is the running total (only eligible summaries enter)
            delta = tokens[j] - cost_in[j]
            replaced: list[int] = []
        else:  # checked on the per-leaf state: the units under j must nest in its span
            step = state.raise_delta(j)
            if step is None:
                continue
            delta = step[0]
            replaced = (step[1][step[1] >= idx.n] - idx.n).tolist()
        if delta >= 0:
            continue
        more_lost = full_loss[j] - lost_in[j]
        show(j)
        if not scalar:
            state.apply_raise(j, delta)
            for u in replaced:  # shown summaries outside the forest, now under j
                hidden[u] = True
        total += delta
        lost_in[j] += more_lost
        cost_in[j] += delta
        for up in above(j):
            lost_in[up] += more_lost
            cost_in[up] += delta
            # re-key the direct parent now; higher ancestors are re-keyed when popped
            if levels_of[up] == levels_of[j] + 1 and eligible[up]:
                k = key(up)
                if k is not None:
                    heapq.heappush(heap, (k[0], k[1], up))

    # The refill: a summary's un-fold delta depends on it alone.
    lower: dict[int, tuple[int | None, float]] = {}

    def lowering(j: int) -> tuple[int | None, float]:
        if j not in lower:
            a, b = firsts[j], int(stop[j])
            lower[j] = (state.lower_delta(j), float(weights[a:b].sum()))
        return lower[j]

    changed = total < target and not short
    while changed:
        if deadline.expired():
            short = True
            break
        changed = False
        options = []
        for j in (j for j, on in enumerate(shown) if on and not hidden[j]):
            delta, g = lowering(j)
            if delta is not None:
                options.append((-g / max(delta, 1), -firsts[j], j, delta))
        for _, _, j, delta in sorted(options):
            new = total + delta
            if new <= wall and abs(new - target) < abs(total - target):
                shown[j] = False
                for c in children[j]:
                    if forest.members[c] > 0:
                        shown[c], hidden[c] = True, False
                total = new
                changed = True
    levels = state.levels.copy()  # protected leaves keep theirs; the rest is painted
    free = ~idx.protected
    levels[free] = 0
    for j in [j for j, on in enumerate(shown) if on and not hidden[j]]:
        a, b = firsts[j], int(stop[j])
        levels[a:b][free[a:b]] = levels_of[j]
    return Cut(levels, total, short)


def append_cut(problem: FoldProblem, forest: Forest, carried: IntArray) -> Cut:
    """The carried frontier with the raw history after its memories folded, as deep as
    memories reach.

    Every leaf up to the last one the carried frontier shows folded keeps its level, so
    the request keeps its front; after it, the level-1 summaries over raw, unprotected
    leaves are shown oldest first while each saves tokens, stopping at the first raw
    leaf no such summary covers (the memories stay one log, in order). The cut is valid
    whenever ``carried`` is.
    """
    idx = problem.index
    free = ~idx.protected
    folded = np.flatnonzero((carried > 0) & free)
    boundary = int(folded[-1]) + 1 if folded.size else 0
    state = FrontierState(forest, carried)
    level, first, last = forest.level, forest.first, forest.last
    after = np.flatnonzero((level == 1) & forest.eligible & (first >= boundary))
    for j in after[np.argsort(first[after], kind="stable")].tolist():
        a, b = int(first[j]), int(last[j]) + 1
        if free[boundary:a].any():
            break  # a raw leaf no memory covers: later memories would not be in order
        step = state.raise_delta(j)
        if step is None or step[0] >= 0:
            break
        state.apply_raise(j, step[0])
        boundary = b
    return Cut(state.levels, state.tokens)


def _seams(problem: FoldProblem, levels: IntArray) -> npt.NDArray[np.bool_]:
    """``ok[b]``: no shown summary spans across the boundary before leaf ``b``."""
    from folding.render import resolve_units

    h = problem.hierarchy
    n = problem.index.n
    nodes, _ = resolve_units(problem, levels)
    crossed = np.zeros(n + 2, dtype=np.int64)
    for j in (nodes[nodes >= n] - n).tolist():
        a, e = int(h.span_first[j]), int(h.span_last[j])
        crossed[a + 1] += 1
        crossed[e + 1] -= 1
    inside = np.cumsum(crossed)[: n + 1] > 0
    return ~inside


@register
class KvStable(Solver):
    """Hold in the band, else move to the ideal cut within a KV trust region."""

    name = "kv-stable"
    Config = KvStableConfig
    capabilities = Capabilities(uses_time_limit=True, windowed=True)

    @staticmethod
    def _ahead(
        problem: FoldProblem, levels: IntArray, tokens: int, target: int | None = None
    ) -> list[ProduceRequest]:
        """The memories the next fold will need, once a request of ``levels`` (``tokens``
        long) is past the target: the L1s of the raw history no memory covers yet.
        (Merges are asked for only by a request that does not fit: asked ahead, they cost
        more on the bundled replays than the refolds they spare.)"""
        if tokens <= (problem.budget.target if target is None else target):
            return []
        return [r for r in produce_requests(problem, levels) if r.level == 1]

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        cfg = self.config
        assert isinstance(cfg, KvStableConfig)
        deadline = Deadline.after(time_limit)
        target, wall = problem.budget.target, problem.budget.total
        reach = cfg.reach_tokens if cfg.reach_tokens is not None else wall
        # the band the frontier is held in and folded to: the current window's, or the
        # prepared window's (goal_tokens) while the current wall stays the hard limit
        band_wall, band_target = wall, target
        forest = Forest(problem)
        carried = carried_levels(problem)
        diag: dict[str, object] = {"reach_tokens": reach}
        if cfg.goal_tokens is not None and cfg.goal_tokens < wall:
            band_wall = cfg.goal_tokens
            band_target = min(target, target * band_wall // max(1, wall))
            diag["goal_tokens"], diag["goal_target"] = band_wall, band_target
        carried_tokens = None
        if carried is not None:
            carried_tokens = render_levels(problem, carried).total
            diag["carried_tokens"] = carried_tokens
        if cfg.fold == "append" and carried is not None and carried_tokens is not None:
            if carried_tokens <= band_wall:  # it fits: a pure append
                diag["decision"] = "hold"
                quick = {"planned_tokens": carried_tokens, "time_limit_hit": False}
                # past the target the next fold is near: ask for the memories it will
                # fold (the L1s of the raw history no memory covers yet), so they are
                # written before it, not at it
                ahead = self._ahead(problem, carried, carried_tokens, band_target)
                return Plan(carried, Status.FEASIBLE, ahead, diag, quick)
            # fold deep: everything raw after the memories that a memory covers, so the
            # next fold is as far away as the raw tail allows
            appended = append_cut(problem, forest, carried)
            diag["append_tokens"] = appended.tokens
            paced = (
                not cfg.strict_reach
                or carried_tokens > wall  # forced: the wall comes before the pace
                or kv_cost(previous_layout(problem), render_levels(problem, appended.levels))
                <= reach
            )
            if appended.tokens <= band_target and paced:
                diag["decision"] = "append"
                quick = {"planned_tokens": appended.tokens, "time_limit_hit": False}
                return Plan(appended.levels, Status.FEASIBLE, diagnostics=diag, stats=quick)
        ideal = ideal_cut(
            problem, forest, cfg.alpha, deadline=deadline, target=band_target, wall=band_wall
        )
        ideal_levels = ideal.levels
        ideal_tokens = render_levels(problem, ideal_levels).total
        diag["ideal_tokens"] = ideal_tokens
        stats: dict[str, object] = {
            "planned_tokens": ideal.tokens,
            "time_limit_hit": ideal.cut_short,
        }
        if ideal_tokens > wall:
            diag["decision"] = "escalate"
            return finish_greedy(
                problem, Plan(ideal_levels, Status.FEASIBLE, diagnostics=diag, stats=stats)
            )
        if carried is None or carried_tokens is None:
            diag["decision"] = "bootstrap"
            ahead = self._ahead(problem, ideal_levels, ideal_tokens, band_target)
            return Plan(ideal_levels, Status.FEASIBLE, ahead, diag, stats)
        weights = fidelity_weights(problem, cfg.alpha)

        def loss(levels: IntArray) -> float:  # folding.fidelity_loss on a level array
            return float(weights @ levels)

        ideal_loss, carried_loss = loss(ideal_levels), loss(carried)
        diag["ideal_loss"], diag["carried_loss"] = ideal_loss, carried_loss
        in_band = band_target <= carried_tokens <= band_wall
        if np.array_equal(carried, ideal_levels):
            diag["decision"] = "hold"
            return Plan(carried, Status.FEASIBLE, diagnostics=diag, stats=stats)
        if in_band and carried_loss <= (1.0 + cfg.quality_gap) * max(1.0, ideal_loss):
            diag["decision"] = "hold"
            return Plan(carried, Status.FEASIBLE, diagnostics=diag, stats=stats)
        before = previous_layout(problem)
        ideal_kv = kv_cost(before, render_levels(problem, ideal_levels))
        diag["ideal_kv"] = ideal_kv
        if ideal_kv <= reach:
            diag["decision"] = "adopt"
            ahead = self._ahead(problem, ideal_levels, ideal_tokens, band_target)
            return Plan(ideal_levels, Status.FEASIBLE, ahead, diag, stats)
        seams = np.flatnonzero(_seams(problem, carried) & _seams(problem, ideal_levels))
        differ = np.flatnonzero(carried != ideal_levels)
        seams = seams[seams <= (differ.max() if differ.size else 0)]

        def mixed(b: int) -> IntArray:
            out = carried.copy()
            out[b:] = ideal_levels[b:]
            return out

        lo, hi = 0, len(seams) - 1
        best: IntArray | None = None
        while lo <= hi:  # the oldest seam whose suffix adoption fits the trust region
            mid = (lo + hi) // 2
            candidate = mixed(int(seams[mid]))
            layout = render_levels(problem, candidate)
            if kv_cost(before, layout) <= reach and layout.total <= wall:
                best = candidate
                hi = mid - 1
            else:
                lo = mid + 1
        if best is not None and is_valid_levels(problem, best):
            diag["decision"] = "suffix"
            ahead = self._ahead(problem, best, render_levels(problem, best).total, band_target)
            return Plan(best, Status.FEASIBLE, ahead, diag, stats)
        if cfg.strict_reach and carried_tokens <= wall:  # a hard pace: wait
            diag["decision"] = "blocked"
            diag["blocked"] = "reach-floor"
            ahead = self._ahead(problem, carried, carried_tokens, band_target)
            return Plan(carried, Status.FEASIBLE, ahead, diag, stats)
        diag["decision"] = "override"
        diag["override"] = "infeasible" if carried_tokens > wall else "reach"
        ahead = self._ahead(problem, ideal_levels, ideal_tokens, band_target)
        return Plan(ideal_levels, Status.FEASIBLE, ahead, diag, stats)
