"""Summarisers backed by model providers, through their official SDKs.

:class:`AnthropicSummarizer` calls the Anthropic Messages API;
:class:`OpenAISummarizer` calls the OpenAI Chat Completions API. Both answer
the :class:`~context_manager.summarizer.Summarizer` protocol within a deadline,
retry transient failures (:class:`RetryPolicy`) and report provider trouble as
a completion with stop reason ``error`` instead of raising.

Each class is imported on first use, so importing this package loads no SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .retry import RetryPolicy

if TYPE_CHECKING:
    from .anthropic import AnthropicSummarizer
    from .openai import OpenAISummarizer

__all__ = ["AnthropicSummarizer", "OpenAISummarizer", "RetryPolicy"]

_LAZY = {"AnthropicSummarizer": ".anthropic", "OpenAISummarizer": ".openai"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
