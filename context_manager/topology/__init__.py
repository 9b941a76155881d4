"""Audit and repair the memory tree of a store: ``ctxfold audit`` and ``ctxfold repair``.

The autobiographical strategy's memories are records in the store (see
:mod:`context_manager.strategies.autobiographical.records`): an L1 covers the
messages of one chunk record, an L2 or higher covers lower memories. The tree is
sound when

* every L1 covers a contiguous run of the rows the strategy reads, in order, each
  once (the branch's messages, or once a host presents rows, the agent's window:
  :mod:`.checks` states what is and is not a defect);
* every L2+ lists existing memories one level below, adjacent in the messages and
  together contiguous, and its ``first`` / ``last`` name the ends of that run;
* every memory has content, its id is unique, its parent pointer names a memory
  that lists it, no memory is listed by two parents, and (once chunk records
  exist) some chunk record names each L1 but one the strategy set aside when it
  adopted memories written without chunk records;
* every chunk record is a contiguous run, and one compressed into an L1 names a
  memory the store holds.

:func:`audit` checks these over a :class:`StoredRecords` (read by
:func:`read_stored`) and returns :class:`Finding` objects; :func:`plan_repair`
turns findings into :class:`Action` objects and :func:`apply_repair` writes them
through the store's own write API, in one transaction. A repair never touches a
message: it drops memories (a broken one with every memory above it), fixes
pointers and ranges, and reopens chunk records, so the strategy summarises those
messages again. :func:`audit_store` and :func:`repair_store` do it for a store file:
they refuse a store a running agent holds (its writer lock), audit a copy, and a
repair replaces the file only after the repaired copy audits clean, keeping the
original next to it. Rows of the file that cannot be read at all (damaged bytes) are
listed by both (:mod:`context_manager.salvage`), and a repair starts from a new store
of every row that can be.

The package splits it by job: :mod:`.model` (records, findings and actions),
:mod:`.stored` (reading the strategy's records from a store and writing a repair
back), :mod:`.checks` (the audit), :mod:`.plan` (the repair plan) and
:mod:`.store_files` (the audit and repair of a store file). This module is the
facade: its names are the public ones.

Examples
--------
Two L1 memories over messages ``a..f``; the second skips ``e``:

>>> records = StoredRecords(
...     messages=("a", "b", "c", "d", "e", "f"),
...     summaries=(
...         Raw("1", {"id": "L1-0", "level": 1, "content": "abc", "tokens": 1,
...                   "source_ids": ["a", "b", "c"], "first": "a", "last": "c"}),
...         Raw("2", {"id": "L1-1", "level": 1, "content": "df", "tokens": 1,
...                   "source_ids": ["d", "f"], "first": "d", "last": "f"}),
...     ),
... )
>>> [(f.id, f.kind.value, f.detail) for f in audit(records)]
[('L1-1', 'non_contiguous', 'skips 1 of the messages in its range: e (position 4)')]
>>> [a.describe() for a in plan_repair(audit(records), records)]
['drop L1-1 (item 2): it is not a contiguous run of messages; its messages are summarised again']
"""

from __future__ import annotations

from ..store import NotAStoreError
from .checks import audit
from .model import Action, Finding, Kind, Op, Raw, StoredRecords
from .model import Record as Record
from .plan import plan_repair
from .policy import StoreTopologyError, TopologyPolicy, check_at_open
from .store_files import StoreAudit, StoreRepair, audit_store, repair_store
from .stored import apply_repair, read_stored

__all__ = [
    "Action",
    "Finding",
    "Kind",
    "NotAStoreError",
    "Op",
    "Raw",
    "StoreAudit",
    "StoreRepair",
    "StoreTopologyError",
    "StoredRecords",
    "TopologyPolicy",
    "apply_repair",
    "audit",
    "audit_store",
    "check_at_open",
    "plan_repair",
    "read_stored",
    "repair_store",
]
