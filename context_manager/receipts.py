"""Fold receipts: what a provider accepted.

A compile builds a request; only the host knows whether the provider took it. When it
did, :meth:`ContextManager.accept_round <context_manager.ContextManager.accept_round>`
stores a :class:`FoldReceipt`: the compile's id, when it was accepted, the usage the
provider reported and the request's rows as :class:`ReceiptUnit` runs, each a run of
raw messages or one memory shown in place of the messages it stands for (its
*fold*). The receipts of a branch are a log under the manager's namespace
(:data:`RECEIPTS_SLOT`), the newest also named by a snapshot (:data:`LAST_SLOT`) so
reading it costs one item, whatever the number of rounds.

The last receipt is the continuity baseline a cache-aware solver compares a new
request with: what the provider holds in its prompt cache is what it accepted, not
what the last compile built (a compile the host never sent, or sent and saw refused,
changes nothing there). :meth:`FoldReceipt.runs` gives it in the form of a committed
frontier (runs ``(first id, last id, level)``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from .request import CompileResult
    from .store import RecordStore

__all__ = [
    "LAST_SLOT",
    "RECEIPTS_SLOT",
    "FoldReceipt",
    "ReceiptUnit",
    "compiled_request_hash",
    "last_receipt",
    "layout_hash",
    "read_receipts",
    "units_of",
]

RECEIPTS_SLOT = "fold-receipts"
"""The log of a branch's receipts, oldest first, under the namespace
(``<namespace>/fold-receipts``)."""
LAST_SLOT = "fold-receipt"
"""The snapshot naming a branch's newest receipt (``{"seq", "item", "compile_id"}``)."""


class ReceiptUnit(BaseModel):
    """A run of rows of an accepted request: raw messages, or one memory.

    Examples
    --------
    >>> ReceiptUnit(memory="L2-7", level=2, first="12", last="40", messages=29).fold
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory: str | None
    """The memory shown (None: raw messages shown as stored)."""
    level: int | None = Field(ge=0)
    """The memory's level (0 for raw messages; None for a memory the strategy no
    longer held when the request was compiled)."""
    first: str
    """The first stored message the run shows or stands for."""
    last: str
    """The last one."""
    messages: int = Field(ge=1)
    """How many stored messages it shows or stands for (fewer than the span from
    ``first`` to ``last`` when some between are not in the request)."""

    @property
    def fold(self) -> bool:
        """Whether a memory stands here in place of its messages."""
        return self.memory is not None


class FoldReceipt(BaseModel):
    """A request the provider accepted, as stored by ``ContextManager.accept_round``.

    Examples
    --------
    >>> unit = ReceiptUnit(memory="L1-0", level=1, first="1", last="4", messages=4)
    >>> raw = ReceiptUnit(memory=None, level=0, first="5", last="6", messages=2)
    >>> receipt = FoldReceipt(seq=1, compile_id="ab12", branch="main", accepted_at=0.0,
    ...                       units=(unit, raw), request_hash="0" * 64,
    ...                       layout_hash=layout_hash((unit, raw)))
    >>> receipt.runs(), [f.memory for f in receipt.folds]
    ([('1', '4', 1)], ['L1-0'])
    >>> FoldReceipt.from_body(receipt.body()) == receipt
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=1)
    """Its number on the branch, from 1."""
    compile_id: str
    """The compile whose request was accepted (:attr:`CompileResult.compile_id`)."""
    branch: str
    """The branch it was compiled and accepted on."""
    accepted_at: float
    """When it was accepted (seconds since the epoch, ``time.time()``)."""
    usage: dict[str, int] | None = None
    """What the provider reported for the round, as given (token counts by name)."""
    units: tuple[ReceiptUnit, ...] = ()
    """The request's rows from the record, in order, as runs (injections left out)."""
    request_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The SHA-256 of the request as compiled (:func:`compiled_request_hash`): the
    same bytes sent again hash the same."""
    layout_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The SHA-256 of :attr:`units` (:func:`layout_hash`): two receipts with the same
    layout showed the same memories and raw runs (a keep-alive round, say), whatever
    their exact bytes."""

    @property
    def folds(self) -> tuple[ReceiptUnit, ...]:
        """The memories the request showed in place of their messages, in order."""
        return tuple(u for u in self.units if u.fold)

    def runs(self) -> list[tuple[str, str, int]]:
        """The folds as frontier runs ``(first id, last id, level)``, in order: the form
        of ``AutobiographicalStrategy.resolutions`` (a fold of unknown level left out)."""
        return [(u.first, u.last, u.level) for u in self.folds if u.level is not None]

    def body(self) -> dict[str, Any]:
        """The stored form (units as ``[memory, level, first, last, messages]``)."""
        return {
            "seq": self.seq,
            "compile_id": self.compile_id,
            "branch": self.branch,
            "accepted_at": self.accepted_at,
            "usage": self.usage,
            "units": _unit_rows(self.units),
            "request_hash": self.request_hash,
            "layout_hash": self.layout_hash,
        }

    @classmethod
    def from_body(cls, body: Any) -> FoldReceipt:
        """The receipt a stored ``body`` holds (``ValueError`` for one that is not)."""
        if not isinstance(body, dict) or not isinstance(body.get("units"), list):
            raise ValueError("a fold receipt is an object with a list of units")
        fields = ("memory", "level", "first", "last", "messages")
        units = []
        for u in body["units"]:
            if not isinstance(u, list) or len(u) != len(fields):
                raise ValueError(f"a receipt unit is a list of {len(fields)} values, got {u!r}")
            units.append(ReceiptUnit(**dict(zip(fields, u, strict=True))))
        return cls.model_validate({**body, "units": tuple(units)})


def _unit_rows(units: Sequence[ReceiptUnit]) -> list[list[Any]]:
    return [[u.memory, u.level, u.first, u.last, u.messages] for u in units]


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def layout_hash(units: Sequence[ReceiptUnit]) -> str:
    """The SHA-256 (hex) of ``units`` as stored (``[memory, level, first, last,
    messages]`` lists, compact JSON).

    Examples
    --------
    >>> unit = ReceiptUnit(memory=None, level=0, first="1", last="2", messages=2)
    >>> len(layout_hash([unit])), layout_hash([unit]) == layout_hash([unit])
    (64, True)
    """
    return _digest(_unit_rows(units))


def compiled_request_hash(result: CompileResult) -> str:
    """The SHA-256 (hex) of a compiled request: its system prompt, system injections,
    tool definitions and messages as JSON (``model_dump(mode="json")``), keys sorted, no
    spaces, past-ASCII characters escaped.

    Examples
    --------
    >>> from context_manager import CompileResult, Message
    >>> result = CompileResult([Message.text_message("User", "hi")], system_prompt="Be brief.")
    >>> len(compiled_request_hash(result))
    64
    """
    return _digest(
        {
            "system": result.system_prompt,
            "system_injections": [b.model_dump(mode="json") for b in result.system_injections],
            "tools": result.tools,
            "messages": [m.model_dump(mode="json") for m in result.messages],
        }
    )


def units_of(
    provenance: Sequence[tuple[str | None, Sequence[str]]],
    level_of: Callable[[str], int | None],
) -> list[ReceiptUnit]:
    """A compiled request's rows as runs, from its provenance
    (:attr:`CompileResult.provenance`): adjacent raw rows make one run; the rows of
    one memory (its question and its answer) one unit; rows standing for no stored
    message (injections) none. ``level_of`` gives a memory's level.

    Examples
    --------
    >>> rows = [(None, ()), ("L1-0", ()), ("L1-0", ("1", "2", "3")), (None, ("4",)),
    ...         (None, ("5",))]
    >>> [(u.memory, u.first, u.last, u.messages) for u in units_of(rows, lambda m: 1)]
    [('L1-0', '1', '3', 3), (None, '4', '5', 2)]
    """
    out: list[ReceiptUnit] = []
    for memory, ids in provenance:
        if not ids:  # an injection, or a memory's question (its answer names the messages)
            continue
        last = out[-1] if out else None
        if last is not None and last.memory == memory:  # raw after raw, or the same memory
            grown = {"last": ids[-1], "messages": last.messages + len(ids)}
            out[-1] = last.model_copy(update=grown)
        else:
            level = 0 if memory is None else level_of(memory)
            out.append(
                ReceiptUnit(
                    memory=memory, level=level, first=ids[0], last=ids[-1], messages=len(ids)
                )
            )
    return out


def last_receipt(store: RecordStore, slot: Callable[[str], str]) -> FoldReceipt | None:
    """The newest receipt of the current branch (None before the first acceptance);
    ``slot`` names a slot in the namespace (``lambda name: f"{namespace}/{name}"``)."""
    head = store.get(slot(LAST_SLOT))
    if not isinstance(head, dict) or not isinstance(head.get("item"), str):
        return None
    item = store.item(slot(RECEIPTS_SLOT), head["item"])
    return None if item is None else FoldReceipt.from_body(item.body)


def read_receipts(store: RecordStore, slot: Callable[[str], str]) -> list[FoldReceipt]:
    """Every receipt of the current branch, oldest first (``slot`` as for
    :func:`last_receipt`)."""
    return [FoldReceipt.from_body(i.body) for i in store.items(slot(RECEIPTS_SLOT))]
