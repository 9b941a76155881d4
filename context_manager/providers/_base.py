"""What the provider summarisers share: key resolution, client ownership, the retry loop."""

from __future__ import annotations

import json
import math
import os
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import ClassVar, Generic, Protocol, Self, TypeVar

from ..errors import ConfigError, MissingAPIKeyError
from ..summarizer import Completion, CompletionRequest
from .redaction import client_secrets, redact
from .retry import (
    Retry,
    RetryPolicy,
    error_completion,
    retry_after_seconds,
    run_with_retries,
    should_retry_status,
)

__all__ = ["DEFAULT_DEADLINE", "ProviderSummarizer", "field", "resolve_api_key"]

DEFAULT_DEADLINE = 600.0
"""Seconds one ``complete`` call may take, retries and waits included."""


class _Closable(Protocol):
    def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Closable)


def resolve_api_key(api_key: str | None, env_var: str, owner: str) -> str:
    """``api_key`` when given, else the environment variable ``env_var``.

    Raises
    ------
    MissingAPIKeyError
        When neither holds a non-empty key; the message names ``env_var`` and the fix.
    """
    key = api_key if api_key is not None else os.environ.get(env_var)
    if not key or not key.strip():
        raise MissingAPIKeyError(
            f"{owner} needs an API key: set the {env_var} environment variable, "
            f"pass api_key=..., or pass a ready client=..."
        )
    return key


class MalformedAnswer(Exception):
    """An answer that does not have the shape of the provider's response."""


def field(obj: object, name: str) -> object:
    """``obj[name]`` for a mapping, else the attribute; None when absent."""
    if isinstance(obj, dict):
        return obj.get(name)
    try:
        return getattr(obj, name, None)
    except Exception:  # a model built from a malformed body may fail on access
        return None


def count_field(obj: object, name: str) -> int:
    """A token count read with :func:`field`: the value when it is an int (not a bool),
    else 0."""
    value = field(obj, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class ProviderSummarizer(ABC, Generic[ClientT]):
    """A summariser backed by a provider SDK client, with deadline-bounded retries.

    Subclasses build the client, turn a request into one SDK call and read
    the answer. Provider trouble never raises: it ends as a completion with
    stop reason ``error`` whose text is a one-line diagnostic. Every diagnostic,
    logged or returned, has its secrets removed first (see
    :func:`~context_manager.providers.redaction.redact`): the client's API key,
    bearer tokens, credential headers and key-shaped tokens a server echoed.
    """

    provider: ClassVar[str]
    env_var: ClassVar[str]

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        client: ClientT | None,
        deadline: float,
        retry: RetryPolicy | None,
        seed: int,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        name = type(self).__name__
        if isinstance(deadline, bool) or not (
            isinstance(deadline, int | float) and math.isfinite(deadline) and deadline > 0
        ):
            raise ConfigError(
                f"{name}.deadline must be a positive number of seconds, got {deadline!r}"
            )
        self.deadline = float(deadline)
        self.retry = retry if retry is not None else RetryPolicy()
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._clock = clock
        if client is not None:
            if api_key is not None or base_url is not None:
                raise ConfigError(
                    f"{name}: pass either client=... or api_key/base_url, not both "
                    f"(configure the key and base URL on the client)"
                )
            self._client: ClientT = self._without_sdk_retries(client)
            self._owns_client = False
            self._secrets = client_secrets(client)
        else:
            key = resolve_api_key(api_key, self.env_var, name)
            self._client = self._build_client(key, base_url)
            self._owns_client = True
            self._secrets = (key, *client_secrets(self._client))

    # ------------------------------------------------------------ subclass hooks
    @abstractmethod
    def _build_client(self, api_key: str, base_url: str | None) -> ClientT:
        """A new SDK client with the SDK's own retries off."""

    @abstractmethod
    def _without_sdk_retries(self, client: ClientT) -> ClientT:
        """A view of a caller's client with the SDK's own retries off."""

    @abstractmethod
    def _call(self, request: CompletionRequest, timeout: float) -> object:
        """One SDK call with ``timeout`` seconds; the SDK's answer object."""

    @abstractmethod
    def _read(self, answer: object, requested_model: str) -> Completion:
        """The SDK's answer as a completion; :class:`MalformedAnswer` when it is not one."""

    @property
    @abstractmethod
    def _sdk(self) -> ModuleType:
        """The SDK module, for its ``APIStatusError``, ``APIConnectionError``, ``APIError``."""

    def _redact(self, text: str) -> str:
        """``text`` without the client's key or any other secret (see :func:`redact`)."""
        return redact(text, self._secrets)

    def _attempt(self, request: CompletionRequest, timeout: float) -> Completion | Retry:
        """One call: a completion (``error`` for a final failure) or a transient failure,
        its diagnostic redacted."""
        outcome = self._try(request, timeout)
        if isinstance(outcome, Retry):
            return Retry(self._redact(outcome.detail), outcome.retry_after)
        if outcome.stop_reason == "error":
            return outcome.model_copy(update={"text": self._redact(outcome.text)})
        return outcome

    def _try(self, request: CompletionRequest, timeout: float) -> Completion | Retry:
        """One call, its diagnostic as the SDK gave it."""
        sdk, model = self._sdk, request.model
        try:
            answer = self._call(request, timeout)
        except sdk.APIStatusError as exc:
            detail = f"{self.provider}: HTTP {exc.status_code}: {exc.message}"
            headers = exc.response.headers
            if should_retry_status(exc.status_code, headers):
                return Retry(detail, retry_after_seconds(headers))
            return error_completion(detail, model)
        except sdk.APIConnectionError as exc:  # timeouts included
            return Retry(f"{self.provider}: {type(exc).__name__}: {exc.message}")
        except sdk.APIError as exc:  # e.g. a body failing validation
            return error_completion(f"{self.provider}: {type(exc).__name__}: {exc}", model)
        except json.JSONDecodeError as exc:
            return error_completion(f"{self.provider}: malformed response body: {exc}", model)
        try:
            return self._read(answer, model)
        except MalformedAnswer as exc:
            return error_completion(f"{self.provider}: malformed response: {exc}", model)

    # ------------------------------------------------------------------ public
    @property
    def client(self) -> ClientT:
        """The SDK client the calls go through (its own retries are off)."""
        return self._client

    def complete(self, request: CompletionRequest) -> Completion:
        """Answer ``request`` within :attr:`deadline` seconds (or the request's shorter
        ``timeout``), retrying transient failures.

        Parameters
        ----------
        request : CompletionRequest
            Model, messages, system prompt, output cap and tools, passed through.

        Returns
        -------
        Completion
            The provider's answer with its stop reason mapped to our vocabulary,
            or stop reason ``error`` (text: a diagnostic) for transport errors,
            malformed answers, non-transient HTTP errors and exhausted retries.
        """
        return run_with_retries(
            lambda timeout: self._attempt(request, timeout),
            deadline=min(self.deadline, request.timeout or self.deadline),
            policy=self.retry,
            rng=self._rng,
            sleep=self._sleep,
            clock=self._clock,
            label=self.provider,
            model=request.model,
            secrets=self._secrets,
        )

    def close(self) -> None:
        """Close the SDK client when this summariser built it (a caller's client stays open)."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
