"""Seeded problem generators for examples, tests and benchmarks.

The generators live in the library, in :mod:`folding.testing`; this module
re-exports them for the benchmark's callers.
"""

from __future__ import annotations

from folding.testing.synthetic import (
    agent_history,
    chronicle,
    chunked_history,
    random_problem,
    summaries_over,
)

__all__ = ["agent_history", "chronicle", "chunked_history", "random_problem", "summaries_over"]
