"""The audit's checks of the memory tree and the chunk records: :func:`audit` parses
the records (:func:`parse`, into a :class:`Tree`) and notes every broken invariant as
a :class:`~.model.Finding`.

What is a defect is what the strategy would not have written. Its rules:

* **Contiguity is judged over the rows the strategy reads**
  (:attr:`~.model.StoredRecords.rows`): the record until a host presents rows, then
  the agent's window (the rows presented and not retracted that the record still
  holds, in the order presented). The strategy closes chunks over that view, so a
  chunk over presented rows that passes over a row of the record never presented is
  one run, and sound. Rows enter the window only at its end (a row presented again
  too), and a retraction the strategy hears drops or shrinks the records over that
  row, so a record it wrote as one run stays one run.
* **A record is judged over the view it was written over.** A retraction or a redo
  the strategy did not hear (another manager presented or retracted in its
  namespace) can leave a record it wrote as one run over rows that are no longer
  one run of the window, or no longer in it; the strategy follows such a change
  when it loads (``reconcile``: it lets go of those rows, to remember them again).
  So a record that is not sound in the window now is checked again against the
  window as it stood when the record was last written (the window records written
  before it, by store record number): sound then, it is no finding. A memory whose
  leaves are not one run, in order, of the view it was written over (they skip a
  row of it, repeat one, or come out of order), or an L2+ whose children are not
  adjacent, is a defect: the strategy never writes one.
* **A chunk record that names rows outside the view** (removed, or out of the
  window) is not a finding: the strategy follows it when it loads (``reconcile``).
  An L1 over such rows is (``missing_messages``: its memory tells of rows the agent
  no longer has), unless they were in the view it was written over (above).
* **An L1 no chunk record names** is a defect (``unchunked``: its rows would be
  summarised again) unless the strategy set it aside when it adopted the memories
  of a store written without chunk records: then no memory lists it, its parent is
  empty and some of its rows are held by a chunk record (the memory adopted over
  them), so it is neither shown nor merged and nothing is summarised twice.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..strategies.autobiographical.records import ChunkRecord, SummaryEntry
from .model import Finding, Kind, StoredRecords


# ------------------------------------------------------------------- the tree
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class Tree:
    """The records parsed: what the strategy would read, and what it would not."""

    records: StoredRecords
    position: dict[str, int]
    valid: dict[str, SummaryEntry]
    """The memories the strategy reads: the last well-formed, non-empty record per id."""
    invalid: dict[str, str]
    """Ids of memory records it does not read -> why (``is empty``, ``is malformed``)."""
    chunks: list[ChunkRecord]
    """The well-formed chunk records, in store order."""
    named: set[str] = field(default_factory=set)
    """Memory ids the well-formed chunk records name."""
    claimants: dict[str, list[str]] = field(default_factory=dict)
    """Memory id -> the valid memories listing it as a child, in store order."""
    spans: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    """Memory id -> its message positions (inclusive) when it is a sound run."""
    chunked: set[str] = field(default_factory=set)
    """Message ids the well-formed chunk records hold."""
    revs: dict[str, int] = field(default_factory=dict)
    """Store item -> the store record number of its current body (0 when unknown)."""
    _then: dict[int, tuple[tuple[str, ...], dict[str, int]]] = field(default_factory=dict)
    """Window records written -> the rows read then and where each stood (as read)."""

    def sound_when_written(self, item: str, ids: Sequence[str]) -> bool:
        """Whether the record in ``item``, over the rows ``ids``, was one run, in order,
        of the rows the strategy read when it was last written: the window as it
        stood then, when a window record was written after it (a retraction or a
        redo the strategy had not heard of yet, which it follows when it loads).
        False when no window record came after it (it is judged by the rows now)."""
        log = self.records.window_log
        rev = self.revs.get(item, 0)
        if not log or not rev:
            return False
        count = bisect.bisect_left([r for r, _ in log], rev)
        if count == len(log):
            return False
        if count not in self._then:
            rows = self.records.rows_at(count)
            self._then[count] = (rows, {m: i for i, m in enumerate(rows)})
        rows, position = self._then[count]
        return all(i in position for i in ids) and not _run_problem(ids, position, rows)


def parse(records: StoredRecords, findings: list[Finding] | None = None) -> Tree:
    """Parse the records; note unreadable, empty and duplicate ones in ``findings``."""
    out = findings if findings is not None else []
    position = {m: i for i, m in enumerate(records.rows)}
    seen: dict[str, list[SummaryEntry]] = {}
    invalid: dict[str, str] = {}
    for raw in records.summaries:
        body = raw.body
        name = body.get("id") if isinstance(body, dict) else None
        name = name if isinstance(name, str) and name else f"item {raw.item}"
        level = body.get("level") if isinstance(body, dict) else None
        level = level if _is_int(level) else None
        content = body.get("content", "") if isinstance(body, dict) else None
        if isinstance(content, str) and not content.strip():
            out.append(
                Finding(
                    Kind.EMPTY,
                    "summary",
                    name,
                    raw.item,
                    level,
                    "it has no content, so the strategy does not read it",
                    *_claimed_range(body, position),
                )
            )
            invalid.setdefault(name, "is empty")
            continue
        problem = SummaryEntry.problem_of(body)
        if problem is not None:
            out.append(
                Finding(
                    Kind.MALFORMED,
                    "summary",
                    name,
                    raw.item,
                    level,
                    f"the record cannot be read as a memory: {problem}",
                )
            )
            invalid.setdefault(name, "is malformed")
            continue
        seen.setdefault(name, []).append(SummaryEntry(item=raw.item, **body))
    valid: dict[str, SummaryEntry] = {}
    for name, entries in seen.items():
        kept = entries[-1]
        for older in entries[:-1]:
            out.append(
                Finding(
                    Kind.DUPLICATE_ID,
                    "summary",
                    name,
                    older.item,
                    older.level,
                    f"a later record (item {kept.item}) has the same id; "
                    "the strategy reads only that one",
                    older.first,
                    older.last,
                    _positions(older.first, older.last, position),
                )
            )
        valid[name] = kept
        invalid.pop(name, None)
    chunks: list[ChunkRecord] = []
    for raw in records.chunks:
        problem = ChunkRecord.problem_of(raw.body)
        if problem is not None:
            body = raw.body
            name = body.get("id") if isinstance(body, dict) else None
            out.append(
                Finding(
                    Kind.MALFORMED,
                    "chunk",
                    name if isinstance(name, str) and name else f"item {raw.item}",
                    raw.item,
                    None,
                    f"the record cannot be read as a chunk record: {problem}",
                )
            )
            continue
        chunks.append(ChunkRecord(item=raw.item, **raw.body))
    tree = Tree(records, position, valid, invalid, chunks)
    tree.named = {c.summary_id for c in chunks if c.summary_id is not None}
    tree.chunked = {i for c in chunks for i in c.source_ids}
    tree.revs = {r.item: r.rev for r in (*records.summaries, *records.chunks)}
    for s in valid.values():
        if s.level > 1:
            for child in dict.fromkeys(s.source_ids):
                tree.claimants.setdefault(child, []).append(s.id)
    return tree


def _positions(first: Any, last: Any, position: dict[str, int]) -> tuple[int, int] | None:
    if isinstance(first, str) and isinstance(last, str) and first in position and last in position:
        return (position[first], position[last])
    return None


def _claimed_range(body: Any, position: dict[str, int]) -> tuple[Any, Any, Any]:
    """``(first, last, positions)`` of a record body, as far as they can be read."""
    if not isinstance(body, dict):
        return (None, None, None)
    first = body.get("first") if isinstance(body.get("first"), str) else None
    last = body.get("last") if isinstance(body.get("last"), str) else None
    return (first, last, _positions(first, last, position))


def _short(ids: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _run_problem(
    ids: Sequence[str],
    position: dict[str, int],
    messages: Sequence[str],
    missing: Sequence[str] = (),
) -> str:
    """Why the messages ``ids`` (all on the branch) are not one run in order ('' if they
    are); '' too when some are ``missing`` (not on the branch: another finding)."""
    if missing:
        return ""
    spots = [position[i] for i in ids]
    repeated = sorted((i for i, n in Counter(ids).items() if n > 1), key=lambda i: position[i])
    if repeated:
        return f"names {_short(repeated)} more than once"
    lo, hi = min(spots), max(spots)
    if hi - lo + 1 != len(spots):
        held = set(spots)
        gaps = [p for p in range(lo, hi + 1) if p not in held]
        gap = [messages[p] for p in gaps]
        where = ", ".join(map(str, gaps))
        noun = "position" if len(gap) == 1 else "positions"
        return (
            f"skips {len(gap)} of the messages in its range: {_short(gap)} ({noun} {where})"
            if len(gap) <= 6
            else f"skips {len(gap)} of the {hi - lo + 1} messages in its range"
        )
    if spots != sorted(spots):
        return "names its messages out of order (positions " + ", ".join(map(str, spots)) + ")"
    return ""


def audit(records: StoredRecords) -> list[Finding]:
    """Every broken invariant of the memory tree and the chunk records.

    Parameters
    ----------
    records : StoredRecords
        As read by :func:`read_stored`.

    Returns
    -------
    list of Finding
        Empty when the tree is sound: first the unreadable, empty and duplicate
        records, then each memory's own findings (store order), then the chunk
        records'.

    Examples
    --------
    An L2 over two L1s that are not adjacent (``c`` lies between them):

    >>> from context_manager.topology import Raw
    >>> def l1(item, id, ids, parent=None):
    ...     return Raw(item, {"id": id, "level": 1, "content": "x", "tokens": 1,
    ...                       "source_ids": ids, "first": ids[0], "last": ids[-1],
    ...                       "parent_id": parent})
    >>> records = StoredRecords(
    ...     messages=("a", "b", "c", "d"),
    ...     summaries=(
    ...         l1("1", "L1-0", ["a", "b"], "L2-2"),
    ...         l1("2", "L1-1", ["d"], "L2-2"),
    ...         Raw("3", {"id": "L2-2", "level": 2, "content": "y", "tokens": 1,
    ...                   "source_ids": ["L1-0", "L1-1"], "first": "a", "last": "d"}),
    ...     ),
    ... )
    >>> [(f.id, f.level, f.kind.value, f.positions) for f in audit(records)]
    [('L2-2', 2, 'non_contiguous', (0, 3))]
    >>> print(audit(records)[0].detail)  # doctest: +NORMALIZE_WHITESPACE
    its children are not adjacent: L1-0 ends at position 1 and L1-1 starts at position 3
    (1 message between)
    """
    findings: list[Finding] = []
    analyse(records, findings)
    order = {raw.item: k for k, raw in enumerate(records.summaries)}
    order.update({raw.item: len(order) + k for k, raw in enumerate(records.chunks)})
    first = (Kind.MALFORMED, Kind.EMPTY, Kind.DUPLICATE_ID)
    early = [f for f in findings if f.kind in first]
    rest = [f for f in findings if f.kind not in first]
    rest.sort(key=lambda f: (f.record == "chunk", order.get(f.item, 0)))
    return early + rest


def analyse(records: StoredRecords, findings: list[Finding]) -> Tree:
    """The parsed tree with every memory's span, every finding noted in ``findings``."""
    tree = parse(records, findings)
    for s in sorted(tree.valid.values(), key=lambda x: x.level):
        _check_span(tree, s, findings)
    for s in tree.valid.values():  # store order
        _check_links(tree, s, findings)
    _check_chunks(tree, findings)
    return tree


def _check_span(tree: Tree, s: SummaryEntry, out: list[Finding]) -> None:
    """Is ``s`` a sound run (its children checked first)? Sets ``tree.spans[s.id]``."""
    position, messages = tree.position, tree.records.rows
    claimed = _positions(s.first, s.last, position)

    def finding(kind: Kind, detail: str) -> None:
        out.append(
            Finding(kind, "summary", s.id, s.item, s.level, detail, s.first, s.last, claimed)
        )

    span: tuple[int, int] | None = None
    if s.level == 1:
        missing = [i for i in s.source_ids if i not in position]
        if (missing or _run_problem(s.source_ids, position, messages, missing)) and (
            tree.sound_when_written(s.item, s.source_ids)
        ):
            pass  # sound when written: the strategy follows what changed since
        elif missing:
            noun = "message is" if len(missing) == 1 else "messages are"
            finding(
                Kind.MISSING_MESSAGES,
                f"{len(missing)} of its {len(s.source_ids)} {noun} not on this branch: "
                + _short(missing),
            )
        elif problem := _run_problem(s.source_ids, position, messages):
            finding(Kind.NON_CONTIGUOUS, problem)
        else:
            span = (position[s.source_ids[0]], position[s.source_ids[-1]])
    else:
        children = s.source_ids
        absent = [c for c in children if c not in tree.valid]
        wrong = [c for c in children if c in tree.valid and tree.valid[c].level != s.level - 1]
        repeated = sorted(c for c, n in Counter(children).items() if n > 1)
        if absent:
            finding(
                Kind.MISSING_CHILD,
                "it lists "
                + ", ".join(
                    f"{c}, which {tree.invalid.get(c, 'the store does not hold')}" for c in absent
                ),
            )
        elif wrong:
            finding(
                Kind.LEVEL_MISMATCH,
                "it lists "
                + ", ".join(f"{c} (L{tree.valid[c].level})" for c in wrong)
                + f", not L{s.level - 1} memories",
            )
        elif repeated:
            finding(Kind.NON_CONTIGUOUS, f"it lists {', '.join(repeated)} more than once")
        elif all(tree.spans.get(c) is not None for c in children):
            spans = [tree.spans[c] for c in children]
            problem = ""
            for (a, sa), (b, sb) in itertools.pairwise(zip(children, spans, strict=True)):
                assert sa is not None and sb is not None
                if sb[0] == sa[1] + 1:
                    continue
                if sb[0] > sa[1] + 1:
                    between = sb[0] - sa[1] - 1
                    noun = "message" if between == 1 else "messages"
                    problem = (
                        f"its children are not adjacent: {a} ends at position {sa[1]} and "
                        f"{b} starts at position {sb[0]} ({between} {noun} between)"
                    )
                elif sb[1] < sa[0]:
                    problem = (
                        f"its children are out of order: {b} (positions {sb[0]}..{sb[1]}) "
                        f"comes before {a} (positions {sa[0]}..{sa[1]}) in the messages"
                    )
                else:
                    problem = (
                        f"its children overlap: {a} (positions {sa[0]}..{sa[1]}) and "
                        f"{b} (positions {sb[0]}..{sb[1]})"
                    )
                break
            if problem and not tree.sound_when_written(s.item, _leaves(tree, s)):
                finding(Kind.NON_CONTIGUOUS, problem)
            elif not problem:
                first, last = spans[0], spans[-1]
                assert first is not None and last is not None
                span = (first[0], last[1])
        # else: a child is broken; this memory goes with it (see plan_repair)
    tree.spans[s.id] = span
    if span is not None and (s.first, s.last) != (messages[span[0]], messages[span[1]]):
        finding(
            Kind.WRONG_RANGE,
            f"its range says {s.first}..{s.last} but it covers "
            f"{messages[span[0]]}..{messages[span[1]]} (positions {span[0]}..{span[1]})",
        )


def _leaves(tree: Tree, s: SummaryEntry) -> list[str]:
    """The messages under the memory ``s``, through its children, in order."""
    if s.level == 1:
        return list(s.source_ids)
    out: list[str] = []
    for child in s.source_ids:
        below = tree.valid.get(child)
        if below is not None and below.level < s.level:
            out.extend(_leaves(tree, below))
    return out


def _check_links(tree: Tree, s: SummaryEntry, out: list[Finding]) -> None:
    """Parent pointers against the parents' lists of children, and L1s against chunks."""
    claimed = _positions(s.first, s.last, tree.position)

    def finding(kind: Kind, detail: str) -> None:
        out.append(
            Finding(kind, "summary", s.id, s.item, s.level, detail, s.first, s.last, claimed)
        )

    parents = tree.claimants.get(s.id, [])
    if len(parents) > 1:
        finding(
            Kind.SHARED_CHILD,
            f"{len(parents)} memories list it as a child ({', '.join(parents)}); its parent "
            f"pointer names {s.parent_id or 'none'}",
        )
    if s.parent_id is not None:
        if s.parent_id not in tree.valid:
            why = tree.invalid.get(s.parent_id, "is not in the store")
            finding(Kind.DANGLING_PARENT, f"its parent {s.parent_id} {why}")
        elif s.parent_id not in parents:
            finding(Kind.DANGLING_PARENT, f"its parent {s.parent_id} does not list it as a child")
    elif len(parents) == 1:
        finding(Kind.UNLINKED_CHILD, f"{parents[0]} lists it as a child, but its parent is empty")
    if s.level == 1 and tree.chunks and s.id not in tree.named and not _set_aside(tree, s):
        finding(
            Kind.UNCHUNKED,
            "no chunk record names it, so the strategy neither shows nor merges it",
        )


def _set_aside(tree: Tree, s: SummaryEntry) -> bool:
    """Whether the L1 ``s``, which no chunk record names, is one the strategy set aside
    when it adopted the memories of a store without chunk records: no memory lists it
    and no parent is named, and some of its messages are held by a chunk record (the
    memory adopted over them). Such a memory is neither shown nor merged, and its
    messages are not summarised twice."""
    if s.parent_id is not None or tree.claimants.get(s.id):
        return False
    held = tree.chunked
    return any(i in held for i in s.source_ids)


def chunk_runs(
    chunk: ChunkRecord, position: dict[str, int], messages: Sequence[str]
) -> list[tuple[str, ...]]:
    """The chunk's messages as runs of consecutive positions, in message order."""
    spots = sorted({position[i] for i in chunk.source_ids})
    runs: list[list[int]] = []
    for p in spots:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return [tuple(messages[p] for p in run) for run in runs]


def _check_chunks(tree: Tree, out: list[Finding]) -> None:
    position, messages = tree.position, tree.records.rows
    for c in tree.chunks:
        claimed = _positions(c.source_ids[0], c.source_ids[-1], position)

        def finding(kind: Kind, detail: str, c: ChunkRecord = c, claimed: Any = claimed) -> None:
            out.append(
                Finding(
                    kind,
                    "chunk",
                    c.id,
                    c.item,
                    None,
                    detail,
                    c.source_ids[0],
                    c.source_ids[-1],
                    claimed,
                )
            )

        # a chunk that lost messages is the strategy's to follow on open (reconcile)
        if (
            all(i in position for i in c.source_ids)
            and (problem := _run_problem(c.source_ids, position, messages))
            and not tree.sound_when_written(c.item, c.source_ids)
        ):
            finding(Kind.NON_CONTIGUOUS_CHUNK, problem)
        if c.summary_id is not None:
            held = tree.valid.get(c.summary_id)
            if held is None:
                why = tree.invalid.get(c.summary_id, "is not in the store")
                finding(Kind.ORPHAN_CHUNK, f"it is compressed into {c.summary_id}, which {why}")
            elif held.level != 1:
                finding(
                    Kind.ORPHAN_CHUNK,
                    f"it is compressed into {c.summary_id}, which is an L{held.level}, not an L1",
                )
