"""Shared test configuration: hypothesis profiles ``dev`` (default) and ``ci``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# the shared helpers assert too: their failures are explained as a test module's are
pytest.register_assert_rewrite("tests.support")

settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# the benchmark's commands (demo, bench, sweep, ...), registered as the console script does
from context_manager.cli import load_plugins  # noqa: E402

load_plugins()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a PostgreSQL server for the session (:mod:`tests.support.postgres_server`:
    a throwaway one, or the one ``CTXFOLD_TEST_POSTGRES`` names). Without one the tests
    that need it fail saying why, unless ``CTXFOLD_TEST_POSTGRES=off`` leaves the
    backend out of the run."""
    from tests.support import postgres_server

    if os.environ.get(postgres_server.ENV) == "off":
        pytest.skip(f"the PostgreSQL backend is left out of this run ({postgres_server.ENV}=off)")
    try:
        server = postgres_server.start()
    except postgres_server.NoServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server.url
    postgres_server.stop(server)
