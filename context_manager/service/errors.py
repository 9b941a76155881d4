"""What the service answers when a call fails: one JSON body, ``{"code", "message"}``
(and ``details`` where the library gives some), with the HTTP status each code maps to.

The four stateless functions keep their ``context/...`` codes; the manager's errors
and the service's own get ``manager/...`` and ``service/...`` codes. :func:`answer`
maps every library error to its status once, for the routes and the client alike
(:data:`STATUS` is the table the client reads back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationError

from ..assembly import AssemblyError
from ..assembly.errors import INVALID_REQUEST, MODEL_UNRESOLVED, OVERFLOW, STATE
from ..errors import (
    ArgumentError,
    ConfigError,
    ConstraintConflictError,
    ContextManagerError,
    OverBudgetError,
    SummarizerNotConfiguredError,
    SummarizerTimeoutError,
    UnknownMessageError,
)
from ..messages import MessageFormatError
from ..store import StoreCorruptError, StoreFullError, StoreLockedError

__all__ = [
    "STATUS",
    "ErrorBody",
    "ServiceError",
    "answer",
    "jsonable",
]

STATUS: Final[dict[str, int]] = {
    INVALID_REQUEST: 422,
    MODEL_UNRESOLVED: 422,
    OVERFLOW: 422,
    STATE: 503,
    "context/busy": 409,
    "manager/invalid_argument": 422,
    "manager/unknown_message": 404,
    "manager/over_budget": 422,
    "manager/constraint_conflict": 409,
    "manager/store_busy": 409,
    "manager/store_full": 507,
    "manager/store_damaged": 503,
    "manager/summarizer_unavailable": 503,
    "manager/error": 500,
    "service/malformed_json": 400,
    "service/unauthorized": 401,
    "service/forbidden": 403,
    "service/not_found": 404,
    "service/method_not_allowed": 405,
    "service/too_large": 413,
    "service/invalid_request": 422,
    "service/deadline": 504,
    "service/shutting_down": 503,
    "service/not_ready": 503,
}
"""Every error code the service answers with, and its HTTP status.

``context/overflow`` is 422: the request is well formed but no reduction makes it fit
(a property of the request, not a conflict with the server's state); the manager's
refusal over budget is 422 for the same reason. Busy answers (``context/busy``, a
compaction another caller holds the lease for, and ``manager/store_busy``, a store
another process writes) are 409 with ``Retry-After``."""


class ErrorBody(BaseModel):
    """The body of every error answer."""

    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    details: dict[str, Any] | None = None


@dataclass
class ServiceError(Exception):
    """An error answer: its code (a key of :data:`STATUS`), message and details."""

    code: str
    message: str
    details: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(f"{self.code}: {self.message}")

    @property
    def status(self) -> int:
        """The HTTP status of :attr:`code`."""
        return STATUS[self.code]

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        return ErrorBody(code=self.code, message=self.message, details=self.details).model_dump(
            exclude_none=True
        )


def answer(exc: BaseException) -> ServiceError:
    """The error answer for ``exc``, raised by the library while serving a request.

    Examples
    --------
    >>> from context_manager.errors import ArgumentError
    >>> err = answer(ArgumentError("max_tokens", -1, "an int from 1"))
    >>> err.code, err.status
    ('manager/invalid_argument', 422)
    """
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, AssemblyError):
        return ServiceError(exc.code, exc.message)
    if isinstance(exc, OverBudgetError):
        details = {
            "stage": exc.stage,
            "budget": exc.budget,
            "actual": exc.actual,
            "diagnostics": exc.diagnostics,
        }
        return ServiceError("manager/over_budget", str(exc), jsonable(details))
    if isinstance(exc, ConstraintConflictError):
        return ServiceError(
            "manager/constraint_conflict",
            str(exc),
            jsonable({"conflicts": exc.conflicts, "diagnostics": exc.diagnostics}),
        )
    if isinstance(exc, UnknownMessageError):
        return ServiceError(
            "manager/unknown_message", str(exc), {"param": exc.param, "ids": list(exc.ids)}
        )
    if isinstance(exc, ArgumentError):
        details = {"param": exc.param, "accepted": exc.accepted}
        return ServiceError("manager/invalid_argument", str(exc), details)
    if isinstance(exc, ConfigError | MessageFormatError | ValidationError):
        return ServiceError("manager/invalid_argument", str(exc))
    if isinstance(exc, StoreLockedError):
        return ServiceError("manager/store_busy", str(exc), headers={"Retry-After": "1"})
    if isinstance(exc, StoreFullError):
        return ServiceError("manager/store_full", str(exc))
    if isinstance(exc, StoreCorruptError):
        return ServiceError("manager/store_damaged", str(exc))
    if isinstance(exc, SummarizerNotConfiguredError | SummarizerTimeoutError):
        return ServiceError("manager/summarizer_unavailable", str(exc))
    if isinstance(exc, ContextManagerError):
        return ServiceError("manager/error", f"{type(exc).__name__}: {exc}")
    return ServiceError("manager/error", f"internal error ({type(exc).__name__})")


def jsonable(value: Any) -> Any:
    """``value`` as JSON values: models dumped, tuples and sets as lists, keys as text,
    anything else JSON cannot carry written as text.

    Examples
    --------
    >>> jsonable({1: ("a", {2}), "x": None})
    {'1': ['a', [2]], 'x': None}
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
