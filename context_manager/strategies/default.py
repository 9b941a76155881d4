"""The strategy :meth:`ContextManager.open <context_manager.ContextManager.open>` uses
when given none: autobiographical with a summariser, passthrough without one."""

from __future__ import annotations

from ..arguments import MAX_WINDOW_TOKENS, check_int, check_text
from ..errors import ConfigError
from ..summarizer import Summarizer
from .autobiographical import AutobiographicalConfig, AutobiographicalStrategy
from .base import Strategy
from .passthrough import PassthroughStrategy

__all__ = ["DEFAULT_WINDOW", "default_strategy"]

DEFAULT_WINDOW = 100_000
"""The ``max_tokens`` of a compile when neither the caller nor the strategy sets one."""


def default_strategy(
    summarizer: Summarizer | None,
    window_tokens: int | None = None,
    memory_model: str | None = None,
) -> Strategy:
    """The strategy :meth:`ContextManager.open` uses when given none.

    With a summariser, the autobiographical strategy sized for ``window_tokens``
    (:data:`DEFAULT_WINDOW` when None), its memories requested from ``memory_model``
    or else the summariser's ``model`` attribute; without one, the passthrough strategy
    with that window.

    Raises
    ------
    ConfigError
        For a summariser with no ``model`` attribute and no ``memory_model``: a memory
        request names the model that writes it.

    Examples
    --------
    >>> from context_manager import ExtractiveSummarizer
    >>> strategy = default_strategy(ExtractiveSummarizer(), 32_000)
    >>> strategy.name, strategy.config.window_tokens, strategy.config.compression_model
    ('autobiographical', 32000, 'extractive')
    >>> default_strategy(None).name
    'passthrough'
    """
    if window_tokens is not None:
        window_tokens = check_int(window_tokens, "window_tokens", low=1, high=MAX_WINDOW_TOKENS)
    if memory_model is not None:
        check_text(memory_model, "memory_model", blank=False)
    if summarizer is None:
        return PassthroughStrategy(window_tokens=window_tokens)
    model = memory_model if memory_model is not None else getattr(summarizer, "model", None)
    if not isinstance(model, str) or not model:
        raise ConfigError(
            f"memory_model: {type(summarizer).__name__} has no model attribute to name in "
            "its memory requests; open with memory_model='<the model that writes the "
            "memories>' (the agent's own), or give a strategy"
        )
    try:
        config = AutobiographicalConfig.for_window(
            window_tokens if window_tokens is not None else DEFAULT_WINDOW,
            compression_model=model,
        )
    except ValueError as exc:  # a window too small to fold into
        raise ConfigError(f"window_tokens: {exc}") from exc
    return AutobiographicalStrategy(config)
