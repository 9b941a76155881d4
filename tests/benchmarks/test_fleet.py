"""``benchmarks/fleet.py`` in a small configuration against the session's PostgreSQL
server: both engines reported, every acknowledged message stored exactly once, every
store auditing clean, after the timed runs and after a run of SIGKILLed workers."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest

from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def fleet() -> ModuleType:
    """The benchmark script, loaded as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "fleet_benchmark", ROOT / "benchmarks" / "fleet.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(fleet: ModuleType, postgres_url: str) -> dict[str, Any]:
    cfg = fleet.FleetConfig(
        workers=2,
        agents=5,
        turns=6,
        think_ms=10.0,
        kills=2,
        kill_every=1.5,
        max_seconds=600.0,
        url=postgres_url,
        probe_turns=3,
        repeats=2,
        control_wait_ms=2.0,
    )
    return fleet.run_fleet(cfg, log=lambda _: None)  # type: ignore[no-any-return]


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_the_timed_run_stores_every_acknowledged_message_once(
    report: dict[str, Any], engine: str
) -> None:
    got = report["engines"][engine]
    assert got["error_count"] == 0, got["errors"]
    assert got["problems"] == []
    assert got["runs"] == 2  # pooled over the repeats, each on a store of its own
    assert got["turns"] == got["compiles"] == 2 * 5 * 6
    assert got["acknowledged"] == got["stored_messages"] == 2 * 5 * 6 * 3
    assert got["lost"] == got["duplicated"] == 0
    assert got["audits_clean"] == got["audits"] == 2 * 5
    assert all(len(v) == 2 for v in got["p50_ms_by_run"].values())
    for op in ("add", "compile", "tick", "turn"):
        assert got["calls"][op]["n"] > 0 and got["calls"][op]["p50_ms"] > 0
    assert {"add", "compile", "tick"} <= set(got["statements_per_call"])
    assert got["cpu_seconds"]["workers"] > 0
    assert got["blocking_call_in_a_worker"]["n"] > 0  # worker 0's probe, on both engines
    loaded = got["round_trip_under_load"]
    if engine == "postgresql":  # the probe ran beside the fleet
        assert loaded["n"] > 0 and loaded["p50_ms"] > 0
    else:
        assert loaded is None


def test_the_control_makes_each_sqlite_add_wait(report: dict[str, Any]) -> None:
    add = report["engines"]["sqlite"]["calls"]["add"]
    assert add["p50_ms"] >= 2.0  # every timed SQLite add slept 2 ms in its thread
    assert report["config"]["control_wait_ms"] == 2.0


def test_both_engines_are_compared(report: dict[str, Any]) -> None:
    for op in ("add", "compile", "tick", "turn"):
        assert report["ratios"][op]["p50"] > 0 and report["ratios"][op]["p99"] > 0
    assert set(report["verdict"]["within_3x"]) == {
        f"{op}_{q}" for op in ("compile", "add", "tick", "turn") for q in ("p50", "p99")
    }
    assert report["verdict"]["checks_pass"]


def test_killed_workers_lose_and_duplicate_nothing(report: dict[str, Any]) -> None:
    kill = report["kill_run"]
    assert kill["kills"] == kill["kills_asked"] == 2
    assert kill["error_count"] == 0, kill["errors"]
    assert kill["problems"] == []
    assert kill["acknowledged"] > 0
    assert kill["lost"] == kill["duplicated"] == 0
    # an add in flight at a kill is stored or not, never twice (duplicated above)
    assert kill["stored_messages"] == kill["acknowledged"] + kill["in_flight_stored"]
    assert kill["audits_clean"] == kill["audits"] == 5
    # every restarted worker not itself killed reopened all its agents' stores
    assert kill["not_reopened"] == 0 and kill["takeovers"] > 0
    assert len(kill["schedule"]) == 2
