"""What a manager may ask of its strategy, declared once.

Every strategy has the hooks of :class:`~.base.Strategy` (``select`` required, the
others with defaults) and a :class:`~.base.StrategyProfile` (the window it was sized
for, the model that writes its memories...). Beyond those, a strategy may offer
optional capabilities, each a :class:`typing.Protocol` here:

- :class:`Pinning`: pins and locks (``pin_range``, ``unpin``, ``pins``, ``lock``);
- :class:`MemoryReads`: its memories, read and searched (``summaries``,
  ``leaves_of``, ``search_summaries``, ``summaries_in_range``);
- :class:`HeadReset`: moving the start of its raw head (``reset_head_window``);
- :class:`GivesUp`: work it gave up on, tried again (``retry_given_up``);
- :class:`Reconfigurable`: a copy with other options, for a preview
  (``with_options``).

:func:`capabilities_of` reads them once, when the manager takes the strategy; the
manager then asks :class:`Capabilities`, never the strategy's attributes.
``context_manager.testing`` checks a strategy against this contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError, ContextManagerError
from .base import Strategy, StrategyContext, StrategyProfile

__all__ = [
    "REQUIRED_HOOKS",
    "Capabilities",
    "GivesUp",
    "HeadReset",
    "MemoryReads",
    "Pinning",
    "Reconfigurable",
    "capabilities_of",
]

REQUIRED_HOOKS = (
    "initialize",
    "on_new_message",
    "on_messages_removed",
    "select",
    "tick",
    "is_ready",
    "on_holds_released",
    "pending_work",
)
"""The methods every strategy has (:class:`~.base.Strategy` gives all but ``select`` a
default), which the manager calls without asking."""


@runtime_checkable
class Pinning(Protocol):
    """A strategy that keeps pins (ranges held raw or at a level) and locks."""

    @property
    def pins(self) -> Sequence[Any]:
        """The current pins."""
        ...

    def pin_range(
        self,
        ctx: StrategyContext,
        first: str,
        last: str,
        *,
        name: str | None = None,
        level: int | None = None,
        max_level: int | None = None,
        kind: str = "range",
    ) -> str:
        """Pin ``first..last``; returns the pin id."""
        ...

    def unpin(self, ctx: StrategyContext, pin_id: str) -> bool:
        """Remove a pin; False when there is none."""
        ...

    def lock(self, ctx: StrategyContext, message_id: str, locked: bool = True) -> None:
        """Keep a message at its current fold level (or stop keeping it)."""
        ...


@runtime_checkable
class MemoryReads(Protocol):
    """A strategy whose memories can be read and searched."""

    @property
    def summaries(self) -> Mapping[str, Any]:
        """Its memories by id."""
        ...

    def leaves_of(self, summary: Any) -> list[str]:
        """The ids of the stored messages a memory stands for."""
        ...

    def search_summaries(
        self,
        text: str | None = None,
        *,
        regex: str | None = None,
        levels: Sequence[int] | None = None,
        limit: int = 50,
        include_merged: bool = False,
    ) -> list[Any]:
        """``(memory, matches)`` pairs for ``text`` or ``regex``."""
        ...

    def summaries_in_range(
        self,
        ctx: StrategyContext,
        from_time: float | None = None,
        to_time: float | None = None,
        level: int | None = None,
    ) -> list[Any]:
        """Memories whose messages' timestamps meet the range."""
        ...


@runtime_checkable
class HeadReset(Protocol):
    """A strategy that can move the start of the raw head it keeps."""

    def reset_head_window(self, ctx: StrategyContext, message_id: str) -> None:
        """The raw head now starts at ``message_id``."""
        ...


@runtime_checkable
class GivesUp(Protocol):
    """A strategy that gives up on compression work and can try it again."""

    def retry_given_up(self, ctx: StrategyContext) -> int:
        """Try the work given up on again; returns how many pieces had a count."""
        ...


@runtime_checkable
class Reconfigurable(Protocol):
    """A strategy that makes a copy of itself with other options (for a preview)."""

    def with_options(self, **overrides: Any) -> Strategy:
        """A copy with ``overrides`` applied to its options."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """What a strategy offers beyond the required hooks, read once.

    Each optional capability is the strategy itself, typed as its protocol, or None
    when it does not offer it.
    """

    name: str
    """The strategy's name, for messages."""
    profile: StrategyProfile
    pinning: Pinning | None = None
    memory: MemoryReads | None = None
    head_reset: HeadReset | None = None
    gives_up: GivesUp | None = None
    reconfigurable: Reconfigurable | None = None

    def require_pinning(self, method: str) -> Pinning:
        """The pinning capability, or an error naming ``method`` that needs it."""
        if self.pinning is None:
            raise _unsupported(self.name, method, "Pinning")
        return self.pinning

    def require_reconfigurable(self) -> Reconfigurable:
        """The reconfigurable capability.

        Raises
        ------
        ConfigError
            When the strategy has none: a preview cannot take overrides.
        """
        if self.reconfigurable is None:
            raise ConfigError(
                f"the {self.name} strategy takes no overrides (it has no with_options); "
                "preview without them, or set_strategy() a configured one"
            )
        return self.reconfigurable


def _unsupported(name: str, method: str, capability: str) -> ContextManagerError:
    return ContextManagerError(
        f"the {name} strategy does not support {method}: it has no {capability} "
        "capability (context_manager.strategies.contract); use a strategy that does, "
        "such as the autobiographical one"
    )


def capabilities_of(strategy: Strategy) -> Capabilities:
    """The capabilities ``strategy`` declares (its profile, and each optional protocol
    it implements).

    Examples
    --------
    >>> from context_manager.strategies import PassthroughStrategy
    >>> caps = capabilities_of(PassthroughStrategy(window_tokens=8_000))
    >>> caps.pinning is None, caps.profile.window_tokens
    (True, 8000)
    """
    profile = strategy.profile if isinstance(strategy, Strategy) else StrategyProfile()
    return Capabilities(
        name=strategy.name,
        profile=profile,
        pinning=strategy if isinstance(strategy, Pinning) else None,
        memory=strategy if isinstance(strategy, MemoryReads) else None,
        head_reset=strategy if isinstance(strategy, HeadReset) else None,
        gives_up=strategy if isinstance(strategy, GivesUp) else None,
        reconfigurable=strategy if isinstance(strategy, Reconfigurable) else None,
    )
