"""The fixed wording of the strategy and the edits made to a summariser request."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from ...messages import Message, TextBlock, ThinkingBlock
from ...summarizer import MEMORY_MARKER_PARTICIPANT, CompletionRequest

__all__ = [
    "CONTEXT_MANAGER",
    "NO_TOOLS",
    "PLAIN_PROSE",
    "clean",
    "cut",
    "shape",
    "shorter",
    "strip_thinking",
    "with_suffix",
]

CONTEXT_MANAGER = MEMORY_MARKER_PARTICIPANT
"""The participant of the strategy's own turns (questions, markers, instructions)."""
NO_TOOLS = " Answer in plain text only; do not call any tool."
PLAIN_PROSE = " Write plain prose only, with no tags and no reasoning markup."


def shape(request: CompletionRequest) -> str:
    """A stable hash of a request: what a refusal ledger entry is keyed by."""
    return hashlib.sha256(request.model_dump_json().encode()).hexdigest()


def strip_thinking(messages: list[Message]) -> tuple[list[Message], list[int]]:
    """The messages without thinking blocks (a message left empty is dropped), and for
    each input message the index of the last kept message at or before it (-1: none)."""
    out: list[Message] = []
    moved: list[int] = []
    for m in messages:
        content = tuple(b for b in m.content if not isinstance(b, ThinkingBlock))
        if content:
            same = len(content) == len(m.content)
            out.append(m if same else m.model_copy(update={"content": content}))
        moved.append(len(out) - 1)
    return out, moved


_THINKING = re.compile(r"^\s*<thinking>.*?</thinking>\s*", re.DOTALL)


def clean(text: str) -> str:
    r"""The answer without a leading ``<thinking>`` preamble, stripped, and storable: a
    lone surrogate (no character of any text a model meant to write) becomes U+FFFD.

    Examples
    --------
    >>> clean("<thinking>hmm</thinking> I fixed the test \ud800.")
    'I fixed the test \ufffd.'
    """
    text = _THINKING.sub("", text).strip()
    if not text.isascii():
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def with_suffix(request: CompletionRequest, suffix: str) -> CompletionRequest:
    """The request with ``suffix`` appended to its final instruction turn."""
    messages = list(request.messages)
    last = messages[-1]
    blocks = list(last.content)
    if blocks and isinstance(blocks[-1], TextBlock):
        blocks[-1] = TextBlock(text=blocks[-1].text + suffix)
    else:
        blocks.append(TextBlock(text=suffix.strip()))
    messages[-1] = last.model_copy(update={"content": tuple(blocks)})
    return request.model_copy(update={"messages": tuple(messages)})


def shorter(limit: int) -> str:
    """The sentence appended to a memory request whose answer was over ``limit`` tokens."""
    return (
        f" Your memory must be at most {limit} tokens; a longer one is cut. Write it "
        "again, shorter: keep the decisions, facts and open threads, drop the detail."
    )


_SENTENCE_END = re.compile(r"[.!?;:](?=\s)|\n")
_ELLIPSIS = "\u2026"


def cut(text: str, limit: int, count: Callable[[str], int]) -> str:
    """The longest start of ``text`` within ``limit`` tokens by ``count``, ending at a
    sentence end (else a word boundary) in its second half, followed by an ellipsis.

    The result is never over ``limit`` (with a counter that is not monotone in length,
    characters before the ellipsis go until it is). ``text`` within the limit is
    returned as it is.

    Examples
    --------
    >>> chars = len
    >>> cut("I fixed the parser. Then I ran the tests and all passed.", 30, chars)
    'I fixed the parser. …'
    >>> cut("short", 30, chars)
    'short'
    """
    if count(text) <= limit:
        return text
    lo, hi = 0, len(text)  # the longest prefix (with its ellipsis) within the limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(f"{text[:mid].rstrip()} {_ELLIPSIS}") <= limit:
            lo = mid
        else:
            hi = mid - 1
    head = text[:lo]
    ends = [m.end() for m in _SENTENCE_END.finditer(head + " ")]
    ends = [e for e in ends if e <= len(head) and e >= len(head) // 2]
    if ends:
        head = head[: ends[-1]]
    elif " " in head[len(head) // 2 :]:
        head = head[: head.rindex(" ")]
    out = f"{head.rstrip()} {_ELLIPSIS}" if head.strip() else _ELLIPSIS
    while out and count(out) > limit:  # a counter that is not monotone in length
        out = out[:-2] + _ELLIPSIS if len(out) > 1 else ""
    return out
