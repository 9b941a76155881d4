"""Hot configuration: :class:`LiveSettings` holds the settings in force and swaps in a
new file's as one object, so a request reads either the old settings or the new ones,
never a mix.

A change is picked up by polling the file (every ``reload_poll_seconds``), by
``SIGHUP`` (:meth:`LiveSettings.install_sighup`), or by calling
:meth:`LiveSettings.reload`. A file that cannot be read or is refused keeps the old
settings in force; the error is logged and kept in :attr:`LiveSettings.last_error`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from .settings import ServiceSettings, SettingsError, load_settings

__all__ = ["LiveSettings"]

log = logging.getLogger("context_manager.service")


class LiveSettings:
    """The settings in force, reloaded from ``path`` when it changes.

    Parameters
    ----------
    path : str or Path, optional
        The configuration file (none: ``initial`` or the defaults, never reloaded
        but by :meth:`replace`).
    environ : mapping, optional
        The environment the ``CTXFOLD_...`` overrides are read from, at every load.
    initial : ServiceSettings, optional
        Settings to start from in place of loading ``path``.

    Examples
    --------
    >>> live = LiveSettings(initial=ServiceSettings(port=9000))
    >>> live.current.port
    9000
    >>> live.replace(ServiceSettings(port=9001)); live.current.port, live.generation
    (9001, 1)
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        initial: ServiceSettings | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._environ = dict(environ or {})
        self._lock = threading.Lock()
        self._listeners: list[Callable[[ServiceSettings, ServiceSettings], None]] = []
        self._digest = self._file_digest()
        if initial is None:
            initial = load_settings(self.path, environ=self._environ)
        self._current = initial
        self.generation = 0
        """How many times new settings were put in force."""
        self.last_error: str | None = None
        """Why the last reload was refused (None after a good one)."""
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def current(self) -> ServiceSettings:
        """The settings in force (one immutable object: read it once per request)."""
        return self._current

    def on_change(self, listener: Callable[[ServiceSettings, ServiceSettings], None]) -> None:
        """Call ``listener(old, new)`` after each change (the lease store swap, ...)."""
        self._listeners.append(listener)

    def replace(self, new: ServiceSettings) -> None:
        """Put ``new`` in force."""
        with self._lock:
            old, self._current = self._current, new
            self.generation += 1
            self.last_error = None
        for listener in self._listeners:
            try:
                listener(old, new)
            except Exception:  # a listener's failure must not undo the change
                log.exception("a configuration listener failed")

    def _file_digest(self) -> str | None:
        if self.path is None:
            return None
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def reload(self) -> bool:
        """Load the file again; put it in force when it is valid and changed.

        Returns True when new settings are in force. A file that cannot be read or is
        refused leaves the old settings in force (logged, :attr:`last_error`).
        """
        if self.path is None:
            return False
        digest = self._file_digest()
        if digest == self._digest:
            return False
        try:
            new = load_settings(self.path, environ=self._environ)
        except SettingsError as exc:
            self._digest = digest  # said once per content, not at every poll
            self.last_error = str(exc)
            log.error("configuration reload refused, the old one stays in force: %s", exc)
            return False
        self._digest = digest
        self.replace(new)
        log.info("configuration reloaded from %s (generation %d)", self.path, self.generation)
        return True

    def start_watching(self) -> None:
        """Poll the file in a daemon thread until :meth:`stop_watching`."""
        if self.path is None or self._watcher is not None:
            return

        def watch() -> None:
            while not self._stop.wait(self._current.reload_poll_seconds):
                try:
                    self.reload()
                except Exception:  # never let the watcher die
                    log.exception("configuration reload failed")

        self._stop.clear()
        self._watcher = threading.Thread(target=watch, name="ctxfold-config", daemon=True)
        self._watcher.start()

    def stop_watching(self) -> None:
        """Stop the polling thread (waits for it)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None

    def install_sighup(self) -> None:
        """Reload on ``SIGHUP`` (main thread only, where the platform has it)."""
        main = threading.current_thread() is threading.main_thread()
        if not hasattr(signal, "SIGHUP") or not main:
            return
        signal.signal(signal.SIGHUP, lambda *_: self.reload())

    def __repr__(self) -> str:
        where = os.fspath(self.path) if self.path is not None else "no file"
        return f"LiveSettings({where}, generation={self.generation})"
