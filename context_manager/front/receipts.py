"""Fold receipts on the manager's side: the compile in flight, accepting it, telling
listeners and listing what was accepted (:mod:`context_manager.receipts`).

``ContextManager.accept_round``, ``on_fold_receipt`` and ``list_fold_receipts``
delegate here. The compile in flight is held in memory, per manager: the last live
compile it returned (a preview, a dry run or a compile whose bookkeeping the full
store refused is never in flight), so only a compile this manager made since it was
opened can be accepted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..arguments import check_mapping, check_text
from ..errors import ArgumentTypeError, UnknownCompileError
from ..receipts import (
    LAST_SLOT,
    RECEIPTS_SLOT,
    FoldReceipt,
    ReceiptUnit,
    compiled_request_hash,
    last_receipt,
    layout_hash,
    read_receipts,
    units_of,
)

if TYPE_CHECKING:
    from ..manager import ContextManager
    from ..request import CompileResult

__all__ = ["ISSUED_KEPT", "accept_round", "compiled", "list_fold_receipts", "on_fold_receipt"]

log = logging.getLogger(__name__)

ISSUED_KEPT = 256
"""How many of its newest compile ids a manager remembers, to tell a superseded id
(stale) from one it never issued."""

USAGE_ACCEPTED = "None or a mapping of token counts (str -> int from 0; None values are dropped)"


@dataclass(frozen=True)
class _Flight:
    """The last live compile: what accepting it stores."""

    compile_id: str
    branch: str
    units: tuple[ReceiptUnit, ...]
    request: CompileResult
    """The compile's result as returned, hashed only when accepted (a copy of its
    messages: the host may change its list)."""


@dataclass
class _Receipts:
    """A manager's receipt state (in memory)."""

    flight: _Flight | None = None
    issued: deque[str] = field(default_factory=lambda: deque(maxlen=ISSUED_KEPT))
    listeners: list[Callable[[FoldReceipt], None]] = field(default_factory=list)


_STATES: weakref.WeakKeyDictionary[ContextManager, _Receipts] = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def _state(cm: ContextManager) -> _Receipts:
    with _STATES_LOCK:
        state = _STATES.get(cm)
        if state is None:
            state = _STATES[cm] = _Receipts()
        return state


def _slot(cm: ContextManager) -> Callable[[str], str]:
    namespace = cm._namespace
    return lambda name: f"{namespace}/{name}"


def compiled(cm: ContextManager, result: CompileResult) -> None:
    """``result``, a live compile's, is now the compile in flight (the one
    :func:`accept_round` takes), with its rows as receipt units."""
    memory = cm._caps.memory
    summaries = memory.summaries if memory is not None else {}

    def level_of(memory_id: str) -> int | None:
        found = summaries.get(memory_id)
        level = getattr(found, "level", None)
        return level if isinstance(level, int) else None

    state = _state(cm)
    units = tuple(units_of(result.provenance, level_of))
    kept = dataclasses.replace(
        result,
        messages=list(result.messages),
        system_injections=list(result.system_injections),
        tools=[dict(t) for t in result.tools],
    )
    state.flight = _Flight(result.compile_id, cm._store.branch, units, kept)
    state.issued.append(result.compile_id)


def _usage(usage: object) -> dict[str, int] | None:
    """The checked ``usage`` of an acceptance: its int values (None values dropped)."""
    if usage is None:
        return None
    counts: dict[str, int] = {}
    for key, value in check_mapping(usage, "usage", USAGE_ACCEPTED).items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ArgumentTypeError(
                f"usage[{key!r}]",
                value,
                "a token count (an int from 0) or None",
                hint="pass the provider's counts only: "
                "{k: v for k, v in usage.items() if isinstance(v, int)}",
            )
        counts[key] = value
    return counts


def accept_round(
    cm: ContextManager, compile_id: str, usage: Mapping[str, int | None] | None
) -> FoldReceipt:
    """Store the receipt of compile ``compile_id``'s request (see
    ``ContextManager.accept_round``); run inside the manager's write operation."""
    check_text(compile_id, "compile_id")
    counts = _usage(usage)
    store = cm._store
    slot = _slot(cm)
    state = _state(cm)
    head = store.get(slot(LAST_SLOT))
    if isinstance(head, dict) and head.get("compile_id") == compile_id:
        accepted = last_receipt(store, slot)
        if accepted is not None:
            return accepted  # accepted already: a duplicate changes nothing
    flight = state.flight
    if flight is None or flight.compile_id != compile_id:
        stale = compile_id in state.issued
        newest = f"; the compile in flight is {flight.compile_id!r}" if flight else ""
        why = (
            "was superseded by a later compile: only the last live compile can be accepted"
            if stale
            else "was not returned by a live compile of this manager since it was opened "
            "(a preview's or a dry run's id, another manager's, or one from before a reopen)"
        )
        raise UnknownCompileError(
            f"compile_id={compile_id!r} {why}{newest}; call accept_round with the "
            "CompileResult.compile_id of the request the provider accepted, right after it",
            compile_id=compile_id,
            stale=stale,
        )
    if flight.branch != store.branch:
        raise UnknownCompileError(
            f"compile_id={compile_id!r} was compiled on branch {flight.branch!r}, and the "
            f"current branch is {store.branch!r}: switch back to accept it, or compile again",
            compile_id=compile_id,
            stale=True,
        )
    seq = (int(head["seq"]) if isinstance(head, dict) else 0) + 1
    receipt = FoldReceipt(
        seq=seq,
        compile_id=compile_id,
        branch=flight.branch,
        accepted_at=time.time(),
        usage=counts,
        units=flight.units,
        request_hash=compiled_request_hash(flight.request),
        layout_hash=layout_hash(flight.units),
    )
    with store.transaction():
        item = store.append(slot(RECEIPTS_SLOT), receipt.body())
        store.set(slot(LAST_SLOT), {"seq": seq, "item": item.id, "compile_id": compile_id})
    if state.listeners:  # told once the receipt is committed
        cm._gate.committed.append(lambda: _notify(state, receipt))
    return receipt


def _notify(state: _Receipts, receipt: FoldReceipt) -> None:
    for listener in list(state.listeners):
        try:
            listener(receipt)
        except Exception:
            log.exception("a fold receipt listener failed on receipt %d", receipt.seq)


def on_fold_receipt(
    cm: ContextManager, listener: Callable[[FoldReceipt], None]
) -> Callable[[], None]:
    """Call ``listener`` with each receipt stored from now on (see
    ``ContextManager.on_fold_receipt``); returns the idempotent detach."""
    if not callable(listener):
        raise ArgumentTypeError("listener", listener, "a callable taking a FoldReceipt")
    state = _state(cm)
    state.listeners.append(listener)

    def stop() -> None:
        with suppress(ValueError):
            state.listeners.remove(listener)

    return stop


def list_fold_receipts(cm: ContextManager) -> list[FoldReceipt]:
    """The current branch's receipts, oldest first."""
    return read_receipts(cm._store, _slot(cm))
