"""kv-unified's stability term, continuity multiplier, hysteresis certificate and
latent merge demand, on the reference's worked cases (kv-unified digest, section 5)
with the expected values worked out by hand from the score's formulas.

Fixture A: four leaves of 90 tokens, L1-0 over c0 c1, L1-1 over c2 c3 and L2-0 over
both, each summary 55 tokens. Its frontiers: all raw (R 360), one L1 (R 235, either
pair), both L1s (R 110) and the L2 (R 55).

Change weights used below (recency half-life H_C 90 tokens, floor q_min 0.1): the
middle of c3 is 45 raw tokens from the live edge, c2 135, c1 225, c0 315, so
recency = 0.1 + 0.9 * 2**(-mid / 90):

    c3: 0.1 + 0.9 * 0.7071068 = 0.7363961
    c2: 0.1 + 0.9 * 0.3535534 = 0.4181981
    c1: 0.1 + 0.9 * 0.1767767 = 0.2590990
    c0: 0.1 + 0.9 * 0.0883883 = 0.1795495

and one level of change from raw costs 90 x recency:
    folding c0 c1: C_old    = 90 * (0.1795495 + 0.2590990) =  39.47837
    folding c2 c3: C_recent = 90 * (0.4181981 + 0.7363961) = 103.91348
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import solvers
from folding import (
    FoldProblem,
    ProduceRequest,
    SolveResult,
    Status,
    fidelity_weights,
    render_levels,
)
from folding.frontiers import enumerate_frontiers
from folding.render import levels_from_frontier
from folding.testing.strategies import problems
from solvers.kv_unified import (
    PRESETS,
    ContinuityRelaxation,
    KvUnifiedPolicy,
    continuity_multiplier,
)

C_OLD = 39.47837
C_RECENT = 103.91348


def fixture_a(**changes: Any) -> FoldProblem:
    base: dict[str, Any] = {
        "leaves": [{"id": f"c{i}", "tokens": 90} for i in range(4)],
        "summaries": [
            {"id": "L1-0", "level": 1, "tokens": 55, "children": ["c0", "c1"]},
            {"id": "L1-1", "level": 1, "tokens": 55, "children": ["c2", "c3"]},
            {"id": "L2-0", "level": 2, "tokens": 55, "children": ["L1-0", "L1-1"]},
        ],
        "budget": {"total": 400},
    }
    base.update(changes)
    return FoldProblem.model_validate(base)


def policy(**changes: Any) -> dict[str, Any]:
    """The reference policy with alpha 0 (F = 90 x level per leaf), band [0.5, 0.75],
    and neither the cache nor the continuity term."""
    base = PRESETS["reference"].model_dump()
    base.update(
        alpha=0.0,
        budget_low_ratio=0.5,
        budget_high_ratio=0.75,
        budget_under_lambda=1000.0,
        budget_over_lambda=1000.0,
        cache_lambda=0.0,
        continuity_lambda=0.0,
    )
    base.update(changes)
    return base


CONTINUITY = {
    "continuity_lambda": 10_000.0,
    "continuity_scale": 100.0,
    "continuity_recency_half_life_tokens": 90.0,
    "continuity_recency_floor": 0.1,
}


# --------------------------------------------------------------------- stability
def test_the_policy_requires_the_stability_terms_and_the_presets_carry_the_reference_values() -> (
    None
):
    for name in ("continuity_stable_half_life", "continuity_stable_floor"):
        data = PRESETS["reference"].model_dump()
        del data[name]
        with pytest.raises(ValidationError, match=name):
            KvUnifiedPolicy(**data)
    # the reference's development policy: H_tau 16 accepted presentations, g_min 0.25
    assert PRESETS["reference"].continuity_stable_half_life == 16.0
    assert PRESETS["reference"].continuity_stable_floor == 0.25
    with pytest.raises(ValidationError, match="continuity_stable_half_life"):
        KvUnifiedPolicy(**{**PRESETS["reference"].model_dump(), "continuity_stable_half_life": 0})
    with pytest.raises(ValidationError, match="continuity_stable_floor"):
        KvUnifiedPolicy(**{**PRESETS["reference"].model_dump(), "continuity_stable_floor": 1.5})


@pytest.mark.parametrize(
    ("half_life", "tau", "frontier", "change"),
    [
        # stability(tau) = 0.25 + 0.75 * 2**(-tau / H_tau) scales c2's and c3's weight
        # tau 0 (not given): factor 1, C_recent 103.913 > C_old 39.478: fold the old pair
        (16.0, None, {"c0": 1, "c1": 1}, C_OLD),
        # tau 32, H 16: 0.25 + 0.75 / 4 = 0.4375, C_recent 45.462 > 39.478: still old
        (16.0, 32, {"c0": 1, "c1": 1}, C_OLD),
        # tau 64, H 16: 0.25 + 0.75 / 16 = 0.296875, C_recent 30.849 < 39.478: the
        # long-stable recent pair is now the cheaper change
        (16.0, 64, {"c2": 1, "c3": 1}, C_RECENT * 0.296875),
        # tau 64, H 32: 0.4375 again: the half-life decides
        (32.0, 64, {"c0": 1, "c1": 1}, C_OLD),
    ],
)
def test_stability_half_life_lets_a_long_stable_region_change_first(
    half_life: float, tau: int | None, frontier: dict[str, int], change: float
) -> None:
    """Spec case 14 with the stability factor g(tau). W 250 forces one fold; both
    single folds have F 180 and band 1000 * ((235 - 187.5) / 62.5)**2 = 577.6, so the
    change decides: the floor is the least C and the other fold pays
    10_000 * (excess / 100)**2 (with tau 64, H 16: excess 39.478 - 30.849 = 8.629,
    74.46)."""
    p = fixture_a(budget={"total": 250}, previous={})
    stable = None if tau is None else {"c2": tau, "c3": tau}
    result = solvers.solve(
        p,
        method="kv-unified",
        policy=policy(**CONTINUITY, continuity_stable_half_life=half_life),
        stable_for=stable,
    )
    assert result.frontier == frontier
    assert result.diagnostics["change"] == pytest.approx(change, abs=1e-3)
    assert result.diagnostics["change_floor"] == pytest.approx(change, abs=1e-3)
    assert result.diagnostics["score"] == pytest.approx(180.0 + 577.6, abs=1e-3)


def test_stable_for_ignores_ids_that_are_not_leaves_and_rejects_negative_ages() -> None:
    p = fixture_a(budget={"total": 250}, previous={})
    result = solvers.solve(
        p, method="kv-unified", policy=policy(**CONTINUITY), stable_for={"gone": 99}
    )
    assert result.frontier == {"c0": 1, "c1": 1}
    with pytest.raises(ValidationError, match="stable_for"):
        solvers.get("kv-unified", policy="reference", stable_for={"c0": -1})


# ------------------------------------------------------------------ rho (18, 19, 33)
def _case_18(rho: float) -> SolveResult:
    """Spec cases 15 and 14 together: a raw previous request cached at units 2 (offset
    180) and 4 (offset 360), W 250, band [0, 1] (no band term), alpha 0.

    churn K = 1.15 x (R - cached): fold c2 c3 keeps the first two units cached,
    1.15 * (235 - 180) = 63.25; the L2 caches nothing, 1.15 * 55 = 63.25; fold c0 c1
    1.15 * 235 = 270.25; both L1s 1.15 * 110 = 126.5. K floor 63.25, C floor C_old.

    The floors are found in the integer model, in thousandths of a score unit: the
    change floor is 39.478 (C_old rounded), so fold c2 c3's excess is 64.43548.

    scores (lambda 10_000, scales 100):
      fold c2 c3: F 180 + K 0 + rho * 10_000 * (64.43548 / 100)**2
                = 180 + rho * 4151.931
      the L2:     F 720 + K 0 + rho * 10_000 * ((2 * 143.39185 - 39.47837) / 100)**2
      fold c0 c1: F 180 + 10_000 * 2.07**2 = 43_029 (+ 0 change excess)
      both L1s:   F 360 + 10_000 * 0.6325**2 + rho * 10_000 * 1.0391348**2
    so fold c2 c3 wins for every rho in [0, 1].
    """
    return solvers.solve(
        fixture_a(budget={"total": 250}, previous={}),
        method="kv-unified",
        breakpoints=(2, 4),
        policy=policy(
            **CONTINUITY,
            cache_lambda=10_000.0,
            cache_scale=100.0,
            budget_low_ratio=0.0,
            budget_high_ratio=1.0,
        ),
        continuity_multiplier=rho,
    )


def test_rho_scales_only_the_continuity_penalty() -> None:
    """Spec case 18: rho 0 vs 1, the same churn and change, a lower score with 0."""
    full, relaxed = _case_18(1.0), _case_18(0.0)
    for result in (full, relaxed):
        assert result.frontier == {"c2": 1, "c3": 1}
        assert result.diagnostics["churn"] == pytest.approx(63.25)
        assert result.diagnostics["change"] == pytest.approx(C_RECENT, abs=1e-3)
        assert result.diagnostics["change_floor"] == 39.478
    assert full.diagnostics["score"] == pytest.approx(180.0 + 4151.931, abs=0.01)
    assert relaxed.diagnostics["score"] == pytest.approx(180.0)
    assert relaxed.diagnostics["continuity_multiplier"] == 0.0
    half = _case_18(0.5)
    assert half.diagnostics["score"] == pytest.approx(180.0 + 0.5 * 4151.931, abs=0.01)


@pytest.mark.parametrize("rho", [float("nan"), float("inf"), -0.5, 1.5])
def test_a_malformed_rho_fails_closed_to_one(rho: float) -> None:
    """Spec case 19: rho NaN is the same as 1 (and so is any value outside [0, 1])."""
    result = _case_18(rho)
    assert result.frontier == {"c2": 1, "c3": 1}
    assert result.diagnostics["score"] == pytest.approx(180.0 + 4151.931, abs=0.01)
    assert result.diagnostics["continuity_multiplier"] == 1.0
    assert result.diagnostics["continuity_multiplier_ignored"] == repr(rho)


def test_continuity_relaxation_expires_and_fails_closed() -> None:
    """Spec case 33: surgery at 0.25, unexpired -> 0.25; expired -> 1; NaN -> 1."""
    record = {"reason": "surgery", "multiplier": 0.25, "expires_at": 1_000.0}
    assert continuity_multiplier(record, 999.0) == 0.25
    assert continuity_multiplier(ContinuityRelaxation(**record), 999.0) == 0.25
    assert continuity_multiplier(record, 1_000.0) == 1.0  # expired at its instant
    assert continuity_multiplier(record, 5_000.0) == 1.0
    assert continuity_multiplier({**record, "multiplier": float("nan")}, 999.0) == 1.0
    assert continuity_multiplier({**record, "multiplier": 2.0}, 999.0) == 1.0
    assert continuity_multiplier({**record, "reason": "whim"}, 999.0) == 1.0
    assert continuity_multiplier({"reason": "surgery", "multiplier": 0.25}, 999.0) == 1.0
    assert continuity_multiplier({**record, "extra": 1}, 999.0) == 1.0
    assert continuity_multiplier("surgery", 999.0) == 1.0
    assert continuity_multiplier(None, 999.0) == 1.0
    assert continuity_multiplier(record, float("nan")) == 1.0
    for reason in ("budget-transition", "infrastructure"):
        assert continuity_multiplier({**record, "reason": reason}, 0.0) == 0.25
    with pytest.raises(ValidationError, match="reason"):
        ContinuityRelaxation(reason="whim", multiplier=0.5, expires_at=1.0)


# ----------------------------------------------------------------- certificate (34)
def _band_policy(epsilon: float) -> dict[str, Any]:
    """Band [1, 1] x W: B(R) = 1000 * ((400 - R) / 400)**2 at W 400, strictly convex."""
    return policy(budget_low_ratio=1.0, budget_high_ratio=1.0, adopt_epsilon=epsilon)


def test_the_certificate_keeps_the_carried_frontier_by_a_tangent_bound() -> None:
    """The carried fold of c2 c3: R 235, F 180, B = 1000 * (165 / 400)**2 = 170.15625,
    S = 350.15625 (no churn: every unit of the previous layout is kept; no change).

    pass 1, t = 235: B'(t) = -2 * 1000 * 165 / 400**2 = -2.0625; F - 2.0625 R is least
      all raw (0 - 742.5; one fold 180 - 484.6875), R 360; LB = -742.5 + 170.15625
      + 2.0625 * 235 = -87.65625, S - LB = 437.8 > 400; R 360 > t: t = (235 + 400) / 2
    pass 2, t = 317.5: B' = -1.03125, all raw again (-371.25), B(t) = 42.5390625;
      LB = -371.25 + 42.5390625 + 1.03125 * 317.5 = -1.2890625, S - LB = 351.4453 <= 400.
    The full solve holds it too: the best, all raw, scores B(360) = 10 and
    350.15625 <= 10 + 400.
    """
    p = fixture_a(previous={"c2": 1, "c3": 1})
    opts: dict[str, Any] = {"policy": _band_policy(400.0)}
    certified = solvers.solve(p, method="kv-unified", hysteresis_certificate=True, **opts)
    full = solvers.solve(p, method="kv-unified", **opts)
    assert certified.frontier == full.frontier == {"c2": 1, "c3": 1}
    assert certified.decision == full.decision == "carried"
    assert certified.status is Status.FEASIBLE
    assert certified.stats["certified"] is True
    proof = certified.diagnostics["certificate"]
    assert proof["passes"] == 2
    assert proof["carried_score"] == pytest.approx(350.15625)
    assert proof["lower_bound"] == pytest.approx(-1.2890625, abs=1e-5)
    assert proof["max_improvement"] == pytest.approx(351.4453125, abs=1e-5)
    assert certified.diagnostics["score"] == pytest.approx(350.15625)


def test_the_certificate_declines_when_the_hold_is_not_within_epsilon() -> None:
    """With epsilon 300 the full solve moves to all raw (350.156 > 10 + 300); every
    tangent bound is at most the least F + B, 10, so S - LB >= 340.156 > 300 and the
    certificate declines."""
    p = fixture_a(previous={"c2": 1, "c3": 1})
    opts: dict[str, Any] = {"policy": _band_policy(300.0)}
    certified = solvers.solve(p, method="kv-unified", hysteresis_certificate=True, **opts)
    full = solvers.solve(p, method="kv-unified", **opts)
    assert certified.stats["certified"] is False
    assert "certificate" not in certified.diagnostics
    assert certified.frontier == full.frontier == {}


def test_the_certificate_needs_a_positive_epsilon_and_a_carried_frontier_that_fits() -> None:
    p = fixture_a(previous={"c2": 1, "c3": 1})
    no_margin = solvers.solve(
        p, method="kv-unified", policy=_band_policy(0.0), hysteresis_certificate=True
    )
    assert no_margin.stats["certified"] is False
    over = solvers.solve(
        fixture_a(previous={}, budget={"total": 250}),
        method="kv-unified",
        policy=_band_policy(1e9),
        hysteresis_certificate=True,
    )
    assert over.stats["certified"] is False and over.tokens is not None and over.tokens <= 250


def _least_f_plus_b(problem: FoldProblem, pol: KvUnifiedPolicy) -> float:
    """min over every frontier (the wall ignored) of F + B(R), from the definitions."""
    weights = fidelity_weights(problem, pol.alpha)
    wall = problem.budget.total
    low, high = pol.budget_low_ratio * wall, pol.budget_high_ratio * wall
    best = float("inf")
    for frontier in enumerate_frontiers(problem):
        levels = levels_from_frontier(problem, frontier)
        r = render_levels(problem, levels).total
        band = 0.0
        if r < low and low > 0:
            band += pol.budget_under_lambda * ((low - r) / low) ** 2
        if r > high and wall > high:
            band += pol.budget_over_lambda * ((r - high) / (wall - high)) ** 2
        best = min(best, float(weights @ levels) + band)
    return best


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    problem=problems(max_leaves=7, max_depth=3, dag=False),
    epsilon=st.sampled_from([0.5, 5.0, 50.0, 500.0, 5_000.0]),
    low=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    settled=st.booleans(),
)
def test_a_certificate_selects_what_the_full_solve_selects(
    problem: FoldProblem, epsilon: float, low: float, settled: bool
) -> None:
    """Spec case 34: whenever the certificate succeeds it selects exactly what the full
    solver does, and its lower bound is at most the exhaustive least F + B (over every
    frontier, the wall ignored); when it declines the full solve runs as without it."""
    pol = KvUnifiedPolicy(
        **{
            **PRESETS["reference"].model_dump(),
            "budget_low_ratio": low,
            "budget_high_ratio": max(low, 0.9),
            "adopt_epsilon": epsilon,
        }
    )
    if settled:  # carry the solver's own plan, the steady state a hold certifies
        first = solvers.solve(problem, method="kv-unified", policy=pol)
        data = problem.model_dump(mode="json")
        data["previous"] = first.frontier
        problem = FoldProblem.model_validate(data)
    certified = solvers.solve(problem, method="kv-unified", policy=pol, hysteresis_certificate=True)
    full = solvers.solve(problem, method="kv-unified", policy=pol)
    # certified or not, the option never changes the plan
    assert certified.status == full.status
    assert certified.frontier == full.frontier
    if certified.stats.get("certified"):
        event("certified")
        assert full.decision == "carried"
        proof = certified.diagnostics["certificate"]
        assert proof["lower_bound"] <= _least_f_plus_b(problem, pol) + 1e-9
        assert proof["carried_score"] - proof["lower_bound"] <= epsilon
    else:
        event("declined")


# ---------------------------------------------------------------- latent demand (22)
def _case_22(
    epsilon: float = 0.0, previous: dict[str, int] | None = None, **options: Any
) -> SolveResult:
    """Four leaves of 90 tokens, each with its own L1 of 60; W 300, band top 0.5
    (150 tokens), over-band weight 100_000, the reference's alpha 0.7."""
    p = FoldProblem.model_validate(
        {
            "leaves": [{"id": f"c{i}", "tokens": 90} for i in range(4)],
            "summaries": [
                {"id": f"L1-{i}", "level": 1, "tokens": 60, "children": [f"c{i}"]} for i in range(4)
            ],
            "budget": {"total": 300},
            "previous": previous,
        }
    )
    pol = {
        **PRESETS["reference"].model_dump(),
        "budget_low_ratio": 0.0,
        "budget_high_ratio": 0.5,
        "budget_over_lambda": 100_000.0,
        "adopt_epsilon": epsilon,
    }
    return solvers.solve(p, method="kv-unified", policy=pol, **options)


DEMAND = {"merge_threshold": 2, "fallback_recall_tokens": 30}
# fidelity weights 90 x age**-0.7 (age 1 = c3): 4**-0.7 = 0.3789292, 3**-0.7 = 0.4634631,
# 2**-0.7 = 0.6155722, so c0 34.10362, c1 41.71168, c2 55.40150, c3 90
W = (34.10362, 41.71168, 55.40150, 90.0)


def test_latent_demand_asks_for_the_merges_the_plan_would_use() -> None:
    """Spec case 22. The plan: every L1, R 240, band 100_000 * ((240 - 150) / 150)**2 =
    36_000, F = sum(W) = 221.2168, score 36_221.2168. No L2 exists, so both merges
    (L1-0 L1-1, L1-2 L1-3) cost the fallback 30 (expected and conservative), saving
    120 - 30 = 90 tokens each. With one in place the best frontier is R = 30 + 120 =
    150, band 0:
      merge c0 c1: F = 2 * (34.10362 + 41.71168) + 55.40150 + 90 = 297.0321,
                   improvement 36_221.2168 - 297.0321 = 35_924.1847
      merge c2 c3: F = 34.10362 + 41.71168 + 2 * (55.40150 + 90) = 366.6183,
                   improvement 36_221.2168 - 366.6183 = 35_854.5985
    Both exceed epsilon 0: two L2 requests, the larger improvement first; two what-if
    evaluations (the expected cost equals the conservative one, no second pass)."""
    result = _case_22(latent_demand=DEMAND)
    assert result.tokens == 240 and result.frontier == {f"c{i}": 1 for i in range(4)}
    assert result.diagnostics["score"] == pytest.approx(36_000 + sum(W), abs=1e-3)
    assert result.produce == [
        ProduceRequest(level=2, first="c0", last="c1"),
        ProduceRequest(level=2, first="c2", last="c3"),
    ]
    assert result.stats["latent_evaluations"] == 2
    rows = result.diagnostics["latent_demand"]
    assert [r["conservative_cost"] for r in rows] == [30, 30]
    assert [r["expected_cost"] for r in rows] == [30, 30]
    assert rows[0]["improvement"] == pytest.approx(35_924.1847, abs=1e-3)
    assert rows[1]["improvement"] == pytest.approx(35_854.5985, abs=1e-3)
    assert all(r["requested"] for r in rows)
    # deterministic: the same inputs, the same requests and report
    again = _case_22(latent_demand=DEMAND)
    assert again.produce == result.produce and again.diagnostics == result.diagnostics


def test_latent_demand_is_gated_by_epsilon_and_off_by_default() -> None:
    """The same case: no requests without the option (as before), and none when the
    hysteresis margin exceeds both improvements (35_924.18 < 36_000)."""
    assert _case_22().produce == []
    gated = _case_22(36_000.0, latent_demand=DEMAND)
    assert gated.produce == []
    assert [r["requested"] for r in gated.diagnostics["latent_demand"]] == [False, False]
    # between the two improvements: only the larger is requested
    between = _case_22(35_900.0, latent_demand=DEMAND)
    assert between.produce == [ProduceRequest(level=2, first="c0", last="c1")]


def test_latent_demand_prices_a_merge_from_the_summaries_of_its_level() -> None:
    """Five L1s of 60 over c0..c4 and one L2 of 100 over L1-3 L1-4: the merge of L1-0
    L1-1 is priced from the one existing L2 (median and 80th percentile 100, at least
    the fallback 30) and saves 120 - 100 = 20 tokens; L1-2 has no partner (the L2
    follows it)."""
    p = FoldProblem.model_validate(
        {
            "leaves": [{"id": f"c{i}", "tokens": 90} for i in range(5)],
            "summaries": [
                *(
                    {"id": f"L1-{i}", "level": 1, "tokens": 60, "children": [f"c{i}"]}
                    for i in range(5)
                ),
                {"id": "L2-0", "level": 2, "tokens": 100, "children": ["L1-3", "L1-4"]},
            ],
            "budget": {"total": 400},
        }
    )
    result = solvers.solve(p, method="kv-unified", policy="reference", latent_demand=DEMAND)
    rows = result.diagnostics["latent_demand"]
    assert [(r["children"], r["expected_cost"], r["conservative_cost"]) for r in rows] == [
        (["L1-0", "L1-1"], 100, 100)
    ]


def test_latent_demand_options_are_validated() -> None:
    for bad, field in (
        ({"merge_threshold": 1, "fallback_recall_tokens": 30}, "merge_threshold"),
        ({"merge_threshold": 2}, "fallback_recall_tokens"),
        ({**DEMAND, "typo": 1}, "typo"),
        ({**DEMAND, "max_candidates": 0}, "max_candidates"),
    ):
        with pytest.raises(solvers.SolverConfigError, match=field):
            solvers.configure("kv-unified", {"policy": "reference", "latent_demand": bad})


def test_latent_demand_after_a_certified_hold_compares_with_the_full_solve() -> None:
    """Case 22 with every L1 carried and epsilon 1: the certificate holds at its first
    tangent (t = 240, B' = 2 * 100_000 * 90 / 150**2 = 800; F + 800 R is least at the
    carried frontier, so LB = its score, 36_221.22), having ranked no other frontier.
    Latent demand then solves the base in full and asks for the same merges as the
    uncertified solve."""
    carried = {f"c{i}": 1 for i in range(4)}
    certified = _case_22(1.0, carried, latent_demand=DEMAND, hysteresis_certificate=True)
    assert certified.stats["certified"] is True
    assert certified.diagnostics["certificate"]["passes"] == 1
    plain = _case_22(1.0, carried, latent_demand=DEMAND)
    assert (
        certified.produce
        == plain.produce
        == [
            ProduceRequest(level=2, first="c0", last="c1"),
            ProduceRequest(level=2, first="c2", last="c3"),
        ]
    )
    assert certified.stats["latent_evaluations"] == plain.stats["latent_evaluations"] == 2
