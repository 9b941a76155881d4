"""Emergency reduction: the largest function results become bounded references.

When a request is still over budget after capping, pruning and compaction,
results are replaced largest first, ignoring every pruning guard, until
enough tokens are freed. A reference names the call, the original size and
hash, a 160-character preview and how to get the original back; it stays
under about 2000 bytes. Message count, order and ids never change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..tokens import compact_json
from .estimate import Estimator, result_tokens
from .results import ResultSite, Rewrite, result_sites, rewrite_message
from .wire import AnyMessage, FunctionResultMessage, TextBlock, joined_text

__all__ = [
    "PREVIEW_CHARS",
    "REDUCED_PREFIX",
    "RETRIEVAL_HINT",
    "EmergencyOutcome",
    "emergency_reduce",
    "reference_for",
]

PREVIEW_CHARS: Final = 160
REDUCED_PREFIX: Final = "[function result reduced for context budget] "
RETRIEVAL_HINT: Final = (
    "The original result remains in the session transcript; retrieve it by function_call_id."
)


@dataclass(frozen=True)
class EmergencyOutcome:
    """Messages after reduction, tokens freed and results replaced."""

    messages: list[AnyMessage]
    freed_tokens: int
    replaced: int


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def reference_for(
    site: ResultSite, original: Any, original_tokens: int, details: Any = None
) -> dict[str, Any]:
    """The reference that stands in for a result.

    ``original`` is the wire form of what is replaced: the whole message, or
    the inline block. ``original_bytes`` is the length of its compact JSON and
    ``sha256`` the hash of those bytes; ``preview`` is the first 160 characters
    of the result's text (of its serialised ``details`` when it has no text),
    with ``…`` when cut.
    """
    serialised = compact_json(original).encode("utf-8", "surrogatepass")
    text = joined_text(site.content)
    if not text and details is not None:
        text = compact_json(details)
    ref: dict[str, Any] = {"kind": "function_result_reference"}
    if site.function_id is not None:
        ref["function_id"] = site.function_id
    ref["function_call_id"] = site.function_call_id
    ref["original_bytes"] = len(serialised)
    ref["original_estimated_tokens"] = original_tokens
    ref["sha256"] = hashlib.sha256(serialised).hexdigest()
    ref["preview"] = _preview(text)
    ref["retrieval_hint"] = RETRIEVAL_HINT
    return ref


def emergency_reduce(
    messages: Sequence[AnyMessage], required: int, estimator: Estimator | None = None
) -> EmergencyOutcome:
    """Replace results, largest first (ties in transcript order), until ``required`` is freed.

    A result whose replacement would free nothing is left as it is.
    """
    estimator = estimator or Estimator()
    out = list(messages)
    if required <= 0:
        return EmergencyOutcome(out, 0, 0)
    candidates: list[tuple[int, int, ResultSite]] = []
    for order, site in enumerate(result_sites(messages)):
        if site.block_index is None:
            value = estimator.message(messages[site.message_index])
        else:
            value = result_tokens(site.content)
        candidates.append((value, order, site))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    freed = replaced = 0
    for value, _, site in candidates:
        if freed >= required:
            break
        host = out[site.message_index]
        if site.block_index is None:
            assert isinstance(host, FunctionResultMessage)
            ref = reference_for(site, host.wire(), value, host.details)
            text = REDUCED_PREFIX + compact_json(ref)
            rewrite = Rewrite((TextBlock(text=text),), {"context_reference": ref})
        else:
            ref = reference_for(site, host.content[site.block_index].wire(), value)
            rewrite = Rewrite((TextBlock(text=REDUCED_PREFIX + compact_json(ref)),))
        changed = rewrite_message(host, {site.block_index: rewrite})
        saved = estimator.message(host) - estimator.message(changed)
        if saved <= 0:
            continue
        out[site.message_index] = changed
        freed += saved
        replaced += 1
    return EmergencyOutcome(out, freed, replaced)
