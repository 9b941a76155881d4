"""Shared test configuration: hypothesis profiles ``dev`` (default) and ``ci``."""

from __future__ import annotations

import os

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
