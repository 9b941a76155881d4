"""The manager over HTTP: the client's results equal the in-process manager's, one
agent's requests run one at a time, and nothing acknowledged is lost at shutdown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from context_manager import ContextManager, ExtractiveSummarizer
from context_manager.client import ContextClient, ServiceCallError
from context_manager.errors import ArgumentError, OverBudgetError, UnknownMessageError
from context_manager.messages import TextBlock, ToolResultBlock, ToolUseBlock
from context_manager.request import Injection
from context_manager.service import ServiceSettings, create_app
from tests.support.assembly_fixtures import BlockingSummarizer

TURNS = 40


def _settings(root: Path, **manager: object) -> ServiceSettings:
    return ServiceSettings.model_validate(
        {
            "allow_anonymous": True,
            "store_root": str(root),
            "manager": {"window_tokens": 4000, "auto_tick": False, **manager},
        }
    )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(_settings(tmp_path / "stores"), environ={})
    with TestClient(app) as client:
        yield client


def _talk(cm: ContextManager | ContextClient) -> list[str]:
    ids = []
    for n in range(TURNS):
        ts = 1_000.0 + 10 * n
        ids.append(cm.add_message("User", f"Step {n}: list the files in dir{n}.", timestamp=ts))
        ids.append(
            cm.add_message(
                "Claude",
                [TextBlock(text="Listing."), ToolUseBlock(id=f"t{n}", name="ls", input={"d": n})],
                timestamp=ts + 1,
            )
        )
        body = f"file_{n}_a.py file_{n}_b.py README_{n}.md " * 20
        ids.append(
            cm.add_message(
                "Tool", [ToolResultBlock(tool_use_id=f"t{n}", content=body)], timestamp=ts + 2
            )
        )
    return ids


def test_a_remote_agent_compiles_what_the_same_manager_compiles_in_process(
    service: TestClient, tmp_path: Path
) -> None:
    remote = ContextClient(client=service, agent="a1")
    local = ContextManager.open(
        path=tmp_path / "local.db", summarizer=ExtractiveSummarizer(), window_tokens=4000
    )
    with local:
        assert _talk(remote) == _talk(local)
        for _ in range(30):
            assert remote.tick() == local.tick()
        kwargs = {"max_tokens": 4000, "reserve_for_response": 500}
        there = remote.compile(**kwargs)
        here = local.compile(**kwargs)
        assert there.messages == here.messages
        assert there.cache_breakpoints == here.cache_breakpoints
        assert there.render_stats["tokens"] == here.render_stats["tokens"]
        assert there.to_anthropic(model="m") == here.to_anthropic(model="m")
        assert there.to_openai(model="m") == here.to_openai(model="m")
        assert [m.message for m in remote.get_messages()] == [
            m.message for m in local.get_messages()
        ]
        assert len(remote.get_summaries_in_range()) == len(local.get_summaries_in_range())
        assert remote.get_summaries_in_range()  # memories were written


def test_message_routes_add_list_get_edit_remove(service: TestClient) -> None:
    cm = ContextClient(client=service, agent="a2")
    first = cm.add_message("User", "hello", metadata={"k": 1}, timestamp=5.0)
    second = cm.add_message("Claude", "hi there", timestamp=6.0)
    assert [m.id for m in cm.get_messages()] == [first, second]
    assert cm.get_message(first).metadata == {"k": 1}
    cm.edit_message(second, "hi again")
    assert cm.get_message(second).text == "hi again"
    cm.remove_message(first)
    assert [m.id for m in cm.get_messages()] == [second]
    with pytest.raises(UnknownMessageError) as missing:
        cm.get_message(first)
    assert missing.value.ids == (first,)
    with pytest.raises(UnknownMessageError):
        cm.remove_message("nope")
    page = service.get("/v1/agents/a2/messages", params={"offset": 5, "limit": 1}).json()
    assert page == {"messages": [], "total": 1}


def test_compile_takes_injections_and_answers_provider_forms(service: TestClient) -> None:
    cm = ContextClient(client=service, agent="a3")
    cm.add_message("User", "What is the plan?")
    note = Injection.text("notes", "before_user", "Remember: be brief.")
    result = cm.compile(max_tokens=2000, injections=[note])
    assert [m.text for m in result.messages] == ["Remember: be brief.", "What is the plan?"]
    for fmt, key in (("anthropic", "messages"), ("openai", "messages")):
        body = {"max_tokens": 2000, "format": fmt, "model": "m1"}
        answer = service.post("/v1/agents/a3/context", json=body).json()
        assert answer["request"]["model"] == "m1" and answer["request"][key]


def test_errors_come_back_as_the_library_exceptions(service: TestClient) -> None:
    cm = ContextClient(client=service, agent="a4")
    cm.add_message("User", "x " * 3000)
    with pytest.raises(OverBudgetError) as over:
        cm.compile(max_tokens=200, reserve_for_response=0, catch_up=False)
    assert over.value.actual > over.value.budget == 200
    with pytest.raises(ArgumentError, match="participant"):
        cm.add_message("", "empty participant")
    with pytest.raises(ServiceCallError) as bad_id:
        ContextClient(client=service, agent="-x").add_message("User", "x")
    assert (bad_id.value.status, bad_id.value.code) == (422, "service/invalid_request")


def test_pins_and_branches(service: TestClient) -> None:
    cm = ContextClient(client=service, agent="a5")
    ids = [cm.add_message("User", f"m{n}") for n in range(4)]
    pin = cm.pin_range(ids[0], ids[1], name="task")
    assert [p["id"] for p in cm.list_pins()] == [pin]
    assert cm.unpin(pin) and not cm.unpin(pin)
    assert cm.current_branch == "main"
    name = cm.fork("experiment")
    assert name == "experiment" == cm.current_branch
    cm.add_message("User", "only on the branch")
    cm.switch_branch("main")
    assert len(cm.get_messages()) == 4
    assert {b["name"] for b in cm.list_branches()} == {"main", "experiment"}


def test_one_agent_serialised_and_nothing_acknowledged_lost_at_shutdown(tmp_path: Path) -> None:
    root = tmp_path / "stores"
    app = create_app(_settings(root), environ={})
    acknowledged: dict[str, set[str]] = {"b1": set(), "b2": set()}
    lock = threading.Lock()
    with TestClient(app) as client:

        def writer(agent: str, k: int) -> None:
            cm = ContextClient(client=client, agent=agent)
            for n in range(15):
                text = f"{agent}-{k}-{n}"
                cm.add_message("User", text)
                with lock:
                    acknowledged[agent].add(text)

        threads = [
            threading.Thread(target=writer, args=(a, k)) for a in acknowledged for k in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # the application has shut down: every store closed, then read in process
    for agent, texts in acknowledged.items():
        with ContextManager.open(path=root / f"{agent}.db") as cm:
            stored = [m.message.text for m in cm.get_messages()]
        assert sorted(stored) == sorted(texts) and len(stored) == 60


def test_idle_agents_are_closed_and_reopened_on_the_next_request(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "stores")
    app = create_app(settings, environ={})
    with TestClient(app) as client:
        cm = ContextClient(client=client, agent="c1")
        cm.add_message("User", "before")
        pool = app.state.pool
        assert pool.open_count == 1
        pool.clock = lambda: 10**9  # far past the idle limit
        assert pool.close_idle() == 1 and pool.open_count == 0
        assert [m.message.text for m in cm.get_messages()] == ["before"]
        assert pool.open_count == 1


def test_a_blocked_agent_does_not_hold_up_another(tmp_path: Path) -> None:
    blocking = BlockingSummarizer()
    settings = ServiceSettings.model_validate(
        {
            "allow_anonymous": True,
            "store_root": str(tmp_path),
            "manager": {
                "strategy": "autobiographical",
                "options": {
                    "target_chunk_tokens": 100,
                    "min_chunk_messages": 2,
                    "l1_holdback_chunks": 0,
                    "recent_window_tokens": 0,
                },
                "auto_tick": False,
            },
        }
    )
    app = create_app(settings, summarizer=blocking, environ={})
    with TestClient(app) as client:
        slow = ContextClient(client=client, agent="slow")
        for n in range(12):
            slow.add_message("User" if n % 2 == 0 else "Claude", f"turn {n} " + "word " * 60)
        ticking = threading.Thread(target=slow.tick)
        ticking.start()
        try:
            assert blocking.entered.wait(timeout=60)  # slow's tick is in the summariser
            fast = ContextClient(client=client, agent="fast")
            fast.add_message("User", "not held up")
            assert [m.message.text for m in fast.get_messages()] == ["not held up"]
        finally:
            blocking.release.set()
            ticking.join()
