"""Service processes sharing one PostgreSQL store database (``store_url``): an agent
is served by one at a time; what one wrote, the other reads once it has the agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from context_manager.client import ContextClient
from context_manager.service import ServiceSettings, create_app
from context_manager.store import StoreLockedError
from tests.support.postgres_server import fresh_database


def _settings(url: str, root: Path) -> ServiceSettings:
    return ServiceSettings.model_validate(
        {
            "allow_anonymous": True,
            "store_root": str(root),  # unused: the stores are in the database
            "store_url": url,
            "manager": {"window_tokens": 4000, "auto_tick": False},
        }
    )


def test_two_services_share_an_agent_one_at_a_time(postgres_url: str, tmp_path: Path) -> None:
    url = fresh_database(postgres_url)
    first_app = create_app(_settings(url, tmp_path / "a"), environ={})
    second_app = create_app(_settings(url, tmp_path / "b"), environ={})
    with TestClient(first_app) as first, TestClient(second_app) as second:
        assert first.get("/readyz").json() == {"status": "ready"}
        one = ContextClient(client=first, agent="shared")
        written = one.add_message("User", "written through the first service")
        other = ContextClient(client=second, agent="shared")
        with pytest.raises(StoreLockedError, match="open by the server process"):
            other.get_messages()  # the first service holds the agent's writer lock
        busy = second.get("/v1/agents/shared/messages")
        assert busy.status_code == 409 and busy.headers["retry-after"]
        ContextClient(client=second, agent="elsewhere").add_message("User", "in parallel")
    assert not list(tmp_path.glob("*/*.db"))  # nothing went to files
    with TestClient(create_app(_settings(url, tmp_path / "c"), environ={})) as third:
        # the first service has stopped and closed the agent: another takes it over
        moved = ContextClient(client=third, agent="shared")
        assert [m.id for m in moved.get_messages()] == [written]


def test_readiness_names_a_store_database_that_does_not_answer(tmp_path: Path) -> None:
    url = f"postgresql://nobody@/db?host={tmp_path}&connect_timeout=2"
    with TestClient(create_app(_settings(url, tmp_path), environ={})) as service:
        answer = service.get("/readyz")
        assert answer.status_code == 503
        assert "the store database does not answer" in answer.json()["message"]
