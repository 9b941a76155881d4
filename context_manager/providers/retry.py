"""Retries with exponential backoff, bounded by a deadline.

The provider summarisers turn each attempt into either a final
:class:`~context_manager.summarizer.Completion` or a :class:`Retry` (a
transient failure: 429, 5xx, a dropped connection, a timeout).
:func:`run_with_retries` repeats the attempt while the deadline allows:

* the wait before retry ``n`` (0-based) is ``initial_delay * multiplier**n``,
  capped at ``max_delay`` and scaled by a seeded jitter factor in
  ``[1 - jitter, 1 + jitter]``;
* a ``retry-after`` the server sent replaces that wait;
* a wait that would end at or past the deadline is never started: the call
  ends there with stop reason ``error``;
* every attempt gets the time left before the deadline as its timeout;
* a failure's detail is logged and returned with its secrets removed
  (:func:`~context_manager.providers.redaction.redact`).

The clock and the sleep function are injectable, so tests never sleep.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..errors import ConfigError
from ..summarizer import Completion
from .redaction import redact

__all__ = [
    "Retry",
    "RetryPolicy",
    "error_completion",
    "retry_after_seconds",
    "run_with_retries",
    "should_retry_status",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait between attempts.

    Parameters
    ----------
    initial_delay : float
        Wait before the first retry, in seconds (before jitter).
    multiplier : float
        Growth of the wait per retry (at least 1).
    max_delay : float
        Cap on one wait, in seconds (before jitter).
    jitter : float
        Relative spread of the wait, in ``[0, 1)``: the wait is scaled by a
        factor drawn uniformly from ``[1 - jitter, 1 + jitter]``.
    max_attempts : int or None
        Cap on attempts per call; ``None`` lets the deadline alone bound them.

    Raises
    ------
    ConfigError
        Naming the field that is out of range.

    Examples
    --------
    >>> import random
    >>> RetryPolicy(jitter=0.0).delay(3, random.Random(0))
    4.0
    """

    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 8.0
    jitter: float = 0.25
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.initial_delay) and self.initial_delay > 0):
            raise ConfigError(
                f"RetryPolicy.initial_delay must be a positive number of seconds, "
                f"got {self.initial_delay!r}"
            )
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1):
            raise ConfigError(f"RetryPolicy.multiplier must be >= 1, got {self.multiplier!r}")
        if not (math.isfinite(self.max_delay) and self.max_delay >= self.initial_delay):
            raise ConfigError(
                f"RetryPolicy.max_delay must be >= initial_delay ({self.initial_delay}), "
                f"got {self.max_delay!r}"
            )
        if not (0 <= self.jitter < 1):
            raise ConfigError(f"RetryPolicy.jitter must be in [0, 1), got {self.jitter!r}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError(
                f"RetryPolicy.max_attempts must be >= 1 or None, got {self.max_attempts!r}"
            )

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based), jitter included."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** min(retry, 64))
        if not self.jitter:
            return base
        return base * (1 + self.jitter * (2 * rng.random() - 1))


@dataclass(frozen=True)
class Retry:
    """A transient failure: try again after ``retry_after`` seconds or the backoff.

    Parameters
    ----------
    detail : str
        What went wrong, for the log and the final diagnostic.
    retry_after : float or None
        The wait the server asked for, when it sent one.
    """

    detail: str
    retry_after: float | None = None


def error_completion(detail: str, model: str | None) -> Completion:
    """A completion with stop reason ``error`` whose text is the one-line ``detail``."""
    return Completion(text=detail, stop_reason="error", model=model)


def should_retry_status(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an HTTP error status is transient.

    An ``x-should-retry`` header of ``true``/``false`` decides; otherwise 408,
    409, 429 and every 5xx are transient.

    Examples
    --------
    >>> should_retry_status(429, {}), should_retry_status(400, {})
    (True, False)
    >>> should_retry_status(500, {"x-should-retry": "false"})
    False
    """
    flag = (headers.get("x-should-retry") or "").strip().lower()
    if flag in ("true", "false"):
        return flag == "true"
    return status in (408, 409, 429) or status >= 500


def retry_after_seconds(
    headers: Mapping[str, str], *, now: Callable[[], float] = time.time
) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, or ``retry-after`` in seconds or as a date.

    Returns None when neither header is present or readable, and never a negative wait.

    Examples
    --------
    >>> retry_after_seconds({"retry-after": "2"})
    2.0
    >>> retry_after_seconds({"retry-after-ms": "250"})
    0.25
    >>> retry_after_seconds({"retry-after": "soon"}) is None
    True
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(0.0, value)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        value = when.timestamp() - now()
    return max(0.0, value) if math.isfinite(value) else None


def run_with_retries(
    attempt: Callable[[float], Completion | Retry],
    *,
    deadline: float,
    policy: RetryPolicy,
    rng: random.Random,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    label: str,
    model: str | None,
    secrets: Iterable[str] = (),
) -> Completion:
    """Run ``attempt(timeout)`` until it returns a completion or the deadline forbids a retry.

    Parameters
    ----------
    attempt : callable
        Called with the seconds left before the deadline (its timeout); returns
        the final :class:`Completion` or a :class:`Retry`.
    deadline : float
        Seconds from now by which the call ends, retries and waits included.
    policy : RetryPolicy
        The backoff.
    rng : random.Random
        Source of the jitter (seeded by the caller for reproducible waits).
    sleep, clock : callable
        ``time.sleep`` and ``time.monotonic`` or stand-ins.
    label : str
        Prefix of the diagnostic (the provider name).
    model : str or None
        Reported in an ``error`` completion.
    secrets : iterable of str
        Strings never to log or return (the API key): a failure's detail, in the
        log and in an ``error`` completion, is passed through
        :func:`~context_manager.providers.redaction.redact` with them.

    Returns
    -------
    Completion
        The attempt's completion, or stop reason ``error`` with a diagnostic
        when the retries ran out or the deadline passed.
    """
    secrets = tuple(secrets)
    end = clock() + deadline
    attempts = 0
    last = "no attempt made"
    while True:
        remaining = end - clock()
        if remaining <= 0:
            return error_completion(
                f"{label}: deadline of {deadline:g}s passed after {attempts} attempt(s); "
                f"last failure: {last}",
                model,
            )
        outcome = attempt(remaining)
        attempts += 1
        if isinstance(outcome, Completion):
            if outcome.stop_reason == "error":
                return outcome.model_copy(update={"text": redact(outcome.text, secrets)})
            return outcome
        last = redact(outcome.detail, secrets)
        if policy.max_attempts is not None and attempts >= policy.max_attempts:
            return error_completion(
                f"{label}: gave up after {attempts} attempt(s); last failure: {last}", model
            )
        wait = outcome.retry_after
        if wait is None or wait <= 0:
            wait = policy.delay(attempts - 1, rng)
        if clock() + wait >= end:
            return error_completion(
                f"{label}: a retry in {wait:.3g}s would pass the deadline of {deadline:g}s "
                f"after {attempts} attempt(s); last failure: {last}",
                model,
            )
        log.warning("%s: attempt %d failed (%s); retrying in %.3gs", label, attempts, last, wait)
        sleep(wait)
