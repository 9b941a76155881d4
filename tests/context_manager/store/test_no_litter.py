"""A derive, repair or audit killed at any point leaves nothing behind once the store is
opened again: their scratch folders are beside the store (or the derive's target) and
the next open of the store removes those no live process owns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from context_manager import CharsCounter, ContextManager
from context_manager.store import Store, scratch, sweep_scratch
from tests.support.paths import ROOT


def _store(path: Path, n: int = 30) -> None:
    with ContextManager.open(path=path, counter=CharsCounter()) as cm:
        for i in range(n):
            cm.add_message("User", f"message {i} " + "word " * 20)


def _litter(*folders: Path) -> list[str]:
    return sorted(
        f"{folder.name}/{p.name}"
        for folder in folders
        for p in folder.iterdir()
        if p.name.startswith(".")
    )


KILLED = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from context_manager import store as S, topology as T
    source, target, point = sys.argv[1], sys.argv[2], sys.argv[3]
    def die(*_args, **_kw):
        os._exit(137)  # no cleanup runs, as under SIGKILL
    if point == "derive-copy":
        opened = S.Store.open.__func__
        def open_then_die(cls, path, **kw):
            store = opened(cls, path, **kw)
            if os.path.basename(path) == "child.db":
                store.append("messages", {{"half": "written"}})
                die()
            return store
        S.Store.open = classmethod(open_then_die)
    elif point == "derive-link":
        S.opening.os.link = die
    elif point == "repair":
        T.store_files._open_copy = die
    elif point == "audit":
        T.store_files.read_stored = die
    if point.startswith("derive"):
        with S.Store.open(source) as store:
            store.derive(target, store.sequence)
    elif point == "repair":
        T.repair_store(source, apply=True)
    else:
        T.audit_store(source)
    """
)


@pytest.mark.parametrize("point", ["derive-copy", "derive-link", "repair", "audit"])
def test_a_killed_operation_leaves_nothing_after_the_next_open(tmp_path: Path, point: str) -> None:
    source = tmp_path / "agent.db"
    _store(source)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "kill.py"
    script.write_text(KILLED.format(root=str(ROOT)))
    before = _litter(tmp_path, elsewhere)
    done = subprocess.run(
        [sys.executable, str(script), str(source), str(elsewhere / "child.db"), point],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 137, done.stderr
    assert _litter(tmp_path, elsewhere) != before  # the kill left its scratch folder
    with Store.open(source) as store:
        assert len(store.items("messages")) == 30
    assert _litter(tmp_path, elsewhere) == before
    assert not (elsewhere / "child.db").exists()


LOOP = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from context_manager.store import Store
    source, folder = sys.argv[1], sys.argv[2]
    with Store.open(source) as store:
        for i in range(10_000):
            store.derive(f"{{folder}}/d{{i}}.db", store.sequence)
            print(i, flush=True)
    """
)


def test_sigkill_at_any_point_of_repeated_derives_leaves_nothing(tmp_path: Path) -> None:
    """Real SIGKILLs: the child derives over and over, and is killed after a different
    number of derives each trial (read from its output, so the kill lands wherever the
    next derive is at that moment)."""
    source = tmp_path / "agent.db"
    _store(source, 200)
    out = tmp_path / "derived"
    out.mkdir()
    script = tmp_path / "loop.py"
    script.write_text(LOOP.format(root=str(ROOT)))
    for trial in range(8):
        (out / str(trial)).mkdir()
        with subprocess.Popen(
            [sys.executable, str(script), str(source), str(out / str(trial))],
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdout is not None
            for _ in range(trial % 3 + 1):
                child.stdout.readline()
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
        with Store.open(source):
            pass
        leftovers = [p.name for p in (out / str(trial)).iterdir() if p.name.startswith(".")]
        assert leftovers == []
        for derived in (out / str(trial)).glob("d*.db"):
            with Store.open(derived) as store:  # every derived store that appeared is whole
                assert len(store.items("messages")) == 200


def test_a_scratch_folder_in_use_is_never_swept(tmp_path: Path) -> None:
    with scratch(tmp_path, "agent.db", "audit") as work:
        (work / "copy.db").write_text("x")
        assert sweep_scratch(tmp_path, "agent.db") == []
        assert work.is_dir()
    assert not work.exists()
    # another store's scratch is not this one's to sweep
    other = tmp_path / ".other.db.repair-abc"
    other.mkdir()
    (other / ".owner").write_text("")
    assert sweep_scratch(tmp_path, "agent.db") == []
    assert sweep_scratch(tmp_path, "other.db") == [str(other)]
    assert os.listdir(tmp_path) == []
