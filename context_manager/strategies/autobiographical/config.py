"""The options of :class:`~context_manager.strategies.autobiographical.AutobiographicalStrategy`.

Every option carries a description (``AutobiographicalConfig.model_fields[name].description``,
also in ``AutobiographicalConfig.model_json_schema()``). The defaults suit a window of
about 200k tokens; :meth:`AutobiographicalConfig.for_window` sizes the options for any
window from 4k to 1M tokens. :meth:`AutobiographicalConfig.reference` gives the
TypeScript reference's defaults instead, and an option of the reference this config does
not have is refused with what to use instead (:data:`UNSUPPORTED_OPTIONS`; the list and
the defaults that differ are in ``docs/reference-defaults.md``).
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import pydantic
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from ...errors import ConfigError
from ...messages import CacheTTL
from ..send_copy import SendCopyOptions

__all__ = [
    "UNSUPPORTED_OPTIONS",
    "AutobiographicalConfig",
    "ToolProseFallback",
    "UnsupportedOption",
    "UnsupportedOptionError",
]

_MIN_WINDOW = 1024
"""The smallest window :meth:`AutobiographicalConfig.for_window` sizes for."""
_VALUES_SHARE = 4
"""By default a memory's exact values take up to this fraction (1 / share) of
``summary_target_tokens``."""


class ToolProseFallback(BaseModel):
    """The tool-prose rung of the refusal ladder
    (:attr:`AutobiographicalConfig.compression_tool_prose_fallback`).

    A model may refuse to write the memory of a stretch where the agent reasoned
    through a tool (a ``think`` or ``plan`` tool whose argument is its prose). The
    rung asks once more with each such call rewritten as a call of the host's
    note-taking tool, the same prose as its one argument: nothing is dropped, only
    reframed as notes. The note-taking tool must be among the tool definitions the
    host set (``set_tool_definitions``), or the rung is skipped, with a warning.

    (The reference's ``{intoTool, fromTools, field, result, minChars}``, named
    ``into_tool``, ``from_tools``, ``into_argument``, ``result``, ``min_chars``.)

    Examples
    --------
    >>> rung = ToolProseFallback(into_tool="note", from_tools=("think",))
    >>> rung.into_argument, rung.min_chars
    ('content', 100)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    into_tool: str = Field(
        min_length=1, description="The host's note-taking tool the reasoning prose moves into."
    )
    from_tools: tuple[str, ...] = Field(
        min_length=1, description="The reasoning tools whose long arguments move."
    )
    into_argument: str = Field(
        default="content",
        min_length=1,
        description="The argument of ``into_tool`` that holds the moved prose.",
    )
    result: str | None = Field(
        default=None,
        description="What a moved call's result says in the rung's request (the note "
        "tool's acknowledgement); None keeps each call's own result.",
    )
    min_chars: int = Field(
        default=100,
        ge=1,
        description="A call moves when its prose (its argument, or its arguments as "
        "``name: value`` lines) has at least this many characters.",
    )

    @model_validator(mode="after")
    def _distinct(self) -> ToolProseFallback:
        if self.into_tool in self.from_tools:
            raise ValueError(
                f"into_tool={self.into_tool!r} is also in from_tools: the prose must move "
                "into another tool than the one it came from"
            )
        return self


MIN_SOURCE_CAP = 64
"""The least ``memory_source_cap_tokens`` may be: a result cut shorter says nothing."""


class AutobiographicalConfig(SendCopyOptions):
    """Options of :class:`AutobiographicalStrategy` (unknown keys are rejected).

    The defaults suit a window of about 200k tokens (a recent window of 30k, chunks of
    3k, memories of 2k); :meth:`for_window` sizes them for another window. Each field's
    description is in :attr:`model_fields` and :meth:`model_json_schema`.

    Examples
    --------
    >>> config = AutobiographicalConfig.for_window(8000, compression_model="extractive")
    >>> config.recent_window_tokens, config.reserve_for_response_tokens
    (1750, 1000)
    >>> AutobiographicalConfig.model_fields["recent_window_tokens"].description.split(":")[0]
    'The raw tail'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    compression_model: str | None = Field(
        default=None,
        description="The model whose voice memories are written in (the ``model`` of every "
        "summariser request). No default: without it the strategy refuses to write memories.",
    )
    target_chunk_tokens: int = Field(
        default=3000,
        gt=0,
        description="A chunk closes once it holds this many tokens and ``min_chunk_messages`` "
        "messages, or twice this many tokens whatever its length (so a huge message can still "
        "fold). Each closed chunk becomes one L1 memory.",
    )
    shard_large_messages: bool = Field(
        default=True,
        description="A text-only message (text blocks alone) of more than twice "
        "``target_chunk_tokens`` tokens is stored as shards of about ``target_chunk_tokens`` "
        "each, cut at paragraph, line or word breaks (a body in parts, see "
        "context_manager.bodies), so it is remembered in pieces; a compile sends the raw "
        "shards of one body as one message. Only with ``adaptive_resolution`` (as in the "
        "reference). False stores every message whole.",
    )
    attachments_ignore_size: bool = Field(
        default=True,
        description="A chunk's size counts its messages without their images (each image "
        "as the note that replaces it), so a few screenshots do not close a chunk of a "
        "handful of words. False counts images at the counter's price.",
    )
    max_compression_image_bytes: int = Field(
        default=12 * 1024 * 1024,
        ge=0,
        description="A memory request carries the newest images of what it remembers up "
        "to this many (decoded) bytes; older ones become a note. 0: no limit.",
    )
    min_chunk_messages: int = Field(
        default=4,
        ge=1,
        description="Messages a chunk needs before it closes at ``target_chunk_tokens`` (a chunk "
        "of twice that many tokens closes with fewer).",
    )
    recent_window_tokens: int = Field(
        default=30_000,
        ge=0,
        description="The raw tail: the newest messages up to this many tokens, and always the "
        "newest message, are never folded and always sent verbatim (the boundary never falls "
        "between a tool call and its answer). It must fit the input budget with room to "
        "spare: lower it for small windows.",
    )
    head_window_tokens: int = Field(
        default=0,
        ge=0,
        description="The raw head: the oldest messages up to this many tokens (the task "
        "statement, say) are never folded and always sent verbatim. 0: no head.",
    )
    l1_holdback_chunks: int = Field(
        default=1,
        ge=0,
        description="The newest closed chunks left uncompressed until more close (unless a "
        "compile asks for their memories): recent history stays raw a little longer.",
    )
    memory_schedule: Literal["eager", "forecast"] = Field(
        default="eager",
        description="When a chunk's memory is written. 'eager': once the chunk closes and "
        "leaves the holdback. 'forecast': only once a compile asks for it, because its "
        "plan will fold the chunk soon (kv-stable asks once a held request passes the "
        "target) or because the request does not fit without it (a compile then catches "
        "up): history that is never folded is never summarised. Merges then wait for a "
        "request that needs them, so a fold may have to catch up on them and the memories "
        "shown fill more of the window meanwhile; on the bundled replays 'forecast' billed "
        "2-17 % more than 'eager' without a holdback.",
    )
    min_chunk_chars_for_llm: int = Field(
        default=200,
        ge=0,
        description="Text-only chunks with fewer non-space characters get a stub memory, "
        "without a summariser call.",
    )
    hierarchical: bool = Field(
        default=True,
        description="True: memories merge into memories of the next level, without a fixed "
        "top. False: a single level, L1 memories only; nothing is ever merged (neither by "
        "``merge_threshold`` nor when a compile asks for a coarser memory), so the fully "
        "folded history grows with its length.",
    )
    merge_threshold: int = Field(
        default=6,
        ge=2,
        description="Memories of one level merged into one of the next level. A run of "
        "contiguous parentless memories at the newest end of a level merges its oldest "
        "``merge_threshold`` once it holds that many, one fewer where that would leave a "
        "single memory behind (the whole run of three at 2). An older run, cut off by a live "
        "message no memory of its level covers (a refused chunk, a pin), can no longer grow: "
        "it merges once it holds two, whole, in the fewest and most even groups of at most "
        "``merge_threshold`` (seven at 3: 3 + 2 + 2), so none of it is left alone; at 2 an "
        "odd run has one group of three. Unlike the reference, whose merge queue fixes a "
        "group when it is enqueued, the groups are worked out again before each merge, so a "
        "newest run that grew while its merge failed merges by the rule at its new length; "
        "and a merge over a held message waits without stopping other work. Ignored unless "
        "``hierarchical``.",
    )
    merge_from: Literal["below", "memories"] = Field(
        default="below",
        description="What a merge is written from. ``below``: what the memories it merges "
        "were written from, one level down (an L2 from the messages of its L1s, an L3 from "
        "the L1s under its L2s), so the L2 merges read the remembered history a second time. "
        "``memories``: the memories it merges (an L2 from its L1s), a few hundred tokens per "
        "merge at small windows; every level is then a summary of the one below it.",
    )
    merge_attempt_limit: int = Field(
        default=5,
        ge=1,
        description="Answers that are not memory on one merge before it is no longer tried "
        "(persisted).",
    )
    merge_max_source_span_messages: int | None = Field(
        default=None,
        ge=1,
        description="When set, a memory spanning more messages than this x "
        "merge_threshold^(level - 3) (the exponent floored at 0) is not merged further. None "
        "(the default): no cap. A cap keeps old memories finer, but a memory it stops also "
        "stops its neighbours one level up (a merge takes contiguous memories of one level), "
        "so on an agent with many short messages the fully folded history grows with its "
        "length until no budget holds it: set one only for histories of bounded length.",
    )
    chunk_attempt_limit: int = Field(
        default=3,
        ge=1,
        description="Answers that are not memory (a refusal, a truncation, an empty answer) on "
        "one chunk before it stays raw (persisted; ``retry_given_up`` starts over). A provider "
        "error, an exception or a missed deadline is not an answer: it never counts.",
    )
    summary_timeout_seconds: float = Field(
        default=320.0,
        gt=0,
        allow_inf_nan=False,
        description="Deadline of one summariser call (sent as ``CompletionRequest.timeout``); a "
        "call still running then is abandoned and the work retried later, as after an error.",
    )
    retry_backoff_seconds: float = Field(
        default=30.0,
        ge=0,
        allow_inf_nan=False,
        description="Wait before retrying work whose call failed (an error, an exception, a "
        "missed deadline), doubled after each further failure in a row, at most an hour.",
    )
    compression_refusal_curve_fallbacks: int = Field(
        default=3,
        ge=0,
        description="After a refused L1 request, at most this many variants, each showing one "
        "merged memory of the recall ladder as its children instead; 0 disables.",
    )
    compression_context_budget_tokens: int = Field(
        default=200_000,
        gt=0,
        description="The summariser's window: a request variant is sent only if its input plus "
        "the output cap fits this.",
    )
    compression_source_only: bool = Field(
        default=True,
        description="Every L1 request carries only the memory marker, the chunk and the "
        "instruction (its prefix, with the system prompt and tools, is the same in every "
        "such request and ends a cache breakpoint): no raw head, recall ladder or "
        "unremembered middle before the chunk, which every request would read again. "
        "False sends them, so a memory is written knowing what came before it.",
    )
    memory_source_cap_tokens: int | None = Field(
        default=None,
        ge=MIN_SOURCE_CAP,
        description="In a memory request, a tool result longer than this many tokens is "
        "sent as its head and tail around a marker naming the tool and its size. The "
        "memory's exact values are still taken from all of it and the recall tool "
        "returns it whole; what the summariser reads of one result is bounded. None: "
        "results are sent whole.",
    )
    compression_source_only_fallback: bool = Field(
        default=False,
        description="After a refused L1 request and its ladder variants, one last request "
        "for the chunk alone (as ``compression_source_only`` writes every request).",
    )
    compression_tool_prose_fallback: ToolProseFallback | None = Field(
        default=None,
        description="After a refused L1 request, its ladder variants and the chunk alone: "
        "one more request with the long arguments of reasoning tools moved into the host's "
        "note-taking tool (:class:`ToolProseFallback`). None: no such rung.",
    )
    compression_split_fallback: bool = Field(
        default=False,
        description="After the rungs above are refused too, halve the chunk at a call-answer "
        "boundary and ask for each half alone, halving a refused half again down to single "
        "turns; the halves' memories, in order, are stitched into the chunk's one L1 "
        "(``stitched``). A single turn still refused, or "
        "``compression_split_max_calls_per_chunk`` calls, ends the attempt: the chunk is "
        "given up on as when every rung is refused.",
    )
    compression_split_max_calls_per_chunk: int = Field(
        default=40,
        ge=1,
        description="Summariser calls one split of a refused chunk may make.",
    )
    witnessed_before_sequence: int | None = Field(
        default=None,
        ge=1,
        description="An inherited record: a chunk whose messages all have a store "
        "sequence below this (``StoredMessage.seq``, as ``get_messages()`` gives them; "
        "``current_sequence() + 1`` once the record is loaded) is remembered in the third "
        "person, each event attributed to the participant named in it, the first person "
        "kept for the agent's own reading and carrying of the record. Its memory is "
        "flagged ``witnessed``, and a merge of witnessed memories only keeps that voice "
        "(and the flag). A chunk across the boundary is the agent's own. None: every "
        "memory is the agent's own.",
    )
    witnessed_instruction: str | None = Field(
        default=None,
        min_length=1,
        description="The closing instruction of every witnessed memory request (L1 and "
        "merges), in place of the built-in one; ``{targetTokens}`` is replaced by "
        "``summary_target_tokens`` and ``[CM] `` is put before it when it does not start "
        "so (the strategy's own turns do). None: the built-in instruction.",
    )
    summary_target_tokens: int = Field(
        default=2000,
        gt=0,
        description="The length each memory is asked to have (the summariser's output cap is "
        "the larger of 16,000 and 1.5x this). A memory shown in a context costs about this "
        "much, so it must be well below the input budget.",
    )
    summary_max_tokens: int | None = Field(
        default=None,
        gt=0,
        description="The longest memory stored, a safety net under ``summary_target_tokens``: "
        "a longer answer is asked for once more with this limit stated, and if that is still "
        "too long the shorter answer is cut to the limit at a sentence or word boundary "
        "(ending in an ellipsis). A stored memory over the limit (written before, or under a "
        "larger limit) is written again by a later tick once no other work waits. None: four "
        "times ``summary_target_tokens``.",
    )
    memory_values_tokens: int | None = Field(
        default=None,
        ge=0,
        description="The tokens of exact values (identifiers, codes, paths, hashes, URLs, "
        "amounts, dates, tool-call arguments: ``context_manager.exact_values``) each memory "
        "carries beside its prose, shown after it on one line (``Exact values: ...``) and "
        "priced with it. The cap is the same at every level: a merge keeps the best of its "
        "children's values within it. A memory's values also cost at most a quarter of "
        "its messages raw. None: a quarter of ``summary_target_tokens``; 0 keeps no values.",
    )
    summary_participant: str = Field(
        default="Claude",
        description="The participant memories are written as: the assistant side of "
        "summariser requests and the speaker of every recalled memory in a compiled context.",
    )
    summary_context_label: str = Field(
        default="What do you remember from earlier?",
        description="The question of each recall pair on the adaptive path (the pyramid path "
        "uses ``recall_header_template``). ``{tools}`` is replaced by the names of the tools "
        "called in the messages the memory stands for (first called first, each once, joined "
        "by ``, ``); for a memory whose messages called none, a parenthetical holding it "
        "(``(tools: {tools})``) is dropped whole, else the placeholder and the separators "
        "before it. Other braces are kept as written.",
    )
    recall_budget_tokens: int = Field(
        default=100_000,
        gt=0,
        description="Cap on recall pairs in a compression request (newest first).",
    )
    adaptive_resolution: bool = Field(
        default=True,
        description="True: a solver (``solver``) picks the fold depth per region "
        "under the budget. False: the threshold pyramid (newest history at L1, older at L2, "
        "oldest coarser, within ``l1_budget_tokens`` / ``l2_budget_tokens`` / "
        "``l3_budget_tokens``). This is the reference's pyramid *mode*, not only its solver: "
        "it also asks each memory's recall question by ``recall_header_template`` (id, "
        "level and span) where the adaptive path uses ``summary_context_label``. So "
        "``solver='threshold-pyramid'`` with this on (the pyramid solver under the adaptive "
        "recall question and ``solver_options``) sends other requests than this off, and "
        "neither spelling is an alias of the other.",
    )
    solver: str = Field(
        default="kv-stable",
        description="The registered solver (``solvers.names()``) that picks the fold depth on "
        "each compile when ``adaptive_resolution`` is on. (Formerly ``folding_strategy``, "
        "still accepted with a DeprecationWarning.)",
    )
    solver_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options passed to the ``solver`` (e.g. "
        "``{'policy': 'reference'}`` for kv-unified).",
    )
    l1_budget_tokens: int = Field(
        default=30_000,
        ge=0,
        description="Pyramid allowance of level 1 (the newest folded history), used only when "
        "``adaptive_resolution`` is off.",
    )
    l2_budget_tokens: int = Field(
        default=30_000,
        ge=0,
        description="Pyramid allowance of level 2, used only when ``adaptive_resolution`` is off.",
    )
    l3_budget_tokens: int = Field(
        default=30_000,
        ge=0,
        description="Pyramid allowance of level 3 and of every level above, used only when "
        "``adaptive_resolution`` is off.",
    )
    recall_header_template: str = Field(
        default="[Recall {id}]",
        description="Question of each recall pair on the pyramid path; ``{id}``, ``{level}``, "
        "``{first}`` and ``{last}`` are substituted. The adaptive path asks "
        "``summary_context_label``.",
    )
    compression_cache_breakpoints: bool = Field(
        default=True,
        description="Mark the end of the raw head, of the last merged memory (level 2 or more) "
        "and of the last memory as prompt-cache breakpoints, in compiled contexts "
        "(``CompileResult.cache_breakpoints``) and in the summariser's requests "
        "(``CompletionRequest.cache_breakpoints``): a refold, and the next memory request, "
        "usually add after them, so those prefixes keep hitting the cache (a merge or a deeper "
        "cut changes them). A request whose recall ladder was cut to the recall budget marks "
        "only its head: its ladder's start moves as memories are added.",
    )
    compression_cache_ttl: CacheTTL = Field(
        default="1h",
        description="Lifetime asked for the summariser requests' cached prefixes: memory "
        "requests come minutes apart, so the longer one keeps them warm.",
    )
    compression_slack_ratio: float = Field(
        default=0.3,
        ge=0.0,
        lt=1.0,
        allow_inf_nan=False,
        description="Solvers fold the history down to ``(1 - slack) x`` what the request's "
        "overhead (system prompt, tools, injections) leaves of the input budget; appends then "
        "fill the band up to the budget without refolding, so the prefix (and the provider's "
        "cache) stays put. A wider band refolds less often; on the bundled replays 0.3 billed "
        "25-40% less input than 0.1 with every request still within budget.",
    )
    over_budget_grace_ratio: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="Overshoot of the input budget tolerated when nothing fits it, taken from "
        "the response reserve only: a compile never exceeds ``max_tokens``. Solvers still aim "
        "for the plain budget.",
    )
    fold_window: bool = Field(
        default=True,
        description="State each compile over the part of history the frontier can reach: a "
        "memory the last frontier showed (as itself or through memories only) is stated at the "
        "grain of its memories one level below the finest shown, not message by message, so a "
        "compile costs about the same at 1,000 messages and at 1,000,000. A compile may then "
        "unfold a region by one level below what the last one showed (the next, one more). "
        "False states every message on every compile: the solver sees the whole history. Only "
        "solvers built for long-lived agents (``solvers.capabilities(name).windowed``: "
        "kv-stable, kv-unified) are given the window; the others always see all of it.",
    )
    continuity_baseline: Literal["compiled", "accepted"] = Field(
        default="compiled",
        description="What a compile's solver is told the last request showed (the fold "
        "problem's ``previous``, the baseline its continuity and hysteresis compare with; "
        "with ``fold_window``, also where the window's blocks are read from). "
        "``'compiled'``: the last live compile's frontier, sent or not. ``'accepted'``: the "
        "newest fold receipt of the branch (``ContextManager.accept_round``), the request the "
        "provider actually holds, so a compile that was never sent moves nothing; before the "
        "first receipt, the last compile's frontier. Under ``'accepted'`` with kv-unified, "
        "the receipts also give each leaf's stability tau (``KvUnifiedConfig.stable_for``: "
        "accepted presentations since its representation last changed). The reference "
        "measures continuity against accepted presentations only (``reference()`` sets "
        "``'accepted'``); this library's default stays ``'compiled'``: a host that reports "
        "only some acceptances (or stops reporting them) would otherwise have every compile "
        "compared with an old request, and the bundled benchmark figures are measured so.",
    )
    window_tokens: int | None = Field(
        default=None,
        gt=0,
        description="The context window (the ``max_tokens`` of each compile) these options "
        "were sized for, as set by ``for_window``. When set, the options are checked against "
        "it: the head and recent windows, the response reserve and one memory must leave room "
        "for folded history. None: not checked.",
    )
    reserve_for_response_tokens: int | None = Field(
        default=None,
        ge=0,
        description="The part of ``window_tokens`` kept for the model's answer, as sized by "
        "``for_window``: pass it as ``reserve_for_response`` to ``ContextManager.compile`` "
        "(with ``max_tokens=window_tokens``). None: not sized.",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed_options(cls, data: Any) -> Any:
        """The options under their former names (``folding_strategy``), read under their
        current ones with a :class:`DeprecationWarning`."""
        if isinstance(data, Mapping) and not _RENAMED.keys().isdisjoint(data):
            return renamed_options(data)
        return data

    @model_validator(mode="before")
    @classmethod
    def _reference_options(cls, data: Any) -> Any:
        """Refuse the reference's options this config does not have
        (:data:`UNSUPPORTED_OPTIONS`, and the reference's camelCase spelling of its own
        options) with what to use instead, not pydantic's bare "extra inputs"."""
        if isinstance(data, Mapping):
            problems = refused_options(data, set(cls.model_fields))
            if problems:
                raise PydanticCustomError(
                    UNSUPPORTED_ERROR_TYPE,
                    "{message}",
                    {
                        "message": "; ".join(m for _, m in problems),
                        "options": [o for o, _ in problems],
                    },
                )
        return data

    @property
    def folding_strategy(self) -> str:
        """The ``solver``, under its former name.

        .. deprecated::
            Warns with :class:`DeprecationWarning` and will be removed in the next
            release: read ``solver``.
        """
        _deprecated(
            "AutobiographicalConfig.folding_strategy is deprecated and will be removed in "
            "the next release; read AutobiographicalConfig.solver"
        )
        return self.solver

    @model_validator(mode="after")
    def _limit_above_target(self) -> AutobiographicalConfig:
        limit = self.summary_max_tokens
        if limit is not None and limit < self.summary_target_tokens:
            raise ValueError(
                f"summary_max_tokens={limit} is below summary_target_tokens="
                f"{self.summary_target_tokens}: every memory asked for would be cut; raise "
                "summary_max_tokens or leave it None (four times the target)"
            )
        return self

    @model_validator(mode="after")
    def _fits_window(self) -> AutobiographicalConfig:
        window = self.window_tokens
        if window is None:
            return self
        reserve = self.reserve_for_response_tokens or 0
        if reserve >= window:
            raise ValueError(
                f"reserve_for_response_tokens={reserve} leaves no input in "
                f"window_tokens={window}: lower reserve_for_response_tokens, or size every "
                f"option with AutobiographicalConfig.for_window({window})"
            )
        parts = {
            "head_window_tokens": self.head_window_tokens,
            "recent_window_tokens": self.recent_window_tokens,
            "reserve_for_response_tokens": reserve,
            "summary_target_tokens": self.summary_target_tokens,
            "memory_values_tokens": self.values_tokens(),  # shown with the memory
        }
        if sum(parts.values()) >= window:
            named = ", ".join(f"{k}={v}" for k, v in parts.items() if v)
            lower = " or ".join(
                k for k in ("recent_window_tokens", "head_window_tokens") if parts[k]
            )
            raise ValueError(
                f"{named} add up to {sum(parts.values())} tokens, which leaves no room for "
                f"folded history in window_tokens={window}: lower "
                f"{lower or 'summary_target_tokens'}, or size every option with "
                f"AutobiographicalConfig.for_window({window})"
            )
        return self

    @classmethod
    def for_window(cls, window_tokens: int, **overrides: Any) -> AutobiographicalConfig:
        """Options sized for a context window of ``window_tokens`` (4k to 1M tokens).

        From the window ``W``: a response reserve of ``W / 8`` (256 to 16,000 tokens),
        and of the input ``I = W - reserve``, a recent window of ``I / 4``, chunks of
        ``I / 12`` (200 to 12,000 tokens), memories of ``I / 60`` (40 to 2,400 tokens; a
        chunk folds about 5:1), a recall budget of ``I / 2`` (1,000 to 100,000 tokens)
        and pyramid allowances of a quarter of what the recent window leaves each. The
        chunk and memory caps keep each summariser call a sensible size on huge windows;
        the floors keep memories worth writing on tiny ones. No chunk is held back
        (``l1_holdback_chunks=0``): the recent window already keeps the newest history
        raw, and a closed chunk without its memory only stops a fold short of that
        window, so the request stays larger and folds again sooner. Solvers that size
        their own options to the window (``solvers.window_options``: kv-unified) get them.

        Parameters
        ----------
        window_tokens : int
            The model's context window: the ``max_tokens`` each compile will be given.
        **overrides
            Any other option (``compression_model``, ``solver``, ...), or a sized
            one to replace; the result is checked against the window all the same.

        Returns
        -------
        AutobiographicalConfig
            With ``window_tokens`` and ``reserve_for_response_tokens`` set: compile with
            ``max_tokens=config.window_tokens,
            reserve_for_response=config.reserve_for_response_tokens``.

        Raises
        ------
        TypeError
            For a window that is not an int.
        ValueError
            For a window under 1,024 tokens.
        pydantic.ValidationError
            For overrides that do not fit the window (the message names the options to
            lower).

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
        >>> from context_manager.strategies.autobiographical import AutobiographicalStrategy
        >>> config = AutobiographicalConfig.for_window(4000, compression_model="extractive")
        >>> (config.target_chunk_tokens, config.summary_target_tokens,
        ...  config.recent_window_tokens, config.reserve_for_response_tokens)
        (291, 58, 875, 500)
        >>> cm = ContextManager.open(
        ...     path=":memory:",
        ...     strategy=AutobiographicalStrategy(config),
        ...     summarizer=ExtractiveSummarizer(),
        ...     counter=CharsCounter(),
        ... )
        >>> _ = cm.add_message("User", "Fix the failing test in src/app.py.")
        >>> result = cm.compile(
        ...     max_tokens=config.window_tokens,
        ...     reserve_for_response=config.reserve_for_response_tokens,
        ... )
        >>> [m.text for m in result.messages]
        ['Fix the failing test in src/app.py.']
        >>> cm.close()
        >>> AutobiographicalConfig.for_window(1_000_000).target_chunk_tokens
        12000
        """
        if isinstance(window_tokens, bool) or not isinstance(window_tokens, int):
            raise TypeError(f"window_tokens must be an int, got {window_tokens!r}")
        if window_tokens < _MIN_WINDOW:
            raise ValueError(
                f"window_tokens={window_tokens} is too small to fold into: for_window sizes "
                f"windows of at least {_MIN_WINDOW} tokens"
            )
        overrides = renamed_options(overrides)
        w = window_tokens
        reserve = overrides.get("reserve_for_response_tokens")
        if reserve is None:
            reserve = _clamp(w // 8, 256, 16_000)
        budget = max(1, w - reserve)
        recent = overrides.get("recent_window_tokens", budget // 4)
        head = overrides.get("head_window_tokens", 0)
        middle = max(0, budget - recent - head)
        sized: dict[str, Any] = {
            "window_tokens": w,
            "reserve_for_response_tokens": reserve,
            "recent_window_tokens": recent,
            "target_chunk_tokens": _clamp(budget // 12, 200, 12_000),
            "summary_target_tokens": _clamp(budget // 60, 40, 2_400),
            "recall_budget_tokens": _clamp(budget // 2, 1_000, 100_000),
            "l1_budget_tokens": middle // 4,
            "l2_budget_tokens": middle // 4,
            "l3_budget_tokens": middle // 4,
            "l1_holdback_chunks": 0,
        }
        if "solver_options" not in overrides:
            import solvers

            method = overrides.get("solver", cls.model_fields["solver"].default)
            slack = overrides.get(
                "compression_slack_ratio", cls.model_fields["compression_slack_ratio"].default
            )
            if method in solvers.names():  # an unknown one is refused by the strategy
                options = solvers.window_options(method, budget, 1.0 - slack)
                if options:
                    sized["solver_options"] = options
        return cls(**{**sized, **overrides})

    @classmethod
    def reference(cls, **overrides: Any) -> AutobiographicalConfig:
        """Options with the TypeScript reference's defaults where this library's differ.

        A configuration ported from the reference as it is keeps its behaviour only
        where both libraries share a default. This preset sets the others to what the
        reference does: the threshold pyramid instead of a solver
        (``adaptive_resolution=False``, and ``flat-profile`` if it is turned back on), a
        slack of 0.1, a grace of 2 %, a merge span cap of 1,500 messages, memory
        requests that carry the head and recall ladder, memories without exact values
        and with no length limit below the output cap, and a solver shown every
        message. ``docs/reference-defaults.md`` lists each difference and why this
        library's default differs.

        Parameters
        ----------
        **overrides
            Any option, which replaces the preset's value (``compression_model`` has
            no default in either library and must be given to write memories).

        Returns
        -------
        AutobiographicalConfig

        Raises
        ------
        pydantic.ValidationError
            For an override that is not a valid option.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
        >>> from context_manager.strategies.autobiographical import AutobiographicalStrategy
        >>> config = AutobiographicalConfig.reference(compression_model="extractive")
        >>> config.adaptive_resolution, config.compression_slack_ratio, config.solver
        (False, 0.1, 'flat-profile')
        >>> AutobiographicalConfig.reference(adaptive_resolution=True).solver_and_options
        ('flat-profile', {})
        >>> cm = ContextManager.open(
        ...     path=":memory:",
        ...     strategy=AutobiographicalStrategy(config),
        ...     summarizer=ExtractiveSummarizer(),
        ...     counter=CharsCounter(),
        ... )
        >>> _ = cm.add_message("User", "Fix the failing test in src/app.py.")
        >>> [m.text for m in cm.compile(max_tokens=8000).messages]
        ['Fix the failing test in src/app.py.']
        >>> cm.close()
        """
        overrides = renamed_options(overrides)
        target = overrides.get(
            "summary_target_tokens", cls.model_fields["summary_target_tokens"].default
        )
        preset: dict[str, Any] = {
            **_REFERENCE_DEFAULTS,
            # no cut below what one answer may hold (the request's output cap)
            "summary_max_tokens": memory_output_cap(target) if isinstance(target, int) else None,
        }
        return cls(**{**preset, **overrides})

    def memory_limit(self) -> int:
        """The longest memory stored, in the manager's counter's tokens
        (``summary_max_tokens``, by default four times ``summary_target_tokens``).

        Examples
        --------
        >>> from context_manager.strategies.autobiographical import AutobiographicalConfig
        >>> AutobiographicalConfig(summary_target_tokens=500).memory_limit()
        2000
        >>> AutobiographicalConfig(summary_target_tokens=500, summary_max_tokens=800).memory_limit()
        800
        """
        return self.summary_max_tokens or 4 * self.summary_target_tokens

    def values_tokens(self, level: int = 1) -> int:
        """The tokens of exact values a memory of ``level`` carries
        (``memory_values_tokens``, by default a quarter of ``summary_target_tokens``).

        Every level has the same allowance: a merge keeps the best of its children's
        values within it, so a memory costs no more for standing higher, and folding a
        region one level deeper still frees room.

        Examples
        --------
        >>> config = AutobiographicalConfig(summary_target_tokens=400)
        >>> config.values_tokens(1), config.values_tokens(3)
        (100, 100)
        >>> AutobiographicalConfig(memory_values_tokens=0).values_tokens(2)
        0
        """
        if level < 1:
            raise ValueError(f"level={level}: memories have levels from 1")
        base = self.memory_values_tokens
        return self.summary_target_tokens // _VALUES_SHARE if base is None else base

    @property
    def solver_and_options(self) -> tuple[str, dict[str, Any]]:
        """The registered solver each compile calls and its options: ``solver`` with
        ``solver_options``, or the threshold pyramid when ``adaptive_resolution`` is
        off.

        Examples
        --------
        >>> AutobiographicalConfig(solver="kv-unified").solver_and_options
        ('kv-unified', {})
        >>> AutobiographicalConfig(adaptive_resolution=False).solver_and_options[0]
        'threshold-pyramid'
        """
        if self.adaptive_resolution:
            return self.solver, dict(self.solver_options)
        budgets = (self.l1_budget_tokens, self.l2_budget_tokens, self.l3_budget_tokens)
        return "threshold-pyramid", {"level_budgets": budgets}


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


_RENAMED = {"folding_strategy": "solver"}
"""Options under a former name: the name -> the current one."""


def renamed_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every option under a former name (:data:`_RENAMED`) under its
    current one, with a :class:`DeprecationWarning` for each.

    Raises
    ------
    ValueError
        For an option given under both names, with two values.
    """
    found = dict(options)
    for old, new in _RENAMED.items():
        if old not in found:
            continue
        value = found.pop(old)
        if new in found and found[new] != value:
            raise ValueError(
                f"{old}={value!r} and {new}={found[new]!r} name the same option: "
                f"pass only {new} ({old} is its deprecated name)"
            )
        _deprecated(
            f"the AutobiographicalConfig option {old} is deprecated and will be removed in "
            f"the next release; pass {new}={value!r}"
        )
        found[new] = value
    return found


def memory_output_cap(target_tokens: int) -> int:
    """The output cap (``max_tokens``) of a memory request for memories of
    ``target_tokens``."""
    return max(16_000, round(1.5 * target_tokens))


_REFERENCE_DEFAULTS: dict[str, Any] = {
    "adaptive_resolution": False,
    "solver": "flat-profile",
    "compression_slack_ratio": 0.1,
    "over_budget_grace_ratio": 0.02,
    "merge_max_source_span_messages": 1500,
    "compression_source_only": False,
    "memory_values_tokens": 0,
    "fold_window": False,
    "continuity_baseline": "accepted",
}
"""The options :meth:`AutobiographicalConfig.reference` sets (with ``summary_max_tokens``,
which depends on ``summary_target_tokens``)."""


class UnsupportedOption(NamedTuple):
    """An option of the reference this config refuses, and what to do instead."""

    reference: str
    """Its camelCase name in the reference."""
    use: str
    """What to use instead: an option or behaviour of this library (the message reads
    "not supported: use ..."), or for a planned one, what to do until it comes."""
    planned: bool = False
    """True: it is to be implemented (the message reads "not supported yet; for now,
    ...")."""
    solver: str | None = None
    """The solver whose ``solver_options`` it belongs to; None: a config option."""


_U = UnsupportedOption
UNSUPPORTED_OPTIONS: dict[str, UnsupportedOption] = {
    # windows and chunking
    "max_speculative_l1s": _U(
        "maxSpeculativeL1s",
        "memory_schedule='forecast', which writes a chunk's memory only once a compile "
        "needs it, or l1_holdback_chunks to keep the newest closed chunks unsummarised",
    ),
    "chunk_on_message_boundary": _U(
        "chunkOnMessageBoundary",
        "the default behaviour and drop the option: chunks always end at a message boundary",
    ),
    "auto_tick_on_new_message": _U(
        "autoTickOnNewMessage",
        "ContextManager.open(auto_tick=True), which ticks on a background thread after "
        "each message and compile",
    ),
    # rendering of memories
    "positioned_recall_pairs": _U(
        "positionedRecallPairs",
        "the default behaviour and drop the option: each memory is always shown as its "
        "own recall pair at its place in the history (the reference's default, true)",
    ),
    "recall_envelope": _U(
        "recallEnvelope",
        "summary_context_label (recall_header_template when adaptive_resolution is off) "
        "to word each recall pair's question; a memory's answer is never wrapped in tags",
    ),
    "carrier_policy": _U(
        "carrierPolicy",
        "compile(thinking_binding=ThinkingBinding(...)), which decides which signed "
        "thinking of the agent's replies a request carries; memories are shown as text, "
        "without reasoning blocks",
    ),
    "enforce_budget": _U(
        "enforceBudget",
        "over_budget_grace_ratio to tolerate an overshoot (taken from the response "
        "reserve); the budget is always enforced",
    ),
    # hierarchy and merges
    "merge_contiguity_gap_limit": _U(
        "mergeContiguityGapLimit",
        "merge_threshold alone and drop the option: a live message between memories "
        "always ends a merge run, as in the reference's current grouping",
    ),
    "compression_merge_source_only": _U(
        "compressionMergeSourceOnly",
        "merge_from='memories' for smaller merge requests (a merge written from the "
        "memories it merges); a merge request always carries the recall ladder before it",
    ),
    "compression_merge_source_only_fallback": _U(
        "compressionMergeSourceOnlyFallback",
        "merge_attempt_limit to bound a refused merge's retries; a merge request always "
        "carries the recall ladder before it (merge_from='memories' makes it smaller)",
    ),
    "speculative_production": _U(
        "speculativeProduction",
        "hierarchical=True (the default): memories merge level after level with no fixed top",
    ),
    # the summariser's requests
    "compression_max_tokens": _U(
        "compressionMaxTokens",
        "summary_target_tokens (a memory request's output cap is the larger of 16,000 "
        "and 1.5 x it) and summary_max_tokens; for a model with a smaller output limit, "
        "lower CompletionRequest.max_tokens in its summariser",
    ),
    "compression_recall_budget_tokens": _U("compressionRecallBudgetTokens", "recall_budget_tokens"),
    "compression_cache_markers": _U("compressionCacheMarkers", "compression_cache_breakpoints"),
    "identity_reminder": _U(
        "identityReminder",
        "ContextManager.set_system_prompt: every memory request carries the host's "
        "system prompt, so say there who the agent is",
    ),
    "persist_mint_preimages": _U(
        "persistMintPreimages",
        "a summariser of your own that records each CompletionRequest it is given "
        "before passing it on",
    ),
    "summary_system_prompt": _U(
        "summarySystemPrompt",
        "ContextManager.set_system_prompt for what every memory request should carry "
        "(the reference's current memory requests ignore this option too)",
    ),
    "summary_user_prompt": _U(
        "summaryUserPrompt",
        "the built-in instruction and drop the option (the reference's current memory "
        "requests ignore it too)",
    ),
    # refusals and failures
    "compression_split_placeholder": _U(
        "compressionSplitPlaceholder",
        "compression_split_fallback alone: a split asks for every half and stitches "
        "their memories; a turn still refused ends it and the chunk stays raw, with no "
        "placeholder memory",
    ),
    "compression_split_max_calls_per_10_min": _U(
        "compressionSplitMaxCallsPer10Min",
        "compression_split_max_calls_per_chunk, which bounds the calls of one split, and "
        "retry_backoff_seconds, which spaces the retries after failed calls",
    ),
    "quarantine_alarm_interval_ms": _U(
        "quarantineAlarmIntervalMs",
        "the warning logged when work is given up on, and a timer of your own over "
        "ContextManager.pending_work() and retry_compression()",
    ),
    # solvers
    "production_budget_tokens": _U(
        "productionBudgetTokens",
        "memory_schedule='eager' (the default), which writes every closed chunk's memory "
        "and every due merge ahead of need, and preview_context(max_tokens=...) to see "
        "what a smaller budget would send",
    ),
    "kv_stable_reach_tokens": _U(
        "kvStableReachTokens", "solver='kv-stable' with solver_options={'reach_tokens': N}"
    ),
    "kv_stable_quality_gap_ratio": _U(
        "kvStableQualityGapRatio", "solver='kv-stable' with solver_options={'quality_gap': x}"
    ),
    "kv_unified": _U(
        "kvUnified",
        "solver='kv-unified' with its policy in solver_options (e.g. {'policy': 'reference'})",
    ),
    "log_effective_config": _U(
        "logEffectiveConfig",
        "config.model_dump(), which holds every effective value, defaults included, and "
        "log it yourself",
    ),
    # kv-stable's options (in solver_options)
    "cache_cold": _U(
        "cacheCold",
        "solver_options={'fold': 'ideal'} with the default reach_tokens (the whole "
        "window), under which a change adopts kv-stable's ideal cut whole; the solver is "
        "not told whether the cache is warm",
        solver="kv-stable",
    ),
    "defer_when_warm": _U(
        "deferWhenWarm",
        "kv-stable's default solver_options={'fold': 'append'}, which never changes a "
        "frontier that still fits the wall, whatever the cache's state",
        solver="kv-stable",
    ),
    # the open's options, not the strategy's
    "topology_policy": _U(
        "topologyPolicy",
        "the topology_policy of ContextManager.open ('reject', the default, 'repair' or "
        "'ignore'): a store's memory tree is audited when the store opens, not by the strategy",
    ),
    "audit_only": _U(
        "auditOnly",
        "ContextManager.open(audit_only=True), which loads and audits the store and "
        "never writes (findings in topology_findings()): the option is the open's, "
        "not the strategy's",
    ),
}
"""The reference's options this config refuses, by snake_case name: the reference's
name, what to use instead and whether it is to come. Each is refused under either
spelling with :data:`UNSUPPORTED_ERROR_TYPE`; one that becomes a field (or a kv-stable
option) is accepted and must leave the table."""
del _U

UNSUPPORTED_ERROR_TYPE = "unsupported_option"
"""The pydantic error type of a refused reference option (``ValidationError.errors()``)."""

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _snake_case(name: str) -> str:
    """``name`` in snake_case: ``maxLiveImages`` -> ``max_live_images``."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


_BY_SPELLING: dict[str, str] = {
    **{entry.reference: name for name, entry in UNSUPPORTED_OPTIONS.items()},
    **{name: name for name in UNSUPPORTED_OPTIONS},
}
"""Either spelling of a refused option -> its snake_case name."""


def _refusal(given: str, name: str, entry: UnsupportedOption, where: str = "") -> str:
    spelled = (
        f"the reference's {entry.reference}"
        if given == name
        else f"the reference's option, {name} in snake_case"
    )
    state = "not supported yet; for now," if entry.planned else "not supported: use"
    return f"{where}{given} ({spelled}) is {state} {entry.use}"


def refused_options(options: Mapping[str, Any], fields: set[str]) -> list[tuple[str, str]]:
    """The options of ``options`` that are the reference's and not this config's (or a
    kv-stable ``solver_options`` key of the reference), each with its message saying
    what to use instead: ``(name as given, message)``, in the order given.

    ``fields`` are the config's fields: a name among them is never refused. A camelCase
    name whose snake_case form is a field (or a former name, :data:`_RENAMED`) is refused
    with that name.
    """
    out: list[tuple[str, str]] = []
    for key in options:
        if not isinstance(key, str) or key in fields or key in _RENAMED:
            continue
        name = _BY_SPELLING.get(key)
        entry = UNSUPPORTED_OPTIONS.get(name) if name is not None else None
        if name is not None and entry is not None:
            if name not in fields:
                out.append((key, _refusal(key, name, entry)))
            continue
        snake = _snake_case(key)
        if snake != key and (snake in fields or snake in _RENAMED):
            ours = _RENAMED.get(snake, snake)
            out.append((key, f"{key} is the reference's spelling: use the snake_case name {ours}"))
    solver = options.get("solver", options.get("folding_strategy", "kv-stable"))
    given = options.get("solver_options")
    if solver == "kv-stable" and isinstance(given, Mapping):
        from solvers.kv_stable import KvStableConfig

        known = set(KvStableConfig.model_fields)
        where = "solver_options of kv-stable: "
        for key in given:
            if not isinstance(key, str) or key in known:
                continue
            name = _BY_SPELLING.get(key)
            entry = UNSUPPORTED_OPTIONS.get(name) if name is not None else None
            if name is not None and entry is not None and entry.solver == "kv-stable":
                if name not in known:
                    out.append((key, _refusal(key, name, entry, where)))
                continue
            snake = _snake_case(key)
            if snake != key and snake in known:
                spelling = f"{key} is the reference's spelling: use the snake_case name"
                out.append((key, f"{where}{spelling} {snake}"))
    return out


class UnsupportedOptionError(ConfigError):
    """A reference option this config does not have, given to the strategy: the message
    says what to use instead (:data:`UNSUPPORTED_OPTIONS`).

    Attributes
    ----------
    options : tuple of str
        The refused options, as given.
    """

    def __init__(self, message: str, options: tuple[str, ...]) -> None:
        super().__init__(message)
        self.options = options

    @classmethod
    def of(cls, exc: ValidationError, prefix: str = "") -> UnsupportedOptionError | None:
        """The refusal in ``exc`` (a config's validation error) as this error, its
        message prefixed with ``prefix``; None when ``exc`` refuses no reference option."""
        for error in exc.errors():
            if error["type"] == UNSUPPORTED_ERROR_TYPE:
                ctx = error.get("ctx") or {}
                return cls(prefix + str(error["msg"]), tuple(ctx.get("options", ())))
        return None


_INTERNAL = (
    os.path.dirname(pydantic.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep,
)
"""Where the frames a deprecated option passes through live: pydantic and
``context_manager`` (a preview's overrides reach the config through the manager)."""


def _deprecated(message: str) -> None:
    """Warn ``message`` as a :class:`DeprecationWarning` at the line that used the
    deprecated name: the first frame outside pydantic and ``context_manager``."""
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)
