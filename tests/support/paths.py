"""Where things are, wherever a test module sits: the repository root and ``tests/``."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
"""The ``tests`` folder."""
ROOT = TESTS.parent
"""The repository root."""
