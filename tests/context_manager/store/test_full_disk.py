"""A full disk degrades, never stops: a compile returns the request it could build, the
``auto_tick`` worker waits for space and goes on, nothing acknowledged is lost."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    StoreFullError,
    StoreFullWarning,
)
from context_manager.summarizer import Completion, CompletionRequest
from tests.support.paths import ROOT

WAIT = 30.0


def _fill(cm: ContextManager, pages: int | None = None) -> None:
    """Cap the database at its size and fill what room its pages have left."""
    conn: sqlite3.Connection = cm.store._conn
    if pages is None:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {pages}")
    for size in (4_000, 400, 40, 1):
        try:
            while True:
                cm.store.append("ballast", "b" * size)
        except StoreFullError:
            pass


def _free(cm: ContextManager) -> None:
    cm.store._conn.execute("PRAGMA max_page_count = 1000000")


def _open(path: Path, **kw: Any) -> ContextManager:
    return ContextManager.open(
        path=path,
        summarizer=kw.pop("summarizer", ExtractiveSummarizer()),
        counter=CharsCounter(),
        window_tokens=4_000,
        **kw,
    )


def _talk(cm: ContextManager, start: int, n: int) -> list[str]:
    return [
        cm.add_message("User" if i % 2 else "Claude", f"turn {i} " + "word " * 60)
        for i in range(start, start + n)
    ]


def test_a_compile_on_a_full_store_returns_the_request_unstored(tmp_path: Path) -> None:
    with _open(tmp_path / "a.db") as cm:
        acknowledged = _talk(cm, 0, 40)
        cm.drain()
        cm.compile()
        acknowledged += _talk(cm, 40, 20)
        expected = cm.compile(dry_run=True)
        _fill(cm)
        with pytest.raises(StoreFullError):
            cm.add_message("User", "not stored")
        with pytest.warns(StoreFullWarning, match="bookkeeping could not be stored"):
            request = cm.compile()
        assert request.messages == expected.messages  # the request as it would be
        assert request.render_stats["bookkeeping"]["stored"] is False
        assert cm.get_render_stats()["bookkeeping"]["stored"] is False  # type: ignore[index]
        assert [m.id for m in cm.get_messages()] == acknowledged
        _free(cm)  # space returns: the next compile stores what it chose
        again = cm.compile()
        assert "bookkeeping" not in again.render_stats
        assert again.messages == expected.messages
    with _open(tmp_path / "a.db") as cm:  # nothing acknowledged was lost
        assert [m.id for m in cm.get_messages()] == acknowledged


class _Gated:
    """An extractive summariser that holds its first call until ``gate`` opens."""

    needs_tool_definitions = False
    model = "extractive"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.inner = ExtractiveSummarizer()

    def complete(self, request: CompletionRequest) -> Completion:
        self.entered.set()
        assert self.gate.wait(WAIT)
        return self.inner.complete(request)


def test_the_auto_tick_worker_waits_for_space_and_goes_on(tmp_path: Path) -> None:
    summarizer = _Gated()
    with _open(tmp_path / "a.db", summarizer=summarizer, auto_tick=True) as cm:
        _talk(cm, 0, 40)
        assert summarizer.entered.wait(WAIT)  # a memory is being written
        _fill(cm)
        summarizer.gate.set()  # its answer comes: storing it fails
        assert cm.wait_for_ticks(WAIT)  # idle, waiting for space, not stopped
        assert cm.pending_work()
        _free(cm)
        cm.compile()  # wakes the worker
        assert cm.wait_for_ticks(WAIT)
        assert cm.pending_work() == []
        assert cm.strategy.state.summaries  # type: ignore[attr-defined]


CHILD = textwrap.dedent(
    """
    import os, sys, warnings
    sys.path.insert(0, {root!r})
    from context_manager import (
        CharsCounter, ContextManager, ExtractiveSummarizer, StoreFullError, StoreFullWarning,
    )
    mount = sys.argv[1]
    with ContextManager.open(
        path=os.path.join(mount, "agent.db"), summarizer=ExtractiveSummarizer(),
        counter=CharsCounter(), window_tokens=4000,
    ) as cm:
        acked = [cm.add_message("User", f"turn {{i}} " + "word " * 60) for i in range(40)]
        cm.drain()
        cm.compile()
        acked += [cm.add_message("Claude", f"late {{i}} " + "word " * 60) for i in range(20)]
        expected = cm.compile(dry_run=True).messages
        ballast = os.open(os.path.join(mount, "ballast"), os.O_WRONLY | os.O_CREAT)
        for size in (65536, 4096, 512, 1):  # fill the filesystem
            try:
                while True:
                    os.write(ballast, b"x" * size)
            except OSError:
                pass
        try:
            cm.add_message("User", "not stored")
            print("ADD-STORED")
        except StoreFullError:
            print("ADD-REFUSED")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            request = cm.compile()
        unstored = request.render_stats.get("bookkeeping", {{}}).get("stored") is False
        print("UNSTORED" if unstored else "STORED",
              any(issubclass(w.category, StoreFullWarning) for w in caught),
              request.messages == expected)
        os.close(ballast)
        os.remove(os.path.join(mount, "ballast"))
        again = cm.compile()
        print("AFTER", "bookkeeping" in again.render_stats, again.messages == expected)
    with ContextManager.open(path=os.path.join(mount, "agent.db"), counter=CharsCounter()) as cm:
        print("KEPT", [m.id for m in cm.get_messages()] == acked)
    """
)


def _mount_command(mount: Path, script: Path) -> list[str] | None:
    """A command running ``script`` with a 16 MiB tmpfs mounted at ``mount``: as root
    directly, else in a user namespace; None when neither is allowed here."""
    run = f"mount -t tmpfs -o size=16m tmpfs {mount} && {sys.executable} {script} {mount}"
    for prefix in (["unshare", "--mount"], ["unshare", "--user", "--map-root-user", "--mount"]):
        if shutil.which(prefix[0]) is None:
            continue
        probe = subprocess.run(
            [*prefix, "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {mount}"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return [*prefix, "sh", "-c", run]
    return None


def test_a_full_filesystem_degrades_the_compile_and_loses_nothing(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    command = _mount_command(mount, script)
    if command is None:
        pytest.skip("no tmpfs can be mounted here (neither as root nor in a user namespace)")
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert "ADD-REFUSED" in lines
    assert "UNSTORED True True" in lines
    assert "AFTER False True" in lines
    assert "KEPT True" in lines
