"""Normal pruning: old, verbose (or aged) function results become short placeholders.

Results are scanned from the newest back. The newest ``protect_recent_tokens``
of result text are never pruned, nor anything within the most recent
``protected_user_turns`` user turns, nor a protected function's results. A
result is eligible when it is verbose (more than ``max_output_chars`` bytes)
or aged (``decay_user_turns`` later user turns, when decay is on). Nothing
changes unless the pass frees at least ``min_free_tokens``; nothing is removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .config import AssemblyConfig
from .estimate import result_tokens, text_bytes, text_tokens
from .results import ResultSite, Rewrite, apply_rewrites, result_sites
from .wire import AnyMessage, TextBlock, is_plain_user, joined_text

__all__ = ["PruneOutcome", "PruneSettings", "placeholder", "prune_results"]


def placeholder(function_id: str, tokens: int) -> str:
    """The text a pruned result is replaced with.

    Examples
    --------
    >>> text = placeholder("web_search", 1234)
    >>> text, len(text.encode()), text_tokens(text)
    ('[output of web_search pruned: was ~1234 tokens; re-call it if still needed]', 75, 18)
    """
    return f"[output of {function_id} pruned: was ~{tokens} tokens; re-call it if still needed]"


def _is_placeholder(content: tuple[object, ...], function_id: str) -> bool:
    if len(content) != 1 or not isinstance(content[0], TextBlock):
        return False
    pattern = (
        r"\[output of "
        + re.escape(function_id)
        + r" pruned: was ~\d+ tokens; re-call it if still needed\]"
    )
    return re.fullmatch(pattern, content[0].text) is not None


@dataclass(frozen=True)
class PruneSettings:
    """Thresholds of one pruning pass (see :class:`AssemblyConfig` for their meaning)."""

    protect_recent_tokens: int
    decay_user_turns: int
    protected_user_turns: int
    min_free_tokens: int
    max_output_chars: int
    protected_functions: frozenset[str] = frozenset()

    @classmethod
    def from_config(
        cls, config: AssemblyConfig, protected_functions: Iterable[str] = ()
    ) -> PruneSettings:
        """The configured thresholds, with the given protected functions."""
        return cls(
            protect_recent_tokens=config.protect_recent_tokens,
            decay_user_turns=config.decay_user_turns,
            protected_user_turns=config.protected_user_turns,
            min_free_tokens=config.min_free_tokens,
            max_output_chars=config.max_output_chars,
            protected_functions=frozenset(protected_functions),
        )


@dataclass(frozen=True)
class PruneOutcome:
    """Messages after pruning, the net tokens freed, results pruned and results scanned."""

    messages: list[AnyMessage]
    pruned_tokens: int
    pruned_parts: int
    scanned_parts: int


def prune_results(messages: Sequence[AnyMessage], settings: PruneSettings) -> PruneOutcome:
    """One normal pruning pass over ``messages`` (a new list; the input is untouched)."""
    by_message: dict[int, list[ResultSite]] = {}
    for site in result_sites(messages):
        if site.block_index is not None and site.function_id is None:
            continue  # an inline result that answers no earlier call
        by_message.setdefault(site.message_index, []).append(site)
    decay = settings.decay_user_turns
    user_turns = window = scanned = 0
    eligible: list[tuple[ResultSite, int, str]] = []
    for i in range(len(messages) - 1, -1, -1):
        if is_plain_user(messages[i]):
            user_turns += 1
            continue
        if user_turns < settings.protected_user_turns:
            continue
        for site in reversed(by_message.get(i, [])):
            function_id = site.function_id
            assert function_id is not None
            if function_id in settings.protected_functions:
                continue
            tokens = result_tokens(site.content)
            scanned += 1
            window += tokens
            if window <= settings.protect_recent_tokens:
                continue  # recent
            verbose = text_bytes(joined_text(site.content)) > settings.max_output_chars
            aged = decay > 0 and user_turns >= decay
            # a placeholder is never pruned again, and nothing is replaced by something
            # larger: pruning stays idempotent whatever max_output_chars is
            if not (verbose or aged) or _is_placeholder(site.content, function_id):
                continue
            text = placeholder(function_id, tokens)
            saving = tokens - text_tokens(text)
            if saving > 0:
                eligible.append((site, saving, text))
    net = sum(saving for _, saving, _ in eligible)
    if not eligible or net < settings.min_free_tokens:
        return PruneOutcome(list(messages), 0, 0, scanned)
    rewrites = {site.key: Rewrite((TextBlock(text=text),)) for site, _, text in eligible}
    return PruneOutcome(apply_rewrites(messages, rewrites), net, len(eligible), scanned)
