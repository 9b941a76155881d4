"""The four assembly functions over HTTP answer the same bytes as in process, and their
errors with the documented statuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from context_manager.assembly import (
    AssemblyConfig,
    AssemblyError,
    SqliteLeaseStore,
    assemble,
    count_tokens,
)
from context_manager.client import ContextClient
from context_manager.service import LiveSettings, ServiceSettings, create_app
from tests.support.assembly_fixtures import (
    BlockingSummarizer,
    FakeSummarizer,
    assistant,
    user,
)
from tests.support.assembly_scenarios import IN_PROCESS, LONG, REPLY, SCENARIOS, SMALL


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TestClient]:
    settings = ServiceSettings(allow_anonymous=True, store_root=tmp_path / "stores")
    app = create_app(settings, summarizer=FakeSummarizer(reply=REPLY), environ={})
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize(("name", "request_body"), SCENARIOS)
def test_each_function_answers_the_in_process_bytes(
    service: TestClient, name: str, request_body: dict[str, Any]
) -> None:
    here = IN_PROCESS[name](request_body, summarizer=FakeSummarizer(reply=REPLY))
    response = service.post(f"/v1/context/{name}", json=request_body)
    assert response.status_code == 200, response.text
    assert response.content == here.model_dump_json(exclude_none=True).encode()


@pytest.mark.parametrize(("name", "request_body"), SCENARIOS)
def test_the_client_returns_the_in_process_result(
    service: TestClient, name: str, request_body: dict[str, Any]
) -> None:
    here = IN_PROCESS[name](request_body, summarizer=FakeSummarizer(reply=REPLY))
    remote = ContextClient(client=service)
    method = {"count-tokens": remote.count_tokens, "prune": remote.prune}.get(name)
    method = method or {"compact": remote.compact, "assemble": remote.assemble}[name]
    assert method(request_body) == here


def test_an_invalid_request_is_422_with_the_in_process_message(service: TestClient) -> None:
    bad = {"messages": [{"role": "user", "content": "not a list", "timestamp": 1}], "model": SMALL}
    with pytest.raises(AssemblyError) as here:
        count_tokens(bad)
    response = service.post("/v1/context/count-tokens", json=bad)
    assert response.status_code == 422
    assert response.json() == {"code": here.value.code, "message": here.value.message}
    with pytest.raises(AssemblyError) as remote:
        ContextClient(client=service).count_tokens(bad)
    assert (remote.value.code, remote.value.message) == (here.value.code, here.value.message)


def test_overflow_is_422_context_overflow(service: TestClient) -> None:
    body = {"messages": [assistant("a", ts=1), user("q" * 40_000, ts=2)], "model": SMALL}
    with pytest.raises(AssemblyError) as here:
        assemble(body, summarizer=FakeSummarizer(reply=REPLY))
    response = service.post("/v1/context/assemble", json=body)
    assert (response.status_code, response.json()["code"]) == (422, "context/overflow")
    assert response.json()["message"] == here.value.message


def test_a_body_that_is_not_json_is_400_and_not_an_object_is_422(service: TestClient) -> None:
    for name in IN_PROCESS:
        response = service.post(f"/v1/context/{name}", content=b'{"messages": [')
        assert response.status_code == 400
        assert response.json()["code"] == "service/malformed_json"
        response = service.post(f"/v1/context/{name}", json=[1, 2])
        assert (response.status_code, response.json()["code"]) == (422, "context/invalid_request")


def test_a_compaction_holding_the_lease_answers_409_with_retry_after(tmp_path: Path) -> None:
    leases = tmp_path / "leases"
    leases.mkdir()
    settings = ServiceSettings(
        allow_anonymous=True,
        store_root=tmp_path / "stores",
        assembly=AssemblyConfig(lease_dir=leases, lease_ttl_secs=30),
    )
    held = SqliteLeaseStore(leases.resolve() / "leases.sqlite3")
    now = 10**13
    assert held.acquire("conv-9", now=now, ttl_ms=10**9) is not None
    body = {"messages": LONG, "model": SMALL, "options": {"lease_key": "conv-9"}}
    with TestClient(create_app(settings, summarizer=FakeSummarizer(), environ={})) as client:
        response = client.post("/v1/context/compact", json=body)
        assert response.status_code == 409
        assert response.headers["retry-after"] == "30"
        assert response.json() == {"status": "busy"}
        assert ContextClient(client=client).compact(body).status == "busy"


def test_a_request_past_its_deadline_is_504(tmp_path: Path) -> None:
    blocking = BlockingSummarizer()
    settings = ServiceSettings(
        allow_anonymous=True,
        store_root=tmp_path / "stores",
        limits={"request_timeout_seconds": 0.05},  # type: ignore[arg-type]
    )
    try:
        with TestClient(create_app(settings, summarizer=blocking, environ={})) as client:
            body = {"messages": LONG, "model": SMALL}
            response = client.post("/v1/context/compact", json=body)
            assert (response.status_code, response.json()["code"]) == (504, "service/deadline")
    finally:
        blocking.release.set()


def test_a_body_over_the_limit_is_413_before_the_function_runs(tmp_path: Path) -> None:
    fake = FakeSummarizer()
    settings = ServiceSettings(
        allow_anonymous=True,
        store_root=tmp_path,
        limits={"max_body_bytes": 1000},  # type: ignore[arg-type]
    )
    with TestClient(create_app(settings, summarizer=fake, environ={})) as client:
        body = json.dumps({"messages": LONG, "model": SMALL}).encode()
        response = client.post("/v1/context/compact", content=body)
        assert (response.status_code, response.json()["code"]) == (413, "service/too_large")
        # a chunked body (no Content-Length) is counted as it arrives
        response = client.post("/v1/context/compact", content=iter([body[:900], body[900:]]))
        assert response.status_code == 413
    assert fake.requests == []


def test_a_lease_dir_change_swaps_the_lease_store_on_the_next_call(tmp_path: Path) -> None:
    held_dir, free_dir = tmp_path / "held", tmp_path / "free"
    held_dir.mkdir()
    free_dir.mkdir()
    held = SqliteLeaseStore(held_dir.resolve() / "leases.sqlite3")
    assert held.acquire("conv-7", now=10**13, ttl_ms=10**9) is not None

    def settings(lease_dir: Path) -> ServiceSettings:
        return ServiceSettings(
            allow_anonymous=True,
            store_root=tmp_path / "stores",
            assembly=AssemblyConfig(lease_dir=lease_dir),
        )

    live = LiveSettings(initial=settings(held_dir))
    body = {"messages": LONG, "model": SMALL, "options": {"lease_key": "conv-7"}}
    app = create_app(live, summarizer=FakeSummarizer(reply="S"), environ={})
    with TestClient(app) as client:
        assert client.post("/v1/context/compact", json=body).status_code == 409
        live.replace(settings(free_dir))
        answered = client.post("/v1/context/compact", json=body)
        assert (answered.status_code, answered.json()["status"]) == (200, "ok")
