"""The exact values a memory keeps beside its prose.

A memory is prose, and prose loses the exact strings an agent needs again: a
reservation id, a ticket code, a path, a commit hash, a measurement with its unit, a
URL, the arguments of the tool calls it made. :func:`extract_values` finds them in the
messages a memory covers, deterministically, and ranks them; :func:`cap_values` keeps
the best that fit a token allowance; :func:`render_values` is the one line a memory
shows them on (``Exact values: HAT123; /repo/src/x.py; 12.5 kg``).

What counts as a value
----------------------
- the scalar argument values of tool calls (strings of 3 to 100 characters on one line,
  numbers other than integers of fewer than 3 digits; nested ones included), and the
  values below found inside longer arguments;
- URLs, e-mail addresses and file paths (absolute, home or dot relative, relative
  with a file extension or three segments, Windows, and bare file names with a common
  extension);
- dates and times (ISO dates and timestamps, ``05/15/2024``, ``May 20th``,
  ``20 May 2024``, ``14:05``, ``11 AM``);
- amounts of money (``$1,250``, ``300 EUR``) and numbers with a unit (``12.5 kg``,
  ``300 ms``, ``45%``, ``2 GB``, ``3 days``);
- hashes (lowercase hex of 7 to 64 characters holding a digit and a letter), UUIDs and
  dotted numbers of three parts or more (versions, addresses, OIDs);
- identifiers and codes: tokens of at least 4 characters mixing letters and digits,
  joined by ``-`` or ``_``, with a capital letter or a run of 3 digits (``HAT123``,
  ``T-48213-C``, ``mia_li_3668``; not ``arr2`` or ``step10``, which name variables),
  except very common ones (``utf8``, ``float32``, ``x86_64``, ordinals, ...);
- bare integers of at least 3 digits in a tool argument or a user turn, and of at least
  5 digits anywhere else (shorter ones are line numbers, counts and prices of no
  standing of their own).

A tool result that is JSON is read as JSON: its keys are not values, its strings are
read as text. A match longer than 200 characters is a blob (base64, minified code), not
a value. Each value is kept once.

How they rank
-------------
1. values in a tool call's arguments (the agent used them), then values in a user
   turn, then the rest;
2. rare before frequent: a value seen once or twice, then three to five times, then
   more often (a value repeated on every log line is noise);
3. longer (more specific) before shorter, up to 40 characters;
4. first occurrence first.

(:func:`rank_values`, which ranks given values over messages, puts those the messages
no longer hold after the others of their tier.)

Values already in the memory's prose (as a whole word) are dropped: the prose keeps
them. The same messages and prose always give the same values in the same order.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .messages import USER, Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

__all__ = [
    "VALUES_LABEL",
    "VALUES_SEPARATOR",
    "cap_values",
    "extract_values",
    "merge_values",
    "rank_values",
    "render_values",
    "text_values",
    "with_values",
]

VALUES_LABEL = "Exact values: "
"""What the line of a memory's values starts with."""
VALUES_SEPARATOR = "; "
"""What separates two values on that line (no value holds it)."""

_MAX_ARGUMENT = 100
"""Longest tool argument kept whole (longer ones are read as text)."""
_MAX_VALUE = 200
"""Longest value found in text (a longer match is a blob, not a value)."""
_SPECIFIC = 16
"""Length past which a longer value is no more specific."""
_CONSIDERED = 256
"""Ranked values :func:`cap_values` looks at, at most."""

_COMMON = frozenset(
    """
    utf8 utf-8 utf16 utf-16 utf32 utf-32 latin1 latin-1 ascii7 iso8859 iso-8859-1 cp1252
    int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 float128
    complex64 complex128 bfloat16 base64 base32 base16 sha1 sha224 sha256 sha384 sha512
    md5 crc32 x86 x86_64 x64 amd64 arm64 aarch64 i386 i686 win32 win64 ipv4 ipv6 http2
    http3 oauth2 h264 h265 mp3 mp4 mpeg4 ec2 e2e p2p b2b b2c 2fa i18n l10n k8s py2 py3
    python2 python3 pip3 es5 es6 es2015 es2020 html5 css3 v1 v2 v3 4k 1080p 720p
    """.split()  # noqa: SIM905 (a word list)
)
"""Tokens mixing letters and digits that are vocabulary, not values."""

_UNITS = (
    r"ms|µs|us|ns|sec|secs|seconds?|mins?|minutes?|hrs?|hours?|days?|weeks?|months?|"
    r"years?|kg|mg|lbs?|oz|km|cm|mm|mi|ft|mph|km/h|m/s|KB|MB|GB|TB|PB|KiB|MiB|GiB|TiB|kB|"
    r"bytes|Hz|kHz|MHz|GHz|kW|kWh|MW|mA|mAh|rpm|fps|px|dpi|°C|°F|nights?|tokens"
)
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_EXTENSIONS = (
    r"py|pyi|pyx|ipynb|js|mjs|cjs|jsx|ts|tsx|json|jsonl|yaml|yml|toml|ini|cfg|conf|md|rst|"
    r"txt|csv|tsv|log|c|h|cc|cpp|hpp|rs|go|java|kt|rb|php|sh|bash|zsh|ps1|html|htm|css|"
    r"scss|xml|sql|lock|env|pdf|png|jpg|jpeg|gif|svg|zip|gz|tgz|tar|whl|so|dll|exe|"
    r"db|sqlite|parquet|proto|tf|swift|scala|lua|pl|r|vue|dockerfile|patch|diff|traj"
)

# One pass per text: the first alternative that matches at a position wins (URLs before
# paths, dates before times, amounts before bare numbers), so the parts of a value are
# not values again.
_ALTERNATIVES = [
    r"(?P<url>\b(?:https?|ftp|file|ssh|git|s3|gs)://[^\s<>\"'`;|{}\\^]+)",
    r"(?P<email>(?<![\w.+-])[A-Za-z0-9][\w.+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
    r"\.[A-Za-z]{2,}(?![\w-]))",
    r"(?P<uuid>(?<![\w-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
    r"-[0-9a-fA-F]{12}(?![\w-]))",
    r"(?P<iso>(?<![\w-])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w-]))",
    r"(?P<slashdate>(?<![\w/])(?:\d{1,2}/\d{1,2}/(?:\d{4}|\d{2})|\d{4}/\d{2}/\d{2})"
    r"(?![\w/]))",
    rf"(?P<monthdate>\b{_MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH}(?:,? \d{{4}})?\b)",
    r"(?P<winpath>\b[A-Za-z]:\\(?:[^\\\s\"'<>|:*?]+\\)*[^\\\s\"'<>|:*?]+)",
    r"(?P<abspath>(?<![\w.~/:-])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]+/?)",
    r"(?P<relpath>(?<![\w./~:@-])[\w.@+-]+(?:/[\w.@+-]+)+/?)",
    r"(?P<time>(?<![\w:.])(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?"
    r"(?:\s?[AaPp]\.?[Mm]\b\.?)?(?![\w:])"
    r"|\b(?:1[0-2]|0?[1-9])\s?[AaPp]\.?[Mm]\b\.?)",
    r"(?P<money>(?<![\w$€£¥])[$€£¥]\s?\d[\d,]*(?:\.\d+)?"
    r"(?:\s?(?:[kKmMbB]n?|million|billion|thousand)\b)?"
    r"|(?<![\w.,])\d[\d,]*(?:\.\d+)?\s?(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|dollars?|euros?)\b)",
    rf"(?P<measure>(?<![\w.,-])-?\d[\d,]*(?:\.\d+)?(?:\s?(?:%|°[CF])|\s?(?:{_UNITS})\b"
    r"|[smhdgKMGBVWx]\b)(?![\w%]))",
    r"(?P<dotted>(?<![\w.])v?\d+(?:\.\d+){2,}(?:[-+][0-9A-Za-z.]+)?(?![\w]|\.\w))",
    r"(?P<hash>(?<![\w-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}(?![\w-]))",
    rf"(?P<file>(?<![\w./@-])[\w][\w.-]*\.(?:{_EXTENSIONS})(?![\w/-]|\.\w))",
    r"(?P<number>(?<![\w.,-])\d+(?![\w.,]\d|\w))",
    r"(?P<code>(?<![\w@/.\\-])[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*(?![\w@/\\-]|\.\w))",
]
_VALUE = re.compile("|".join(_ALTERNATIVES))
# A scan also passes over plain words at once: a word of letters alone, after a space, a
# bracket or a quote and before a space or sentence punctuation, starts no value (every
# value there needs a digit, a symbol, a '/', a '.', a '@' or a ':', and a month name
# before a space and a digit is left to the dates). Without it every alternative is
# tried at each such word before ``code`` takes it; the values found are the same.
_SCAN = re.compile(
    "|".join(
        [
            r"(?P<word>(?<![^\s(\[\"'])(?:[a-z]+|[A-Z][a-z]*)(?=[\s,;!?)\]}\"'(]|\Z)(?! \d))",
            *_ALTERNATIVES,
        ]
    )
)
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}$")
_ORDINAL = re.compile(r"^\d+(?:st|nd|rd|th)$", re.IGNORECASE)
_TRAILING = ".,:;!?)]}'\""


def text_values(text: str, *, min_digits: int = 5) -> list[str]:
    """The values in one text, in the order they occur, each once.

    Parameters
    ----------
    text : str
        Plain text (shell output, a log, prose, a stack trace).
    min_digits : int
        Digits a bare integer needs to count (5 in general; 3 in a tool argument or a
        user turn).

    Returns
    -------
    list of str

    Examples
    --------
    >>> text_values("Booked HAT123 on 2024-05-20 for $1,250 (see /srv/app/log.txt).")
    ['HAT123', '2024-05-20', '$1,250', '/srv/app/log.txt']
    >>> text_values("took 300 ms at commit 9fceb02, line 42, utf8")
    ['300 ms', '9fceb02']
    """
    found: dict[str, None] = {}
    for match in _SCAN.finditer(text):
        kind = match.lastgroup
        if kind == "word":
            continue
        value = match.group()
        if kind in ("url", "abspath", "relpath", "winpath", "monthdate", "money", "time"):
            value = _trim(value)
        if value and _counts(kind, value, min_digits):
            found.setdefault(value, None)
    return list(found)


def _trim(value: str) -> str:
    """``value`` without the sentence punctuation after it (a closing bracket stays when
    it closes one the value opened)."""
    while value and value[-1] in _TRAILING:
        last = value[-1]
        if last == ")" and value.count("(") >= value.count(")"):
            break
        value = value[:-1]
    return value.strip()


def _counts(kind: str | None, value: str, min_digits: int) -> bool:
    """Whether a match of ``kind`` is a value worth keeping."""
    if len(value) > _MAX_VALUE:
        return False  # a blob (base64, minified code), not a value to quote
    if kind == "abspath":
        return value.rstrip("/").count("/") >= 2 or bool(_EXTENSION.search(value))
    if kind == "relpath":
        parts = value.rstrip("/").split("/")
        if not any(any(c.isalpha() for c in p) for p in parts):
            return False
        return len(parts) >= 3 or bool(_EXTENSION.search(value))
    if kind == "code":
        return _is_code(value)
    if kind == "number":
        return len(value) >= min_digits
    if kind == "measure":
        return any(c.isdigit() for c in value) and value.lower() not in _COMMON
    return True


_DIGIT_RUN = re.compile(r"\d{3}")


def _is_code(value: str) -> bool:
    """An identifier or code: 4 characters or more, letters and digits mixed, with a
    capital letter or a run of 3 digits (``HAT123``, ``mia_li_3668``; not ``arr2`` or
    ``step10``, the names of variables), not vocabulary."""
    if len(value) < 4 or value.lower() in _COMMON or _ORDINAL.match(value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    return any(c.isupper() for c in value) or _DIGIT_RUN.search(value) is not None


# ------------------------------------------------------------------ reading messages
class _Source:
    """The messages as the ranking reads them: all their text (``corpus``), the text of
    their tool calls' arguments and of their user turns, and the candidates found, in
    order."""

    def __init__(self, messages: Sequence[Message], user: str, *, find: bool = True) -> None:
        corpus: list[str] = []
        calls: list[str] = []
        users: list[str] = []
        self.arguments: set[str] = set()
        self.candidates: dict[str, None] = {}
        self.find = find
        for m in messages:
            for block in m.content:
                if isinstance(block, TextBlock):
                    corpus.append(block.text)
                    if m.participant == user:
                        users.append(block.text)
                    self._scan(block.text)
                elif isinstance(block, ThinkingBlock):
                    corpus.append(block.thinking)
                    self._scan(block.thinking)
                elif isinstance(block, ToolUseBlock):
                    scalars = list(_scalars(block.input))
                    corpus.extend(scalars)
                    calls.extend(scalars)
                    for value in _arguments(block.input):
                        self.arguments.add(value)
                        self._add(value)
                    for text in _strings(block.input):
                        self._scan(text, min_digits=3)
                elif isinstance(block, ToolResultBlock):
                    content = block.content
                    texts = (
                        [content]
                        if isinstance(content, str)
                        else [b.text for b in content if isinstance(b, TextBlock)]
                    )
                    for text in texts:
                        corpus.append(text)
                        if find:
                            for part in _result_texts(text):
                                self._scan(part)
        self.corpus = "\n".join(corpus)
        self.calls = "\n".join(calls)
        self.users = "\n".join(users)

    def _scan(self, text: str, min_digits: int = 5) -> None:
        if self.find:
            for v in text_values(text, min_digits=min_digits):
                self.candidates.setdefault(v, None)

    def _add(self, value: str) -> None:
        if self.find:
            self.candidates.setdefault(value, None)


def _leaves(value: Any) -> Iterator[Any]:
    """Every value in a tool call's arguments that is neither an object nor an array
    (nested ones included), in order."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _arguments(value: Any) -> Iterator[str]:
    """The scalar argument values of a tool call kept whole, in order."""
    for leaf in _leaves(value):
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, str):
            text = leaf.strip()
            if 3 <= len(text) <= _MAX_ARGUMENT and "\n" not in text and ";" not in text:
                yield text
        elif isinstance(leaf, int):
            if abs(leaf) >= 100:
                yield str(leaf)
        elif isinstance(leaf, float):
            text = repr(leaf)
            if math.isfinite(leaf) and sum(c.isdigit() for c in text) >= 2:
                yield text


def _strings(value: Any) -> Iterator[str]:
    """Every string in a tool call's arguments (nested ones included), in order."""
    return (leaf for leaf in _leaves(value) if isinstance(leaf, str))


def _scalars(value: Any) -> Iterator[str]:
    """Every string and number in a tool call's arguments as written (numbers as
    :func:`_arguments` writes them), in order."""
    for leaf in _leaves(value):
        if isinstance(leaf, str):
            yield leaf
        elif isinstance(leaf, int | float) and not isinstance(leaf, bool):
            yield repr(leaf) if isinstance(leaf, float) else str(leaf)


def _result_texts(text: str) -> list[str]:
    """The texts of a tool result to read values from: the strings and numbers of a
    JSON result (not its keys), else the text itself."""
    stripped = text.strip()
    if stripped[:1] not in ("{", "["):
        return [text]
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return [text]
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out.append(str(value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(parsed)
    return out


# --------------------------------------------------------------------- ranking
def _in_prose(value: str, prose: str) -> bool:
    """``value`` occurs in ``prose`` as a whole word: no word character (a letter, a
    digit or ``_``, as ``\\w`` reads them) right before or after it.

    >>> _in_prose("HAT12", "Moved to HAT12."), _in_prose("HAT12", "Moved to HAT123.")
    (True, False)
    """
    at = prose.find(value)
    while at >= 0:
        end = at + len(value)
        if not (at and _word_char(prose[at - 1])) and not (
            end < len(prose) and _word_char(prose[end])
        ):
            return True
        at = prose.find(value, at + 1)
    return False


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _rarity(count: int) -> int:
    return 0 if count <= 2 else 1 if count <= 5 else 2


_IDENTIFYING = frozenset(
    ("url", "email", "uuid", "winpath", "abspath", "relpath", "file", "hash", "dotted", "code")
)
_QUANTITIES = frozenset(("iso", "slashdate", "monthdate", "money", "measure"))
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def _weight(value: str) -> int:
    """How specific a kind of value is: 2 for what identifies (codes, hashes, paths,
    URLs, addresses, a tool argument's free text), 1 for dates and quantities, 0 for
    times and bare numbers."""
    match = _VALUE.fullmatch(value)
    kind = None if match is None else match.lastgroup
    if kind is None and _NUMBER.fullmatch(value):
        return 0  # a number argument (12.5, -3e-05)
    if kind is None or kind in _IDENTIFYING:
        return 2
    return 1 if kind in _QUANTITIES else 0


def _rank(source: _Source, values: Iterable[str], prose: str) -> list[str]:
    corpus = source.corpus
    end = len(corpus)
    keyed = []
    for order, value in enumerate(dict.fromkeys(values)):
        if not value or _in_prose(value, prose):
            continue
        if value in source.arguments or value in source.calls:
            tier = 0
        elif value in source.users:
            tier = 1
        else:
            tier = 2
        count = corpus.count(value)
        first = corpus.find(value)
        at = first if first >= 0 else end + order
        specific = (-_weight(value), -min(len(value), _SPECIFIC))
        keyed.append(((tier, first < 0, _rarity(count), *specific, at, order), value))
    keyed.sort(key=lambda kv: kv[0])
    return [v for _, v in keyed]


def extract_values(messages: Sequence[Message], *, prose: str = "", user: str = USER) -> list[str]:
    """The exact values of ``messages``, best first (see the module's rules).

    Parameters
    ----------
    messages : sequence of Message
        The messages a memory covers, in order.
    prose : str
        The memory's text: values it already holds (as a whole word) are dropped.
    user : str
        The participant whose text turns are the user's.

    Returns
    -------
    list of str
        Every value found, ranked; :func:`cap_values` keeps what fits an allowance.

    Examples
    --------
    >>> from context_manager.messages import Message, ToolUseBlock
    >>> ask = Message.text_message("User", "Please move reservation ZFA04Y to May 20th.")
    >>> call = Message(participant="Claude", content=(ToolUseBlock(
    ...     id="c1", name="update", input={"reservation_id": "ZFA04Y", "flight": "HAT123"}),))
    >>> extract_values([ask, call])
    ['ZFA04Y', 'HAT123', 'May 20th']
    >>> extract_values([ask, call], prose="The agent moved ZFA04Y.")
    ['HAT123', 'May 20th']
    """
    source = _Source(messages, user)
    return _rank(source, source.candidates, prose)


def rank_values(
    values: Iterable[str],
    messages: Sequence[Message],
    *,
    prose: str = "",
    user: str = USER,
) -> list[str]:
    """``values`` (each once) ranked as :func:`extract_values` ranks what it finds in
    ``messages``; values the messages no longer hold rank after the others of their
    tier, in the order given. Values in ``prose`` are dropped.

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> log = Message.text_message("Tool", "ok /var/log/a.log\\nok /var/log/a.log\\n" * 2)
    >>> ask = Message.text_message("User", "Where is /etc/app/b.conf?")
    >>> rank_values(["/var/log/a.log", "/etc/app/b.conf", "/srv/x/gone.txt"], [log, ask])
    ['/etc/app/b.conf', '/var/log/a.log', '/srv/x/gone.txt']
    """
    return _rank(_Source(messages, user, find=False), values, prose)


def merge_values(
    children: Sequence[Sequence[str]],
    messages: Sequence[Message] | None,
    *,
    prose: str = "",
    user: str = USER,
) -> list[str]:
    """The values of a memory merged from ``children`` (their values, oldest child
    first, each ranked best first): their union, re-ranked over the ``messages`` the
    merge covers; or, with ``messages`` None, the children's lists taken rank by rank
    (every child's best, oldest child first, then every child's second, ...), each value
    once and none the ``prose`` already holds, which reads no message at all.

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> a = Message.text_message("User", "Ticket T-48213-C is open.")
    >>> b = Message.text_message("Claude", "Deployed build 9fceb02.")
    >>> merge_values([["T-48213-C"], ["9fceb02", "T-48213-C"]], [a, b])
    ['T-48213-C', '9fceb02']
    >>> merge_values([["A-1001", "B-2002"], ["C-3003", "A-1001", "D-4004"]], None)
    ['A-1001', 'C-3003', 'B-2002', 'D-4004']
    >>> merge_values([["A-1001", "B-2002"], ["C-3003"]], None, prose="Closed B-2002.")
    ['A-1001', 'C-3003']
    """
    if messages is None:
        merged: dict[str, None] = {}
        for rank in range(max((len(c) for c in children), default=0)):
            for values in children:
                if rank < len(values) and not _in_prose(values[rank], prose):
                    merged.setdefault(values[rank], None)
        return list(merged)
    union: dict[str, None] = {}
    for values in children:
        for v in values:
            union.setdefault(v, None)
    return rank_values(union, messages, prose=prose, user=user)


# ------------------------------------------------------------------- rendering
def render_values(values: Sequence[str]) -> str:
    """The line that shows ``values`` (empty for none).

    Examples
    --------
    >>> render_values(["HAT123", "/repo/src/x.py", "12.5 kg"])
    'Exact values: HAT123; /repo/src/x.py; 12.5 kg'
    >>> render_values([])
    ''
    """
    return VALUES_LABEL + VALUES_SEPARATOR.join(values) if values else ""


def with_values(prose: str, values: Sequence[str]) -> str:
    """A memory's text as a context shows it: its prose, then the line of its values.

    Examples
    --------
    >>> with_values("Booked the flight.", ["HAT123"])
    'Booked the flight.\\nExact values: HAT123'
    >>> with_values("Booked the flight.", [])
    'Booked the flight.'
    """
    line = render_values(values)
    if not line:
        return prose
    return f"{prose}\n{line}" if prose else line


def cap_values(
    values: Sequence[str],
    max_tokens: int,
    count_text: Callable[[str], int] | None = None,
) -> tuple[str, ...]:
    """The best of ``values`` whose line (:func:`render_values`) fits ``max_tokens``.

    Values are taken in rank order; one that does not fit is passed over for the next,
    and one already inside a value taken (a file name inside its path) is left out.

    Parameters
    ----------
    values : sequence of str
        Ranked values (:func:`extract_values`).
    max_tokens : int
        The allowance of the whole line, label included; 0 or less keeps none.
    count_text : callable, optional
        The token counter's ``count_text`` (default: ``ceil(chars / 4)``).

    Returns
    -------
    tuple of str
        In rank order.

    Examples
    --------
    >>> cap_values(["/repo/src/x.py", "x.py", "HAT123", "12.5 kg"], 10)
    ('/repo/src/x.py', 'HAT123')
    >>> cap_values(["HAT123"], 0)
    ()
    """
    if max_tokens <= 0:
        return ()
    count = count_text if count_text is not None else _chars
    kept: list[str] = []
    for value in values[:_CONSIDERED]:
        if VALUES_SEPARATOR.strip() in value or "\n" in value:
            continue
        if any(value in k for k in kept):
            continue
        if count(render_values([*kept, value])) <= max_tokens:
            kept.append(value)
    return tuple(kept)


def _chars(text: str) -> int:
    return math.ceil(len(text) / 4)
