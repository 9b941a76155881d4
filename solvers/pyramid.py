"""``threshold-pyramid``: resolution by age bands, with a token allowance per level.

The classic renderer of hierarchical memory, as a solver. It starts from the
coarsest frontier (the floor) and opens summaries into their children from
the newest end backwards, level by level from the top: a level-k summary
is replaced by its level-(k-1) children while the summaries shown at level
k-1 and above stay within the allowances of those levels
(``level_budgets``; unused allowance of a coarser level flows down to the
finer ones). The first summary that does not fit ends the band, so the
newest history is shown finest and resolution falls with age in steps.
L1 memories are never opened back into raw messages.

The bands ignore the soft target. When they overflow the wall, every
allowance is halved until the frontier fits (at worst the floor); a floor
above the wall is reported as ``over_budget`` with produce requests.
"""

from __future__ import annotations

from pydantic import Field

from folding import FoldProblem, Status, render_levels

from ._base import Plan, Solver, SolverConfig, register
from ._common import cheapest_levels
from ._forest import Forest, FrontierState, IntArray

__all__ = ["PyramidConfig", "ThresholdPyramid"]

_HALVINGS = 16


class PyramidConfig(SolverConfig):
    """Token allowances of the levels, finest first."""

    level_budgets: tuple[int, ...] = Field(default=(30_000, 30_000, 30_000), min_length=1)
    """``level_budgets[k - 1]`` bounds the tokens of summaries shown at level k; the last
    entry applies to every level above. Each must be non-negative."""

    def allowance(self, level: int) -> int:
        """The allowance of ``level`` (1-based)."""
        budgets = self.level_budgets
        return budgets[min(level, len(budgets)) - 1]

    def model_post_init(self, context: object, /) -> None:
        bad = [b for b in self.level_budgets if b < 0]
        if bad:
            raise ValueError(f"level_budgets must be non-negative, got {list(self.level_budgets)}")


def _bands(forest: Forest, floor: IntArray, config: PyramidConfig, scale: float) -> FrontierState:
    state = FrontierState(forest, floor)
    level = forest.level
    for k in range(forest.depth, 1, -1):
        allowance = sum(int(config.allowance(i) * scale) for i in range(k - 1, forest.depth + 1))
        shown = state.shown_summaries()
        spent = sum(int(forest.tokens[j]) for j in shown if level[j] >= k - 1)
        newest_first = sorted(
            (j for j in shown if level[j] == k),
            key=lambda j: (-int(forest.last[j]), -int(forest.first[j])),
        )
        for j in newest_first:
            delta = state.lower_delta(j)
            if delta is None:
                continue  # constraints keep this summary shown as it is
            if spent + delta > allowance:
                break  # the band of level k - 1 ends here
            state.apply_lower(j, delta)
            spent += delta
    return state


@register
class ThresholdPyramid(Solver):
    """Newest history at the finest summaries, older at coarser ones, by level allowances.

    Examples
    --------
    >>> import solvers
    >>> from folding import chronicle
    >>> problem = chronicle(36, total=12_000)
    >>> result = solvers.solve(problem, method="threshold-pyramid", level_budgets=(800, 400))
    >>> result.status.value, result.tokens <= 12_000
    ('feasible', True)
    """

    name = "threshold-pyramid"
    Config = PyramidConfig

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        config = self.config
        assert isinstance(config, PyramidConfig)
        floor = cheapest_levels(problem)
        assert floor is not None
        wall = problem.budget.total
        if render_levels(problem, floor).total > wall:
            return Plan(None, Status.OVER_BUDGET)  # the cheapest frontier is already too big
        forest = Forest(problem)
        scale = 1.0
        for halving in range(_HALVINGS + 1):
            state = _bands(forest, floor, config, scale)
            tokens = render_levels(problem, state.levels).total
            if tokens <= wall:
                stats = {"scale": scale, "halvings": halving, "planned_tokens": tokens}
                return Plan(state.levels, Status.FEASIBLE, stats=stats)
            scale = scale / 2 if halving < _HALVINGS - 1 else 0.0
        return Plan(None, Status.OVER_BUDGET)
