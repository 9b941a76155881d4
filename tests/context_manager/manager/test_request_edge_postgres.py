"""The request machine (:mod:`tests.support.request_machine`) on PostgreSQL: every
host operation against an agent's store in a database server, derandomised with a
fixed example count; ``make soak`` runs it long."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.support.request_machine import PostgresRequestMachine


@pytest.fixture(autouse=True)
def _server(postgres_url: str) -> None:
    PostgresRequestMachine.url = postgres_url


PostgresRequestMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=40, derandomize=True, database=None, deadline=None
)
TestPostgresRequestMachine = PostgresRequestMachine.TestCase
