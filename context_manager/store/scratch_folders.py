"""Scratch folders beside a store file: where a derive, repair or audit writes before
its result is whole. Each is owned through a lock on a file inside it, so a folder a
killed process left is told from one in use (:func:`sweep_scratch`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRATCH_KINDS = ("deriving", "repair", "audit")
"""The work that writes a scratch folder beside a store file (:func:`scratch`)."""
_OWNER = ".owner"
_UNOWNED_GRACE = 60.0
"""Seconds a scratch folder without its owner file is left alone (it may be one being
created right now)."""


@contextmanager
def scratch(folder: str | os.PathLike[str], stem: str, kind: str) -> Iterator[Path]:
    """A scratch folder ``.<stem>.<kind>-XXXX`` in ``folder``, removed when the block ends.

    Its owner holds a lock on a file inside it for as long as the block runs, so
    :func:`sweep_scratch` can tell a folder in use from one a killed process left.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with scratch(folder, "agent.db", "repair") as work:
    ...     work.name.startswith(".agent.db.repair-")
    True
    >>> os.listdir(folder)
    []
    """
    if kind not in SCRATCH_KINDS:
        raise ValueError(f"kind must be one of {SCRATCH_KINDS}, got {kind!r}")
    path = tempfile.mkdtemp(prefix=f".{stem}.{kind}-", dir=folder)
    fd = -1
    try:
        fd = os.open(os.path.join(path, _OWNER), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if fd >= 0:
            os.close(fd)


def _abandoned(path: str, *, unowned: bool = False) -> bool:
    """Whether the scratch folder ``path`` has no live owner: its lock is free, or it has
    no owner file (``unowned``: at once; else after longer than a creation takes)."""
    try:
        fd = os.open(os.path.join(path, _OWNER), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return unowned or time.time() - os.stat(path).st_mtime > _UNOWNED_GRACE
        except FileNotFoundError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its owner is alive
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def sweep_scratch(folder: str | os.PathLike[str], stem: str, *, unowned: bool = False) -> list[str]:
    """Remove the scratch folders of ``stem`` in ``folder`` that no live process owns
    (what a derive, repair or audit killed mid-way left); returns their paths.
    ``unowned``: a folder killed before it had its owner file goes too (only where no
    process may be creating one now).

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> left = tempfile.mkdtemp(prefix=".agent.db.deriving-", dir=folder)
    >>> _ = open(os.path.join(left, ".owner"), "w").close()
    >>> [os.path.basename(p) == os.path.basename(left) for p in sweep_scratch(folder, "agent.db")]
    [True]
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    prefixes = tuple(f".{stem}.{kind}-" for kind in SCRATCH_KINDS)
    for entry in entries:
        if not entry.name.startswith(prefixes) or not entry.is_dir(follow_symlinks=False):
            continue
        if _abandoned(entry.path, unowned=unowned):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed
