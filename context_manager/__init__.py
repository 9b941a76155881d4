"""context_manager: the application layer over :mod:`folding` and :mod:`solvers`.

:class:`ContextManager` keeps every message in a SQLite store and compiles the
context of each model call through a strategy; summarisers write the
summaries (:mod:`context_manager.providers` holds the ones backed by model
providers, importable from here too, loading their SDK on first use); token
counters price messages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .arguments import MAX_WINDOW_TOKENS
from .bodies import BodyShardError
from .channels import ChannelCount, ChannelTokens, ChannelTokenStats
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    AuditOnlyError,
    ConfigError,
    ConstraintConflictError,
    ContextManagerError,
    MissingAPIKeyError,
    OverBudgetError,
    SummarizerNotConfiguredError,
    SummarizerTimeoutError,
    UncoveredDropError,
    UnknownCompileError,
    UnknownMessageError,
)
from .manager import (
    CompileResult,
    ContextEntry,
    ContextManager,
    FoldedMemory,
    Injection,
    NoSummarizerWarning,
    Overhead,
    Preview,
    QueryResult,
    StoreFullWarning,
)
from .messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from .pairing import enforce_tool_pairs, tool_pair_problems
from .recall import RecallInputError, RecallTool
from .store import (
    NotAStoreError,
    Store,
    StoreAliasError,
    StoreAliasWarning,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)
from .strategies import PassthroughConfig, PassthroughStrategy, Strategy
from .strategies.autobiographical import IgnoredPinWarning
from .strategies.hot import HotContextSettings, UnsupportedSettingError
from .summarizer import Completion, CompletionRequest, ExtractiveSummarizer, Summarizer
from .thinking import NotedRow, RequestIdentity, StrippedThinking, ThinkingBinding, ThinkingStrip
from .tokens import (
    ByteHeuristicCounter,
    CharsCounter,
    ClaudeEstimateCounter,
    TiktokenCounter,
    TokenCounter,
    TokenizerDataError,
    counter_for_model,
)
from .topology.policy import StoreTopologyError
from .window import UnknownRowError, WindowStatus

if TYPE_CHECKING:
    from .providers import AnthropicSummarizer, OpenAISummarizer

__all__ = [
    "MAX_WINDOW_TOKENS",
    "AnthropicSummarizer",
    "ArgumentError",
    "ArgumentTypeError",
    "AuditOnlyError",
    "BodyShardError",
    "ByteHeuristicCounter",
    "ChannelCount",
    "ChannelTokenStats",
    "ChannelTokens",
    "CharsCounter",
    "ClaudeEstimateCounter",
    "CompileResult",
    "Completion",
    "CompletionRequest",
    "ConfigError",
    "ConstraintConflictError",
    "ContextEntry",
    "ContextManager",
    "ContextManagerError",
    "ExtractiveSummarizer",
    "FoldedMemory",
    "HotContextSettings",
    "IgnoredPinWarning",
    "ImageBlock",
    "Injection",
    "Message",
    "MissingAPIKeyError",
    "NoSummarizerWarning",
    "NotAStoreError",
    "NotedRow",
    "OpenAISummarizer",
    "OverBudgetError",
    "Overhead",
    "PassthroughConfig",
    "PassthroughStrategy",
    "Preview",
    "QueryResult",
    "RecallInputError",
    "RecallTool",
    "RequestIdentity",
    "Store",
    "StoreAliasError",
    "StoreAliasWarning",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
    "StoreFullWarning",
    "StoreLockedError",
    "StoreTopologyError",
    "Strategy",
    "StrippedThinking",
    "Summarizer",
    "SummarizerNotConfiguredError",
    "SummarizerTimeoutError",
    "TextBlock",
    "ThinkingBinding",
    "ThinkingBlock",
    "ThinkingStrip",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerDataError",
    "ToolResultBlock",
    "ToolUseBlock",
    "UncoveredDropError",
    "UnknownCompileError",
    "UnknownMessageError",
    "UnknownRowError",
    "UnsupportedSettingError",
    "WindowStatus",
    "counter_for_model",
    "enforce_tool_pairs",
    "tool_pair_problems",
]


_PROVIDERS = ("AnthropicSummarizer", "OpenAISummarizer")


def __getattr__(name: str) -> Any:
    if name in _PROVIDERS:
        return getattr(importlib.import_module(".providers", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
