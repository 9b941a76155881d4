"""The result cap: no single function result may exceed ``max_result_tokens``.

An oversized result keeps its head (60 %) and tail (40 %) around a marker
saying how large it was and how to get the middle back. The pass has no
exemptions and is idempotent: a capped result estimates at or under the cap.

:func:`cap_text` (with :func:`cap_marker`) is the one cut every cap makes: the
strategies' caps of stored messages (:mod:`context_manager.strategies.capping`,
one cap level per compile) cut with it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ..tokens import compact_json
from .estimate import (
    Estimator,
    is_char_boundary,
    is_denied,
    result_tokens,
    text_bytes,
    text_tokens,
)
from .results import KEEP_DETAILS, Rewrite, apply_rewrites, result_sites
from .wire import AnyMessage, TextBlock, joined_text

__all__ = [
    "CAPPED_DETAILS_BYTES",
    "CapOutcome",
    "cap_marker",
    "cap_results",
    "cap_text",
]

CAPPED_DETAILS_BYTES: Final = 2048
"""Serialised ``details`` above this size are replaced when their result is capped."""

_UNKNOWN_FUNCTION: Final = "the function"


@dataclass(frozen=True)
class CapOutcome:
    """Messages after the cap pass, results rewritten and tokens saved."""

    messages: list[AnyMessage]
    capped_parts: int
    capped_tokens: int


def cap_marker(tokens: int, function_id: str, max_result_tokens: int) -> str:
    """The longest marker whose own estimate fits the cap.

    Examples
    --------
    >>> cap_marker(30000, "read_file", 20000)[:40]
    '\\n[…result capped: was ~30000 tokens; mid'
    >>> cap_marker(30000, "read_file", 1), cap_marker(30000, "read_file", 0)
    ('[cap]', '…')
    """
    candidates = (
        f"\n[…result capped: was ~{tokens} tokens; middle omitted; re-call {function_id} "
        "with narrower arguments if the omitted middle is needed]\n",
        "[cap]",
        "…",
    )
    for marker in candidates:
        if text_tokens(marker) <= max_result_tokens:
            return marker
    return ""


def cap_text(text: str, tokens: int, max_result_tokens: int, function_id: str) -> str:
    """``text`` cut to its head and tail around the cap marker, at character boundaries.

    ``tokens`` is the result's estimate (text plus images).

    Examples
    --------
    >>> cap_text("a" * 40 + "b" * 40, 20, 10, "f")
    'aaaaaaaaaaaaaaaaaa[cap]bbbbbbbbbbbbb'
    """
    marker = cap_marker(tokens, function_id, max_result_tokens)
    raw = text.encode("utf-8", "surrogatepass")
    target = len(raw) * max_result_tokens * 9 // (tokens * 10)
    keep = max(0, target - text_bytes(marker))
    head = keep * 6 // 10
    tail = keep - head
    head_end = head
    while not is_char_boundary(raw, head_end):
        head_end -= 1
    tail_start = len(raw) - tail
    while not is_char_boundary(raw, tail_start):
        tail_start += 1
    tail_start = max(tail_start, head_end)
    return (
        raw[:head_end].decode("utf-8", "surrogatepass")
        + marker
        + raw[tail_start:].decode("utf-8", "surrogatepass")
    )


def cap_results(
    messages: Sequence[AnyMessage], max_result_tokens: int, estimator: Estimator | None = None
) -> CapOutcome:
    """Cap every function result over ``max_result_tokens`` (0 disables the pass).

    Images of a capped result are dropped; a message-level result's large
    ``details`` (over 2048 serialised bytes, unless a denial envelope) become
    ``{"context_capped": {"original_estimated_tokens": tokens}}``.
    """
    estimator = estimator or Estimator()
    if max_result_tokens <= 0:
        return CapOutcome(list(messages), 0, 0)
    rewrites: dict[tuple[int, int | None], Rewrite] = {}
    for site in result_sites(messages):
        tokens = result_tokens(site.content)
        if tokens <= max_result_tokens:
            continue
        function_id = site.function_id if site.function_id is not None else _UNKNOWN_FUNCTION
        text = cap_text(joined_text(site.content), tokens, max_result_tokens, function_id)
        details = KEEP_DETAILS
        if site.block_index is None:
            current = messages[site.message_index].details  # type: ignore[union-attr]
            if not is_denied(current) and text_bytes(compact_json(current)) > CAPPED_DETAILS_BYTES:
                details = {"context_capped": {"original_estimated_tokens": tokens}}
        rewrites[site.key] = Rewrite((TextBlock(text=text),), details)
    if not rewrites:
        return CapOutcome(list(messages), 0, 0)
    out = apply_rewrites(messages, rewrites)
    saved = sum(
        estimator.message(messages[i]) - estimator.message(out[i]) for i in {i for i, _ in rewrites}
    )
    return CapOutcome(out, len(rewrites), saved)
