"""Branches: cutting one at a sequence, switching to one, listing them.

A branch sees its own records plus its parent's up to the sequence it was cut at,
recursively (its lineage, :class:`~.connection.StoreConnection`), so branching copies
nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .connection import StoreConnection, guarded
from .errors import StoreError


@dataclass(frozen=True)
class Branch:
    """A branch: its name, parent and the sequence it was cut at."""

    name: str
    parent: str | None
    fork_seq: int
    head_seq: int


class BranchStore(StoreConnection):
    """The branch operations (a part of :class:`~.opening.Store`)."""

    # --------------------------------------------------------------- branches
    @property
    @guarded("reading the sequence")
    def sequence(self) -> int:
        """The newest sequence number visible on the current branch."""
        return self._head

    @property
    @guarded("reading the branch")
    def branch(self) -> str:
        """The current branch name."""
        return self._branch_name

    @guarded("creating a branch")
    def branch_at(self, seq: int, name: str | None = None) -> str:
        """Create a branch that sees the current branch up to ``seq``; returns its name.

        Raises
        ------
        StoreError
            When the name is taken or ``seq`` is outside ``[0, sequence]``.
        """
        self._check_open()
        self._check_not_aborted()
        if not 0 <= seq <= self._head:
            raise StoreError(f"cannot branch at sequence {seq}: the branch head is {self._head}")
        name = name or f"branch-{int(time.time() * 1000)}"
        try:
            with self.transaction():
                self._conn.execute(
                    "INSERT INTO branches (name, parent, fork_seq, created) VALUES (?, ?, ?, ?)",
                    (name, self._branch_id, seq, time.time()),
                )
        except self._sql.integrity_errors:
            raise StoreError(f"a branch named {name!r} already exists") from None
        return name

    @guarded("forking a branch")
    def fork(self, name: str | None = None) -> str:
        """Branch at the current head and switch to it."""
        name = self.branch_at(self._head, name)
        self.switch_branch(name)
        return name

    @guarded("switching branch")
    def switch_branch(self, name: str) -> None:
        """Make ``name`` the current branch (remembered across opens).

        Raises
        ------
        StoreError
            When no branch has that name.
        """
        self._check_open()
        self._check_not_aborted()
        row = self._conn.execute("SELECT id FROM branches WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(b.name for b in self.list_branches())
            raise StoreError(f"unknown branch {name!r}; branches: {known}")
        self._conn.execute(self._sql.upsert_meta, ("current_branch", name))
        self._branch_id, self._branch_name = int(row[0]), name
        self._lineage = self._compute_lineage(self._branch_id)
        self._head = self._compute_head()
        self._cache.clear()

    @guarded("listing branches")
    def list_branches(self) -> list[Branch]:
        """Every branch, oldest first."""
        rows = self._conn.execute(
            "SELECT b.id, b.name, p.name, b.fork_seq FROM branches b "
            "LEFT JOIN branches p ON p.id = b.parent ORDER BY b.id"
        ).fetchall()
        out = []
        for branch_id, name, parent, fork_seq in rows:
            own = self._conn.execute(
                "SELECT MAX(seq) FROM records WHERE branch = ?", (branch_id,)
            ).fetchone()[0]
            out.append(Branch(name, parent, int(fork_seq), int(own or fork_seq)))
        return out

    @property
    @guarded("reading the branch id")
    def branch_id(self) -> int:
        """The current branch's id (what a view saved for one branch is keyed by)."""
        return self._branch_id
