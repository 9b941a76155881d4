"""Context strategies: what each compile sends."""

from .base import Entry, RequestBudget, Selection, StoredMessage, Strategy, StrategyContext
from .passthrough import PassthroughConfig, PassthroughStrategy

__all__ = [
    "Entry",
    "PassthroughConfig",
    "PassthroughStrategy",
    "RequestBudget",
    "Selection",
    "StoredMessage",
    "Strategy",
    "StrategyContext",
]
