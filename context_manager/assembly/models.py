"""Requests and responses of the assembly functions (their JSON wire form).

Requests accept the JSON objects as mappings; unknown request fields are
ignored, every known field is validated and a bad one is named in the error.
Responses dump to the response JSON with ``model_dump(exclude_none=True)``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from .wire import AgentFunction, AnyMessage, ModelInput, ThinkingLevel, WireMessage

__all__ = [
    "Applied",
    "AssembleOptions",
    "AssembleRequest",
    "AssembleResponse",
    "Breakdown",
    "ByRole",
    "CompactBusy",
    "CompactEmpty",
    "CompactOk",
    "CompactOptions",
    "CompactOverflow",
    "CompactRequest",
    "CompactResponse",
    "CountTokensRequest",
    "CountTokensResponse",
    "PruneOptions",
    "PruneRequest",
    "PruneResponse",
]

_NonNegative = Field(default=None, ge=0)


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ------------------------------------------------------------------ requests
class AssembleOptions(_Request):
    """Per-call options of ``assemble``; an absent option takes the configured default."""

    reserved_tokens: int | None = _NonNegative
    tail_turns: int | None = _NonNegative
    allow_compaction: bool | None = None
    allow_prune: bool | None = None
    protected_functions: tuple[str, ...] | None = None
    max_result_tokens: int | None = _NonNegative
    request_overhead_tokens: int | None = _NonNegative
    thinking_level: ThinkingLevel | None = None
    lease_key: str | None = None
    previous_summary: str | None = None
    preview_only: bool | None = None


class AssembleRequest(_Request):
    """A request to build a model call that fits the model's usable budget."""

    messages: tuple[WireMessage, ...] | None = None
    model: ModelInput
    system_prompt: str | None = None
    tools: tuple[AgentFunction, ...] | None = None
    parts: dict[str, str] | None = None
    options: AssembleOptions | None = None


class CompactOptions(_Request):
    """Per-call options of ``compact``."""

    tail_turns: int | None = _NonNegative
    previous_summary: str | None = None
    preserve_recent_tokens: int | None = _NonNegative
    lease_key: str | None = None
    instructions: str | None = None


class CompactRequest(_Request):
    """A request to summarise the head of a conversation."""

    messages: tuple[WireMessage, ...] | None = None
    model: ModelInput
    options: CompactOptions | None = None


class CountTokensRequest(_Request):
    """A request to estimate a conversation's tokens."""

    messages: tuple[WireMessage, ...] | None = None
    model: ModelInput
    system_prompt: str | None = None
    tools: tuple[AgentFunction, ...] | None = None
    parts: dict[str, str] | None = None


class PruneOptions(_Request):
    """Thresholds of ``prune``; an absent option takes the configured value, 0 is honoured."""

    protect_recent_tokens: int | None = _NonNegative
    decay_user_turns: int | None = _NonNegative
    protected_user_turns: int | None = _NonNegative
    min_free_tokens: int | None = _NonNegative
    max_output_chars: int | None = _NonNegative
    protected_functions: tuple[str, ...] | None = None


class PruneRequest(_Request):
    """A request to prune old function results (``model`` is accepted and unused)."""

    messages: tuple[WireMessage, ...] | None = None
    model: ModelInput | None = None
    options: PruneOptions | None = None


# ------------------------------------------------------------------ responses
class ByRole(_Response):
    """Message tokens by role; they sum to the messages' share of the count."""

    user: int = 0
    assistant: int = 0
    function_result: int = 0
    custom: int = 0


class Breakdown(_Response):
    """Where the tokens of an assembled request are."""

    system_prompt_tokens: int
    tools_tokens: int
    by_role: ByRole
    by_part: dict[str, int] | None = None
    estimator: Literal["heuristic"] = "heuristic"


class Applied(_Response):
    """What ``assemble`` did; the compaction fields appear only when it compacted."""

    initial_token_count: int
    pruned: bool
    pruned_tokens: int
    capped_parts: int
    capped_tokens: int
    compacted: bool
    summary: str | None = None
    tail_start_index: int | None = None
    tokens_before: int | None = None
    summarized_head_tokens: int | None = None


class AssembleResponse(_Response):
    """The assembled request: system prompt, messages and their accounting."""

    system_prompt: str
    messages: list[AnyMessage]
    token_count: int
    usable: int
    effective_max_output_tokens: int
    model_resolved: Literal["inline", "router", "fallback"]
    applied: Applied
    breakdown: Breakdown


class CompactOk(_Response):
    """A summary of the head; ``tail_start_index`` is ``null`` when everything was summarised."""

    status: Literal["ok"] = "ok"
    summary: str
    tail_start_index: int | None
    tokens_before: int
    tokens_after: int
    used_prior_summary: bool

    @model_serializer(mode="wrap")
    def _keep_null_tail(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {
            "status": data["status"],
            "summary": data["summary"],
            "tail_start_index": self.tail_start_index,
            "tokens_before": data["tokens_before"],
            "tokens_after": data["tokens_after"],
            "used_prior_summary": data["used_prior_summary"],
        }


class CompactBusy(_Response):
    """Another compaction of the same conversation holds the lease."""

    status: Literal["busy"] = "busy"


class CompactEmpty(_Response):
    """Nothing to summarise (or the summariser answered with nothing)."""

    status: Literal["empty"] = "empty"


class CompactOverflow(_Response):
    """No summary could be produced within the budget, the call limit or the deadline."""

    status: Literal["overflow"] = "overflow"


CompactResponse = CompactOk | CompactBusy | CompactEmpty | CompactOverflow


class CountTokensResponse(_Response):
    """Estimated tokens of a conversation, by role, tools and named parts."""

    tokens: int
    by_role: ByRole
    tools_tokens: int | None = None
    by_part: dict[str, int] | None = None
    estimator: Literal["heuristic"] = "heuristic"


class PruneResponse(_Response):
    """Messages after pruning and what was pruned."""

    messages: list[AnyMessage]
    pruned_tokens: int
    pruned_parts: int
    scanned_parts: int
