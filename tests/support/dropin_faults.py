"""Failure injection for the drop-in tests: a store whose k-th write fails as a full
disk does, and a count of the writes an operation makes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from context_manager import ContextManager, StoreFullError


class WriteFault:
    """Counts the store's record writes; the ``fail_at``-th one (1-based) raises
    :class:`StoreFullError` before anything is written, as a full disk does."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.writes = 0
        self.fired = False

    @contextmanager
    def on(self, manager: ContextManager) -> Iterator[WriteFault]:
        store: Any = manager.store
        original = store._write

        def write(*args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            if self.writes == self.fail_at:
                self.fired = True
                raise StoreFullError(f"injected: write {self.writes} found the disk full")
            return original(*args, **kwargs)

        store._write = write
        try:
            yield self
        finally:
            del store._write
