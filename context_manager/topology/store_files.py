"""Audit and repair of a store file: :func:`audit_store` audits a copy of it, and
:func:`repair_store` plans a repair and, with ``apply``, replaces the file with a
repaired copy once that audits clean, keeping the original. Both refuse a store a
running agent holds (its writer lock); what they found and did is a
:class:`StoreAudit` or a :class:`StoreRepair`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..salvage import DamagedRow, damaged_rows, salvage
from ..store import (
    NotAStoreError,
    Store,
    StoreError,
    StoreLockedError,
    check_store_tables,
    copy_private,
    scratch,
    store_tables,
)
from .checks import audit, parse
from .model import Action, Finding, StoredRecords
from .plan import plan_repair
from .stored import apply_repair, read_stored


# ------------------------------------------------------------- store files
@dataclass
class StoreAudit:
    """What :func:`audit_store` found.

    Attributes
    ----------
    path : str
        The store file audited (its real path).
    namespace, branch : str
    records : StoredRecords
    findings : list of Finding
    """

    path: str
    namespace: str
    branch: str
    records: StoredRecords
    findings: list[Finding]
    damaged: list[DamagedRow] = field(default_factory=list)
    """Rows of the file that cannot be read (:func:`~context_manager.salvage.damaged_rows`):
    the findings are those of the rest."""

    def counts(self) -> dict[str, Any]:
        """Messages, memories by level and chunk records, as read."""
        tree = parse(self.records)
        levels: dict[str, int] = {}
        for s in tree.valid.values():
            levels[f"L{s.level}"] = levels.get(f"L{s.level}", 0) + 1
        return {
            "messages": len(self.records.messages),
            "summaries": len(self.records.summaries),
            "levels": dict(sorted(levels.items(), key=lambda kv: int(kv[0][1:]))),
            "chunks": len(self.records.chunks),
        }


@dataclass
class StoreRepair:
    """What :func:`repair_store` planned and did.

    Attributes
    ----------
    path, namespace, branch : str
    findings : list of Finding
        The audit before the repair.
    actions : list of Action
        The plan.
    applied : bool
        The store file was replaced by the repaired copy.
    backup : str or None
        Where the original was kept (when applied).
    after : list of Finding
        The audit of the repaired copy (empty when applied).
    messages_before, messages_after : int
        Messages on the branch before and after (equal: a repair removes none).
    """

    path: str
    namespace: str
    branch: str
    findings: list[Finding]
    actions: list[Action]
    applied: bool = False
    backup: str | None = None
    after: list[Finding] = field(default_factory=list)
    messages_before: int = 0
    messages_after: int = 0
    damaged: list[DamagedRow] = field(default_factory=list)
    """Rows of the file that cannot be read: the repair copies every other row into a
    new store (:func:`~context_manager.salvage.salvage`) and repairs that."""


def _held_message(shown: str) -> str:
    return (
        f"{shown} is held by a running agent: another process (or a Store in this one) "
        "has its writer lock, an flock on the database file; stop the agent (close its "
        "ContextManager) and run this again"
    )


@contextlib.contextmanager
def _file_lock(real: str, shown: str, *, exclusive: bool) -> Iterator[None]:
    """The store's writer lock (shared: only to copy it; exclusive: to replace it).

    Taken without waiting, so a store a running agent holds is refused at once.
    """
    try:
        fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NotAStoreError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreLockedError(_held_message(shown)) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _real(path: str | os.PathLike[str]) -> tuple[str, str]:
    shown = os.fspath(path)
    real = os.path.realpath(shown)
    if not os.path.isfile(real):
        raise NotAStoreError(f"{shown} is not a file")
    return real, shown


def _copy(real: str, dest: Path) -> None:
    """Copy the store file and its write-ahead log (a stopped writer's, not yet folded in)."""
    shutil.copyfile(real, dest)
    if os.path.exists(real + "-wal"):
        shutil.copyfile(real + "-wal", f"{dest}-wal")


def _open_copy(copy: Path, shown: str, namespace: str, branch: str | None) -> tuple[Store, str]:
    """Open the copy as a store, after checking it is one with that namespace; returns
    it on ``branch`` (when given) and the branch that was current."""
    try:
        with contextlib.closing(sqlite3.connect(copy)) as probe:
            tables = store_tables(probe)
            slots, current = [], "main"
            if {"records", "branches", "meta"} <= tables:
                slots = [r[0] for r in probe.execute("SELECT DISTINCT slot FROM records")]
                row = probe.execute(
                    "SELECT value FROM meta WHERE key = 'current_branch'"
                ).fetchone()
                current = str(row[0]) if row else current
    except sqlite3.DatabaseError as exc:
        raise NotAStoreError(f"{shown} is not a SQLite database: {exc}") from exc
    check_store_tables(shown, tables, complete=True)
    namespaces = sorted(
        {slot.rsplit("/", 1)[0] for slot in slots if isinstance(slot, str) and "/" in slot}
    )
    if namespace not in namespaces and (namespaces or namespace != "default"):
        raise NotAStoreError(
            f"{shown} has no namespace {namespace!r}; "
            + (
                f"its namespaces: {', '.join(namespaces)}"
                if namespaces
                else "no strategy has written to it yet"
            )
        )
    try:
        return Store.open(copy, branch=branch), current
    except StoreError as exc:
        raise NotAStoreError(f"{shown}: {str(exc).replace(str(copy), 'the copy')}") from exc


def audit_store(
    path: str | os.PathLike[str], *, namespace: str = "default", branch: str | None = None
) -> StoreAudit:
    """Audit a store file on a copy; the file itself is only read.

    Parameters
    ----------
    path : str or os.PathLike
        The store file (a stopped agent's), or a PostgreSQL URL naming a stopped
        agent's store (``postgresql://HOST/DB?agent=NAME``), read in place.
    namespace : str
        The strategy namespace.
    branch : str, optional
        The branch to audit (by default the store's current one).

    Returns
    -------
    StoreAudit

    Raises
    ------
    StoreLockedError
        When a running agent holds the store (its writer lock).
    NotAStoreError
        When the path is not a readable store, or lacks the namespace or branch.
    """
    if os.fspath(path).startswith(("postgresql://", "postgres://")):
        # an agent's store in a database server: read in place under its writer lock
        # (refused while its agent runs), nothing written
        with Store.open(os.fspath(path)) as store:
            current = store.branch
            if branch is not None and branch != current:
                store.switch_branch(branch)
            try:
                records = read_stored(store, namespace)
                found = StoreAudit(store.path, namespace, store.branch, records, audit(records), [])
            finally:
                if store.branch != current:
                    store.switch_branch(current)  # the agent's current branch stays its own
            return found
    real, shown = _real(path)
    with audit_scratch(real) as tmp:
        copy = Path(tmp) / "store.db"
        with _file_lock(real, shown, exclusive=False):
            _copy(real, copy)
        copy, damaged = _readable_copy(copy)
        store, _ = _open_copy(copy, shown, namespace, branch)
        with store:
            records = read_stored(store, namespace)
            return StoreAudit(real, namespace, store.branch, records, audit(records), damaged)


def _readable_copy(copy: Path) -> tuple[Path, list[DamagedRow]]:
    """``copy``, or when rows of it cannot be read, a new store beside it of every row
    that can (:func:`~context_manager.salvage.salvage`), and the rows left out."""
    try:
        with contextlib.closing(
            sqlite3.connect(copy.resolve().as_uri() + "?mode=ro", uri=True)
        ) as c:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError:
        return copy, []  # not a database at all: opening it says so
    if not {"records", "branches", "meta"} <= tables:
        return copy, []
    damaged = damaged_rows(copy)
    if not damaged:
        return copy, []
    salvaged = copy.with_name("salvaged.db")
    return salvaged, salvage(copy, salvaged)


@contextlib.contextmanager
def audit_scratch(real: str) -> Iterator[Path]:
    """Where an audit copies the store: a scratch folder beside it (removed at the end,
    or by the store's next open if the audit is killed), else, in a folder this process
    may not write, a temporary folder of the system's."""
    with contextlib.ExitStack() as stack:
        try:
            work = stack.enter_context(
                scratch(os.path.dirname(real), os.path.basename(real), "audit")
            )
        except PermissionError:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxfold-audit-")))
        yield work


def _backup_name(real: str, n: int = 0) -> tuple[str, int]:
    """The first free backup name of ``real`` from the ``n``-th on, and its number."""
    while True:
        candidate = f"{real}.bak" if n == 0 else f"{real}.bak.{n}"
        if not os.path.lexists(candidate) and not os.path.lexists(f"{candidate}-wal"):
            return candidate, n
        n += 1


def _keep_backup(real: str, mode: int) -> str:
    """Copy the store file ``real`` to its backup name (a new file, never one written
    through a symlink, with the store's permissions ``mode``) and return that name."""
    n = 0
    while True:
        backup, n = _backup_name(real, n)
        try:
            copy_private(real, backup, mode)
        except FileExistsError:  # it appeared since: take the next
            n += 1
            continue
        return backup


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fold_log(db: Path) -> None:
    """Fold a closed store's write-ahead log into the file itself (one file to move)."""
    if os.path.exists(f"{db}-wal"):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for extra in (f"{db}-wal", f"{db}-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(extra)


def repair_store(
    path: str | os.PathLike[str],
    *,
    apply: bool = False,
    namespace: str = "default",
    branch: str | None = None,
) -> StoreRepair:
    """Plan a repair of a store file and, with ``apply``, carry it out.

    Without ``apply`` the file is only read (a copy is audited and planned). With
    it, the writer lock is held throughout: the plan is applied to a copy next to
    the file, the copy is audited again and checked by SQLite, and only when both
    are clean is the original kept as ``STORE.bak`` (``STORE.bak.1``, ... when taken)
    and the copy moved over ``STORE`` in one rename. The backup and the repaired file
    keep the store's permissions, and the backup is a new file (never one written
    through a symlink planted at its name). Otherwise the original is left
    as it was and :attr:`StoreRepair.after` says what the copy still had.

    Parameters
    ----------
    path : str or os.PathLike
        The store file (a stopped agent's).
    apply : bool
        Carry the plan out.
    namespace : str
    branch : str, optional
        The branch to repair (by default the store's current one, which stays current).

    Returns
    -------
    StoreRepair

    Raises
    ------
    StoreLockedError
        When a running agent holds the store (its writer lock).
    NotAStoreError
        When the path is not a readable store, or lacks the namespace or branch.
    """
    if not apply:  # the plan of an audit: read on a copy, nothing written
        audited = audit_store(path, namespace=namespace, branch=branch)
        n = len(audited.records.messages)
        return StoreRepair(
            audited.path,
            namespace,
            audited.branch,
            audited.findings,
            plan_repair(audited.findings, audited.records),
            messages_before=n,
            messages_after=n,
            damaged=audited.damaged,
        )
    real, shown = _real(path)
    folder = os.path.dirname(real)
    with (
        _file_lock(real, shown, exclusive=True),
        scratch(folder, os.path.basename(real), "repair") as tmp,
    ):
        # the scratch folder goes when this ends; a kill leaves it to the next open
        copy = tmp / "store.db"
        _copy(real, copy)
        copy, damaged = _readable_copy(copy)
        store, current = _open_copy(copy, shown, namespace, branch)
        with store:
            records = read_stored(store, namespace)
            findings = audit(records)
            actions = plan_repair(findings, records)
            result = StoreRepair(
                real,
                namespace,
                store.branch,
                findings,
                actions,
                messages_before=len(records.messages),
                damaged=damaged,
            )
            if not actions and not damaged:
                result.after = findings
                result.messages_after = result.messages_before
                return result
            apply_repair(store, records, actions)
            if store.branch != current:
                store.switch_branch(current)
        with Store.open(copy, branch=result.branch) as store:
            again = read_stored(store, namespace)
            result.after = audit(again)
            result.messages_after = len(again.messages)
            problems = store.integrity_check()
            store.switch_branch(current)
        if problems:
            raise StoreError(f"the repaired copy of {shown} fails SQLite's check: {problems}")
        if result.after or result.messages_after != result.messages_before:
            return result
        _fold_log(copy)
        mode = stat.S_IMODE(os.stat(real).st_mode)
        os.chmod(copy, mode)  # the repaired store keeps the store's permissions
        _fsync(str(copy))
        backup = _keep_backup(real, mode)
        if os.path.exists(real + "-wal"):
            # the log belongs to the original: it goes with the backup, so it is
            # never read against the repaired file
            os.replace(real + "-wal", backup + "-wal")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(real + "-shm")
        os.replace(copy, real)
        _fsync(folder)
        result.applied, result.backup = True, backup
        return result
