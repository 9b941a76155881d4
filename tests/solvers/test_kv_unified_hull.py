"""The hull incumbent of kv-unified: the best vertex of the (tokens, fidelity) hull.

The oracle enumerates every way the open choices of a tiny problem tile its atoms and
finds the points of the lower convex hull straight from the definition
(a point is on it when some multiplier ``lam >= 0`` makes it a least
``fidelity + lam x tokens``), with exact fractions.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import solvers
from folding import FoldProblem
from folding.testing import agent_history
from folding.testing.strategies import problems
from solvers import kv_unified as ku


def _setup(problem: FoldProblem, policy: str) -> tuple[ku._Space, ku._Objective, ku._Terms]:
    cfg = ku.KvUnifiedConfig(policy=policy)
    terms = ku._terms(problem, cfg)
    space = ku._Space(problem, terms)
    return space, ku._objective(space, cfg, terms, (0.0, 0.0)), terms


def _multipliers(point: tuple[int, int], others: set[tuple[int, int]]) -> tuple[Fraction, Fraction]:
    """The multipliers ``lam >= 0`` at which ``point`` is a least ``F + lam R``, as an
    interval ``[lo, hi]`` (``hi`` may be infinite; ``lo > hi``: none)."""
    r, f = point
    lo, hi = Fraction(0), Fraction(10**30)
    for q_r, q_f in others:
        # f + lam r <= q_f + lam q_r  <=>  lam (r - q_r) <= q_f - f
        if r > q_r:
            hi = min(hi, Fraction(q_f - f, r - q_r))
        elif r < q_r:
            lo = max(lo, Fraction(q_f - f, r - q_r))
        elif f > q_f:
            return Fraction(1), Fraction(0)
    return lo, hi


@st.composite
def chunked(draw: st.DrawFn) -> FoldProblem:
    """Up to ten chunks, each with an L1 summary, some pairs under an L2: many
    frontiers and a hull of many vertices (tiny random problems have two or three)."""
    leaves: list[dict[str, object]] = []
    summaries: list[dict[str, object]] = []
    n_chunks = draw(st.integers(2, 10))
    for c in range(n_chunks):
        ids = [f"m{len(leaves) + j}" for j in range(draw(st.integers(1, 3)))]
        for leaf in ids:
            tokens, salience = draw(st.integers(20, 400)), draw(st.sampled_from([0.25, 0.5, 1.0]))
            leaves.append({"id": leaf, "tokens": tokens, "salience": salience, "zone": "middle"})
        tokens = draw(st.integers(5, 120))
        summaries.append({"id": f"L1-{c}", "level": 1, "tokens": tokens, "children": ids})
    for c in range(0, n_chunks - 1, 2):
        if draw(st.booleans()):
            children = [f"L1-{c}", f"L1-{c + 1}"]
            tokens = draw(st.integers(5, 80))
            summaries.append({"id": f"L2-{c}", "level": 2, "tokens": tokens, "children": children})
    raw = sum(int(str(leaf["tokens"])) for leaf in leaves)
    total = draw(st.integers(raw // 8, raw + 50))
    return FoldProblem.model_validate(
        {"leaves": leaves, "summaries": summaries, "budget": {"total": max(1, total)}}
    )


_TWIN = FoldProblem.model_validate(
    {
        "leaves": [{"id": "m0", "tokens": 0}, {"id": "m1", "tokens": 0}],
        "summaries": [
            {"id": "L1-0", "level": 1, "tokens": 1, "children": ["m0", "m1"]},
            {"id": "L1-1", "level": 1, "tokens": 0, "children": ["m0", "m1"]},
        ],
        "budget": {"total": 11, "target": 9},
        "fixed_tokens": 6,
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(_TWIN, "reference")
@given(
    st.one_of(problems(max_leaves=9, dag=True), chunked()),
    st.sampled_from(["reference", "cache-first"]),
)
def test_the_hull_incumbent_is_the_best_hull_vertex(problem: FoldProblem, policy: str) -> None:
    """The kept example, ``_TWIN``: two summaries over one span at one level, two open
    choices that one level array cannot tell apart (the oracle's tilings can)."""
    # no previous frontier (so no lock either): the objective is a function of the point
    problem = FoldProblem.model_validate({**problem.model_dump(), "previous": None, "locks": []})
    space, obj, _ = _setup(problem, policy)
    choices = space.budget
    fidelity = np.asarray(obj.fidelity_z, dtype=np.int64)
    points: dict[tuple[int, int], float] = {}
    for z_on, r_on in _tilings(choices):
        key = (
            int(space.z_tokens[z_on].sum() + space.r_tokens[r_on].sum()),
            int(fidelity[z_on].sum()),
        )
        # without a previous frontier the objective is a function of (tokens, fidelity)
        value, _ = ku._value(space, obj, None, z_on, r_on)
        assert points.setdefault(key, value) == value
    got = ku._hull_hint(space, obj, None, choices)
    if not space.atoms.n_atoms or not any(np.isfinite(v) for v in points.values()):
        assert got is None  # nothing to choose, or nothing the objective allows
    else:
        assert got is not None
        _check(problem, policy, points, got)


def _tilings(choices: ku.Choices) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every way the open choices tile the atoms: each atom raw or under exactly one
    open summary (two summaries over the same span are two ways, which levels alone
    cannot tell apart)."""
    n_atoms, n_z = choices.r_live.size, choices.z_live.size
    out: list[tuple[np.ndarray, np.ndarray]] = []

    def walk(a: int, z: list[int], r: list[int]) -> None:
        if a == n_atoms:
            z_on, r_on = np.zeros(n_z, dtype=np.bool_), np.zeros(n_atoms, dtype=np.bool_)
            z_on[z], r_on[r] = True, True
            out.append((z_on, r_on))
            return
        if choices.r_live[a]:
            walk(a + 1, z, [*r, a])
        for k in np.flatnonzero(choices.z_live & (choices.z_start == a)).tolist():
            walk(int(choices.z_end[k]), [*z, k], r)

    walk(0, [], [])
    return out


def _check(
    problem: FoldProblem, policy: str, points: dict[tuple[int, int], float], got: ku._Vertex
) -> None:
    space, obj, terms = _setup(problem, policy)
    on_hull, vertices = [], []
    for key, value in points.items():
        lo, hi = _multipliers(key, set(points))
        if lo <= hi:
            on_hull.append(value)
            if lo < hi:
                vertices.append(value)
    # a valid frontier of the open choices, with the value it claims
    model = ku._Model(space, ku.KvUnifiedConfig(policy=policy), terms, space.budget)
    assert model.feasible(got.z_on, got.r_on)
    assert ku._value(space, obj, None, got.z_on, got.r_on)[0] == got.value
    # a hull point, no worse than the best vertex (up to the rounding of the two
    # band penalties to integers, which can bend convexity by one unit each)
    assert got.value in on_hull
    assert got.value <= min(vertices) + 2


def test_the_hull_incumbent_closes_edges_of_a_long_history(monkeypatch: pytest.MonkeyPatch) -> None:

    problem = agent_history(8_000, total=60_000, tail_tokens=2_000)
    with_hull = solvers.solve(problem, method="kv-unified", policy="reference")
    monkeypatch.setattr(ku, "_hull_hint", lambda *args: None)
    without = solvers.solve(problem, method="kv-unified", policy="reference")
    assert with_hull.stats["hint"] == "hull"
    assert without.stats["hint"] == "ideal"
    assert with_hull.stats["cpsat_status"] == without.stats["cpsat_status"] == "OPTIMAL"
    assert with_hull.stats["model_objective"] == without.stats["model_objective"]
    # the better incumbent lets the bound close more edges: a smaller model
    assert with_hull.stats["reduced"] and not without.stats["reduced"]
    assert with_hull.stats["variables"] < without.stats["variables"] / 2
