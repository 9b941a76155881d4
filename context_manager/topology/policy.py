"""What opening a manager does with a store whose memory tree is broken.

:meth:`ContextManager.open <context_manager.ContextManager.open>` audits the
strategy's records before the strategy reads them (:func:`check_at_open`), and by its
``topology_policy``:

``"reject"``
    refuses the store with :class:`StoreTopologyError`, which lists the findings and
    names the repair (``ctxfold repair PATH``, or ``topology_policy="repair"``);
    nothing is written.
``"repair"``
    writes the repair :func:`~.plan.plan_repair` plans, in one transaction, and logs
    each action: broken memories are dropped and their messages summarised again; no
    message is touched.
``"ignore"``
    opens as it is, the strategy working around what it can (no audit is run).

``reject`` is the default: the audit judges the records the way the strategy writes
them (:mod:`.checks`: over the rows each was written over, the agent's window once a
host presents rows), so a store the strategy wrote audits clean.

An ``audit_only=True`` open runs the audit (:func:`audit_at_open`) and keeps the
findings for :meth:`ContextManager.topology_findings
<context_manager.ContextManager.topology_findings>` whatever they are; it neither
refuses nor repairs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from ..store import RecordStore, StoreError
from .checks import audit
from .model import Action, Finding
from .plan import plan_repair
from .stored import apply_repair, read_stored

log = logging.getLogger(__name__)

TopologyPolicy = Literal["reject", "repair", "ignore"]
"""What :meth:`ContextManager.open <context_manager.ContextManager.open>` does with a
broken memory tree."""

POLICIES: tuple[TopologyPolicy, ...] = ("reject", "repair", "ignore")

SHOWN = 8
"""Findings an error message lists (the rest are counted)."""


class StoreTopologyError(StoreError):
    """The store's memory tree is broken; the manager was not opened.

    Attributes
    ----------
    findings : list of Finding
        What the audit found (:func:`~context_manager.topology.audit`).
    """

    def __init__(self, message: str, findings: Sequence[Finding]) -> None:
        super().__init__(message)
        self.findings = list(findings)


def audit_at_open(
    store: RecordStore,
    namespace: str,
    *,
    message_slot: str | None = None,
    auxiliary_slots: Sequence[str] = (),
) -> list[Finding]:
    """The audit's findings on the memory tree of ``namespace`` in ``store``, nothing
    written (what an ``audit_only=True`` open keeps).

    Examples
    --------
    >>> from context_manager.store import Store
    >>> with Store.open(":memory:") as store:
    ...     audit_at_open(store, "default")
    []
    """
    records = read_stored(
        store, namespace, message_slot=message_slot, auxiliary_slots=auxiliary_slots
    )
    if not records.summaries and not records.chunks:
        return []
    return audit(records)


def check_at_open(
    store: RecordStore,
    namespace: str,
    policy: TopologyPolicy,
    shown: str,
    *,
    message_slot: str | None = None,
    auxiliary_slots: Sequence[str] = (),
) -> list[Action]:
    """Audit the memory tree of ``namespace`` in ``store`` and apply ``policy``.

    Parameters
    ----------
    store : RecordStore
        The store being opened, on the branch the manager will use.
    namespace : str
        The manager's namespace.
    policy : {"reject", "repair", "ignore"}
    shown : str
        How the error names the store (its path, or its URL without a password).
    message_slot : str, optional
        The manager's message slot (by default as :func:`~.stored.read_stored` finds it).
    auxiliary_slots : sequence of str
        The message slots its record merges with its own (``auxiliary_views``).

    Returns
    -------
    list of Action
        The repair written (empty when the tree is sound or ``policy="ignore"``).

    Raises
    ------
    StoreTopologyError
        With ``policy="reject"`` when the audit finds anything; nothing is written.
    StoreError
        When the repair cannot be written; then nothing is.

    Examples
    --------
    >>> from context_manager.store import Store
    >>> with Store.open(":memory:") as store:
    ...     check_at_open(store, "default", "reject", ":memory:")
    []
    """
    if policy == "ignore":
        return []
    records = read_stored(
        store, namespace, message_slot=message_slot, auxiliary_slots=auxiliary_slots
    )
    if not records.summaries and not records.chunks:
        return []
    findings = audit(records)
    if not findings:
        return []
    if policy == "reject":
        listed = "; ".join(f.describe() for f in findings[:SHOWN])
        more = f" (and {len(findings) - SHOWN} more)" if len(findings) > SHOWN else ""
        target = shown if shown and shown != ":memory:" else "PATH"
        raise StoreTopologyError(
            f"{shown}: the memory tree of namespace {namespace!r} is broken, "
            f"{len(findings)} finding(s): {listed}{more}. Nothing was opened or written: "
            f"repair it with `ctxfold repair {target} --apply` (the original is kept as a "
            "backup), or open with topology_policy='repair' to drop the broken memories "
            "(their messages are "
            "summarised again), or topology_policy='ignore' to open it as it is",
            findings,
        )
    actions = plan_repair(findings, records)
    apply_repair(store, records, actions)
    log.warning(
        "%s: repaired the memory tree of namespace %r at open: %s",
        shown,
        namespace,
        "; ".join(a.describe() for a in actions),
    )
    return actions
