"""The one renderer: time to price a frontier, by history size."""

from __future__ import annotations

from folding import CacheSimulator, check_plan, frontier_from_levels, kv_cost, render, render_levels

from .common import big_chronicle, mixed_levels


class Render:
    params = [1_000, 15_000, 75_000]
    param_names = ["n_leaves"]
    timeout = 300

    def setup(self, n_leaves: int) -> None:
        self.problem = big_chronicle(n_leaves)
        self.levels = mixed_levels(n_leaves)
        self.frontier = frontier_from_levels(self.problem, self.levels)
        self.layout = render(self.problem, self.frontier)

    def time_render(self, n_leaves: int) -> None:
        render(self.problem, self.frontier)

    def time_render_levels(self, n_leaves: int) -> None:
        render_levels(self.problem, self.levels)

    def time_check_plan(self, n_leaves: int) -> None:
        check_plan(self.problem, self.frontier)

    def time_kv_cost(self, n_leaves: int) -> None:
        kv_cost(self.layout, self.layout)

    def time_cache_simulator_request(self, n_leaves: int) -> None:
        CacheSimulator().request(self.layout)

    def peakmem_render(self, n_leaves: int) -> None:
        render(self.problem, self.frontier)

    def track_summaries(self, n_leaves: int) -> int:
        return len(self.problem.summaries)

    track_summaries.unit = "summaries"  # type: ignore[attr-defined]


class BuildProblem:
    params = [1_000, 15_000, 75_000]
    param_names = ["n_leaves"]
    timeout = 300

    def time_validate_problem(self, n_leaves: int) -> None:
        big_chronicle.__wrapped__(n_leaves)
