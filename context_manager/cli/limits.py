"""The limits of what the command line reads and draws: JSON input is checked
(:func:`check_json_limits`) and parsed (:func:`load_json`) within them, and a
hierarchy is drawn at most :data:`MAX_TREE_DEPTH` levels deep.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from .previews import first_line

MAX_JSON_DEPTH = 100
"""The deepest nesting of arrays and objects a JSON input may have."""
MAX_NUMBER_DIGITS = 100
"""The most digits a number in a JSON input may have."""
MAX_INPUT_BYTES = 1 << 30
"""The largest JSON input file read, in bytes (1 GiB)."""
MAX_TREE_DEPTH = 8
"""How many levels below a root ``show`` draws; deeper summaries are counted, not drawn."""


class InputLimitError(ValueError):
    """A JSON input is beyond a limit of the command line: nested too deeply, a number
    with too many digits, or a file too large.

    Parameters
    ----------
    source : str
        What was read (a file name, an option), named in the message.
    problem : str
        What is wrong with it, naming the limit.

    Attributes
    ----------
    source, problem : str
        As given.
    """

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_LONG_NUMBER = re.compile(rf"[0-9]{{{MAX_NUMBER_DIGITS + 1},}}")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def check_json_limits(text: str, source: str) -> None:
    """Refuse JSON text the parsers cannot take safely, before it is parsed.

    The check does not recurse: string literals are blanked out, and the nesting depth
    is the running count of the brackets left, so a document of any depth is measured
    in linear time and constant stack.

    Parameters
    ----------
    text : str
        The JSON text.
    source : str
        What it was read from, named in the error.

    Raises
    ------
    InputLimitError
        Arrays and objects are nested deeper than :data:`MAX_JSON_DEPTH`, or a number
        has more than :data:`MAX_NUMBER_DIGITS` digits.

    Examples
    --------
    >>> check_json_limits('{"a": [1, 2, "[[[["]}', "x.json")
    >>> try:
    ...     check_json_limits("[" * 101 + "]" * 101, "x.json")
    ... except InputLimitError as exc:
    ...     print(exc)
    x.json: arrays and objects nested 101 levels deep, over the limit of 100
    """
    bare = _STRING.sub('""', text)
    brackets = _NOT_BRACKET.sub("", bare)
    depth = max(accumulate(map(_NESTING.__getitem__, brackets)), default=0)
    if depth > MAX_JSON_DEPTH:
        raise InputLimitError(
            source,
            f"arrays and objects nested {depth:,} levels deep, over the limit of {MAX_JSON_DEPTH}",
        )
    long = _LONG_NUMBER.search(bare)
    if long is not None:
        digits = len(long.group())
        raise InputLimitError(
            source,
            f"a number of {digits:,} digits, over the limit of {MAX_NUMBER_DIGITS} digits",
        )


def load_json(text: str, source: str) -> Any:
    """Parse JSON text within the limits of :func:`check_json_limits`.

    Parameters
    ----------
    text : str
        The JSON text.
    source : str
        What it was read from, named in the errors.

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    InputLimitError
        The text is beyond a limit, or the parser still ran out of stack or refused a
        number (a last guard, the message naming ``source``).
    json.JSONDecodeError
        The text is not JSON.
    """
    check_json_limits(text, source)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise InputLimitError(source, "nested too deeply to parse") from None
    except ValueError as exc:  # a number Python refuses to convert
        raise InputLimitError(source, first_line(str(exc), 200)) from None
