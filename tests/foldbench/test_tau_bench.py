"""tau-bench airline trajectories as a dataset, and argument support."""

from __future__ import annotations

from context_manager.messages import ToolResultBlock, ToolUseBlock
from foldbench import dataset
from foldbench.benchmark import argument_values, concatenate, replay_policy
from foldbench.loaders import load_tau_bench

DATA = dataset("tau-bench") / "airline-gpt-4o-150.json"


def test_the_bundled_trajectories_load_with_their_tool_calls() -> None:
    runs = load_tau_bench(DATA)
    assert len(runs) == 150
    first = runs[0]
    assert first.name == "tau-0-0" and first.metadata["dataset"] == "tau-bench"
    assert first.messages[0].participant == "System"  # the airline policy
    calls = [b for m in first.messages for b in m.content if isinstance(b, ToolUseBlock)]
    results = [b for m in first.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert calls and {c.id for c in calls} == {r.tool_use_id for r in results}
    # called before each of the agent's turns
    assert all(first.messages[n].participant == "Claude" for n in first.call_points)
    assert load_tau_bench(DATA, limit=3) == runs[:3]


def test_argument_support_is_complete_with_the_whole_history_in_view() -> None:
    [run] = load_tau_bench(DATA, limit=1)
    records = replay_policy(run, "ours:kv-stable", 200_000)  # everything fits
    total = sum(r.arguments_total for r in records)
    assert total > 0
    assert sum(r.arguments_kept for r in records) == total
    # values the agent used are found in the history before the call, not after it
    for r in records:
        values = argument_values(run.messages[r.messages_so_far])
        assert r.arguments_total <= len(values)


def test_a_small_window_keeps_fewer_argument_values() -> None:
    joined = concatenate(load_tau_bench(DATA, limit=3), name="tau-3")
    small = replay_policy(joined, "langchain-trim-messages", 2_000)
    kept = sum(r.arguments_kept for r in small)
    total = sum(r.arguments_total for r in small)
    assert total > 0 and kept < total
