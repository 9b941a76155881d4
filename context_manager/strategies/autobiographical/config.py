"""The options of :class:`~context_manager.strategies.autobiographical.AutobiographicalStrategy`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...messages import CacheTTL

__all__ = ["AutobiographicalConfig"]


class AutobiographicalConfig(BaseModel):
    """Options of :class:`AutobiographicalStrategy` (unknown keys are rejected)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compression_model: str | None = None
    """The model whose voice memories are written in. No default: without it the
    strategy refuses to write summaries."""
    target_chunk_tokens: int = Field(default=3000, gt=0)
    """A chunk closes once it holds this many tokens and ``min_chunk_messages`` messages,
    or twice this many tokens whatever its length (so a huge message can still fold)."""
    min_chunk_messages: int = Field(default=4, ge=1)
    recent_window_tokens: int = Field(default=30_000, ge=0)
    head_window_tokens: int = Field(default=0, ge=0)
    l1_holdback_chunks: int = Field(default=1, ge=0)
    min_chunk_chars_for_llm: int = Field(default=200, ge=0)
    """Text-only chunks with fewer non-space characters get a stub memory, no call."""
    merge_threshold: int = Field(default=6, ge=2)
    merge_attempt_limit: int = Field(default=5, ge=1)
    merge_max_source_span_messages: int | None = Field(default=None, ge=1)
    """When set, a memory spanning more messages than this x merge_threshold^(level - 3)
    (the exponent floored at 0) is not merged further. None (the default): no cap. A
    cap keeps old memories finer, but a memory it stops also stops its neighbours one
    level up (a merge takes contiguous memories of one level), so on an agent with many
    short messages the fully folded history grows with its length until no budget
    holds it: set one only for histories of bounded length."""
    chunk_attempt_limit: int = Field(default=3, ge=1)
    """Answers that are not memory (a refusal, a truncation, an empty answer) on one chunk
    before it stays raw (persisted; ``retry_given_up`` starts over). A provider error,
    an exception or a missed deadline is not an answer: it never counts."""
    summary_timeout_seconds: float = Field(default=320.0, gt=0, allow_inf_nan=False)
    """Deadline of one summariser call (sent as ``CompletionRequest.timeout``); a call
    still running then is abandoned and the work retried later, as after an error."""
    retry_backoff_seconds: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    """Wait before retrying work whose call failed (an error, an exception, a missed
    deadline), doubled after each further failure in a row, at most an hour."""
    compression_refusal_curve_fallbacks: int = Field(default=3, ge=0)
    """After a refused L1 request, at most this many variants, each showing one merged
    memory of the recall ladder as its children instead; 0 disables."""
    compression_context_budget_tokens: int = Field(default=200_000, gt=0)
    """A variant is sent only if its input plus the output cap fits this."""
    summary_target_tokens: int = Field(default=2000, gt=0)
    summary_participant: str = "Claude"
    summary_context_label: str = "What do you remember from earlier?"
    recall_budget_tokens: int = Field(default=100_000, gt=0)
    """Cap on recall pairs in a compression request (newest first)."""
    adaptive_resolution: bool = True
    """True: a solver (``folding_strategy``) picks the fold depth per region under the
    budget. False: the threshold pyramid (newest history at L1, older at L2, oldest
    coarser, within ``l1_budget_tokens`` / ``l2_budget_tokens`` / ``l3_budget_tokens``)."""
    folding_strategy: str = "kv-stable"
    solver_options: dict[str, Any] = Field(default_factory=dict)
    l1_budget_tokens: int = Field(default=30_000, ge=0)
    l2_budget_tokens: int = Field(default=30_000, ge=0)
    l3_budget_tokens: int = Field(default=30_000, ge=0)
    """Pyramid allowance of level 3 and of every level above."""
    recall_header_template: str = "[Recall {id}]"
    """Question of each recall pair on the pyramid path; ``{id}``, ``{level}``, ``{first}``
    and ``{last}`` are substituted. The adaptive path asks ``summary_context_label``."""
    compression_cache_breakpoints: bool = True
    """Mark the end of the raw head, of the last merged memory (level 2 or more) and of
    the last memory as prompt-cache breakpoints, in compiled contexts
    (:attr:`CompileResult.cache_breakpoints`) and in the summariser's requests
    (:attr:`CompletionRequest.cache_breakpoints`): a refold, and the next memory
    request, usually add after them, so those prefixes keep hitting the cache (a merge
    or a deeper cut changes them). A request whose recall ladder was cut to the recall
    budget marks only its head: its ladder's start moves as memories are added."""
    compression_cache_ttl: CacheTTL = "1h"
    """Lifetime asked for the summariser requests' cached prefixes: memory requests come
    minutes apart, so the longer one keeps them warm."""
    compression_slack_ratio: float = Field(default=0.3, ge=0.0, lt=1.0, allow_inf_nan=False)
    """Solvers fold the history down to ``(1 - slack) x`` what the request's overhead
    (system prompt, tools, injections) leaves of the input budget; appends then fill the
    band up to the budget without refolding, so the prefix (and the provider's cache) stays put.
    A wider band refolds less often; on the bundled replays 0.3 billed 25-40% less input
    than 0.1 with every request still within budget."""
    over_budget_grace_ratio: float = Field(default=0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    """Overshoot of the input budget tolerated when nothing fits it, taken from the
    response reserve only: a compile never exceeds ``max_tokens``. Solvers still aim
    for the plain budget."""
    fold_window: bool = True
    """State each compile over the part of history the frontier can reach: a memory the
    last frontier showed (as itself or through memories only) is stated at the grain of
    its memories one level below the finest shown, not message by message, so a compile
    costs about the same at 1,000 messages and at 1,000,000. A compile may then unfold a
    region by one level below what the last one showed (the next, one more). False
    states every message on every compile: the solver sees the whole history. Only
    solvers built for long-lived agents (``solvers.capabilities(name).windowed``:
    kv-stable, kv-unified) are given the window; the others always see all of it."""

    @property
    def solver(self) -> tuple[str, dict[str, Any]]:
        """The registered solver each compile calls and its options: ``folding_strategy``
        with ``solver_options``, or the threshold pyramid when ``adaptive_resolution`` is
        off.

        Examples
        --------
        >>> AutobiographicalConfig(adaptive_resolution=False).solver[0]
        'threshold-pyramid'
        """
        if self.adaptive_resolution:
            return self.folding_strategy, dict(self.solver_options)
        budgets = (self.l1_budget_tokens, self.l2_budget_tokens, self.l3_budget_tokens)
        return "threshold-pyramid", {"level_budgets": budgets}
