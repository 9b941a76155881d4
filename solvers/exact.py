"""``exact`` and ``brute-force``: maximum fidelity under the budget, proven.

Both minimise the fidelity loss of :func:`folding.fidelity_loss`,
``F = sum_i salience_i * age_i**-alpha * raw_tokens_i * level_i``, subject to
``tokens <= target`` (or ``<= W`` when no frontier meets the target).
``exact`` is a CP-SAT model over atoms (see :mod:`solvers._atoms`);
``brute-force`` enumerates every frontier of a tiny problem and is the
oracle of the tests.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from folding import FoldProblem, Status, enumerate_frontiers, fidelity_weights, render
from folding.render import levels_from_frontier, render_levels

from ._atoms import build_atoms
from ._base import Capabilities, Plan, Solver, SolverConfig, register
from ._common import cheapest_levels
from ._cpsat import MAX_SEED, MAX_WORKERS, import_cp_model, make_solver, translate_status
from ._plan import Deadline


class ExactConfig(SolverConfig):
    """Options of ``exact``."""

    alpha: float = Field(default=0.7, ge=0.0, allow_inf_nan=False)
    """Age exponent of the fidelity loss."""
    time_limit: float = Field(default=60.0, gt=0.0)
    """Seconds, when ``solve`` is not given one."""
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    """CP-SAT workers; 1 keeps the search deterministic."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """CP-SAT random seed."""
    presolve: bool = False
    """Run CP-SAT's presolve (slower on these models)."""


def budget_cap(problem: FoldProblem, floor_tokens: int) -> int | None:
    """The token cap the fidelity optimum is sought under, or None when over the wall."""
    b = problem.budget
    if floor_tokens <= b.target:
        return b.target
    if floor_tokens <= b.total:
        return b.total
    return None


@register
class Exact(Solver):
    """CP-SAT: minimum fidelity loss under the budget; ``optimal`` only when proven."""

    name = "exact"
    capabilities = Capabilities(exact=True, uses_time_limit=True, searches_slowly=True)
    Config = ExactConfig

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        cfg = self.config
        assert isinstance(cfg, ExactConfig)
        deadline = Deadline.after(time_limit if time_limit is not None else cfg.time_limit)
        floor = cheapest_levels(problem)
        assert floor is not None
        floor_tokens = render_levels(problem, floor).total
        cap = budget_cap(problem, floor_tokens)
        if cap is None:
            return Plan(None, Status.OVER_BUDGET)
        cp_model = import_cp_model()
        h = problem.hierarchy
        atoms = build_atoms(problem)
        weights = fidelity_weights(problem, cfg.alpha)
        free = ~problem.index.protected
        model = cp_model.CpModel()
        z = {j: model.new_bool_var(f"z{j}") for j in atoms.selectable.tolist()}
        raw = {a: model.new_bool_var(f"r{a}") for a in np.flatnonzero(atoms.raw_ok).tolist()}
        for a, cover in enumerate(atoms.covers):
            terms = [z[j] for j in cover]
            if a in raw:
                terms.append(raw[a])
            model.add_exactly_one(terms)
        token_terms = [int(atoms.raw_tokens[a]) * v for a, v in raw.items()]
        token_terms += [int(h.summary_tokens[j]) * v for j, v in z.items()]
        model.add(sum(token_terms) <= cap - atoms.constant_tokens)
        value = {}
        for j in z:
            a, b = int(h.span_first[j]), int(h.span_last[j]) + 1
            value[j] = float(h.summary_level[j]) * float(weights[a:b][free[a:b]].sum())
        total = sum(value.values()) or 1.0
        scale = min(1e6, 1e12 / total)
        model.minimize(sum(round(value[j] * scale) * v for j, v in z.items()))
        # hint: the floor frontier is feasible under every cap we use
        floor_units = {int(s) for s in self._chosen(problem, floor)}
        for j, v in z.items():
            model.add_hint(v, 1 if j in floor_units else 0)
        for a, v in raw.items():
            model.add_hint(v, 1 if floor[atoms.atom_leaves[a][0]] == 0 else 0)
        solver = make_solver(
            cp_model,
            time_limit=deadline.remaining(cfg.time_limit),  # the model's build counts too
            workers=cfg.workers,
            seed=cfg.seed,
            presolve=cfg.presolve,
        )
        code = solver.solve(model)
        status = translate_status(code, cp_model)
        stats = {
            "variables": len(z) + len(raw),
            "atoms": atoms.n_atoms,
            "cpsat_status": solver.status_name(code),
            "wall_s": solver.wall_time,
            # CP-SAT stops without a proof (feasible or unknown) only on its limit
            "time_limit_hit": code in (cp_model.FEASIBLE, cp_model.UNKNOWN),
        }
        diag: dict[str, object] = {
            "cap": cap,
            "floor_tokens": floor_tokens,
            "objective_error_bound": 0.5 * max(1, len(z)) / scale,
        }
        if status is None:
            diag["fallback"] = "floor (no solution within the time limit)"
            return Plan(floor, Status.FEASIBLE, diagnostics=diag, stats=stats)
        chosen = [j for j, v in z.items() if solver.value(v)]
        levels = atoms.levels(problem, [], chosen)
        diag["objective"] = solver.objective_value / scale
        diag["bound"] = solver.best_objective_bound / scale
        return Plan(levels, status, diagnostics=diag, stats=stats)

    @staticmethod
    def _chosen(problem: FoldProblem, levels: np.ndarray) -> list[int]:
        from folding.render import resolve_units

        nodes, _ = resolve_units(problem, levels)
        n = problem.index.n
        return [int(x) for x in (nodes[nodes >= n] - n).tolist()]


class BruteForceConfig(SolverConfig):
    """Options of ``brute-force``."""

    alpha: float = Field(default=0.7, ge=0.0, allow_inf_nan=False)
    max_leaves: int = Field(default=12, ge=1)


@register
class BruteForce(Solver):
    """Enumerate every frontier (problems of at most 12 leaves): the test oracle."""

    name = "brute-force"
    Config = BruteForceConfig
    capabilities = Capabilities(
        exact=True, oracle=True, max_leaves=12, uses_time_limit=True, searches_slowly=True
    )

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        cfg = self.config
        assert isinstance(cfg, BruteForceConfig)
        deadline = Deadline.after(time_limit)
        if problem.n_leaves > cfg.max_leaves:
            raise ValueError(
                f"brute-force enumerates frontiers; {problem.n_leaves} leaves > "
                f"max_leaves={cfg.max_leaves}"
            )
        weights = fidelity_weights(problem, cfg.alpha)
        scored = []
        hit = False
        for frontier in enumerate_frontiers(problem):
            levels = levels_from_frontier(problem, frontier)
            tokens = render(problem, frontier).total
            signature = tuple(levels.tolist())
            scored.append((float(weights @ levels), tokens, signature, levels))
            if deadline.expired():
                hit = True  # the best so far, with the floor among the candidates
                break
        if hit:
            cheapest = cheapest_levels(problem)
            assert cheapest is not None
            levels = cheapest
            scored.append(
                (
                    float(weights @ levels),
                    render_levels(problem, levels).total,
                    tuple(levels.tolist()),
                    levels,
                )
            )
        floor = min(s[1] for s in scored)
        cap = budget_cap(problem, floor)
        if cap is None:
            return Plan(None, Status.OVER_BUDGET, stats={"time_limit_hit": hit})
        best = min((s for s in scored if s[1] <= cap), key=lambda s: s[:3])
        return Plan(
            best[3],
            Status.FEASIBLE if hit else Status.OPTIMAL,
            diagnostics={"cap": cap, "floor_tokens": floor, "objective": best[0]},
            stats={"frontiers": len(scored), "time_limit_hit": hit},
        )
