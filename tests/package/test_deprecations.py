"""Deprecated names still work for one release, and warn."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

import solvers
from context_manager.assembly import selection
from context_manager.strategies import PassthroughStrategy
from context_manager.strategies.base import Entry
from folding.testing import random_problem
from solvers.exact import BruteForce, Exact
from solvers.kv_stable import KvStable
from solvers.kv_unified import KvUnified
from solvers.pyramid import ThresholdPyramid


def test_solver_exact_warns_and_reads_the_capabilities() -> None:
    classes = [BruteForce, Exact, KvStable, KvUnified, ThresholdPyramid]
    for cls in classes:
        with pytest.warns(DeprecationWarning, match=r"capabilities\.exact"):
            assert cls.exact is solvers.capabilities(cls.name).exact
    with pytest.warns(DeprecationWarning, match=r"Solver\.exact"):
        assert solvers.get("exact").exact is True
    with pytest.warns(DeprecationWarning):
        assert solvers.get("kv-stable").exact is False


def test_level_bounds_warns_and_reads_the_index() -> None:
    problem = random_problem(2, n_leaves=40, n_pins=6)
    for i, leaf in enumerate(problem.leaves):
        with pytest.warns(DeprecationWarning, match=r"index\.lo"):
            bounds = problem.level_bounds(leaf.id)
        assert bounds == (int(problem.index.lo[i]), int(problem.index.hi[i]))


def test_entries_cover_warns_and_reads_the_source_ids() -> None:
    entries = [
        Entry("user", (), source_ids=("a", "b")),
        Entry("assistant", (), source_ids=("c",), summary_id="s"),
    ]
    with pytest.warns(DeprecationWarning, match="source_ids"):
        assert PassthroughStrategy().entries_cover(entries) == {"a", "b", "c"}


def test_the_assembly_selection_is_a_tail_cut_and_warns_under_its_old_name() -> None:
    with pytest.warns(DeprecationWarning, match="TailCut"):
        assert selection.Selection is selection.TailCut
    with pytest.warns(DeprecationWarning, match="TailCut"):
        from context_manager.assembly.selection import Selection
    assert Selection(2, 2) == selection.TailCut(head_len=2, tail_start=2)
    with pytest.raises(AttributeError, match="Nothing"):
        selection.Nothing  # noqa: B018


def test_the_per_message_langchain_converters_warn_and_convert_through_the_list_ones() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from context_manager.integrations import langchain as integration
    from context_manager.messages import Message

    with pytest.warns(DeprecationWarning, match="langchain_messages.from_langchain"):
        participant, blocks = integration.from_langchain(AIMessage(content="done"))
    assert participant == "Claude" and [b.text for b in blocks] == ["done"]  # type: ignore[union-attr]
    with pytest.warns(DeprecationWarning, match="langchain_messages.to_langchain"):
        [sent] = integration.to_langchain(Message.text_message("User", "hi"))
    assert isinstance(sent, HumanMessage) and sent.content == "hi"


def test_the_old_home_of_unfoldable_warns_and_gives_the_same_function() -> None:
    from context_manager.strategies.autobiographical import capping, unfoldable

    with pytest.warns(DeprecationWarning, match="autobiographical.unfoldable"):
        assert capping.unfoldable is unfoldable.unfoldable
    with pytest.raises(AttributeError, match="cap_forms"):
        capping.cap_forms  # noqa: B018


def test_the_folding_strategy_option_is_the_solver_and_warns() -> None:
    from context_manager.strategies.autobiographical import (
        AutobiographicalConfig,
        AutobiographicalStrategy,
    )

    with pytest.warns(DeprecationWarning, match=r"option folding_strategy .* solver='kv-unified'"):
        config = AutobiographicalConfig(folding_strategy="kv-unified")
    assert config.solver == "kv-unified"
    assert config == AutobiographicalConfig(solver="kv-unified")
    with pytest.warns(DeprecationWarning, match=r"read AutobiographicalConfig\.solver"):
        assert config.folding_strategy == "kv-unified"
    stored = {"folding_strategy": "oldest-first", "recent_window_tokens": 500}
    with pytest.warns(DeprecationWarning, match="pass solver="):
        assert AutobiographicalConfig.model_validate(stored).solver == "oldest-first"
    with pytest.warns(DeprecationWarning, match="pass solver="):
        loaded = AutobiographicalConfig.model_validate_json(json.dumps(stored))
    assert loaded.solver == "oldest-first"
    with pytest.warns(DeprecationWarning, match="pass solver="):
        sized = AutobiographicalConfig.for_window(32_000, folding_strategy="kv-unified")
    assert sized == AutobiographicalConfig.for_window(32_000, solver="kv-unified")
    assert sized.solver_options  # sized for the solver it names
    with pytest.warns(DeprecationWarning, match="pass solver="):
        strategy = AutobiographicalStrategy(compression_model="m", folding_strategy="flat-profile")
    assert strategy.solver == ("flat-profile", {})
    with pytest.warns(DeprecationWarning, match="pass solver="):
        assert strategy.with_options(folding_strategy="oldest-first").config.solver == (
            "oldest-first"
        )
    with pytest.raises(ValidationError, match="name the same option"):
        AutobiographicalConfig(folding_strategy="kv-unified", solver="kv-stable")
    with pytest.warns(DeprecationWarning) as caught:  # at the line that passed it
        AutobiographicalConfig(folding_strategy="kv-stable")
    assert [w.filename for w in caught] == [__file__]
    assert "folding_strategy" not in AutobiographicalConfig.model_json_schema()["properties"]
    assert "folding_strategy" not in config.model_dump()


def test_state_problem_reduce_warns_and_states_the_snapshot_without_ties_or_chunks() -> None:
    from dataclasses import replace

    from context_manager.adapter import Snapshot, state_problem

    snap = Snapshot(
        ids=[f"m{i}" for i in range(8)],
        tokens=[10] * 8,
        tied=[False, True, False, False, True, False, False, False],
        head_end=1,
        tail_start=7,
        budget=1000,
        target=800,
        chunks=(("c0", 2, 6),),
    )
    per_message = replace(snap, tied=[False] * 8, chunks=())
    with pytest.warns(DeprecationWarning, match=r"dataclasses\.replace\(snap"):
        whole = state_problem(snap, reduce=False)
    assert whole.problem == state_problem(per_message).problem
    assert len(whole.problem.leaves) == 8
    with pytest.warns(DeprecationWarning, match="reduce"):
        reduced = state_problem(snap, reduce=True)
    assert reduced.problem == state_problem(snap).problem
    assert len(reduced.problem.leaves) < 8


def test_the_old_compile_module_and_the_cli_s_borrowed_names_warn_and_give_the_same_objects() -> (
    None
):
    import folding
    from context_manager import cli
    from context_manager.strategies.autobiographical import folding as old
    from context_manager.strategies.autobiographical import solve

    with pytest.warns(DeprecationWarning, match="autobiographical.solve"):
        assert old.select is solve.select
    with pytest.raises(AttributeError, match="nothing_here"):
        old.nothing_here  # noqa: B018
    with pytest.warns(DeprecationWarning, match="import FoldProblem from folding"):
        assert cli.FoldProblem is folding.FoldProblem
    with pytest.raises(AttributeError, match="nothing_here"):
        cli.nothing_here  # noqa: B018
