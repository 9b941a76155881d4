"""The agents a service holds open: one :class:`~context_manager.ContextManager` per
agent, on its own store ``<store_root>/<agent>.db`` (or in the database ``store_url``),
opened at its first request and closed when idle.

Requests to one agent run one at a time (each holds the agent's lock for its whole
call); requests to different agents run in parallel. A configuration change to the
stores, the summariser or the manager marks every open agent stale: each is closed and
opened again under the new settings at its next request, so the change takes effect
then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import SummarizerNotConfiguredError
from ..summarizer import Completion, CompletionRequest, ExtractiveSummarizer, Summarizer
from .errors import ServiceError
from .metrics import Metrics
from .settings import AGENT_ID, ServiceSettings, SummarizerSettings

if TYPE_CHECKING:
    from ..manager import ContextManager
    from .reload import LiveSettings

__all__ = ["AgentPool", "CountingSummarizer", "build_summarizer"]

log = logging.getLogger("context_manager.service")


class CountingSummarizer:
    """A summariser that counts its calls and failures in the service's metrics."""

    def __init__(self, inner: Summarizer, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self.model = getattr(inner, "model", None)
        self.needs_tool_definitions = bool(getattr(inner, "needs_tool_definitions", True))

    def complete(self, request: CompletionRequest) -> Completion:
        """Answer ``request`` through the configured summariser, counted."""
        self.metrics.count("ctxfold_summarizer_calls_total")
        try:
            done = self.inner.complete(request)
        except Exception:
            self.metrics.count("ctxfold_summarizer_failures_total")
            raise
        if done.stop_reason != "end_turn" or not done.text.strip():
            self.metrics.count("ctxfold_summarizer_failures_total")
        return done


def build_summarizer(settings: SummarizerSettings, environ: dict[str, str]) -> Summarizer:
    """The summariser ``settings`` name.

    Raises
    ------
    SummarizerNotConfiguredError
        For a provider without a model, or whose key variable is unset.
    """
    if settings.provider == "extractive":
        return ExtractiveSummarizer()
    if not settings.model:
        raise SummarizerNotConfiguredError(
            f"summarizer.provider is {settings.provider!r} but summarizer.model is unset"
        )
    key = None
    if settings.api_key_env is not None:
        key = environ.get(settings.api_key_env)
        if not key:
            raise SummarizerNotConfiguredError(
                f"summarizer.api_key_env names {settings.api_key_env}, which is unset"
            )
    from .. import providers

    made: Any
    if settings.provider == "anthropic":
        made = providers.AnthropicSummarizer(api_key=key, base_url=settings.base_url)
    else:
        made = providers.OpenAISummarizer(api_key=key, base_url=settings.base_url)
    made.model = settings.model
    return made  # type: ignore[no-any-return]


@dataclass
class _Agent:
    manager: ContextManager
    settings: ServiceSettings
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = 0.0
    users: int = 0
    stale: bool = False
    failed: BaseException | None = None
    """Why opening it failed (a request that waited for the open raises it too)."""


class AgentPool:
    """Open agents, each on its own store, at most ``limits.max_open_agents``.

    Parameters
    ----------
    live : LiveSettings
        The settings in force (read at every open).
    metrics : Metrics
        Where summariser calls are counted.
    environ : dict
        The environment a provider key is read from.
    clock : callable
        Seconds, for idleness.
    summarizer : Summarizer, optional
        The summariser of every agent, in place of the configured one.
    """

    def __init__(
        self,
        live: LiveSettings,
        metrics: Metrics,
        *,
        environ: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.override = summarizer
        self.live = live
        self.metrics = metrics
        self.environ = dict(environ or {})
        self.clock = clock
        self._lock = threading.Lock()
        self._agents: dict[str, _Agent] = {}
        self._closed = False
        live.on_change(self._changed)

    # ------------------------------------------------------------------ opening
    def _open(self, agent: str, settings: ServiceSettings) -> ContextManager:
        from ..manager import ContextManager
        from ..strategies.autobiographical import AutobiographicalConfig, AutobiographicalStrategy
        from ..strategies.passthrough import PassthroughStrategy

        inner = self.override or build_summarizer(settings.summarizer, self.environ)
        summarizer = CountingSummarizer(inner, self.metrics)
        chosen = settings.manager
        strategy: Any = None
        if chosen.strategy == "passthrough":
            strategy = PassthroughStrategy()
        elif chosen.strategy == "autobiographical":
            options = dict(chosen.options)
            options.setdefault("compression_model", summarizer.model or "extractive")
            if chosen.window_tokens is not None:
                options.setdefault("window_tokens", chosen.window_tokens)
            strategy = AutobiographicalStrategy(AutobiographicalConfig(**options))
        where: dict[str, Any]
        if settings.store_url is not None:
            where = {"url": settings.store_url, "agent": agent}
        else:
            settings.store_root.mkdir(parents=True, exist_ok=True)
            where = {"path": settings.store_root / f"{agent}.db"}
        return ContextManager.open(
            **where,
            strategy=strategy,
            summarizer=summarizer,
            window_tokens=chosen.window_tokens if strategy is None else None,
            memory_model=summarizer.model if strategy is None else None,
            auto_tick=chosen.auto_tick,
        )

    @contextmanager
    def use(self, agent: str) -> Iterator[ContextManager]:
        """The agent's manager, held for this request alone (opened when needed).

        Raises
        ------
        ServiceError
            ``service/invalid_request`` for an agent id that is not one
            (:data:`~.settings.AGENT_ID`), ``service/shutting_down`` once closed.
        """
        if not AGENT_ID.match(agent):
            raise ServiceError(
                "service/invalid_request",
                f"agent {agent!r} is not an agent id: 1 to 128 letters, digits, '.', '_' "
                "or '-', starting with a letter or digit",
            )
        with self._lock:
            if self._closed:
                raise ServiceError("service/shutting_down", "the service is shutting down")
            entry = self._agents.get(agent)
            if entry is not None:
                entry.users += 1
        if entry is None:
            entry = self._admit(agent)
        try:
            with entry.lock:
                if entry.failed is not None:
                    raise entry.failed
                if entry.stale:
                    entry.manager.close()
                    entry.settings = self.live.current
                    entry.manager = self._open(agent, entry.settings)
                    entry.stale = False
                entry.last_used = self.clock()
                yield entry.manager
                entry.last_used = self.clock()
        finally:
            with self._lock:
                entry.users -= 1

    def _admit(self, agent: str) -> _Agent:
        settings = self.live.current
        with self._lock:
            entry = self._agents.get(agent)
            if entry is not None:  # another request opened it meanwhile
                entry.users += 1
                return entry
            # reserve the slot first: the open happens outside the pool's lock
            placeholder = _Agent(manager=None, settings=settings, users=1)  # type: ignore[arg-type]
            placeholder.lock.acquire()
            self._agents[agent] = placeholder
            evict = self._evictable(settings.limits.max_open_agents)
        for name, old in evict:
            self._close_entry(name, old)
        try:
            placeholder.manager = self._open(agent, settings)
        except BaseException as exc:
            with self._lock:
                del self._agents[agent]
            placeholder.failed = exc
            placeholder.lock.release()
            raise
        placeholder.last_used = self.clock()
        placeholder.lock.release()
        return placeholder

    def _evictable(self, limit: int) -> list[tuple[str, _Agent]]:
        """The idle agents to close so that at most ``limit`` stay open (pool lock held)."""
        over = len(self._agents) - limit
        if over <= 0:
            return []
        idle = sorted(
            ((n, a) for n, a in self._agents.items() if a.users == 0),
            key=lambda item: item[1].last_used,
        )[:over]
        for name, _ in idle:
            del self._agents[name]
        return idle

    def _close_entry(self, name: str, entry: _Agent) -> None:
        with entry.lock:
            try:
                entry.manager.close()
            except Exception:
                log.exception("closing agent %s failed", name)

    # ------------------------------------------------------------------ closing
    def close_idle(self) -> int:
        """Close the agents idle for longer than ``limits.idle_close_seconds``."""
        limit = self.live.current.limits.idle_close_seconds
        now = self.clock()
        with self._lock:
            idle = [
                (n, a)
                for n, a in self._agents.items()
                if a.users == 0 and now - a.last_used >= limit
            ]
            for name, _ in idle:
                del self._agents[name]
        for name, entry in idle:
            self._close_entry(name, entry)
        return len(idle)

    def close_all(self) -> None:
        """Close every agent (waiting for each request in progress) and refuse more."""
        with self._lock:
            self._closed = True
            entries = list(self._agents.items())
            self._agents.clear()
        for name, entry in entries:
            self._close_entry(name, entry)

    @property
    def open_count(self) -> int:
        """Agents open now."""
        with self._lock:
            return len(self._agents)

    def _changed(self, old: ServiceSettings, new: ServiceSettings) -> None:
        if (old.store_root, old.store_url, old.summarizer, old.manager) == (
            new.store_root,
            new.store_url,
            new.summarizer,
            new.manager,
        ):
            return
        with self._lock:
            for entry in self._agents.values():
                entry.stale = True

    def check_summarizer(self) -> str | None:
        """Why the configured summariser cannot be built, or None."""
        if self.override is not None:
            return None
        try:
            build_summarizer(self.live.current.summarizer, self.environ)
        except SummarizerNotConfiguredError as exc:
            return str(exc)
        return None
