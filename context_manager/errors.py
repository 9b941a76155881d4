"""Errors of the context manager."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigError",
    "ConstraintConflictError",
    "ContextManagerError",
    "MissingAPIKeyError",
    "OverBudgetError",
    "SummarizerNotConfiguredError",
    "SummarizerTimeoutError",
    "UncoveredDropError",
]


class ContextManagerError(Exception):
    """Base class of the context manager's errors."""


class ConfigError(ContextManagerError, ValueError):
    """A configuration value is missing or invalid; the message names it and the fix."""


class MissingAPIKeyError(ConfigError):
    """A provider summariser found no API key: the message names the environment variable."""


class SummarizerNotConfiguredError(ContextManagerError):
    """The strategy must write a summary but has no ``compression_model`` (or no summariser)."""


class SummarizerTimeoutError(ContextManagerError, TimeoutError):
    """A summariser call made for the caller did not answer before its deadline.

    The call is abandoned on its worker thread (it cannot be stopped) and nothing was
    stored; the operation can be retried."""


class OverBudgetError(ContextManagerError):
    """The context cannot fit the budget: the compile refuses rather than truncate.

    Attributes
    ----------
    budget : int
        The input budget (max tokens minus the response reserve).
    actual : int
        The tokens the best frontier still needs.
    stage : str
        Where the compile refused (``head/tail reservation``, ``solver``, ...).
    diagnostics : dict
        ``head_tokens``, ``tail_tokens``, ``newest_tokens`` (the newest message as
        sent: the turn the model answers, never folded), ``middle_tokens``,
        ``raw_pins`` (each pin holding raw tokens), ``floor_tokens``,
        ``deepest_level`` and a ``suggestion``.
    """

    def __init__(self, stage: str, budget: int, actual: int, diagnostics: dict[str, Any]) -> None:
        if actual <= budget:
            raise ValueError(
                f"OverBudgetError needs actual > budget, got actual={actual}, budget={budget}"
            )
        self.stage = stage
        self.budget = budget
        self.actual = actual
        self.diagnostics = diagnostics
        parts = ", ".join(
            f"{k}={diagnostics[k]}"
            for k in ("head_tokens", "tail_tokens", "middle_tokens", "deepest_level")
            if k in diagnostics
        )
        super().__init__(
            f"{stage}: {actual} tokens still exceed the hard budget {budget} ({parts})"
        )


class UncoveredDropError(ContextManagerError):
    """The context would omit messages that no emitted summary represents."""

    def __init__(self, dropped_ids: list[str], site: str) -> None:
        self.dropped_ids = dropped_ids
        self.site = site
        shown = ", ".join(dropped_ids[:5]) + (" ..." if len(dropped_ids) > 5 else "")
        super().__init__(
            f"{site}: {len(dropped_ids)} messages would be dropped without a summary "
            f"covering them ({shown}); refusing to send a context that silently loses history"
        )


class ConstraintConflictError(ContextManagerError):
    """Pins, locks, holds and zones leave some messages no level to be shown at.

    No budget can help: the constraints themselves contradict each other. The
    message names every message involved and each constraint on it.

    Attributes
    ----------
    conflicts : list of dict
        One per message: ``message`` (its id), ``available`` (the levels that exist
        for it, 0 = raw) and ``constraints`` (each one described: ``pin-3 (level=2)``,
        ``lock@1``, ``hold``, ``zone=tail``...).
    diagnostics : dict
        The compile's diagnostics, as for :class:`OverBudgetError`.
    """

    def __init__(self, conflicts: list[dict[str, Any]], diagnostics: dict[str, Any]) -> None:
        self.conflicts = conflicts
        self.diagnostics = diagnostics
        shown = "; ".join(
            f"message {c['message']!r}: {', '.join(c['constraints'])} "
            f"(levels available: {c['available']})"
            for c in conflicts[:5]
        )
        more = f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
        super().__init__(
            f"constraints conflict, no level is left for {len(conflicts)} message(s): "
            f"{shown}{more}; unpin, unlock or release one of them"
        )
