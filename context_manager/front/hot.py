"""The hot context settings of :class:`~context_manager.ContextManager`: read and tuned
on its live strategy (:mod:`context_manager.strategies.hot`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..arguments import check_int
from ..strategies.hot import HOT_SETTINGS, HotContextSettings, UnsupportedSettingError

if TYPE_CHECKING:
    from ..manager import ContextManager

__all__ = ["settings", "update"]


def settings(cm: ContextManager) -> HotContextSettings | None:
    """:meth:`ContextManager.get_hot_context_settings`."""
    read = getattr(cm._strategy, "hot_context_settings", None)
    if not callable(read):
        return None
    found = read()
    assert isinstance(found, HotContextSettings)
    return found


def update(
    cm: ContextManager,
    *,
    tail_tokens: object,
    transition_pace_tokens: object,
    prepared_window_tokens: object,
) -> HotContextSettings:
    """:meth:`ContextManager.update_hot_context_settings`."""
    given = {
        "tail_tokens": tail_tokens,
        "transition_pace_tokens": transition_pace_tokens,
        "prepared_window_tokens": prepared_window_tokens,
    }
    checked: dict[str, int | None] = {}
    for name in HOT_SETTINGS:
        value = given[name]
        hint = "" if name == "tail_tokens" else "0 turns it off, None keeps it"
        checked[name] = None if value is None else check_int(value, name, low=0, hint=hint)
    change = getattr(cm._strategy, "update_hot_context_settings", None)
    if not callable(change):
        named = next((n for n in HOT_SETTINGS if checked[n] is not None), "tail_tokens")
        strategy = getattr(cm._strategy, "name", type(cm._strategy).__name__)
        raise UnsupportedSettingError(
            named,
            f"the {strategy!r} strategy has no hot context settings ({named} cannot be "
            "set): it folds nothing, so it has no tail to tune. Open the manager with a "
            "summariser (or an AutobiographicalStrategy) to fold history",
        )
    found = change(**checked)
    assert isinstance(found, HotContextSettings)
    cm._version += 1  # what the strategy computed from the old settings is stale
    if cm._ticker is not None:
        cm._ticker.wake()  # a shorter tail may leave history to compress
    return found
