"""Checks of the arguments of public calls, made before the call does anything.

Each check returns the value as the call uses it, or raises
:class:`~context_manager.errors.ArgumentError` (for a value out of range) or
:class:`~context_manager.errors.ArgumentTypeError` (for a value of the wrong type;
a bool is never an int) naming the parameter, the value received and what the
parameter accepts. Nothing has been written when one raises: the manager checks its
arguments before it opens a transaction.

Examples
--------
>>> check_int(1000, "max_tokens", low=1, high=MAX_WINDOW_TOKENS)
1000
>>> try:
...     check_int(True, "max_tokens", low=1, high=MAX_WINDOW_TOKENS)
... except ArgumentTypeError as exc:
...     print(exc)
max_tokens must be an int from 1 to 1099511627776 (2**40), got True (bool)
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from folding import MAX_LEVEL, MAX_TOKENS

from .errors import ArgumentError, ArgumentTypeError, shown
from .messages import (
    ContentBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    json_problem,
    text_problem,
)

__all__ = [
    "HOLD_ACCEPTED",
    "MAX_LEVEL",
    "MAX_WINDOW_TOKENS",
    "check_choice",
    "check_content",
    "check_flag",
    "check_id",
    "check_ids",
    "check_int",
    "check_items",
    "check_mapping",
    "check_number",
    "check_path",
    "check_pin_levels",
    "check_protocol",
    "check_seconds",
    "check_sequence",
    "check_text",
    "check_tools",
    "refusal",
]

HOLD_ACCEPTED = "True, False or a positive finite number of seconds"
"""What ``hold`` and ``catch_up`` accept besides a bool, as refusals say it."""

MAX_WINDOW_TOKENS = MAX_TOKENS
"""The largest ``max_tokens`` (and ``reserve_for_response``) a compile takes: the fold
model's :data:`folding.MAX_TOKENS` (``2**40``), the largest budget a fold problem
states, so no total the strategy or a solver computes from it can overflow."""

_T = TypeVar("_T")
_BLOCKS = (TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock)
_BLOCK_TYPES: dict[str, type[ContentBlock]] = {
    kind.model_fields["type"].default: kind for kind in _BLOCKS
}


def _power(n: int) -> str:
    """``n`` with its power of two when it is one (``1099511627776 (2**40)``)."""
    if n > 1024 and n & (n - 1) == 0:
        return f"{n} (2**{n.bit_length() - 1})"
    return str(n)


def _int_range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"an int from {_power(low)} to {_power(high)}"
    if low is not None:
        return f"an int of at least {_power(low)}"
    if high is not None:
        return f"an int of at most {_power(high)}"
    return "an int"


def check_int(
    value: object,
    param: str,
    *,
    low: int | None = None,
    high: int | None = None,
    hint: str = "",
) -> int:
    """``value`` as an int in ``[low, high]`` (either bound open when None).

    Any integral number is taken (a numpy integer too), never a bool nor a float,
    even an integral one.

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name, as the error message shows it.
    low, high : int, optional
        The smallest and largest value accepted.
    hint : str
        What to do instead, added to the message.

    Returns
    -------
    int

    Raises
    ------
    ArgumentTypeError
        For a bool or anything that is not an integral number.
    ArgumentError
        For an int out of range.

    Examples
    --------
    >>> check_int(3, "limit", low=0)
    3
    >>> try:
    ...     check_int(-1, "limit", low=0)
    ... except ArgumentError as exc:
    ...     print(exc)
    limit must be an int of at least 0, got -1 (int)
    """
    accepted = _int_range(low, high)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(param, value, accepted, hint=hint)
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        raise ArgumentError(param, value, accepted, hint=hint)
    return number


def check_number(
    value: object,
    param: str,
    *,
    positive: bool = False,
    low: float | None = None,
    accepted: str = "",
) -> float:
    """``value`` as a finite float (never a bool, NaN or an infinity).

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    positive : bool
        Refuse zero and below.
    low : float, optional
        Refuse values below this.
    accepted : str
        What the parameter accepts, as the message says it (by default the range).

    Returns
    -------
    float

    Raises
    ------
    ArgumentTypeError
        For a bool or anything that is not a real number.
    ArgumentError
        For NaN, an infinity, or a value out of range.

    Examples
    --------
    >>> check_number(2, "from_time")
    2.0
    >>> try:
    ...     check_number(float("nan"), "from_time")
    ... except ArgumentError as exc:
    ...     print(exc)
    from_time must be a finite number, got nan (float)
    """
    if not accepted:
        accepted = "a finite number"
        if positive:
            accepted = "a positive finite number"
        elif low is not None:
            accepted = f"a finite number of at least {low:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(param, value, accepted)
    try:
        number = float(value)
    except OverflowError:  # an int beyond the floats
        raise ArgumentError(param, value, accepted) from None
    if (
        not math.isfinite(number)
        or (positive and number <= 0)
        or (low is not None and number < low)
    ):
        raise ArgumentError(param, value, accepted)
    return number


def check_seconds(value: object, param: str, *, zero: bool = False, accepted: str = "") -> float:
    """A duration in seconds: a finite number above 0 (from 0 with ``zero``).

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    zero : bool
        Accept 0.
    accepted : str
        What the parameter accepts, as the message says it.

    Returns
    -------
    float

    Raises
    ------
    ArgumentTypeError, ArgumentError
        As :func:`check_number` does.

    Examples
    --------
    >>> check_seconds(1.5, "timeout")
    1.5
    """
    if not accepted:
        accepted = f"a {'' if zero else 'positive '}finite number of seconds"
        if zero:
            accepted += " (at least 0)"
    if zero:
        return check_number(value, param, low=0.0, accepted=accepted)
    return check_number(value, param, positive=True, accepted=accepted)


def check_flag(value: object, param: str) -> bool:
    """``value`` as a bool: True or False, nothing else.

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.

    Returns
    -------
    bool

    Raises
    ------
    ArgumentTypeError
        For anything but True and False.

    Examples
    --------
    >>> check_flag(False, "dry_run")
    False
    """
    if not isinstance(value, bool):
        raise ArgumentTypeError(param, value, "True or False")
    return value


def check_text(
    value: object, param: str, *, empty: bool = True, blank: bool = True, accepted: str = ""
) -> str:
    """``value`` as a str (a non-empty one unless ``empty``, holding more than
    whitespace unless ``blank``).

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    empty : bool
        Accept ``""``.
    blank : bool
        Accept a string of whitespace only (``""`` too).
    accepted : str
        What the parameter accepts, as the message says it (default: a str, a
        non-empty str or a non-blank str).

    Returns
    -------
    str

    Raises
    ------
    ArgumentTypeError
        For anything but a str.
    ArgumentError
        For an empty str unless ``empty``, a blank one unless ``blank``, or one holding
        a lone surrogate (not valid Unicode: it could be neither stored nor sent).

    Examples
    --------
    >>> check_text("grep", "name", blank=False)
    'grep'
    """
    what = accepted or (
        "a str" if empty and blank else "a non-empty str" if blank else "a non-blank str"
    )
    if not isinstance(value, str):
        raise ArgumentTypeError(param, value, what)
    if (not empty and not value) or (not blank and not value.strip()):
        raise ArgumentError(param, value, what)
    problem = text_problem(value)
    if problem is not None:  # it could be neither stored nor sent
        raise ArgumentError(param, value, f"{what} of valid Unicode text", hint=problem)
    return value


def check_choice(value: object, param: str, choices: Sequence[str]) -> str:
    """``value`` as one of ``choices``.

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    choices : sequence of str
        The values accepted.

    Returns
    -------
    str

    Raises
    ------
    ArgumentTypeError
        For anything but a str.
    ArgumentError
        For a str that is not one of ``choices``.

    Examples
    --------
    >>> check_choice("copy", "relation", ("copy", "derived"))
    'copy'
    """
    accepted = "one of " + ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise ArgumentTypeError(param, value, accepted)
    if value not in choices:
        raise ArgumentError(param, value, accepted)
    return value


def check_id(value: object, param: str) -> str:
    """``value`` as a message id: a str (the id :meth:`ContextManager.add_message
    <context_manager.ContextManager.add_message>` returned).

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.

    Returns
    -------
    str

    Raises
    ------
    ArgumentTypeError
        For anything but a str.

    Examples
    --------
    >>> check_id("7", "message_id")
    '7'
    """
    if not isinstance(value, str):
        raise ArgumentTypeError(param, value, "a message id (the str add_message returned)")
    return value


def check_sequence(value: object, param: str, accepted: str, hint: str = "") -> list[Any]:
    """``value`` as a list: any iterable but a str, bytes or a mapping.

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    accepted : str
        What the parameter accepts, as the message says it.
    hint : str
        What to do instead, added to the message.

    Returns
    -------
    list

    Raises
    ------
    ArgumentTypeError
        For a str, bytes, a mapping or anything that is not iterable.

    Examples
    --------
    >>> check_sequence(("a", 1), "rows", "a sequence of rows")
    ['a', 1]
    """
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise ArgumentTypeError(param, value, accepted, hint=hint)
    return list(value)


def check_ids(ids: object, param: str = "ids") -> list[str]:
    """``ids`` as a list of message ids, in order.

    Parameters
    ----------
    ids : object
        The argument received: a sequence of message ids.
    param : str
        The parameter's name.

    Returns
    -------
    list of str

    Raises
    ------
    ArgumentTypeError
        For a single string (a common slip for a one-element list), anything that is
        not a sequence, or an element that is not a str (named by its index).

    Examples
    --------
    >>> check_ids(("1", "2"))
    ['1', '2']
    >>> try:
    ...     check_ids("12")
    ... except ArgumentTypeError as exc:
    ...     print(exc)
    ids must be a sequence of message ids, got '12' (str); wrap one id in a list: ['12']
    """
    hint = f"wrap one id in a list: [{ids!r}]" if isinstance(ids, str) else ""
    out = check_sequence(ids, param, "a sequence of message ids", hint)
    for i, item in enumerate(out):
        check_id(item, f"{param}[{i}]")
    return out


def check_items(value: object, param: str, kind: type[_T], accepted: str) -> tuple[_T, ...]:
    """``value`` as a tuple of ``kind`` instances: any iterable but a str, bytes or a
    mapping.

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    kind : type
        The type of each item.
    accepted : str
        What one item is, as the message says it.

    Returns
    -------
    tuple

    Raises
    ------
    ArgumentTypeError
        For a value that is not a sequence, or an item of another type (named by its
        index: ``injections[0]``).

    Examples
    --------
    >>> check_items([1, 2], "levels", int, "an int")
    (1, 2)
    """
    items = check_sequence(value, param, f"a sequence of {accepted}")
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            raise ArgumentTypeError(f"{param}[{i}]", item, accepted)
    return tuple(items)


def check_mapping(value: object, param: str, accepted: str) -> Mapping[str, Any]:
    """``value`` as a mapping whose keys are strs.

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    accepted : str
        What the parameter accepts, as the message says it.

    Returns
    -------
    Mapping

    Raises
    ------
    ArgumentTypeError
        For anything but a mapping, or a key that is not a str (named).

    Examples
    --------
    >>> dict(check_mapping({"a": 1}, "overrides", "a mapping of options"))
    {'a': 1}
    """
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(param, value, accepted)
    for key in value:
        if not isinstance(key, str):
            raise ArgumentTypeError(param, value, accepted, hint=f"key {shown(key)} is not a str")
    return value


def check_content(value: object, param: str = "content") -> tuple[ContentBlock, ...]:
    """Message content: a str (one text block) or a sequence of content blocks (each a
    block or its mapping, ``{"type": "text", "text": ...}``).

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.

    Returns
    -------
    tuple of ContentBlock

    Raises
    ------
    ArgumentTypeError
        For anything but a str or a sequence, or an item that is neither a block nor a
        mapping (named by its index: ``content[0]``).
    ArgumentError
        For a mapping that is not a block, naming its field (``content[0].text``).

    Examples
    --------
    >>> [b.text for b in check_content("hi")]
    ['hi']
    >>> [b.text for b in check_content([{"type": "text", "text": "hi"}])]
    ['hi']
    """
    if isinstance(value, str):
        return (TextBlock(text=value),)
    accepted = "a str or a sequence of content blocks (TextBlock, ToolUseBlock, ...)"
    items = check_sequence(value, param, accepted)
    blocks: list[ContentBlock] = []
    for i, item in enumerate(items):
        if isinstance(item, _BLOCKS):
            blocks.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ArgumentTypeError(
                f"{param}[{i}]", item, "a content block or its mapping ({'type': 'text', ...})"
            )
        kind = _BLOCK_TYPES.get(item.get("type"))  # type: ignore[arg-type]
        if kind is None:
            types = ", ".join(repr(t) for t in _BLOCK_TYPES)
            raise ArgumentError(f"{param}[{i}].type", item.get("type"), f"one of {types}")
        try:
            blocks.append(kind.model_validate(item))
        except ValidationError as exc:
            raise refusal(exc, f"{param}[{i}]") from None
    return tuple(blocks)


def refusal(exc: ValidationError, param: str = "") -> ArgumentError:
    """Pydantic's refusal of an argument as an :class:`ArgumentError` naming the field
    (``content[0].text``): its first error, with the value refused and why.

    Parameters
    ----------
    exc : pydantic.ValidationError
        The refusal.
    param : str
        The parameter the validated value came from, prefixed to the field's path.

    Returns
    -------
    ArgumentError

    Examples
    --------
    >>> try:
    ...     TextBlock.model_validate({"type": "text", "text": 5})
    ... except ValidationError as exc:
    ...     print(refusal(exc, "content[0]"))
    content[0].text must be a valid string, got 5 (int)
    """
    first = exc.errors()[0]
    where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first["loc"])
    field = f"{param}{where}" if param else where.lstrip(".")
    said = first["msg"]
    if said.startswith("Input should be "):
        accepted = said.removeprefix("Input should be ")
    elif first["type"] == "missing":
        accepted = "given (the field is required)"
    else:
        accepted = f"valid ({said})"
    return ArgumentError(field, first.get("input"), accepted)


def check_tools(value: object, param: str = "tools") -> list[dict[str, Any]]:
    """Tool definitions: a sequence of mappings with str keys and JSON values, each with
    a non-empty str ``name`` (Anthropic's shape) or a ``function`` mapping holding one
    (the Chat Completions shape).

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.

    Returns
    -------
    list of dict
        Plain copies of the definitions.

    Raises
    ------
    ArgumentTypeError
        For anything but a sequence of mappings (the item named by its index).
    ArgumentError
        For a definition without a name, or holding a value that is not JSON (named).

    Examples
    --------
    >>> check_tools([{"name": "grep", "input_schema": {"type": "object"}}])
    [{'name': 'grep', 'input_schema': {'type': 'object'}}]
    """
    accepted = (
        "a tool definition: a mapping with a non-empty str 'name' (and an 'input_schema'), "
        "or the Chat Completions shape {'type': 'function', 'function': {'name': ...}}"
    )
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(check_sequence(value, param, "a sequence of tool definitions")):
        where = f"{param}[{i}]"
        if not isinstance(tool, Mapping):
            raise ArgumentTypeError(where, tool, accepted)
        plain = dict(tool)
        problem = json_problem(plain, where)
        if problem is not None:
            raise ArgumentError(problem[0], tool, f"JSON ({problem[1]})")
        function = plain.get("function")
        named = function.get("name") if isinstance(function, dict) else plain.get("name")
        if not isinstance(named, str) or not named:
            raise ArgumentError(where, tool, accepted)
        out.append(plain)
    return out


def check_path(value: object, param: str = "path") -> str:
    """A file path: a str or an :class:`os.PathLike` naming one by a str (whether a
    file can have that name is the store's to say).

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.

    Returns
    -------
    str

    Raises
    ------
    ArgumentTypeError
        For anything but a str or a path.

    Examples
    --------
    >>> check_path("a.db")
    'a.db'
    """
    accepted = "a file path (a str or an os.PathLike)"
    if not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(param, value, accepted)
    try:
        text = os.fspath(value)
    except TypeError:
        raise ArgumentTypeError(param, value, accepted) from None
    if not isinstance(text, str):
        raise ArgumentTypeError(param, value, accepted)
    return text


def check_pin_levels(level: object, max_level: object, where: str = "") -> None:
    """The levels of a pin: each None or an int in ``[0, MAX_LEVEL]``, and ``max_level``
    not below ``level`` when both are given.

    Parameters
    ----------
    level, max_level : object
        The pin's exact level and its deepest level (None: unset).
    where : str
        What the pin is, prefixed to the parameter names (``pin 'pin-3' ``).

    Raises
    ------
    ArgumentTypeError
        For a level that is not an int (a bool included).
    ArgumentError
        For a level out of range, or a ``max_level`` below ``level``.

    Examples
    --------
    >>> check_pin_levels(1, 2)
    >>> try:
    ...     check_pin_levels(2, 1)
    ... except ArgumentError as exc:
    ...     print(exc)
    max_level must be None or an int from 2 to 1048576 (2**20) (not below level=2), got 1 (int)
    """
    for name, value in (("level", level), ("max_level", max_level)):
        if value is not None:
            check_int(value, f"{where}{name}", low=0, high=MAX_LEVEL)
    if isinstance(level, int) and isinstance(max_level, int) and max_level < level:
        raise ArgumentError(
            f"{where}max_level",
            max_level,
            f"None or {_int_range(level, MAX_LEVEL)} (not below level={level})",
        )


def check_protocol(value: object, param: str, methods: Sequence[str], accepted: str) -> None:
    """Refuse ``value`` unless each of ``methods`` is a callable attribute of it.

    Parameters
    ----------
    value : object
        The argument received.
    param : str
        The parameter's name.
    methods : sequence of str
        The methods it must have.
    accepted : str
        What the parameter accepts, as the message says it.

    Raises
    ------
    ArgumentTypeError
        Naming the first method missing.

    Examples
    --------
    >>> check_protocol([], "clock", ["__call__"], "a callable")
    Traceback (most recent call last):
    ...
    context_manager.errors.ArgumentTypeError: clock must be a callable, got [] (list)
    """
    for method in methods:
        found: Callable[..., Any] | None = getattr(value, method, None)
        if not callable(found):
            raise ArgumentTypeError(param, value, accepted)
