"""The ``place`` fixture: each store test that takes it runs on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.store_places import Place, agent_places, file_places


@pytest.fixture(params=["sqlite", "postgresql"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    """New stores' addresses: files in the test's folder, or agents of the session's
    PostgreSQL server (``postgres_url``)."""
    if request.param == "sqlite":
        return file_places(tmp_path)
    return agent_places(request.getfixturevalue("postgres_url"))
