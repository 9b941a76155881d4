"""A summariser on the OpenAI Chat Completions API, through the official ``openai`` SDK."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, Literal

import openai

from ..errors import ConfigError
from ..messages import to_openai
from ..summarizer import Completion, CompletionRequest, StopReason, Usage
from ._base import DEFAULT_DEADLINE, MalformedAnswer, ProviderSummarizer, count_field, field
from .retry import RetryPolicy

__all__ = ["OPENAI_FINISH_REASONS", "OpenAISummarizer", "openai_tools"]

OPENAI_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
}
"""Chat Completions finish reasons in our vocabulary.

A non-empty ``refusal`` on the message is a refusal whatever the finish
reason; tool calls on the message are ``tool_use``. Any other finish reason
ends as ``error``.
"""


def openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools in the Chat Completions shape.

    A tool already in that shape (with a ``function`` object) passes unchanged;
    an Anthropic-style tool (``name``, ``description``, ``input_schema``) becomes
    a ``function`` tool with the schema as its ``parameters``.

    Raises
    ------
    ConfigError
        For a tool with neither ``function`` nor ``name``, naming its index.

    Examples
    --------
    >>> openai_tools([{"name": "bash", "input_schema": {"type": "object"}}])
    [{'type': 'function', 'function': {'name': 'bash', 'parameters': {'type': 'object'}}}]
    """
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if isinstance(tool.get("function"), Mapping):
            out.append(dict(tool))
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"tools[{i}] has neither a 'function' object nor a 'name': give each tool "
                f"a 'name' (and 'input_schema'), or the Chat Completions shape"
            )
        function: dict[str, Any] = {"name": name}
        if tool.get("description"):
            function["description"] = tool["description"]
        function["parameters"] = dict(tool.get("input_schema") or {"type": "object"})
        out.append({"type": "function", "function": function})
    return out


class OpenAISummarizer(ProviderSummarizer[openai.OpenAI]):
    """Completes requests with ``client.chat.completions.create`` (Chat Completions API).

    The Chat Completions API is the one most OpenAI-compatible servers speak,
    so it is the one used here (not the Responses API). The request's system
    prompt becomes a leading ``system`` message, the messages go through
    :func:`~context_manager.messages.to_openai` (the request's ``agent`` as the
    assistant side), the model and output cap are passed through, and tools are
    passed through in the Chat Completions shape (see :func:`openai_tools`). The
    request's cache breakpoints are not sent: OpenAI caches long prefixes by itself.

    Failures never raise: a transport error, a malformed body, a non-transient
    HTTP error (400, 401, ...) or retries that ran out end as a completion with
    stop reason ``error`` whose text is a one-line diagnostic (never model
    output), so the caller's gate (:attr:`Completion.acceptable`) refuses it
    like any unusable answer. Only programmer errors raise (a missing key, bad
    settings or tools), before any call.

    Parameters
    ----------
    api_key : str, optional
        The key; by default the ``OPENAI_API_KEY`` environment variable.
    base_url : str, optional
        The API root including the version (``https://api.openai.com/v1`` by
        default, or the SDK's ``OPENAI_BASE_URL``); the SDK posts to
        ``{base_url}/chat/completions``.
    client : openai.OpenAI, optional
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
    max_tokens_field : {"max_completion_tokens", "max_tokens"}
        The body field that carries the output cap: the current one, or the
        older one that some compatible servers still expect.
    sleep, clock : callable
        ``time.sleep`` and ``time.monotonic`` by default; injectable for tests.

    Raises
    ------
    MissingAPIKeyError
        No ``api_key`` and no ``OPENAI_API_KEY``.
    ConfigError
        A non-positive deadline, an unknown ``max_tokens_field``, or ``client``
        together with ``api_key``/``base_url``.

    Examples
    --------
    >>> with OpenAISummarizer(api_key="sk-example", deadline=30) as s:
    ...     s.deadline, s.client.max_retries
    (30.0, 0)
    """

    provider = "openai"
    env_var = "OPENAI_API_KEY"
    needs_tool_definitions = True  # the API refuses tool calls in a history without them

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: openai.OpenAI | None = None,
        deadline: float = DEFAULT_DEADLINE,
        retry: RetryPolicy | None = None,
        seed: int = 0,
        max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_tokens_field not in ("max_completion_tokens", "max_tokens"):
            raise ConfigError(
                f"OpenAISummarizer.max_tokens_field must be 'max_completion_tokens' or "
                f"'max_tokens', got {max_tokens_field!r}"
            )
        self.max_tokens_field = max_tokens_field
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

    def _build_client(self, api_key: str, base_url: str | None) -> openai.OpenAI:
        return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0)

    def _without_sdk_retries(self, client: openai.OpenAI) -> openai.OpenAI:
        return client.with_options(max_retries=0)

    def _call(self, request: CompletionRequest, timeout: float) -> object:
        messages = to_openai(request.messages, agent=request.agent)
        if request.system:
            messages.insert(0, {"role": "system", "content": request.system})
        params: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            self.max_tokens_field: request.max_tokens,
        }
        if request.tools:
            params["tools"] = openai_tools(request.tools)
        return self._client.chat.completions.create(**params, timeout=timeout)

    def _read(self, answer: object, requested_model: str) -> Completion:
        return _read_chat_completion(answer, requested_model)

    @property
    def _sdk(self) -> ModuleType:
        return openai


def _read_chat_completion(answer: object, requested_model: str) -> Completion:
    choices = field(answer, "choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedAnswer("'choices' is not a non-empty list")
    choice = choices[0]
    message = field(choice, "message")
    if message is None:
        raise MalformedAnswer("choices[0] has no 'message'")
    content = field(message, "content")
    if content is not None and not isinstance(content, str):
        raise MalformedAnswer("choices[0].message.content is neither a string nor null")
    text = content or ""
    refusal = field(message, "refusal")
    finish = field(choice, "finish_reason")
    stop: StopReason | None
    if isinstance(refusal, str) and refusal.strip():
        stop, text = "refusal", refusal
    elif field(message, "tool_calls"):
        stop = "tool_use"
    else:
        stop = OPENAI_FINISH_REASONS.get(finish) if isinstance(finish, str) else None
        if stop is None:
            raise MalformedAnswer(f"unknown finish_reason {finish!r}")
    model = field(answer, "model")
    usage = field(answer, "usage")
    return Completion(
        text=text,
        stop_reason=stop,
        usage=Usage(
            input_tokens=count_field(usage, "prompt_tokens"),
            output_tokens=count_field(usage, "completion_tokens"),
        ),
        model=model if isinstance(model, str) else requested_model,
    )
