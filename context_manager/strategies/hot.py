"""Hot context settings: the options of a live strategy a host may tune between compiles
(:meth:`ContextManager.update_hot_context_settings
<context_manager.ContextManager.update_hot_context_settings>`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["HOT_SETTINGS", "HotContextSettings", "UnsupportedSettingError"]

HOT_SETTINGS = ("tail_tokens", "transition_pace_tokens", "prepared_window_tokens")
"""The settings, in the order :class:`HotContextSettings` holds them."""


@dataclass(frozen=True)
class HotContextSettings:
    """The hot context settings of a strategy.

    Attributes
    ----------
    tail_tokens : int
        The raw tail: the newest messages up to this many tokens are never folded (the
        autobiographical strategy's ``recent_window_tokens``).
    transition_pace_tokens : int or None
        The most tokens a change the wall does not force may make the provider re-read
        in one compile (the reference's kv-stable ``transitionPaceTokens``: kv-stable's
        ``reach_tokens`` with ``strict_reach``). None: no hard pace.
    prepared_window_tokens : int or None
        The input tokens of a future window the fold is aimed at while the current one
        stays the wall (the reference's kv-stable ``preparedWindowTokens``: kv-stable's
        ``goal_tokens``). None: the current window.

    Examples
    --------
    >>> HotContextSettings(tail_tokens=2000).tail_tokens
    2000
    """

    tail_tokens: int
    transition_pace_tokens: int | None = None
    prepared_window_tokens: int | None = None


class UnsupportedSettingError(ConfigError):
    """A hot context setting the strategy does not have. ``setting`` names it.

    Examples
    --------
    >>> error = UnsupportedSettingError("prepared_window_tokens", "kv-stable only")
    >>> error.setting, isinstance(error, ConfigError)
    ('prepared_window_tokens', True)
    """

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting
