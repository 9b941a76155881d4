"""``AutobiographicalStrategy``: memories in the agent's own voice, folded by a solver.

The conversation is partitioned into a raw *head* (the oldest messages, up
to ``head_window_tokens``), a raw *tail* (the newest, up to
``recent_window_tokens``) and the *middle*. Closed *chunks* of middle
messages (at least ``target_chunk_tokens`` tokens and ``min_chunk_messages``
messages, never closing on an unanswered tool call) are compressed into L1
memories by the summariser, as of the moment they were lived; contiguous
runs of ``merge_threshold`` parentless memories merge into the next level,
without a fixed top. Each compile hands the state to a solver through the
adapter (:mod:`context_manager.adapter`), which decides how deeply each
region is shown, and renders the chosen frontier: raw messages, and one
*recall pair* (a ``Context Manager`` question and the memory in the agent's
voice) per shown summary.

Every write that matters happens in one store transaction: a chunk record
with its boundaries, a summary with the chunk marked compressed, a parent
with its children's parent pointers. The frontier is persisted only after a
compile fully succeeded, never on a dry run.

The package splits it by responsibility: :mod:`.config` (the options),
:mod:`.records` (what is persisted: read and written only there), :mod:`.state`
(what is held between calls), :mod:`.windows`, :mod:`.chunking`,
:mod:`.prompts` and :mod:`.requests` (the summariser requests), :mod:`.writer`
(what to write next, and writing it), :mod:`.solve` (one compile: the fold
problem stated and solved through :mod:`context_manager.adapter`, its plan
rendered) and :mod:`.queries`; :mod:`.strategy` is the class over them. This
module is the facade: its names are the public ones.
"""

from __future__ import annotations

from .config import AutobiographicalConfig, ToolProseFallback
from .records import (
    ChunkRecord,
    IgnoredPinWarning,
    Pin,
    Records,
    SummaryEntry,
    frontier_runs,
    read_records,
)
from .strategy import AutobiographicalStrategy

__all__ = [
    "AutobiographicalConfig",
    "AutobiographicalStrategy",
    "ChunkRecord",
    "IgnoredPinWarning",
    "Pin",
    "Records",
    "SummaryEntry",
    "ToolProseFallback",
    "frontier_runs",
    "read_records",
]
