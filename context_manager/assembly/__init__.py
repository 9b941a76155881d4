"""Stateless context assembly: fit an agent's conversation into a model's input budget.

Four functions over JSON-shaped requests (mappings or their pydantic models):

* :func:`count_tokens` estimates a conversation (UTF-8 bytes / 4 of compact
  JSON, 4096 per image);
* :func:`prune` replaces old, verbose function results with placeholders;
* :func:`compact` summarises the head of a conversation, keeping a recent
  tail verbatim;
* :func:`assemble` builds a request that fits: media normalisation, a cap on
  each result, pruning, compaction into the system prompt, and, as a last
  resort, bounded references in place of the largest results; otherwise it
  refuses with ``context/overflow``.

Collaborators are keyword arguments: ``config`` (:class:`AssemblyConfig`),
``summarizer`` (any :class:`~context_manager.summarizer.Summarizer`),
``catalog`` (:class:`ModelCatalog`), ``leases`` (:class:`LeaseStore`) and
``clock`` (milliseconds).

The messages are wire messages (:mod:`context_manager.assembly.wire`);
:mod:`context_manager.assembly.convert` turns the library's
:class:`~context_manager.messages.Message` into them and back.

Examples
--------
>>> from context_manager.assembly import count_tokens
>>> msg = {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 1001}
>>> count_tokens({"messages": [msg], "model": {"id": "any"}}).tokens
18
"""

from .catalog import ModelBudget, ModelCatalog, ModelSpec
from .config import AssemblyConfig
from .errors import AssemblyError
from .functions import DEFAULT_CATALOG, assemble, compact, count_tokens, prune
from .leases import (
    InMemoryLeaseStore,
    LeaseRecord,
    LeaseStore,
    PostgresLeaseStore,
    SqliteLeaseStore,
)
from .models import (
    AssembleRequest,
    AssembleResponse,
    CompactBusy,
    CompactEmpty,
    CompactOk,
    CompactOverflow,
    CompactRequest,
    CompactResponse,
    CountTokensRequest,
    CountTokensResponse,
    PruneRequest,
    PruneResponse,
)

__all__ = [
    "DEFAULT_CATALOG",
    "AssembleRequest",
    "AssembleResponse",
    "AssemblyConfig",
    "AssemblyError",
    "CompactBusy",
    "CompactEmpty",
    "CompactOk",
    "CompactOverflow",
    "CompactRequest",
    "CompactResponse",
    "CountTokensRequest",
    "CountTokensResponse",
    "InMemoryLeaseStore",
    "LeaseRecord",
    "LeaseStore",
    "ModelBudget",
    "ModelCatalog",
    "ModelSpec",
    "PostgresLeaseStore",
    "PruneRequest",
    "PruneResponse",
    "SqliteLeaseStore",
    "assemble",
    "compact",
    "count_tokens",
    "prune",
]
