"""A summariser on the Anthropic Messages API, through the official ``anthropic`` SDK."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import anthropic

from ..errors import ConfigError
from ..messages import to_anthropic
from ..summarizer import Completion, CompletionRequest, StopReason, Usage
from ._base import DEFAULT_DEADLINE, MalformedAnswer, ProviderSummarizer, count_field, field
from .retry import RetryPolicy

__all__ = ["ANTHROPIC_STOP_REASONS", "AnthropicSummarizer", "anthropic_tools"]

ANTHROPIC_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "max_tokens",
    "refusal": "refusal",
    "tool_use": "tool_use",
}
"""Anthropic stop reasons in our vocabulary.

``stop_sequence`` is a complete answer. ``model_context_window_exceeded`` and
``pause_turn`` leave the answer unfinished, like ``max_tokens``: never memory,
yet not a transport failure. Any other value ends as ``error``.
"""


def anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools in the Messages API shape.

    A tool with a ``name`` (a custom tool with its ``input_schema``, or one of
    Anthropic's own typed tools) passes unchanged; a Chat Completions tool (a
    ``function`` object) becomes a custom tool with its ``parameters`` as the
    ``input_schema``.

    Raises
    ------
    ConfigError
        For a tool with neither ``name`` nor ``function``, naming its index.

    Examples
    --------
    >>> anthropic_tools([{"type": "function", "function": {"name": "bash"}}])
    [{'name': 'bash', 'input_schema': {'type': 'object'}}]
    """
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        function = tool.get("function")
        if not isinstance(function, Mapping):
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise ConfigError(
                    f"tools[{i}] has neither a 'name' nor a 'function' object: give each tool "
                    "a 'name' and an 'input_schema', or the Chat Completions shape"
                )
            out.append(dict(tool))
            continue
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"tools[{i}].function has no 'name'")
        converted: dict[str, Any] = {"name": name}
        if function.get("description"):
            converted["description"] = function["description"]
        converted["input_schema"] = dict(function.get("parameters") or {"type": "object"})
        out.append(converted)
    return out


class AnthropicSummarizer(ProviderSummarizer[anthropic.Anthropic]):
    """Completes requests with ``client.messages.create`` (Anthropic Messages API).

    The request's model, messages (through :func:`~context_manager.messages.to_anthropic`,
    the request's ``agent`` as the assistant side, its cache breakpoints as
    ``cache_control`` marks with its ``cache_ttl``), system prompt, ``max_tokens``
    are passed through unchanged, and tools in the Messages API shape (see
    :func:`anthropic_tools`).

    Failures never raise: a transport error, a malformed body, a non-transient
    HTTP error (400, 401, ...) or retries that ran out end as a completion with
    stop reason ``error`` whose text is a one-line diagnostic (never model
    output), so the caller's gate (:attr:`Completion.acceptable`) refuses it
    like any unusable answer. Only programmer errors raise (a missing key, bad
    settings), before any call.

    Parameters
    ----------
    api_key : str, optional
        The key; by default the ``ANTHROPIC_API_KEY`` environment variable.
    base_url : str, optional
        The API root (``https://api.anthropic.com`` by default, or the SDK's
        ``ANTHROPIC_BASE_URL``); the SDK posts to ``{base_url}/v1/messages``.
    client : anthropic.Anthropic, optional
        A ready client to use instead (then pass neither ``api_key`` nor
        ``base_url``); it is used with its own retries off and is not closed here.
    deadline : float
        Seconds one :meth:`complete` call may take, retries and waits included;
        each attempt's connect, read and write timeouts are the time left (a
        server that keeps trickling bytes can stretch the last attempt).
    retry : RetryPolicy, optional
        The backoff on 408/409/429/5xx and connection errors; a ``retry-after``
        (or ``retry-after-ms``) header replaces the backoff, but no wait is
        started that would end past the deadline.
    seed : int
        Seed of the backoff jitter.
    sleep, clock : callable
        ``time.sleep`` and ``time.monotonic`` by default; injectable for tests.

    Raises
    ------
    MissingAPIKeyError
        No ``api_key`` and no ``ANTHROPIC_API_KEY``.
    ConfigError
        A non-positive deadline, or ``client`` together with ``api_key``/``base_url``.

    Examples
    --------
    >>> with AnthropicSummarizer(api_key="sk-ant-example", deadline=30) as s:
    ...     s.deadline, s.client.max_retries
    (30.0, 0)
    """

    provider = "anthropic"
    env_var = "ANTHROPIC_API_KEY"
    needs_tool_definitions = True  # the API refuses tool calls in a history without them

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: anthropic.Anthropic | None = None,
        deadline: float = DEFAULT_DEADLINE,
        retry: RetryPolicy | None = None,
        seed: int = 0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            client=client,
            deadline=deadline,
            retry=retry,
            seed=seed,
            sleep=sleep,
            clock=clock,
        )

    def _build_client(self, api_key: str, base_url: str | None) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0)

    def _without_sdk_retries(self, client: anthropic.Anthropic) -> anthropic.Anthropic:
        return client.with_options(max_retries=0)

    def _call(self, request: CompletionRequest, timeout: float) -> object:
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": to_anthropic(
                request.messages,
                agent=request.agent,
                cache_breakpoints=request.cache_breakpoints,
                cache_ttl=request.cache_ttl,
            ),
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = anthropic_tools(request.tools)
        return self._client.messages.create(**params, timeout=timeout)

    def _read(self, answer: object, requested_model: str) -> Completion:
        return _read_message(answer, requested_model)

    @property
    def _sdk(self) -> ModuleType:
        return anthropic


def _read_message(message: object, requested_model: str) -> Completion:
    content = field(message, "content")
    if not isinstance(content, list):
        raise MalformedAnswer(f"'content' is not a list of blocks (got {type(content).__name__})")
    texts: list[str] = []
    for i, block in enumerate(content):
        if field(block, "type") == "text":
            text = field(block, "text")
            if not isinstance(text, str):
                raise MalformedAnswer(f"content[{i}] is a text block without a string 'text'")
            texts.append(text)
    raw_stop = field(message, "stop_reason")
    stop = ANTHROPIC_STOP_REASONS.get(raw_stop) if isinstance(raw_stop, str) else None
    if stop is None:
        raise MalformedAnswer(f"unknown stop_reason {raw_stop!r}")
    model = field(message, "model")
    return Completion(
        text="".join(texts),
        stop_reason=stop,
        usage=_read_usage(field(message, "usage")),
        model=model if isinstance(model, str) else requested_model,
    )


def _read_usage(usage: object) -> Usage:
    return Usage(
        input_tokens=count_field(usage, "input_tokens")
        + count_field(usage, "cache_creation_input_tokens")
        + count_field(usage, "cache_read_input_tokens"),
        output_tokens=count_field(usage, "output_tokens"),
    )
