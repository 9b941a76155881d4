"""A throwaway PostgreSQL server for the tests, the fleet benchmark and the soak.

:func:`start` runs Debian's ``initdb`` in a new temporary folder and starts the server
on a Unix socket in that folder only (``listen_addresses=''``: nothing listens on a
network port), with ``fsync=off`` (a test server: its data dies with it) and trust
authentication for the one superuser ``postgres``. ``initdb`` refuses to run as root,
so under root the server runs as the ``postgres`` user the Debian package creates.
:func:`stop` stops it and removes the folder.

Which server the suite uses:

* ``CTXFOLD_TEST_POSTGRES=off`` leaves the PostgreSQL backend out of the run (its
  tests are skipped, saying so);
* ``CTXFOLD_TEST_POSTGRES=postgresql://...`` uses that server (a database the tests
  may create schemas in);
* otherwise a server is started for the session; when no PostgreSQL binaries are
  found, the tests that need one fail with the reason and the two ways out.

Run as a script, it starts a server, prints its URL and waits until interrupted::

    python -m tests.support.postgres_server
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ENV = "CTXFOLD_TEST_POSTGRES"
"""The variable that chooses the suite's server: ``off``, a URL, or unset (start one)."""


class NoServerError(RuntimeError):
    """No PostgreSQL server could be started; the message says why and what to do."""


@dataclass(frozen=True)
class Server:
    """A running server: its URL, its folder, and the binaries that stop it."""

    url: str
    folder: Path
    bindir: Path | None  # None: a server given by URL, not ours to stop
    user: str | None  # the user it runs as, when not this process's


def _bindir() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``: Debian's newest, else the PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    raise NoServerError(
        "the PostgreSQL backend's tests need a PostgreSQL server, and no initdb was found "
        "(install Debian's postgresql package: `apt-get install -y postgresql`, as "
        "`make test` does); or give one with CTXFOLD_TEST_POSTGRES=postgresql://..., or "
        "leave the backend out with CTXFOLD_TEST_POSTGRES=off"
    )


def _version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _run(args: list[str], user: str | None, **kwargs: object) -> None:
    command = ["runuser", "-u", user, "--", *args] if user else args
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode:
        raise NoServerError(
            f"{Path(args[0]).name} failed (status {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )


def start() -> Server:
    """Start a throwaway server; see the module's docstring.

    Raises
    ------
    NoServerError
        When no binaries are found or the server does not start, saying why.
    """
    given = os.environ.get(ENV, "")
    if given.startswith(("postgresql://", "postgres://")):
        return Server(given, Path(tempfile.gettempdir()), None, None)
    bindir = _bindir()
    user = None
    if os.geteuid() == 0:  # initdb refuses root: the server runs as postgres
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise NoServerError(
                "running as root, and there is no postgres user to run the server as "
                "(Debian's postgresql package creates it)"
            ) from None
        user = "postgres"
    folder = Path(tempfile.mkdtemp(prefix="ctxfold-pg-"))
    data = folder / "data"
    if user:
        shutil.chown(folder, user)
    try:
        initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
        _run([*initdb, "-E", "UTF8"], user)
        options = f"-c listen_addresses='' -k {folder} -c fsync=off -c max_connections=200"
        pg_ctl = [str(bindir / "pg_ctl"), "-D", str(data), "-o", options]
        _run([*pg_ctl, "-l", str(folder / "log"), "-w", "-t", "60", "start"], user)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Server(f"postgresql://postgres@/postgres?host={folder}", folder, bindir, user)


def with_agent(url: str, agent: str) -> str:
    """``url`` naming the store of ``agent`` (its ``agent`` parameter)."""
    return f"{url}{'&' if '?' in url else '?'}agent={agent}"


def fresh_database(url: str) -> str:
    """A new, empty database on the server of ``url``; returns its URL."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(f"CREATE DATABASE {name}".encode())
    head, _, query = url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def stop(server: Server) -> None:
    """Stop a server :func:`start` started and remove its folder (a given one is left)."""
    if server.bindir is None:
        return
    try:
        pg_ctl = [str(server.bindir / "pg_ctl"), "-D", str(server.folder / "data")]
        _run([*pg_ctl, "-m", "immediate", "-w", "stop"], server.user)
    finally:
        shutil.rmtree(server.folder, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover - a developer's convenience
    import time

    running = start()
    print(running.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop(running)
