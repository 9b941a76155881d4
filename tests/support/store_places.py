"""Where a test's stores live, on either engine: a file, or an agent in PostgreSQL.

The store tests that hold for every engine take the ``place`` fixture
(``tests/context_manager/store/conftest.py``): ``place("name")`` is a new store's
address, a file in the test's folder or an agent of the session's PostgreSQL server,
so one test runs on both. :func:`query` reads a store's tables directly, whatever
engine holds them.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.postgres_server import with_agent

Place = Callable[[str], str]
"""A store's address by a name unique in the test: ``place("s")``."""


def file_places(folder: Path) -> Place:
    """Store files in ``folder``."""
    return lambda name: str(folder / f"{name}.db")


def agent_places(url: str) -> Place:
    """Agents of the database at ``url``, their names unique to the caller."""
    prefix = uuid.uuid4().hex[:10]
    return lambda name: with_agent(url, f"{prefix}-{name}")


def query(where: str | Path, sql: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (no parameters) over the store at ``where``'s tables."""
    where = str(where)
    if not where.startswith("postgresql://"):
        with sqlite3.connect(where) as db:
            return db.execute(sql).fetchall()
    import psycopg

    from context_manager.store.postgres import address, agent_id, agent_schema

    found = address(where)
    with psycopg.connect(found.conninfo, autocommit=True) as raw:
        agent = agent_id(raw, found.agent)
        assert agent is not None, f"no agent {found.agent!r}"
        raw.execute(f"SET search_path TO {agent_schema(agent)}")
        return raw.execute(sql.encode()).fetchall()
