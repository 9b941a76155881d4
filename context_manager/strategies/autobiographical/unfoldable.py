"""Which messages the autobiographical compile may cap: those no frontier can fold.

This module only says which messages; the capping itself (one cap level for every
capped result, the head and tail of each around a marker) is shared with the
passthrough strategy: :mod:`context_manager.strategies.capping`.
"""

from __future__ import annotations

from ...adapter import Snapshot

__all__ = ["unfoldable"]


def unfoldable(snap: Snapshot) -> list[bool]:
    """For each message, whether no frontier can fold it: the head and the tail, pinned
    and locked messages, and those under no memory of the snapshot."""
    n = len(snap.tokens)
    covered = [False] * n
    spans = [(s.first, s.last) for s in snap.summaries if s.level == 1]
    spans += [(b.first, b.last) for b in snap.blocks]
    for a, b in spans:
        covered[a : b + 1] = [True] * (b + 1 - a)
    fixed = [not c for c in covered]
    fixed[snap.head_start : snap.head_end] = [True] * max(
        0, min(n, snap.head_end) - snap.head_start
    )
    fixed[snap.tail_start :] = [True] * max(0, n - snap.tail_start)
    for pin in snap.pins:
        fixed[pin.first : pin.last + 1] = [True] * (pin.last + 1 - pin.first)
    for j in snap.locks:
        fixed[j] = True
    return fixed
