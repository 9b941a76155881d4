"""The suite's PostgreSQL server: without one, the tests that need it fail saying why."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import postgres_server
from tests.support.paths import ROOT


def test_no_binaries_is_an_error_naming_the_two_ways_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_server.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(postgres_server.shutil, "which", lambda name: None)
    monkeypatch.delenv(postgres_server.ENV, raising=False)
    with pytest.raises(postgres_server.NoServerError) as info:
        postgres_server.start()
    assert "apt-get install -y postgresql" in str(info.value)
    assert "CTXFOLD_TEST_POSTGRES=off" in str(info.value)


TEST = textwrap.dedent(
    """
    from tests.support import postgres_server

    postgres_server.glob.glob = lambda pattern: []  # a machine without the binaries
    postgres_server.shutil.which = lambda name: None


    def test_needs_a_server(postgres_url):
        assert postgres_url
    """
)


@pytest.mark.parametrize(("env", "outcome"), [("", "1 error"), ("off", "1 skipped")])
def test_the_backend_fails_the_run_unless_told_to_leave_it_out(
    tmp_path: Path, env: str, outcome: str
) -> None:
    (tmp_path / "test_backend.py").write_text(TEST)
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, postgres_server.ENV: env},
    )
    assert outcome in done.stdout, done.stdout
    if env == "off":
        assert "left out of this run" in done.stdout
    else:
        assert "no initdb was found" in done.stdout
