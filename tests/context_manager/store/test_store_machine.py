"""The store contract as a stateful machine, on both engines.

Every public write (append, edit, redact, set, transactions that commit or fail, forks
and branches cut at an earlier sequence, switches, reopening, media, saved counts; on
PostgreSQL also a connection cut by the server) is driven against an independent
model of what each branch holds, and after every step the store reads back exactly
the model: the live items with their ids and bodies, the snapshots, the branch, the
sequence. Derandomised with a fixed example count.
"""

from __future__ import annotations

import base64
import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from context_manager.store import Store, StoreConnectionError
from tests.support.postgres_server import with_agent

SLOTS = ("a", "b")
SNAPSHOTS = ("x", "y")
bodies = st.dictionaries(
    st.sampled_from(["text", "n", "tag"]),
    st.one_of(st.integers(-5, 5), st.text(max_size=8)),
    max_size=2,
)
IMAGE = {"type": "image", "data": base64.b64encode(bytes(range(256)) * 12).decode()}


def _empty() -> dict[str, Any]:
    return {"items": {s: [] for s in SLOTS}, "snap": {}}


class StoreMachine(RuleBasedStateMachine):
    """One store and a model of every branch: after each write, the branch's state."""

    def where(self) -> str:
        return str(self.folder / "s.db")

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp())
        self.store: Store | None = None
        self.branch = "main"
        # per branch: [(sequence, state)] after each write, the first at its cut
        self.history: dict[str, list[tuple[int, dict[str, Any]]]] = {"main": [(0, _empty())]}
        self.n = 0

    @initialize()
    def open(self) -> None:
        self.store = Store.open(self.where())

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def s(self) -> Store:
        assert self.store is not None
        return self.store

    @property
    def state(self) -> dict[str, Any]:
        return self.history[self.branch][-1][1]

    def _wrote(self, state: dict[str, Any]) -> None:
        self.history[self.branch].append((self.s.sequence, state))

    # ------------------------------------------------------------------ writes
    @rule(slot=st.sampled_from(SLOTS), body=bodies, image=st.booleans())
    def append(self, slot: str, body: dict[str, Any], image: bool) -> None:
        if image:
            body = {**body, "content": [IMAGE]}
        item = self.s.append(slot, body)
        state = copy.deepcopy(self.state)
        assert item.id not in [i for i, _ in state["items"][slot]]
        state["items"][slot].append((item.id, body))
        self._wrote(state)

    @precondition(lambda self: any(self.state["items"][s] for s in SLOTS))
    @rule(pick=st.integers(0, 1_000), body=bodies, drop=st.booleans())
    def change(self, pick: int, body: dict[str, Any], drop: bool) -> None:
        slot = next(s for s in SLOTS if self.state["items"][s])
        items = self.state["items"][slot]
        at = pick % len(items)
        state = copy.deepcopy(self.state)
        if drop:
            self.s.redact(slot, items[at][0])
            del state["items"][slot][at]
        else:
            self.s.edit(slot, items[at][0], body)
            state["items"][slot][at] = (items[at][0], body)
        self._wrote(state)

    @rule(slot=st.sampled_from(SNAPSHOTS), value=bodies)
    def set(self, slot: str, value: dict[str, Any]) -> None:
        self.s.set(slot, value)
        state = copy.deepcopy(self.state)
        state["snap"][slot] = value
        self._wrote(state)

    @rule(bodies_=st.lists(bodies, min_size=1, max_size=3), fail=st.booleans())
    def transaction(self, bodies_: list[dict[str, Any]], fail: bool) -> None:
        before = self.s.sequence
        state = copy.deepcopy(self.state)
        try:
            with self.s.transaction():
                for body in bodies_:
                    item = self.s.append("a", body)
                    state["items"]["a"].append((item.id, body))
                self.s.set("x", bodies_[-1])
                state["snap"]["x"] = bodies_[-1]
                if fail:
                    raise KeyError("the block fails")
        except KeyError:
            assert self.s.sequence == before  # nothing of it stays
            return
        self._wrote(state)

    @rule(counts=st.lists(st.tuples(st.binary(min_size=1, max_size=4), st.integers(0, 99))))
    def counts(self, counts: list[tuple[bytes, int]]) -> None:
        self.s.save_counts("scope", counts)
        saved = self.s.derived_counts("scope")
        for digest, n in dict(counts).items():
            assert saved[digest] == n

    # ---------------------------------------------------------------- branches
    @rule()
    def fork(self) -> None:
        self.n += 1
        name = self.s.fork(f"f{self.n}")
        self.history[name] = [(self.s.sequence, copy.deepcopy(self.state))]
        self.branch = name

    @rule(pick=st.integers(0, 1_000))
    def branch_earlier(self, pick: int) -> None:
        past = self.history[self.branch]
        seq, state = past[pick % len(past)]
        self.n += 1
        name = self.s.branch_at(seq, f"b{self.n}")
        self.history[name] = [(seq, copy.deepcopy(state))]
        self.s.switch_branch(name)
        self.branch = name

    @rule(pick=st.integers(0, 1_000))
    def switch(self, pick: int) -> None:
        names = sorted(self.history)
        self.branch = names[pick % len(names)]
        self.s.switch_branch(self.branch)

    @rule()
    def reopen(self) -> None:
        self.s.close()
        self.store = Store.open(self.where())

    # --------------------------------------------------------------- reading
    @invariant()
    def reads_back_the_model(self) -> None:
        if self.store is None:
            return
        assert self.s.branch == self.branch
        assert self.s.sequence == self.history[self.branch][-1][0]
        for slot in SLOTS:
            got = [(i.id, i.body) for i in self.s.items(slot)]
            assert got == self.state["items"][slot]
        for slot in SNAPSHOTS:
            assert self.s.get(slot) == self.state["snap"].get(slot)
        assert [b.name for b in self.s.list_branches()] == sorted(
            self.history, key=lambda n: (n != "main", int(n[1:]) if n != "main" else 0)
        )


class PostgresStoreMachine(StoreMachine):
    """The machine on an agent's store in PostgreSQL, with cut connections."""

    url: str | None = None

    def where(self) -> str:
        assert self.url is not None
        return with_agent(self.url, f"machine-{id(self)}-{self.folder.name}")

    @rule(slot=st.sampled_from(SLOTS), body=bodies)
    def cut_then_append(self, slot: str, body: dict[str, Any]) -> None:
        """The server ends the session: the next operation is a typed error that
        stored nothing, and the one after reconnects."""
        pid = self.s._conn.raw.info.backend_pid  # type: ignore[attr-defined]
        assert self.url is not None
        with psycopg.connect(self.url, autocommit=True) as raw:
            raw.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreConnectionError):
            self.s.append(slot, body)
        self.append(slot, body, image=False)


settings_ci = settings(
    max_examples=40, stateful_step_count=30, derandomize=True, database=None, deadline=None
)
StoreMachine.TestCase.settings = settings_ci
PostgresStoreMachine.TestCase.settings = settings_ci
TestStoreMachine = StoreMachine.TestCase
TestPostgresStoreMachine = PostgresStoreMachine.TestCase


@pytest.fixture(autouse=True)
def _server(request: pytest.FixtureRequest) -> None:
    if request.cls is TestPostgresStoreMachine:
        PostgresStoreMachine.url = request.getfixturevalue("postgres_url")
