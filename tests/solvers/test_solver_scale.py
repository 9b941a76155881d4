"""The fast paths of one-shot solves on long histories give the answers of the
straightforward versions: the vectorised atoms, the compressed floor sweep, the
level-array plan check, and kv-unified's reduced integer model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import solvers
from folding import (
    BoundaryGraph,
    FoldProblem,
    PlanViolation,
    check_levels,
    check_plan,
    frontier_from_levels,
    previous_layout,
    render_levels,
)
from folding._arrays import unique_sorted
from folding.frontiers import floor_levels, selectable_summaries
from folding.testing import agent_history, random_problem
from folding.testing.strategies import problems
from solvers import kv_unified
from solvers._atoms import build_atoms, every_choice

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_atoms(problem: FoldProblem) -> list[tuple[list[int], list[int]]]:
    """(leaves, covering summaries) of each atom, by the plain sweep over span ends."""
    h = problem.hierarchy
    idx = problem.index
    free = ~idx.protected
    selectable = np.flatnonzero(selectable_summaries(problem))
    starts: dict[int, list[int]] = {}
    stops: dict[int, list[int]] = {}
    for j in selectable.tolist():
        starts.setdefault(int(h.span_first[j]), []).append(j)
        stops.setdefault(int(h.span_last[j]) + 1, []).append(j)
    active: set[int] = set()
    out: list[tuple[list[int], list[int]]] = []
    for a, b in itertools.pairwise(sorted(set(starts) | set(stops) | {0, idx.n})):
        for j in stops.get(a, ()):
            active.discard(j)
        for j in starts.get(a, ()):
            active.add(j)
        leaves = [i for i in range(a, b) if free[i]]
        if not leaves:
            continue
        if not active:
            out.extend(([i], []) for i in leaves)
            continue
        piece = [leaves[0]]
        for i in leaves[1:]:
            if i != piece[-1] + 1:
                out.append((piece, sorted(active)))
                piece = []
            piece.append(i)
        out.append((piece, sorted(active)))
    return out


def reference_floor(problem: FoldProblem) -> np.ndarray | None:
    """The cheapest frontier by a position-by-position sweep (ties: the first found)."""
    idx = problem.index
    if (idx.lo > idx.hi).any():
        return None
    graph = BoundaryGraph(problem)
    raw = idx.leaf_tokens
    inf = (float("inf"),)
    best: list[tuple[float, ...]] = [inf] * (graph.m + 1)
    back: list[object] = [None] * (graph.m + 1)
    best[0] = (0.0, 0.0)
    for p in range(graph.m):
        if best[p] == inf:
            continue
        for e in graph.edges_from[p]:
            depth = e.level * int(raw[graph.leaves[e.start : e.end]].sum()) if e.level else 0
            cand = (best[p][0] + e.tokens, best[p][1] + depth)
            if best[e.end] == inf or cand < best[e.end]:
                best[e.end], back[e.end] = cand, e
    if best[graph.m] == inf:
        return None
    path = []
    p = graph.m
    while p:
        e = back[p]
        path.append(e)
        p = e.start  # type: ignore[attr-defined]
    return graph.levels_of(path[::-1])  # type: ignore[arg-type]


@SETTINGS
@given(problems(max_leaves=14, dag=True, feasible=None))
def test_atoms_match_the_plain_sweep(problem: FoldProblem) -> None:
    atoms = build_atoms(problem)
    expected = reference_atoms(problem)
    assert [x.tolist() for x in atoms.atom_leaves] == [leaves for leaves, _ in expected]
    assert atoms.covers == [cover for _, cover in expected]
    lo = problem.index.lo
    assert atoms.raw_ok.tolist() == [bool((lo[x] == 0).all()) for x, _ in expected]
    tokens = problem.index.leaf_tokens
    assert atoms.raw_tokens.tolist() == [int(tokens[x].sum()) for x, _ in expected]


@SETTINGS
@given(problems(max_leaves=14, dag=True, feasible=None))
def test_floor_matches_the_position_sweep(problem: FoldProblem) -> None:
    got, want = floor_levels(problem), reference_floor(problem)
    assert (got is None) == (want is None)
    if got is not None:
        assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(8))
def test_floor_matches_on_pinned_conversations(seed: int) -> None:
    problem = random_problem(seed, n_leaves=120, n_pins=6, n_locks=3, dag=seed % 2 == 0)
    assert np.array_equal(floor_levels(problem), reference_floor(problem))


@SETTINGS
@given(st.data(), problems(max_leaves=10, feasible=None))
def test_check_levels_is_check_plan(data: st.DataObject, problem: FoldProblem) -> None:
    top = problem.hierarchy.depth + 1
    levels = np.array(
        data.draw(
            st.lists(st.integers(-1, top), min_size=problem.n_leaves, max_size=problem.n_leaves)
        ),
        dtype=np.int64,
    )
    frontier = frontier_from_levels(problem, levels)
    try:
        want = check_plan(problem, frontier)
    except PlanViolation as exc:
        with pytest.raises(PlanViolation) as got:
            check_levels(problem, levels)
        assert [v.rule for v in got.value.violations] == [v.rule for v in exc.violations]
    else:
        assert check_levels(problem, levels) == want


@given(st.lists(st.integers(-5, 40), max_size=60))
def test_unique_sorted_is_unique(values: list[int]) -> None:
    assert unique_sorted(values).tolist() == np.unique(np.array(values, dtype=np.int64)).tolist()


def test_agent_history_extends_its_prefix() -> None:
    big, small = agent_history(3_000), agent_history(2_990)
    assert [(x.id, x.tokens) for x in small.leaves] == [
        (x.id, x.tokens) for x in big.leaves[:2_990]
    ]
    mine = {s.id: s for s in big.summaries}
    assert all(mine[s.id] == s for s in small.summaries)
    assert big.budget.total == 32_000 and big.budget.target == 27_200


def _unreduced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run kv-unified over every atom: no edge closed by the wall or by the bound."""

    def everything(atoms, z_start, z_end, z_tokens, wall):  # type: ignore[no-untyped-def]
        return every_choice(atoms, z_start, z_end)

    def nothing(space, obj, choices, cache_total, incumbent, xs):  # type: ignore[no-untyped-def]
        return np.zeros(space.sel.size, dtype=np.bool_), np.zeros(
            space.atoms.n_atoms, dtype=np.bool_
        )

    monkeypatch.setattr(kv_unified, "open_choices", everything)
    monkeypatch.setattr(kv_unified, "_bound_kills", nothing)


def _history(n: int, method_options: dict) -> FoldProblem:  # type: ignore[type-arg]
    before = agent_history(n - 5, tail_tokens=2_000, total=16_000)
    carried = solvers.solve(before, method="kv-unified", **method_options).frontier
    return agent_history(n, tail_tokens=2_000, total=16_000, previous=carried)


@pytest.mark.parametrize("case", ["carried", "cold", "shrunk"], ids=["carried", "cold", "shrunk"])
def test_kv_unified_reduced_model_keeps_the_optimum(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = solvers.window_options("kv-unified", 16_000, 0.7)
    if case == "carried":
        problem = _history(2_000, options)
    elif case == "cold":
        problem = agent_history(2_000, tail_tokens=2_000, total=16_000)
    else:
        carrying = _history(2_000, options)
        data = carrying.model_dump(mode="json")
        held = previous_layout(carrying)
        assert held is not None
        floor = render_levels(carrying, floor_levels(carrying)).total
        assert held.total > floor
        data["budget"] = {"total": (held.total + floor) // 2}  # the carried one no longer fits
        problem = FoldProblem.model_validate(data)
    options = {**options, "floor_time_limit": 20.0}
    reduced = solvers.solve(problem, method="kv-unified", **options)
    with monkeypatch.context() as m:
        _unreduced(m)
        full = solvers.solve(problem, method="kv-unified", **options)
    assert reduced.stats["cpsat_status"] == full.stats["cpsat_status"] == "OPTIMAL"
    assert reduced.stats["model_objective"] == full.stats["model_objective"]
    assert reduced.stats["variables"] <= full.stats["variables"]
    assert reduced.diagnostics["score"] == pytest.approx(full.diagnostics["score"], rel=1e-12)
    assert reduced.status == full.status


def test_kv_unified_warm_starts_from_the_carried_frontier() -> None:
    options = solvers.window_options("kv-unified", 16_000, 0.7)
    problem = _history(2_000, options)
    first = solvers.solve(problem, method="kv-unified", **options)
    again = solvers.solve(problem, method="kv-unified", **options)
    assert first.stats["hint"] == "carried"
    assert isinstance(first.stats["hint_kept"], bool)
    assert first.frontier == again.frontier
    cold = solvers.solve(
        agent_history(2_000, total=16_000, tail_tokens=2_000), method="kv-unified", **options
    )
    assert cold.stats["hint"] in ("ideal", "hull")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(max_leaves=12, dag=True), st.sampled_from(["reference", "cache-first"]))
def test_kv_unified_reduced_model_keeps_the_optimum_on_small_problems(
    problem: FoldProblem, policy: str
) -> None:
    options = {"policy": policy, "floor_time_limit": 20.0}
    reduced = solvers.solve(problem, method="kv-unified", **options)
    with pytest.MonkeyPatch.context() as m:
        _unreduced(m)
        full = solvers.solve(problem, method="kv-unified", **options)
    assert reduced.status == full.status
    # the same optimum of the integer model (which optimal plan CP-SAT returns may differ)
    assert reduced.stats.get("model_objective") == full.stats.get("model_objective")
