"""context_manager: the application layer over :mod:`folding` and :mod:`solvers`.

:class:`ContextManager` keeps every message in a SQLite store and compiles the
context of each model call through a strategy; summarisers write the
summaries; token counters price messages.
"""

from .errors import (
    ConfigError,
    ContextManagerError,
    OverBudgetError,
    SummarizerNotConfiguredError,
    UncoveredDropError,
)
from .manager import CompileResult, ContextEntry, ContextManager, Injection
from .messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from .pairing import enforce_tool_pairs, tool_pair_problems
from .store import Store, StoreError, StoreLockedError
from .strategies import PassthroughStrategy, Strategy
from .summarizer import Completion, CompletionRequest, ExtractiveSummarizer, Summarizer
from .tokens import ByteHeuristicCounter, CharsCounter, TiktokenCounter, TokenCounter

__all__ = [
    "ByteHeuristicCounter",
    "CharsCounter",
    "CompileResult",
    "Completion",
    "CompletionRequest",
    "ConfigError",
    "ContextEntry",
    "ContextManager",
    "ContextManagerError",
    "ExtractiveSummarizer",
    "ImageBlock",
    "Injection",
    "Message",
    "OverBudgetError",
    "PassthroughStrategy",
    "Store",
    "StoreError",
    "StoreLockedError",
    "Strategy",
    "Summarizer",
    "SummarizerNotConfiguredError",
    "TextBlock",
    "ThinkingBlock",
    "TiktokenCounter",
    "TokenCounter",
    "ToolResultBlock",
    "ToolUseBlock",
    "UncoveredDropError",
    "enforce_tool_pairs",
    "tool_pair_problems",
]
