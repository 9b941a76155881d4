"""Drop-ins for agent frameworks, each behind an optional extra.

- :class:`~context_manager.integrations.langchain.ContextFoldingMiddleware`: a LangChain
  v1 agent middleware (``create_agent(..., middleware=[...])``) that folds the agent's
  messages before each model call, one store per thread (extra ``langchain``).
- :class:`~context_manager.integrations.openai_agents.FoldingSession`: an OpenAI Agents
  SDK ``Session`` backed by the store whose items are the folded context (extra
  ``openai-agents``).
- :mod:`~context_manager.integrations.langchain_messages`: the conversion between our
  messages and LangChain's that the middleware stores and sends through (extra
  ``langchain``).

Importing this package loads neither framework: each name imports its module, and so
its framework, on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .langchain import ContextFoldingMiddleware
    from .openai_agents import FoldingSession

__all__ = ["ContextFoldingMiddleware", "FoldingSession"]

_MODULES = {
    "ContextFoldingMiddleware": (".langchain", "langchain"),
    "FoldingSession": (".openai_agents", "openai-agents"),
}


def __getattr__(name: str) -> Any:
    found = _MODULES.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, extra = found
    try:
        return getattr(importlib.import_module(module, __name__), name)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{name} needs the {extra} extra: pip install 'context-folding[{extra}]' "
            f"({exc.name} is not installed)",
            name=exc.name,
        ) from exc
