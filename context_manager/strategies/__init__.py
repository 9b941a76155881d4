"""Context strategies: what each compile sends."""

from .base import Entry, RequestBudget, Selection, StoredMessage, Strategy, StrategyContext
from .passthrough import PassthroughStrategy

__all__ = [
    "Entry",
    "PassthroughStrategy",
    "RequestBudget",
    "Selection",
    "StoredMessage",
    "Strategy",
    "StrategyContext",
]
