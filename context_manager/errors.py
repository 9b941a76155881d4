"""Errors of the context manager."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "AuditOnlyError",
    "ConfigError",
    "ConstraintConflictError",
    "ContextManagerError",
    "MissingAPIKeyError",
    "NoSummarizerWarning",
    "OverBudgetError",
    "StoreFullWarning",
    "SummarizerNotConfiguredError",
    "SummarizerTimeoutError",
    "UncoveredDropError",
    "UnknownCompileError",
    "UnknownMessageError",
]


class ContextManagerError(Exception):
    """Base class of the context manager's errors."""


class ConfigError(ContextManagerError, ValueError):
    """A configuration value is missing or invalid; the message names it and the fix."""


class ArgumentError(ConfigError):
    """An argument of a public call is refused before the call does anything (nothing
    is written): the message names the parameter, the value received and what the
    parameter accepts.

    Attributes
    ----------
    param : str
        The parameter, with the index or key of the part refused (``injections[0]``,
        ``tools[1].name``).
    value : object
        The value received (the part refused).
    accepted : str
        What the parameter accepts.
    """

    def __init__(self, param: str, value: object, accepted: str, *, hint: str = "") -> None:
        self.param = param
        self.value = value
        self.accepted = accepted
        tail = f"; {hint}" if hint else ""
        super().__init__(f"{param} must be {accepted}, got {shown(value)}{tail}")


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (a bool where an int is wanted included): an
    :class:`ArgumentError` that is also a :class:`TypeError`."""


class UnknownMessageError(ContextManagerError, KeyError):
    """An argument names no stored message (nothing was done); a :class:`KeyError`.

    Attributes
    ----------
    param : str
        The parameter that named it (``message_id``, ``first_id``, ``rows[1]``).
    ids : tuple of str
        The ids that name no message, in the order given.
    """

    def __init__(self, text: str, *, param: str, ids: tuple[str, ...]) -> None:
        self.text = text
        self.param = param
        self.ids = ids
        super().__init__(text)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.text


class UnknownCompileError(ContextManagerError, KeyError):
    """A ``compile_id`` that cannot be accepted (nothing was stored); a :class:`KeyError`.

    Attributes
    ----------
    compile_id : str
        The id refused.
    stale : bool
        True when this manager issued it and a later compile has superseded it (or it
        was compiled on another branch); False when this manager never issued it (a
        preview's, another manager's, one from before the store was reopened).
    """

    def __init__(self, text: str, *, compile_id: str, stale: bool) -> None:
        self.text = text
        self.param = "compile_id"
        self.compile_id = compile_id
        self.stale = stale
        super().__init__(text)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.text


def shown(value: object, width: int = 80) -> str:
    """``value`` as an error message shows it: its repr, cut to ``width`` characters,
    and its type.

    Examples
    --------
    >>> shown(float("nan"))
    'nan (float)'
    >>> shown("x" * 100, width=12)
    "'xxxxxxxxx... (str of 100 characters)"
    >>> shown(10**5000)
    'an int of 16610 bits'
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:
        return f"a {type(value).__name__}"
    kind = type(value).__name__
    if len(text) > width:
        size = f" of {len(value)} characters" if isinstance(value, str) else ""
        return f"{text[: width - 2]}... ({kind}{size})"
    return f"{text} ({kind})"


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


class AuditOnlyError(ContextManagerError, PermissionError):
    """A manager opened with ``audit_only=True`` was asked to write.

    An audit-only manager loads and audits its store and never writes to it: every
    operation that would (adding, editing or removing messages, ``compile``, ``tick``,
    pins, holds, presenting rows, branches...) raises this before it does anything.
    ``preview_context`` is the dry compile it allows.

    Attributes
    ----------
    operation : str
        The operation refused (``add_message``, ``compile``...).

    Examples
    --------
    >>> from context_manager import ContextManager, CharsCounter
    >>> with ContextManager.open(path=":memory:", counter=CharsCounter(),
    ...                          audit_only=True) as cm:
    ...     try:
    ...         cm.add_message("User", "hello")
    ...     except AuditOnlyError as refused:
    ...         print(refused.operation)
    add_message
    """

    def __init__(self, operation: str) -> None:
        self.operation = operation
        dry = " (preview_context is the dry compile)" if operation == "compile" else ""
        super().__init__(
            f"{operation} writes to the store, and this manager was opened with "
            f"audit_only=True, which never writes{dry}; open it again without "
            "audit_only to change the store"
        )


class StoreFullWarning(UserWarning):
    """:meth:`ContextManager.compile` built the request but could not store its
    bookkeeping (the context log, the frontier it chose) because the store's disk is
    full: the request is returned, marked ``render_stats["bookkeeping"]``, and the next
    compile recomputes what was not stored."""


class NoSummarizerWarning(UserWarning):
    """:meth:`ContextManager.tick` found compression work but the manager has no
    summariser to do it with: nothing is compressed until one is given
    (``ContextManager.open(summarizer=...)``)."""
