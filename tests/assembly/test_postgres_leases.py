"""Compaction leases in PostgreSQL: the SQLite lease file's rules, shared by hosts."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from context_manager.assembly import (
    AssemblyConfig,
    AssemblyError,
    LeaseRecord,
    PostgresLeaseStore,
    compact,
)
from tests.support.assembly_fixtures import FakeSummarizer, StepClock, tool_turn
from tests.support.postgres_server import fresh_database

MODEL = {
    "id": "claude-x",
    "provider": "anthropic",
    "limits": {"context_window": 200_000, "max_output_tokens": 8_000},
}


@pytest.fixture
def leases(postgres_url: str) -> Iterator[PostgresLeaseStore]:
    store = PostgresLeaseStore(fresh_database(postgres_url))
    yield store
    store.close()


def test_a_lease_is_taken_once_until_released_or_expired(leases: PostgresLeaseStore) -> None:
    nonce = leases.acquire("k", now=1_000, ttl_ms=60_000)
    assert nonce is not None and leases.read("k") == LeaseRecord(nonce, 1_000)
    assert leases.acquire("k", now=2_000, ttl_ms=60_000) is None  # busy
    assert leases.acquire("other", now=2_000, ttl_ms=60_000) is not None
    leases.release("k", nonce)
    again = leases.acquire("k", now=3_000, ttl_ms=60_000)
    assert again is not None
    late = leases.acquire("k", now=3_000 + 60_000, ttl_ms=60_000)  # expired: taken over
    assert late is not None
    leases.release("k", again)  # the former holder's release clears nothing
    assert leases.read("k") == LeaseRecord(late, 63_000)


def test_one_of_many_concurrent_acquirers_gets_the_lease(leases: PostgresLeaseStore) -> None:
    start = threading.Barrier(8)
    won: list[str] = []

    def take() -> None:
        start.wait()
        nonce = leases.acquire("conv", now=1_000, ttl_ms=60_000)
        if nonce is not None:
            won.append(nonce)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and leases.read("conv") == LeaseRecord(won[0], 1_000)


def test_leases_are_shared_between_processes(postgres_url: str) -> None:
    url = fresh_database(postgres_url)
    first = PostgresLeaseStore(url)
    try:
        nonce = first.acquire("k", now=1_000, ttl_ms=60_000)
        assert nonce is not None
        code = (
            "import sys; from context_manager.assembly import PostgresLeaseStore; "
            "s = PostgresLeaseStore(sys.argv[1]); "
            "print(s.acquire('k', now=3000, ttl_ms=60000) is None, "
            "s.acquire('other', now=3000, ttl_ms=60000) is not None); s.close()"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, url], check=True, capture_output=True, text=True
        )
        assert out.stdout.split() == ["True", "True"]
        first.release("k", nonce)
        assert first.read("k") is None
    finally:
        first.close()


def test_lease_url_config_shares_leases_through_postgresql(postgres_url: str) -> None:
    url = fresh_database(postgres_url)
    holder = PostgresLeaseStore(url)
    try:
        assert holder.acquire("k", now=StepClock().now, ttl_ms=300_000) is not None
        request = {
            "messages": tool_turn(0, "x") + tool_turn(1, "y"),
            "model": MODEL,
            "options": {"lease_key": "k"},
        }
        out = compact(
            request,
            summarizer=FakeSummarizer(),
            config=AssemblyConfig(lease_url=url),
            clock=StepClock(),
        )
        assert out.status == "busy"
    finally:
        holder.close()


def test_an_unreachable_lease_database_is_a_state_error(tmp_path: Path) -> None:
    with pytest.raises(AssemblyError) as info:
        PostgresLeaseStore(f"postgresql://nobody@/db?host={tmp_path}&connect_timeout=2")
    assert info.value.code == "context/state" and "lease_url" in str(info.value)


def test_lease_url_must_be_a_postgresql_url() -> None:
    with pytest.raises(ValueError, match="lease_url"):
        AssemblyConfig(lease_url="mysql://db/x")
