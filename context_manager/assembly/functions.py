"""The four stateless functions: ``count_tokens``, ``prune``, ``compact`` and ``assemble``.

Each takes its request as the JSON mapping (or the request model) and its
collaborators as keywords, and never modifies the caller's messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from ..summarizer import Summarizer
from ..tokens import TokenCounter
from .budget import resolve_limits, tail_budget, usable_budget
from .capping import cap_results
from .catalog import ModelCatalog
from .config import AssemblyConfig
from .emergency import emergency_reduce
from .errors import INVALID_REQUEST, OVERFLOW, AssemblyError, from_validation_errors
from .estimate import Estimator, function_tokens, text_tokens
from .leases import (
    InMemoryLeaseStore,
    LeaseStore,
    PostgresLeaseStore,
    SqliteLeaseStore,
    default_lease_key,
)
from .media import normalise_media
from .models import (
    Applied,
    AssembleOptions,
    AssembleRequest,
    AssembleResponse,
    Breakdown,
    ByRole,
    CompactBusy,
    CompactEmpty,
    CompactOk,
    CompactOptions,
    CompactOverflow,
    CompactRequest,
    CompactResponse,
    CountTokensRequest,
    CountTokensResponse,
    PruneOptions,
    PruneRequest,
    PruneResponse,
)
from .pruning import PruneSettings, prune_results
from .selection import TailCut, select_tail
from .summary import SummaryError, SummaryJob, summarize
from .wire import AgentFunction, AnyMessage, CustomMessage

__all__ = [
    "DEFAULT_CATALOG",
    "SUMMARY_HEADING",
    "assemble",
    "compact",
    "count_tokens",
    "prune",
    "render_system_prompt",
]

SUMMARY_HEADING: Final = "# Conversation summary"

DEFAULT_CATALOG: Final = ModelCatalog.bundled()
"""The catalog used when none is passed: current Anthropic and OpenAI models."""

_PROCESS_LEASES: Final = InMemoryLeaseStore()
log = logging.getLogger(__name__)

Clock = Callable[[], int]
_R = TypeVar("_R", bound=BaseModel)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@lru_cache(maxsize=16)
def _sqlite_leases(path: Path) -> SqliteLeaseStore:
    return SqliteLeaseStore(path)


@lru_cache(maxsize=16)
def _postgres_leases(url: str) -> PostgresLeaseStore:
    return PostgresLeaseStore(url)


def _lease_store(leases: LeaseStore | None, config: AssemblyConfig) -> LeaseStore:
    if leases is not None:
        return leases
    if config.lease_url is not None:
        return _postgres_leases(config.lease_url)
    if config.lease_dir is not None:
        return _sqlite_leases(Path(config.lease_dir).expanduser().resolve() / "leases.sqlite3")
    return _PROCESS_LEASES


MAX_JSON_DEPTH: Final = 128
"""Deepest nesting of objects and arrays a request may have (the request object itself is
level 1), as JSON parsers commonly allow; deeper requests are ``context/invalid_request``."""


def _too_deep(request: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first value nested deeper than ``limit``, or None.

    Iterative, so an arbitrarily deep request cannot exhaust the interpreter's stack;
    a container reached again is walked again only from deeper than before, so shared
    and even cyclic values (possible from Python callers) are checked in bounded time.
    The path names at most the first eight keys.
    """
    deepest: dict[int, int] = {}
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(request, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, Mapping):
            items: Any = ((str(k), v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            items = ((str(i), v) for i, v in enumerate(value))
        else:
            continue
        if depth > limit:
            return ".".join(path) + (".." if depth > 8 else "")
        if deepest.get(id(value), 0) >= depth:
            continue
        deepest[id(value)] = depth
        for key, child in items:
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1, (*path, key) if depth < 8 else path))
    return None


def _parse(kind: type[_R], request: Mapping[str, Any] | BaseModel) -> _R:
    if isinstance(request, kind):
        return request
    if isinstance(request, BaseModel):
        request = request.model_dump()
    if not isinstance(request, Mapping):
        raise AssemblyError(
            INVALID_REQUEST,
            f"invalid request: expected a JSON object (mapping), got {type(request).__name__}",
        )
    where = _too_deep(request)
    if where is not None:
        raise AssemblyError(
            INVALID_REQUEST,
            f"invalid request: {where}: JSON nested deeper than {MAX_JSON_DEPTH} levels; "
            "flatten the value",
        )
    try:
        return kind.model_validate(request)
    except ValidationError as exc:
        raise from_validation_errors(exc.errors()) from None


def _require(messages: tuple[AnyMessage, ...] | None) -> tuple[AnyMessage, ...]:
    if messages is None:
        raise AssemblyError(INVALID_REQUEST, "messages is required")
    return messages


def render_system_prompt(base: str | None, summary: str | None) -> str:
    """The system prompt with the conversation summary, if any, under its heading.

    Examples
    --------
    >>> render_system_prompt("You are helpful.  \\n", None)
    'You are helpful.'
    >>> render_system_prompt("You are helpful.", "S")
    'You are helpful.\\n\\n# Conversation summary\\n\\nS'
    >>> render_system_prompt(None, "S")
    '# Conversation summary\\n\\nS'
    """
    trimmed = (base or "").rstrip()
    if summary is None:
        return trimmed
    if trimmed:
        return f"{trimmed}\n\n{SUMMARY_HEADING}\n\n{summary}"
    return f"{SUMMARY_HEADING}\n\n{summary}"


def _by_role(messages: Sequence[AnyMessage], estimator: Estimator) -> ByRole:
    totals = {"user": 0, "assistant": 0, "function_result": 0, "custom": 0}
    for message in messages:
        totals[message.role] += estimator.message(message)
    return ByRole(**totals)


def _tools_tokens(
    tools: Sequence[AgentFunction] | None, count_text: Callable[[str], int] = text_tokens
) -> int:
    return sum(function_tokens(t, count_text) for t in tools or ())


def _parts(parts: Mapping[str, str] | None) -> dict[str, int] | None:
    return None if parts is None else {name: text_tokens(text) for name, text in parts.items()}


def _summary_timeout_ms(config: AssemblyConfig) -> int:
    return min(config.summarizer_timeout_ms, config.lease_ttl_secs * 1000 - 1000)


# ------------------------------------------------------------------ count_tokens
def count_tokens(
    request: Mapping[str, Any] | CountTokensRequest,
    *,
    config: AssemblyConfig | None = None,
    summarizer: Summarizer | None = None,
    catalog: ModelCatalog | None = DEFAULT_CATALOG,
    leases: LeaseStore | None = None,
    clock: Clock = _wall_clock_ms,
) -> CountTokensResponse:
    """Estimate a conversation's tokens: every message (customs included), as sent.

    No media normalisation, capping or pruning; parts are reported, never added.
    The model only selects the estimator, so the catalog is never asked; the
    collaborators are accepted so that every function takes the same keywords.

    Parameters
    ----------
    request : mapping or CountTokensRequest
        The request JSON (same field names) or its model.
    config : AssemblyConfig, optional
        Options (defaults when None).
    summarizer : Summarizer, optional
        Writes summaries; None means no summariser is available.
    catalog : ModelCatalog, optional
        Model limits by provider and id; None means no catalog (inline or fallback limits).
    leases : LeaseStore, optional
        Where compaction leases live (this process's by default, or ``config.lease_url``
        or ``config.lease_dir``).
    clock : callable
        Milliseconds now, for leases and deadlines.

    Returns
    -------
    CountTokensResponse
        Its ``model_dump(exclude_none=True)`` is the response JSON.

    Raises
    ------
    AssemblyError
        ``context/invalid_request`` when ``messages`` or ``model`` is missing or malformed.

    Examples
    --------
    >>> hello = {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 1001}
    >>> out = count_tokens({"messages": [hello], "model": {"id": "any"}, "parts": {"p": "abcd"}})
    >>> out.model_dump(exclude_none=True)
    {'tokens': 18, 'by_role': {'user': 18, 'assistant': 0, 'function_result': 0, 'custom': 0}, \
'by_part': {'p': 1}, 'estimator': 'heuristic'}
    """
    del config, summarizer, catalog, leases, clock  # the estimate needs none of them
    req = _parse(CountTokensRequest, request)
    messages = _require(req.messages)
    estimator = Estimator()
    by_role = _by_role(messages, estimator)
    tools = _tools_tokens(req.tools)
    tokens = estimator.total(list(messages)) + text_tokens(req.system_prompt or "") + tools
    return CountTokensResponse(
        tokens=tokens,
        by_role=by_role,
        tools_tokens=tools if req.tools is not None else None,
        by_part=_parts(req.parts),
    )


# ------------------------------------------------------------------ prune
def prune(
    request: Mapping[str, Any] | PruneRequest,
    *,
    config: AssemblyConfig | None = None,
    summarizer: Summarizer | None = None,
    catalog: ModelCatalog | None = DEFAULT_CATALOG,
    leases: LeaseStore | None = None,
    clock: Clock = _wall_clock_ms,
) -> PruneResponse:
    """Replace old verbose (or aged) function results with placeholders.

    Only the normal pruning pass: no media normalisation, no cap, no summariser.
    An absent option takes the configured value; an explicit 0 is honoured.
    Only ``config`` is used; the other collaborators are accepted so that every
    function takes the same keywords.

    Parameters
    ----------
    request : mapping or PruneRequest
        The request JSON (same field names) or its model.
    config : AssemblyConfig, optional
        Options (defaults when None).
    summarizer : Summarizer, optional
        Writes summaries; None means no summariser is available.
    catalog : ModelCatalog, optional
        Model limits by provider and id; None means no catalog (inline or fallback limits).
    leases : LeaseStore, optional
        Where compaction leases live (this process's by default, or ``config.lease_url``
        or ``config.lease_dir``).
    clock : callable
        Milliseconds now, for leases and deadlines.

    Returns
    -------
    PruneResponse
        Its ``model_dump(exclude_none=True)`` is the response JSON.

    Raises
    ------
    AssemblyError
        ``context/invalid_request`` when ``messages`` is missing or malformed.
    """
    del summarizer, catalog, leases, clock  # pruning is local and needs no model
    cfg = config or AssemblyConfig()
    req = _parse(PruneRequest, request)
    messages = _require(req.messages)
    opts = req.options or PruneOptions()

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    settings = PruneSettings(
        protect_recent_tokens=pick(opts.protect_recent_tokens, cfg.protect_recent_tokens),
        decay_user_turns=pick(opts.decay_user_turns, cfg.decay_user_turns),
        protected_user_turns=pick(opts.protected_user_turns, cfg.protected_user_turns),
        min_free_tokens=pick(opts.min_free_tokens, cfg.min_free_tokens),
        max_output_chars=pick(opts.max_output_chars, cfg.max_output_chars),
        protected_functions=frozenset(opts.protected_functions or ()),
    )
    outcome = prune_results(messages, settings)
    return PruneResponse(
        messages=list(outcome.messages),
        pruned_tokens=outcome.pruned_tokens,
        pruned_parts=outcome.pruned_parts,
        scanned_parts=outcome.scanned_parts,
    )


# ------------------------------------------------------------------ compact
def compact(
    request: Mapping[str, Any] | CompactRequest,
    *,
    config: AssemblyConfig | None = None,
    summarizer: Summarizer | None = None,
    catalog: ModelCatalog | None = DEFAULT_CATALOG,
    leases: LeaseStore | None = None,
    clock: Clock = _wall_clock_ms,
) -> CompactResponse:
    """Summarise the head of a conversation, keeping a recent tail verbatim.

    Returns ``ok`` with the summary, ``busy`` when another compaction of the
    same conversation holds the lease, ``empty`` when there is nothing to
    summarise (or the summariser answered blank) and ``overflow`` when no
    summary could be made (no summariser, a failure, the deadline, or a head
    too large for 32 calls). ``tail_turns=0`` summarises everything.

    Parameters
    ----------
    request : mapping or CompactRequest
        The request JSON (same field names) or its model.
    config : AssemblyConfig, optional
        Options (defaults when None).
    summarizer : Summarizer, optional
        Writes summaries; None means no summariser is available.
    catalog : ModelCatalog, optional
        Model limits by provider and id; None means no catalog (inline or fallback limits).
    leases : LeaseStore, optional
        Where compaction leases live (this process's by default, or ``config.lease_url``
        or ``config.lease_dir``).
    clock : callable
        Milliseconds now, for leases and deadlines.

    Returns
    -------
    CompactResponse
        Its ``model_dump(exclude_none=True)`` is the response JSON.

    Raises
    ------
    AssemblyError
        ``context/invalid_request`` for a malformed request,
        ``context/model_unresolved`` when limits cannot be resolved and fallback
        limits are off, ``context/state`` when the lease store cannot be written.
    """
    cfg = config or AssemblyConfig()
    req = _parse(CompactRequest, request)
    messages = _require(req.messages)
    opts = req.options or CompactOptions()
    if not messages:
        return CompactEmpty()
    limits = resolve_limits(req.model, catalog=catalog, config=cfg)
    input_budget = usable_budget(limits, config=cfg)
    keep_budget = (
        opts.preserve_recent_tokens
        if opts.preserve_recent_tokens is not None
        else tail_budget(input_budget)
    )
    job = SummaryJob(
        model=req.model,
        budget=input_budget,
        anchor=opts.previous_summary,
        instructions=opts.instructions,
        max_output_chars=cfg.max_output_chars,
        timeout_ms=_summary_timeout_ms(cfg),
        max_tokens=limits.max_output_tokens,
    )
    head = _summarize_head(
        messages,
        job,
        keep_budget=keep_budget,
        tail_turns=opts.tail_turns,
        lease_key=opts.lease_key,
        cfg=cfg,
        summarizer=summarizer,
        store=_lease_store(leases, cfg),
        clock=clock,
        estimator=Estimator(),
        keep_a_tail=False,
    )
    if head is None:
        return CompactBusy()
    if head.error is not None:
        if head.error.kind not in ("empty", "unavailable"):
            log.warning("compaction produced no summary: %s", head.error)
        return CompactEmpty() if head.error.kind == "empty" else CompactOverflow()
    if head.summary is None:
        return CompactEmpty()
    length = head.cut.head_len
    return CompactOk(
        summary=head.summary,
        tail_start_index=head.cut.tail_start,
        tokens_before=sum(head.sizes[:length]),
        tokens_after=text_tokens(head.summary) + sum(head.sizes[length:]),
        used_prior_summary=opts.previous_summary is not None,
    )


# ------------------------------------------------------------------ assemble
def assemble(
    request: Mapping[str, Any] | AssembleRequest,
    *,
    config: AssemblyConfig | None = None,
    summarizer: Summarizer | None = None,
    catalog: ModelCatalog | None = DEFAULT_CATALOG,
    leases: LeaseStore | None = None,
    clock: Clock = _wall_clock_ms,
    counter: TokenCounter | None = None,
) -> AssembleResponse:
    """Build a model call that fits the model's usable input budget.

    In order: resolve the model's limits, drop custom messages, normalise
    media, cap oversized results, prune old verbose results, compact (summarise
    the head into the system prompt) when still over budget, reduce the largest
    results to references as a last resort, and refuse when even that is not
    enough. With ``preview_only`` the count is returned without compaction,
    reduction or refusal.

    Parameters
    ----------
    request : mapping or AssembleRequest
        The request JSON (same field names) or its model.
    config : AssemblyConfig, optional
        Options (defaults when None).
    summarizer : Summarizer, optional
        Writes summaries; None means no summariser is available.
    catalog : ModelCatalog, optional
        Model limits by provider and id; None means no catalog (inline or fallback limits).
    leases : LeaseStore, optional
        Where compaction leases live (this process's by default, or ``config.lease_url``
        or ``config.lease_dir``).
    clock : callable
        Milliseconds now, for leases and deadlines.
    counter : TokenCounter, optional
        Prices every count (messages and tools as their compact JSON, the system prompt
        as text) with ``counter.count_text`` instead of the byte heuristic, so that
        ``token_count <= usable`` holds by that counter.

    Returns
    -------
    AssembleResponse
        Its ``model_dump(exclude_none=True)`` is the response JSON.

    Raises
    ------
    AssemblyError
        ``context/invalid_request``, ``context/model_unresolved``,
        ``context/state`` (lease store), or ``context/overflow`` with the
        required and usable token counts.

    Examples
    --------
    >>> hello = {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 1}
    >>> model = {"id": "m", "limits": {"context_window": 10000, "max_output_tokens": 1000}}
    >>> out = assemble({"messages": [hello], "model": model, "system_prompt": "Be brief."})
    >>> out.token_count, out.usable, out.model_resolved, out.applied.compacted
    (20, 8000, 'inline', False)
    """
    cfg = config or AssemblyConfig()
    req = _parse(AssembleRequest, request)
    messages = _require(req.messages)
    opts = req.options or AssembleOptions()
    limits = resolve_limits(req.model, catalog=catalog, config=cfg)
    usable = usable_budget(
        limits, config=cfg, reserved_tokens=opts.reserved_tokens, thinking_level=opts.thinking_level
    )
    preview = opts.preview_only is True
    view_to_orig = [i for i, m in enumerate(messages) if not isinstance(m, CustomMessage)]
    view = normalise_media([messages[i] for i in view_to_orig], limits.supports_vision)
    system = render_system_prompt(req.system_prompt, opts.previous_summary)
    estimator = Estimator(counter.count_text) if counter is not None else Estimator()
    tools = _tools_tokens(req.tools, estimator.count_text)
    fixed = tools + (opts.request_overhead_tokens or 0)

    def count() -> int:
        return estimator.total(view) + estimator.text(system) + fixed

    initial = count()
    max_result = (
        opts.max_result_tokens if opts.max_result_tokens is not None else cfg.max_result_tokens
    )
    capped = cap_results(view, max_result, estimator)
    view = capped.messages
    pruned_tokens = pruned_parts = 0
    if opts.allow_prune is not False:
        settings = PruneSettings.from_config(cfg, opts.protected_functions or ())
        outcome = prune_results(view, settings)
        view, pruned_tokens, pruned_parts = (
            outcome.messages,
            outcome.pruned_tokens,
            outcome.pruned_parts,
        )
    token_count = count()

    compaction: dict[str, Any] = {}
    if token_count > usable and opts.allow_compaction is not False and not preview:
        job = SummaryJob(
            model=req.model,
            budget=usable,
            anchor=opts.previous_summary,
            instructions=None,
            max_output_chars=cfg.max_output_chars,
            timeout_ms=_summary_timeout_ms(cfg),
            max_tokens=limits.max_output_tokens,
        )
        head = _summarize_head(
            view,
            job,
            keep_budget=tail_budget(usable),
            tail_turns=opts.tail_turns,
            # the lease is the whole conversation's, custom messages included
            lease_key=(
                opts.lease_key if opts.lease_key is not None else default_lease_key(messages)
            ),
            cfg=cfg,
            summarizer=summarizer,
            store=_lease_store(leases, cfg),
            clock=clock,
            estimator=estimator,
            keep_a_tail=True,
        )
        if head is not None and head.error is not None:
            level = logging.DEBUG if head.error.kind == "unavailable" else logging.WARNING
            log.log(level, "no summary for the assembled request: %s", head.error)
        if head is not None and head.summary is not None:
            summary, tail_start = head.summary, head.cut.head_len
            head_tokens = sum(head.sizes[:tail_start])
            system = render_system_prompt(req.system_prompt, summary)
            view = view[tail_start:]
            compaction = {
                "summary": summary,
                "tail_start_index": view_to_orig[tail_start],
                "tokens_before": head_tokens,
                "summarized_head_tokens": head_tokens,
            }
            view_to_orig = view_to_orig[tail_start:]
            token_count = count()

    reduced = 0
    if token_count > usable and not preview:
        reduction = emergency_reduce(view, token_count - usable, estimator)
        view = reduction.messages
        pruned_tokens += reduction.freed_tokens
        reduced = reduction.replaced
        token_count = count()
    if token_count > usable and not preview:
        raise AssemblyError(
            OVERFLOW,
            f"assembled context requires {token_count} tokens but usable budget is {usable}",
        )
    return AssembleResponse(
        system_prompt=system,
        messages=list(view),
        token_count=token_count,
        usable=usable,
        effective_max_output_tokens=limits.max_output_tokens,
        model_resolved=limits.resolved,
        applied=Applied(
            initial_token_count=initial,
            pruned=pruned_parts > 0 or reduced > 0,
            pruned_tokens=pruned_tokens,
            capped_parts=capped.capped_parts,
            capped_tokens=capped.capped_tokens,
            compacted=bool(compaction),
            **compaction,
        ),
        breakdown=Breakdown(
            system_prompt_tokens=estimator.text(system),
            tools_tokens=tools,
            by_role=_by_role(view, estimator),
            by_part=_parts(req.parts),
        ),
    )


@dataclass(frozen=True)
class _Head:
    """How a head was chosen and summarised under a lease."""

    cut: TailCut
    sizes: list[int]
    """Estimated tokens of every message."""
    summary: str | None
    """None when there was nothing to summarise, or when ``error`` says why not."""
    error: SummaryError | None = None


def _summarize_head(
    messages: Sequence[AnyMessage],
    job: SummaryJob,
    *,
    keep_budget: int,
    tail_turns: int | None,
    lease_key: str | None,
    cfg: AssemblyConfig,
    summarizer: Summarizer | None,
    store: LeaseStore,
    clock: Clock,
    estimator: Estimator,
    keep_a_tail: bool,
) -> _Head | None:
    """Under the compaction lease, pick the head that leaves ``keep_budget`` of newest
    turns and summarise it; None when another caller holds the lease. With
    ``keep_a_tail`` a head that would take every message is not summarised."""
    key = lease_key if lease_key is not None else default_lease_key(messages)
    nonce = store.acquire(key, now=clock(), ttl_ms=cfg.lease_ttl_secs * 1000)
    if nonce is None:
        return None
    try:
        sizes = [estimator.message(m) for m in messages]
        turns = tail_turns if tail_turns is not None else cfg.tail_turns
        cut = select_tail(messages, sizes, keep_budget, turns)
        length = cut.head_len
        if length == 0 or (keep_a_tail and length >= len(messages)):
            return _Head(cut, sizes, None)
        try:
            summary = summarize(messages[:length], job, summarizer=summarizer, clock=clock)
        except SummaryError as exc:
            return _Head(cut, sizes, None, exc)
        return _Head(cut, sizes, summary)
    finally:
        store.release(key, nonce)
