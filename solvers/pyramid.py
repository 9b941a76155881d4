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

import itertools
from typing import Annotated

from pydantic import Field

from folding import MAX_TOTAL_TOKENS, FoldProblem, Status, render_levels

from ._base import Capabilities, Plan, Solver, SolverConfig, register
from ._common import cheapest_levels
from ._forest import Forest, FrontierState, IntArray
from ._plan import Deadline

__all__ = ["PyramidConfig", "ThresholdPyramid"]

_HALVINGS = 16


class PyramidConfig(SolverConfig):
    """Token allowances of the levels, finest first."""

    level_budgets: tuple[Annotated[int, Field(ge=0, le=MAX_TOTAL_TOKENS)], ...] = Field(
        default=(30_000, 30_000, 30_000), min_length=1
    )
    """``level_budgets[k - 1]`` bounds the tokens of summaries shown at level k; the last
    entry applies to every level above. Each lies in ``[0, folding.MAX_TOTAL_TOKENS]``."""

    def allowance(self, level: int) -> int:
        """The allowance of ``level`` (1-based)."""
        budgets = self.level_budgets
        return budgets[min(level, len(budgets)) - 1]


def _bands(
    forest: Forest, floor: IntArray, config: PyramidConfig, scale: float, deadline: Deadline
) -> tuple[FrontierState, bool]:
    """The bands at ``scale`` x the allowances, and whether the deadline cut them short.

    The shown summaries are tracked per level as summaries open, so each level
    costs its own summaries, not a scan of every leaf.
    """
    state = FrontierState(forest, floor)
    level = forest.level.tolist()
    tokens = forest.tokens.tolist()
    depth = forest.depth
    # allowances from level k - 1 up: suffix sums, level i at index i
    allow = [0] + [int(config.allowance(i) * scale) for i in range(1, depth + 1)]
    from_level = [*itertools.accumulate(reversed(allow))][::-1]
    shown_at: list[list[int]] = [[] for _ in range(depth + 1)]
    spent_at = [0] * (depth + 1)  # tokens of the shown summaries of each level
    for j in state.shown_summaries():
        shown_at[level[j]].append(j)
        spent_at[level[j]] += tokens[j]
    high = spent_at[depth]  # tokens shown at levels >= k
    for k in range(depth, 1, -1):
        if deadline.expired():
            return state, True
        allowance = from_level[k - 1]
        spent = high + spent_at[k - 1]  # tokens shown at levels >= k - 1
        newest_first = sorted(
            shown_at[k], key=lambda j: (-int(forest.last[j]), -int(forest.first[j]))
        )
        for j in newest_first:
            delta = state.lower_delta(j)
            if delta is None:
                continue  # constraints keep this summary shown as it is
            if spent + delta > allowance:
                break  # the band of level k - 1 ends here
            state.apply_lower(j, delta)
            spent += delta
            shown_at[k - 1].extend(c for c in forest.children[j] if forest.members[c] > 0)
            if deadline.expired():
                return state, True
        high = spent
    return state, False


@register
class ThresholdPyramid(Solver):
    """Newest history at the finest summaries, older at coarser ones, by level allowances.

    Examples
    --------
    >>> import solvers
    >>> from folding.testing import chronicle
    >>> problem = chronicle(36, total=12_000)
    >>> result = solvers.solve(problem, method="threshold-pyramid", level_budgets=(800, 400))
    >>> result.status.value, result.tokens <= 12_000
    ('feasible', True)
    """

    name = "threshold-pyramid"
    Config = PyramidConfig
    capabilities = Capabilities(uses_time_limit=True)

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        config = self.config
        assert isinstance(config, PyramidConfig)
        deadline = Deadline.after(time_limit)
        floor = cheapest_levels(problem)
        assert floor is not None
        wall = problem.budget.total
        floor_tokens = render_levels(problem, floor).total
        if floor_tokens > wall:
            return Plan(None, Status.OVER_BUDGET)  # the cheapest frontier is already too big
        forest = Forest(problem)
        scale = 1.0
        for halving in range(_HALVINGS + 1):
            state, cut = _bands(forest, floor, config, scale, deadline)
            tokens = render_levels(problem, state.levels).total
            stats: dict[str, object] = {"scale": scale, "halvings": halving}
            if tokens <= wall:
                stats["planned_tokens"] = tokens
                stats["time_limit_hit"] = cut
                return Plan(state.levels, Status.FEASIBLE, stats=stats)
            if cut or deadline.expired():
                # out of time before the bands fit: the floor is the plan that fits
                stats.update(planned_tokens=floor_tokens, time_limit_hit=True)
                diagnostics = {"fallback": "floor (the time limit ran out before the bands fit)"}
                return Plan(floor, Status.FEASIBLE, diagnostics=diagnostics, stats=stats)
            scale = scale / 2 if halving < _HALVINGS - 1 else 0.0
        return Plan(None, Status.OVER_BUDGET)
