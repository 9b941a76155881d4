"""The commands on stores: ``inspect`` (describe one, or a snapshot of one a running
agent holds), ``audit`` and ``repair`` (of the memory tree, through
:mod:`context_manager.topology`), and ``migrate`` (a whole store copied between
engines).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.tree import Tree

from ..strategies.autobiographical import SummaryEntry, read_records
from .base import RUNTIME_ERROR, Command, app, console, fail
from .previews import first_line, message_preview


@contextlib.contextmanager
def _snapshot(store: Path) -> Iterator[Path]:
    """A consistent copy of the store file ``store``, read through SQLite as a reader
    (so a writer's log is included and the writer is never waited for), in a scratch
    folder removed afterwards."""
    import sqlite3

    from ..topology.store_files import audit_scratch

    with audit_scratch(os.path.realpath(store)) as folder:
        copy = folder / "snapshot.db"
        source = sqlite3.connect(store.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            with contextlib.closing(sqlite3.connect(copy)) as target:
                source.backup(target)
        finally:
            source.close()
        yield copy


@app.command(cls=Command)
def inspect(
    store: Annotated[Path, typer.Argument(help="A context manager store (SQLite file).")],
    namespace: Annotated[
        str, typer.Option(help="The strategy namespace (the part of a slot before '/').")
    ] = "default",
    last: Annotated[int, typer.Option(min=1, help="How many of the newest messages to list.")] = 10,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="Look at a store a running agent holds: read a snapshot of it, taken "
            "beside it as a reader while the agent writes, instead of opening it.",
        ),
    ] = False,
) -> None:
    """Describe a store: messages, branches, the memory tree, resolutions and pins.

    A store a running agent holds is refused (opening it would take its writer lock);
    --read-only describes a snapshot of it instead.
    """
    import sqlite3

    from ..store import NotAStoreError, Store, StoreError, check_store_tables, store_tables

    _file_only(store, "inspect")
    if not store.is_file():
        fail(f"{store} is not a file")
    # look before opening: opening a store writes to it. The read-only probe needs a URI;
    # as_uri() percent-encodes the path, so '#', '?' and '%' in a name stay part of it
    probe_uri = store.resolve().as_uri() + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(probe_uri, uri=True)) as probe:
            tables = store_tables(probe)
            slots = (
                [r[0] for r in probe.execute("SELECT DISTINCT slot FROM records")]
                if "records" in tables
                else []
            )
    except sqlite3.DatabaseError as exc:
        fail(f"{store} is not a SQLite database: {exc}")
    try:
        check_store_tables(str(store), tables, complete=True)
    except NotAStoreError as exc:
        fail(str(exc))
    namespaces = sorted(
        {slot.rsplit("/", 1)[0] for slot in slots if isinstance(slot, str) and "/" in slot}
    )
    if namespace not in namespaces and (namespaces or namespace != "default"):
        fail(
            f"{store} has no namespace {namespace!r}; "
            + (
                f"its namespaces: {', '.join(namespaces)}"
                if namespaces
                else "no strategy has written to it yet"
            )
        )
    stack = contextlib.ExitStack()
    try:
        db = Store.open(stack.enter_context(_snapshot(store)) if read_only else store)
    except (StoreError, OSError, sqlite3.Error) as exc:
        stack.close()
        fail(f"cannot open {store}: {exc}")
    with stack, db:
        messages = db.items("messages")
        console.print(
            f"[bold]{store}[/bold]: branch {db.branch!r} of "
            f"{', '.join(b.name for b in db.list_branches())}; {len(messages):,} messages"
        )
        frame = db.get(f"{namespace}/frame")
        frame = frame if isinstance(frame, dict) else {}
        system, tools = frame.get("system"), frame.get("tools")
        console.print(
            "  system prompt: "
            + (f"{len(system):,} characters: {first_line(system)}" if system else "none"),
            markup=False,
            highlight=False,
        )
        names = [t.get("name", "?") for t in tools or () if isinstance(t, dict)]
        console.print(
            f"  tools: {len(names)}" + (f" ({', '.join(map(str, names))})" if names else ""),
            markup=False,
            highlight=False,
        )
        for item in messages[-last:]:
            body = item.body
            text = message_preview(body.get("content", []))
            console.print(
                f"  {item.id:>6} {body.get('participant', '?'):<12} {text}",
                markup=False,
                highlight=False,
            )
        records = read_records(db, lambda name: f"{namespace}/{name}")
        summaries = list(records.summaries.values())
        chunks = records.chunks
        levels: dict[int, int] = {}
        for s in summaries:
            levels[s.level] = levels.get(s.level, 0) + 1
        console.print(
            f"memories: {len(summaries)} "
            f"({', '.join(f'L{k}: {v}' for k, v in sorted(levels.items())) or 'none'}); "
            f"chunks: {len(chunks)} ({sum(1 for c in chunks if c.compressed)} compressed)"
        )
        tree = Tree("memory tree (parentless memories, newest last)")

        def add(branch: Tree, s: SummaryEntry, depth: int) -> None:
            label = f"[cyan]{s.id}[/cyan] L{s.level}: {escape(repr(s.content[:70]))}"
            if s.values:  # the exact values it keeps, the first few
                more = f" (+{len(s.values) - 4})" if len(s.values) > 4 else ""
                label += f" [dim]values: {escape('; '.join(s.values[:4]))}{more}[/dim]"
            if s.model is not None:  # who wrote it (memories stored before say nothing)
                label += f" [dim]by {escape(s.model)}[/dim]"
            if s.witnessed:
                label += " [dim](witnessed)[/dim]"
            node = branch.add(label)
            if s.level > 1 and depth < 2:
                for child in s.source_ids:
                    if child in records.summaries:
                        add(node, records.summaries[child], depth + 1)

        roots = [s for s in summaries if not s.parent_id]
        for s in roots[-12:]:
            add(tree, s, 0)
        console.print(tree)
        shown: dict[int, int] = {}
        for _, _, level in records.runs:
            shown[level] = shown.get(level, 0) + 1
        console.print(
            "last compiled frontier: "
            + (", ".join(f"{v} runs at L{k}" for k, v in sorted(shown.items())) or "all raw")
        )
        console.print(_receipts_line(db, namespace), markup=False, highlight=False)
        for pin in records.pins:
            console.print(
                f"pin {pin.id} {pin.name or ''}: {pin.first}..{pin.last} "
                f"level={pin.level} max_level={pin.max_level}"
            )
        console.print(_window_line(db, namespace, [item.id for item in messages]))


def _receipts_line(db: Any, namespace: str) -> str:
    """What the provider accepted on the branch (``ContextManager.accept_round``)."""
    from ..receipts import RECEIPTS_SLOT, last_receipt

    count = len(db.items(f"{namespace}/{RECEIPTS_SLOT}"))
    last = last_receipt(db, lambda name: f"{namespace}/{name}")
    if last is None:
        return "fold receipts: none (no accepted round)"
    levels: dict[int, int] = {}
    for fold in last.folds:
        if fold.level is not None:
            levels[fold.level] = levels.get(fold.level, 0) + 1
    shown = ", ".join(f"{v} at L{k}" for k, v in sorted(levels.items())) or "no memories"
    return f"fold receipts: {count:,}; the last accepted (compile {last.compile_id}) showed {shown}"


def _window_line(db: Any, namespace: str, record: Sequence[str]) -> str:
    """What the namespace's agent window holds, against the shared record."""
    from ..window import WindowIndex, WindowRecord

    items = db.items(f"{namespace}/window")
    if not items:
        return "window: the record (no host has presented rows)"
    index = WindowIndex.replay(WindowRecord.from_body(i.body, i.seq) for i in items)
    stored = set(record)
    held = [r for r in index.held() if r in stored]
    undone = sum(1 for r in record if index.was_undone(r))
    never = sum(1 for r in record if not index.holds(r) and not index.was_undone(r))
    return (
        f"window: {len(held):,} rows presented ({len(items):,} records), {undone:,} "
        f"taken out, {never:,} stored but not presented"
    )


AUDIT_STATUS = (
    "Exit status: 0 every memory is sound and every row readable; 1 findings or damaged "
    "rows (run `ctxfold repair STORE` for the plan); 2 a usage error: the path is not a "
    "readable store, has no such namespace or branch, or a running agent holds it (its lock)."
)
REPAIR_STATUS = (
    "Exit status: 0 nothing to repair, or repaired with --apply; 1 a repair is planned "
    "but not applied (no --apply), or the repaired copy did not audit clean and the "
    "store was left as it was; 2 a usage error: the path is not a readable store, has "
    "no such namespace or branch, or a running agent holds it (its lock)."
)

_NamespaceOption = Annotated[
    str, typer.Option(help="The strategy namespace (the part of a slot before '/').")
]
_BranchOption = Annotated[
    str | None,
    typer.Option(help="The branch to look at.", show_default="the store's current branch"),
]


def _file_only(store: Path, command: str) -> None:
    """Refuse a PostgreSQL URL (the argument is a path) for a command on store files."""
    if str(store).startswith(("postgresql:", "postgres:")):
        then = ", then migrate the repaired copy to a new agent" if command == "repair" else ""
        fail(
            f"ctxfold {command} works on a store file; for an agent's store in PostgreSQL, "
            f"copy it out with `ctxfold migrate URL copy.db` and {command} the copy{then}"
        )


def _store_failure(exc: Exception) -> NoReturn:
    """A store that cannot be audited now: a usage error naming why and the fix."""
    from ..store import StoreLockedError

    if isinstance(exc, StoreLockedError):
        fail(f"{exc}; the store was not read or changed")
    if isinstance(exc, OSError):
        fail(f"cannot read the store: {exc.strerror or exc}")
    fail(str(exc))


def _print_findings(findings: Sequence[Any]) -> None:
    for finding in findings:
        console.print(f"  {finding.describe()}", markup=False, highlight=False)


@app.command(cls=Command, epilog=AUDIT_STATUS)
def audit(
    store: Annotated[
        str,
        typer.Argument(
            help="A context manager store: a SQLite file, or postgresql://HOST/DB?agent=NAME."
        ),
    ],
    namespace: _NamespaceOption = "default",
    branch: _BranchOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Check that each memory covers a contiguous run of messages, and the tree's rest.

    The rest: contents, unique ids, parent pointers and chunk records. Rows of the file
    that cannot be read (damaged bytes) are listed first, and the tree is checked over
    the rows that can. Reads a copy of
    the store; the file is never written. Refuses a store a running agent holds (its
    lock): stop the agent first.
    """
    from ..store import StoreError
    from ..topology import audit_store

    try:
        result = audit_store(store, namespace=namespace, branch=branch)
    except (StoreError, OSError) as exc:
        _store_failure(exc)
    counts = result.counts()
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "store": result.path,
                    "namespace": result.namespace,
                    "branch": result.branch,
                    **counts,
                    "clean": not result.findings and not result.damaged,
                    "findings": [f.to_dict() for f in result.findings],
                    "damaged": [d.to_dict() for d in result.damaged],
                },
                indent=2,
            )
        )
    else:
        levels = ", ".join(f"{k}: {v}" for k, v in counts["levels"].items()) or "none"
        console.print(
            f"{store}: branch {result.branch!r}, {counts['messages']:,} messages, "
            f"{counts['summaries']:,} memory records ({levels}), {counts['chunks']:,} chunk "
            "records",
            markup=False,
            highlight=False,
        )
        if result.damaged:
            n = len(result.damaged)
            console.print(
                f"{n} damaged row{'s' if n != 1 else ''} (left out of what follows; "
                f"`ctxfold repair {store} --apply` copies every other row into a new store):",
                markup=False,
                highlight=False,
            )
            _print_findings(result.damaged)
        if not result.findings:
            console.print("clean: every memory covers a contiguous run of messages")
        else:
            n = len(result.findings)
            console.print(f"{n} finding{'s' if n != 1 else ''}:")
            _print_findings(result.findings)
            console.print(
                f"`ctxfold repair {store}` shows the plan; --apply carries it out",
                markup=False,
                highlight=False,
            )
    if result.findings or result.damaged:
        raise typer.Exit(RUNTIME_ERROR)


def _print_repair(store: Path, result: Any, apply: bool) -> None:
    """The findings of a repair, its plan and what became of it."""
    salvaged = bool(result.damaged)
    head = f"{store}: branch {result.branch!r}: "
    if salvaged:
        n = len(result.damaged)
        console.print(f"{head}{n} damaged row{'s' if n != 1 else ''}", markup=False)
        _print_findings(result.damaged)
        if result.findings:
            console.print("and in the rows that can be read:")
    else:
        n = len(result.findings)
        console.print(f"{head}{n} finding{'s' if n != 1 else ''}", markup=False)
    _print_findings(result.findings)
    if result.findings:
        k = len(result.actions)
        removed = "" if salvaged else "; no message is removed"
        console.print(f"plan ({k} action{'s' if k != 1 else ''}{removed}):")
        for action in result.actions:
            console.print(f"  {action.describe()}", markup=False, highlight=False)
    what = (
        "every row that can be read was copied into a new store"
        if salvaged
        else ("the plan was applied to a copy")
    )
    if result.applied:
        console.print(
            f"repaired: {what} ({result.messages_after:,} messages), which audits clean; it "
            f"replaced {result.path}, and the original is kept as {result.backup}",
            markup=False,
            highlight=False,
        )
    elif apply:
        copy = "salvaged" if salvaged else "repaired"
        console.print(f"the {copy} copy still has findings; the store was not changed:")
        _print_findings(result.after)
    else:
        step = (
            "copy every row that can be read into a new store that replaces this one"
            if (salvaged)
            else "repair (on a copy that replaces the store once it audits clean)"
        )
        console.print(
            f"dry run: nothing was changed; run with --apply to {step}; the original is "
            "kept as .bak"
        )


@app.command(cls=Command, epilog=REPAIR_STATUS)
def repair(
    store: Annotated[Path, typer.Argument(help="A context manager store (SQLite file).")],
    apply: Annotated[
        bool, typer.Option("--apply", help="Carry the plan out (without it, only print it).")
    ] = False,
    namespace: _NamespaceOption = "default",
    branch: _BranchOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Plan a repair of what `ctxfold audit` finds, and with --apply carry it out.

    A broken memory is dropped with the memories above it, and its chunk record
    reopened, so the strategy summarises those messages again; pointers and ranges are
    fixed. No message is removed, except a damaged one: when rows of the file cannot
    be read, every row that can is copied into a new store first, and that is repaired.
    With --apply the plan is applied to a copy, which
    must audit clean before it replaces the store; the original is kept as STORE.bak.
    Refuses a store a running agent holds (its lock): stop the agent first.
    """
    from ..store import StoreError
    from ..topology import repair_store

    _file_only(store, "repair")
    try:
        result = repair_store(store, apply=apply, namespace=namespace, branch=branch)
    except (StoreError, OSError) as exc:
        _store_failure(exc)
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "store": result.path,
                    "namespace": result.namespace,
                    "branch": result.branch,
                    "findings": [f.to_dict() for f in result.findings],
                    "actions": [a.to_dict() for a in result.actions],
                    "applied": result.applied,
                    "backup": result.backup,
                    "after": [f.to_dict() for f in result.after],
                    "messages_before": result.messages_before,
                    "messages_after": result.messages_after,
                    "damaged": [d.to_dict() for d in result.damaged],
                },
                indent=2,
            )
        )
    elif not result.findings and not result.damaged:
        console.print(
            f"{store}: branch {result.branch!r}: nothing to repair", markup=False, highlight=False
        )
    else:
        _print_repair(store, result, apply)
    if (result.findings or result.damaged) and not result.applied:
        raise typer.Exit(RUNTIME_ERROR)


MIGRATE_CHECK_TOKENS = 1_000_000
"""The budget of the request ``ctxfold migrate`` compiles on both stores to check a copy."""


@app.command(cls=Command)
def migrate(
    source: Annotated[
        str,
        typer.Argument(
            help="The store to copy: a SQLite file, or postgresql://HOST/DB?agent=NAME."
        ),
    ],
    target: Annotated[
        str,
        typer.Argument(
            help="A new store: a SQLite file that does not exist, or a PostgreSQL URL naming "
            "an agent that has no store."
        ),
    ],
) -> None:
    """Copy a whole store into a new one, between SQLite and PostgreSQL either way.

    Every branch with its records at their ids and sequences, the current branch, the
    media, the memories, windows and saved token counts: the copy compiles the same
    requests. It appears whole or not at all. Checked before it reports success: every
    table's rows hash equal on both, and the request of every namespace's messages,
    compiled on both, is the same bytes. Refuses a store a running agent holds (its
    writer lock): stop the agent first.
    """
    from ..store import Store, StoreError

    try:
        with Store.open(source) as original:
            original.copy_to(target)
            with Store.open(target) as copy:
                before, after = original.content_digest(), copy.content_digest()
                differ = sorted(t for t in before if before[t] != after[t])
                if differ:
                    raise StoreError(f"the copy differs from the store in {', '.join(differ)}")
                same = _same_request(original, copy)
            shown = (original.path, copy.path)
    except (StoreError, OSError) as exc:
        _store_failure(exc)
    console.print(
        f"{shown[0]} -> {shown[1]}: copied; every table's rows hash equal and the request "
        f"compiles to the same {same:,} bytes on both",
        markup=False,
        highlight=False,
    )


def _same_request(original: Any, copy: Any) -> int:
    """Compile the messages of both stores (the raw record, no strategy state needed)
    and return the request's size in bytes; raise when they differ."""
    from ..manager import ContextManager
    from ..store import StoreError
    from ..tokens import CharsCounter

    sent = []
    for store in (original, copy):
        manager = ContextManager.open(store=store, counter=CharsCounter())
        try:
            result = manager.compile(max_tokens=MIGRATE_CHECK_TOKENS, reserve_for_response=0)
            sent.append(json.dumps(result.to_anthropic(), sort_keys=True).encode())
        finally:
            manager.close()
    if sent[0] != sent[1]:
        raise StoreError("the copy compiles another request than the store")
    return len(sent[0])
