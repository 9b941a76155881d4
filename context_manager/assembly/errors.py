"""The one error type of the assembly functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

__all__ = [
    "INVALID_REQUEST",
    "MODEL_UNRESOLVED",
    "OVERFLOW",
    "STATE",
    "AssemblyError",
    "from_validation_errors",
]

INVALID_REQUEST: Final = "context/invalid_request"
MODEL_UNRESOLVED: Final = "context/model_unresolved"
STATE: Final = "context/state"
OVERFLOW: Final = "context/overflow"


class AssemblyError(Exception):
    """A request the assembly functions refuse, as ``code: message``.

    Parameters
    ----------
    code : str
        ``context/invalid_request``, ``context/model_unresolved``, ``context/state``
        or ``context/overflow``.
    message : str
        What is wrong and, where there is one, the fix.

    Examples
    --------
    >>> err = AssemblyError("context/invalid_request", "messages is required")
    >>> err.code, str(err)
    ('context/invalid_request', 'context/invalid_request: messages is required')
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


_FIXES: Final = {
    "missing": "add the field",
    "extra_forbidden": "remove the field or check its spelling",
    "union_tag_invalid": "use one of the tags listed",
    "union_tag_not_found": "add the tag field",
    "int_type": "send an integer",
    "int_parsing": "send an integer",
    "string_type": "send a string",
    "bool_type": "send true or false",
    "list_type": "send an array",
    "tuple_type": "send an array",
    "dict_type": "send an object",
    "model_type": "send an object",
    "greater_than_equal": "send a value that is not negative",
    "literal_error": "use one of the values listed",
}


def from_validation_errors(errors: Sequence[Any]) -> AssemblyError:
    """An ``invalid_request`` error naming the first offending field and its fix."""
    first = errors[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "request"
    fix = _FIXES.get(str(first.get("type")), "correct the value")
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return AssemblyError(
        INVALID_REQUEST, f"invalid request: {loc}: {first.get('msg')}; {fix}{more}"
    )
