"""The repair plan: :func:`plan_repair` turns an audit's findings into the
:class:`~.model.Action` objects that fix them, losing no message.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..strategies.autobiographical.records import SummaryEntry
from .checks import Tree, analyse, chunk_runs
from .model import Action, Finding, Kind, Op, StoredRecords

# -------------------------------------------------------------------- the plan
_AGAIN = "its messages are summarised again"
_DETACHES = {
    Kind.MISSING_MESSAGES: f"some of its messages are not on this branch; {_AGAIN}",
    Kind.NON_CONTIGUOUS: f"it is not a contiguous run of messages; {_AGAIN}",
    Kind.MISSING_CHILD: f"it lists a memory the store does not hold; {_AGAIN}",
    Kind.LEVEL_MISMATCH: f"it lists a memory of the wrong level; {_AGAIN}",
    Kind.UNCHUNKED: "no chunk record names it, so the strategy does not show it",
}


def plan_repair(findings: Sequence[Finding], records: StoredRecords) -> list[Action]:
    """The writes that fix ``findings``, losing no message.

    * an unreadable, empty or duplicate (earlier) memory record is dropped;
    * a memory that is not a sound run (non-contiguous, over messages the branch
      lacks, over missing or wrong-level children, or an L1 no chunk record names) is
      dropped with every memory above it; of a child listed by several parents, the
      parents its pointer does not name are dropped the same way;
    * the memories left keep or get the one parent that lists them (a pointer to a
      dropped, missing or unlisting parent is cleared);
    * a wrong ``first`` / ``last`` is set to the ends of what the memory covers;
    * a chunk record whose L1 is gone (dropped here, or before) is reopened, so the
      strategy summarises its messages again; a non-contiguous one is split into
      contiguous records; an unreadable one is dropped (its messages stay raw).

    Parameters
    ----------
    findings : sequence of Finding
        From :func:`audit` of the same ``records``.
    records : StoredRecords

    Returns
    -------
    list of Action
        In the order :func:`apply_repair` writes them; empty for no findings.

    Examples
    --------
    An L1 naming a parent the store does not hold:

    >>> from context_manager.topology import Raw, audit
    >>> records = StoredRecords(messages=("a",), summaries=(
    ...     Raw("1", {"id": "L1-0", "level": 1, "content": "x", "tokens": 1,
    ...               "source_ids": ["a"], "first": "a", "last": "a", "parent_id": "L2-9"}),))
    >>> [a.describe() for a in plan_repair(audit(records), records)]
    ['clear the parent of L1-0 (item 1): its parent L2-9 is not in the store']
    """
    tree = analyse(records, [])
    valid, position = tree.valid, tree.position
    actions: list[Action] = []
    summary_items = {raw.item for raw in records.summaries}
    chunk_items = {raw.item for raw in records.chunks}
    dropped_items: set[str] = set()
    detach: dict[str, str] = {}  # memory id -> why
    fixes: list[str] = []
    noted: set[str] = set()  # memories with a finding about their parent
    for f in findings:
        if f.record == "summary" and f.item not in summary_items:
            continue
        if f.record == "chunk" and f.item not in chunk_items:
            continue
        if f.record == "summary" and f.kind in (Kind.MALFORMED, Kind.EMPTY, Kind.DUPLICATE_ID):
            if f.item not in dropped_items:
                dropped_items.add(f.item)
                why = {
                    Kind.MALFORMED: "the record cannot be read",
                    Kind.EMPTY: "it has no content",
                    Kind.DUPLICATE_ID: "a later record has the same id",
                }[f.kind]
                actions.append(Action(Op.DROP, "summary", f.id, f.item, why))
        elif f.kind in _DETACHES and f.id in valid:
            detach.setdefault(f.id, _DETACHES[f.kind])
        elif f.kind is Kind.SHARED_CHILD and f.id in valid:
            noted.add(f.id)
            own = valid[f.id].parent_id
            parents = tree.claimants.get(f.id, [])
            for p in parents:
                if p != own or own not in parents:
                    detach.setdefault(
                        p, f"it lists {f.id}, which another parent lists too; {_AGAIN}"
                    )
        elif f.kind in (Kind.DANGLING_PARENT, Kind.UNLINKED_CHILD):
            noted.add(f.id)
        elif f.kind is Kind.WRONG_RANGE and f.id in valid:
            fixes.append(f.id)
    split: dict[str, list[tuple[str, ...]]] = {}
    to_split = {
        f.item for f in findings if f.record == "chunk" and f.kind is Kind.NON_CONTIGUOUS_CHUNK
    }
    for c in tree.chunks:
        if c.item in to_split and all(i in position for i in c.source_ids):
            split[c.item] = chunk_runs(c, position, records.rows)
            if c.summary_id in valid and valid[c.summary_id].level == 1:
                detach.setdefault(c.summary_id, f"its chunk record {c.id} is split; {_AGAIN}")
    # every memory above a detached one goes with it
    queue = list(detach)
    while queue:
        x = queue.pop()
        above = list(tree.claimants.get(x, []))
        own = valid[x].parent_id
        if own in valid:
            above.append(own)
        for p in above:
            if p not in detach:
                detach[p] = f"it is above {x}, which is dropped; {_AGAIN}"
                queue.append(p)
    order = {raw.item: k for k, raw in enumerate(records.summaries)}
    for s in sorted((valid[x] for x in detach), key=lambda s: (s.level, order[s.item])):
        actions.append(Action(Op.DROP, "summary", s.id, s.item, detach[s.id]))
    kept = {x: s for x, s in valid.items() if x not in detach}
    for s in kept.values():
        listing = [p for p in tree.claimants.get(s.id, []) if p in kept]
        want = listing[0] if len(listing) == 1 else None
        if len(listing) > 1 or want == s.parent_id:
            continue
        if s.id not in noted and (s.parent_id is None or s.parent_id in kept):
            continue  # only what the findings name, or what the drops leave dangling
        if want is None:
            why = (
                f"its parent {s.parent_id} is dropped"
                if s.parent_id in detach
                else _parent_reason(tree, s)
            )
            actions.append(Action(Op.CLEAR_PARENT, "summary", s.id, s.item, why))
        else:
            actions.append(
                Action(Op.SET_PARENT, "summary", s.id, s.item, f"{want} lists it", parent=want)
            )
    for x in fixes:
        if x in kept and (span := tree.spans.get(x)) is not None:
            first, last = records.rows[span[0]], records.rows[span[1]]
            actions.append(
                Action(
                    Op.FIX_RANGE,
                    "summary",
                    x,
                    kept[x].item,
                    "the ends of what it covers",
                    first=first,
                    last=last,
                )
            )
    counter = records.chunk_counter
    malformed_chunks = {
        f.item for f in findings if f.record == "chunk" and f.kind is Kind.MALFORMED
    }
    for raw in records.chunks:
        if raw.item in malformed_chunks:
            name = raw.body.get("id") if isinstance(raw.body, dict) else None
            actions.append(
                Action(
                    Op.DROP_CHUNK,
                    "chunk",
                    name if isinstance(name, str) and name else f"item {raw.item}",
                    raw.item,
                    "the record cannot be read; its messages stay, shown raw",
                )
            )
    for c in tree.chunks:
        if c.item in split:
            runs = split[c.item]
            new_ids = tuple(f"c-{counter + k}" for k in range(len(runs) - 1))
            counter += len(new_ids)
            actions.append(
                Action(
                    Op.SPLIT_CHUNK,
                    "chunk",
                    c.id,
                    c.item,
                    "it is not a contiguous run of messages; each run is summarised again",
                    runs=tuple(runs),
                    new_ids=new_ids,
                )
            )
        elif c.summary_id is not None and (
            c.summary_id not in kept or kept[c.summary_id].level != 1
        ):
            gone = (
                "is dropped"
                if c.summary_id in detach
                else tree.invalid.get(c.summary_id, "is not in the store")
            )
            if c.summary_id in valid and c.summary_id not in detach:
                gone = f"is an L{valid[c.summary_id].level}"
            actions.append(
                Action(
                    Op.REOPEN_CHUNK,
                    "chunk",
                    c.id,
                    c.item,
                    f"its memory {c.summary_id} {gone}; {_AGAIN}",
                )
            )
    return actions


def _parent_reason(tree: Tree, s: SummaryEntry) -> str:
    if s.parent_id is not None and s.parent_id not in tree.valid:
        return f"its parent {s.parent_id} {tree.invalid.get(s.parent_id, 'is not in the store')}"
    return f"its parent {s.parent_id} does not list it as a child"
