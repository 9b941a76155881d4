"""Peer policies for the policy benchmark, behind one :class:`Policy` interface.

* :mod:`.base`: the interface (:class:`Policy`, :class:`PolicyRequest`) and
  the shared audit.
* :mod:`.baselines`: observation masking and Anthropic-style
  ``clear_tool_uses``, written here (no optional package).
* :mod:`.langchain_peers`: LangChain's ``trim_messages``, ``SummarizationMiddleware``
  and ``ClearToolUsesEdit`` (needs the ``bench`` extra).
* :mod:`.llamaindex_peers`: LlamaIndex ``Memory`` (needs the ``bench`` extra).

The peer modules import their packages lazily, so importing this package
needs none of them.
"""

from .base import MeteredSummarizer, Policy, PolicyRequest, audit, call_points
from .baselines import ClearToolUses, ObservationMasking

__all__ = [
    "ClearToolUses",
    "MeteredSummarizer",
    "ObservationMasking",
    "Policy",
    "PolicyRequest",
    "audit",
    "call_points",
]
