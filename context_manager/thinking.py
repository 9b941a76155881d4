"""Thinking binding: which signed thinking a compiled request may carry back to its model.

Some models bind each signed thinking block to the request chain it was minted in:
a block is accepted only in a request that continues that chain, under the same
*identity* (model, system text, tools, the rest of the request's head) and with the
same messages before it that the model was sent. A compile that refolds history,
an edit, a moved injection or another model breaks the chain, and the thinking
minted in it can no longer go back.

The manager keeps, per branch, a record of the last request the branch sent: what
the last committing compile with a :class:`ThinkingBinding` built, extended by
:meth:`~context_manager.ContextManager.note_request_sent` with the rows the host
carried after the compiled ones (the replies and results of a stream's later
rounds). A compile keeps a reply's thinking exactly when

* the record was made under the compile's identity, and
* the new request repeats the recorded one message for message up to and including
  that reply, and the recorded one carried the reply with its thinking.

Everything else loses its thinking in the copy sent, never in the store, and the
compile says what it left out (:class:`ThinkingStrip`). A host that never notes
what it sent loses each reply's thinking at the compile after the reply is stored,
and is never refused for it.

The record holds, for each position of the recorded request that carried a reply of
the binding's participant, a hash of the request up to and including it: a new
request is compared with it without keeping the old messages.

Examples
--------
>>> from context_manager import CharsCounter, ContextManager, TextBlock, ThinkingBlock
>>> binding = ThinkingBinding()
>>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
...     _ = cm.add_message("User", "What is 2 + 2?")
...     first = cm.compile(thinking_binding=binding, identity="claude-sonnet-4-5")
...     reply = [ThinkingBlock(thinking="2 + 2 = 4", signature="sig"), TextBlock(text="4")]
...     reply_id = cm.add_message("Claude", reply)
...     _ = cm.note_request_sent([reply_id], first.identity, first.compile_id)
...     _ = cm.add_message("User", "And doubled?")
...     second = cm.compile(thinking_binding=binding, identity="claude-sonnet-4-5")
>>> [type(b).__name__ for b in second.messages[1].content]
['ThinkingBlock', 'TextBlock']
>>> second.thinking_strip.kept == (reply_id,), second.thinking_strip.stripped
(True, ())
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .messages import AGENT, ContentBlock, Message, is_thinking, without_blocks

__all__ = [
    "NotedRow",
    "RequestIdentity",
    "StrippedThinking",
    "ThinkingBinding",
    "ThinkingStrip",
]

StripReason = Literal["unrecorded", "identity", "unnoted", "chain"]
"""Why a reply's thinking was left out of a compiled request.

``unrecorded``: the branch has no record of a request it sent. ``identity``: the
record was made under another identity. ``unnoted``: the reply came after the
recorded request and the host did not note it as carried. ``chain``: the request
differs from the recorded one before (or at) the reply."""


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ThinkingBinding(BaseModel):
    """How the model a request goes to treats signed thinking.

    Parameters
    ----------
    binds : bool
        The model binds each signed thinking block to the request chain it was minted
        in (False: it takes thinking anywhere, and the compile leaves it all in).
    participant : str
        The participant the model's own replies are stored under.
    drop_block : callable
        Which blocks of those replies are bound thinking (default: every
        :class:`~context_manager.messages.ThinkingBlock`).

    Examples
    --------
    >>> from context_manager import ThinkingBlock
    >>> ThinkingBinding().drop_block(ThinkingBlock(thinking="hm", signature="s"))
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    binds: bool = True
    participant: str = Field(default=AGENT, min_length=1)
    drop_block: Callable[[ContentBlock], bool] = is_thinking


class RequestIdentity(BaseModel):
    """What a request is sent under besides its messages, as digests.

    Two requests continue one thinking chain only under equal identities. Build one
    with :meth:`of`, or let the compile build it (``identity="<model>"``, from the
    system text and tools the request carries: :attr:`CompileResult.identity
    <context_manager.CompileResult.identity>`).

    Parameters
    ----------
    model : str
        The model the request goes to.
    system, tools, head : str
        SHA-256 digests of the system text, the tool definitions and the rest of the
        request's head (thinking settings, say); empty when there is none.

    Examples
    --------
    >>> a = RequestIdentity.of("claude-sonnet-4-5", system="Be brief.")
    >>> a == RequestIdentity.of("claude-sonnet-4-5", system="Be brief.")
    True
    >>> a == RequestIdentity.of("claude-sonnet-4-5", system="Be thorough.")
    False
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    system: str = ""
    tools: str = ""
    head: str = ""

    @classmethod
    def of(
        cls,
        model: str,
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        **head: Any,
    ) -> RequestIdentity:
        """The identity of a request to ``model`` with this system text, these tool
        definitions and the other head parameters ``head`` (JSON values)."""
        return cls(
            model=model,
            system=_digest(system) if system else "",
            tools=_digest([dict(t) for t in tools]) if tools else "",
            head=_digest(head) if head else "",
        )


class NotedRow(BaseModel):
    """A row a sent request carried after the compiled messages, for
    :meth:`~context_manager.ContextManager.note_request_sent`.

    A stored message's id (a plain ``str`` says the same) vouches that the row was
    carried, or returned, exactly as stored. ``unstored=True`` marks a row the host
    cannot vouch for (not stored, or sent otherwise than stored): the chain is
    vouched for only up to it.

    Examples
    --------
    >>> NotedRow(unstored=True).unstored
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str | None = None
    unstored: bool = False


class StrippedThinking(BaseModel):
    """A reply whose thinking a compile left out of the copy it sends."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message_id: str | None
    """The stored message (None for a message the strategy wrote)."""
    position: int
    """Its index in the messages the compile would have sent before the strip."""
    blocks: int
    """Blocks left out."""
    tokens: int
    """Tokens the request saved by leaving them out."""
    reason: StripReason
    was_sent: bool
    """The recorded last request carried this reply with its thinking (so this compile
    breaks the chain there)."""


class ThinkingStrip(BaseModel):
    """What a compile with a thinking binding kept and left out
    (:attr:`CompileResult.thinking_strip <context_manager.CompileResult.thinking_strip>`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kept: tuple[str, ...] = ()
    """Stored replies sent with their thinking, in request order."""
    stripped: tuple[StrippedThinking, ...] = ()
    """Replies sent without it, in request order."""

    @property
    def newly(self) -> tuple[str, ...]:
        """Stored replies whose thinking the recorded last request carried and this one
        leaves out."""
        return tuple(s.message_id for s in self.stripped if s.was_sent and s.message_id)

    @property
    def tokens(self) -> int:
        """Tokens the strip saved."""
        return sum(s.tokens for s in self.stripped)


# ------------------------------------------------------------------ the record
_SEED = b""


def link(chain: bytes, message: Message) -> bytes:
    """The chain hash after ``message``: a hash of the request up to and including it."""
    return hashlib.sha256(chain + bytes.fromhex(message.digest())).digest()[:16]


class Mark(BaseModel):
    """A position of a recorded request that carried a reply: the chain hash through
    it and, when the reply was sent without its thinking, why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    position: int
    chain: str
    stripped: StripReason | None = None


class SentRecord(BaseModel):
    """The last request a branch sent, as a compile built it and the host's notes
    extended it (persisted in a snapshot slot, so each branch has its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compile_id: str
    identity: RequestIdentity
    compiled: int
    """Messages the compile built."""
    compiled_chain: str
    """The chain hash after them."""
    marks: tuple[Mark, ...] = ()
    """Marks of the compiled messages."""
    kept: tuple[str, ...] = ()
    """Stored replies the compiled messages carried with their thinking."""
    rows: tuple[str, ...] = ()
    """Stored rows the host noted after the compiled messages, up to the first it could
    not vouch for."""
    row_marks: tuple[Mark, ...] = ()
    length: int = 0
    """Positions vouched for: the compiled messages and the noted rows."""
    chain: str = ""
    """The chain hash after them."""

    def with_rows(
        self, identity: RequestIdentity, rows: Sequence[tuple[str, Message]]
    ) -> SentRecord:
        """The record extended by ``rows`` (id and stored message, in request order)
        after the compiled messages, as sent under ``identity``."""
        chain = bytes.fromhex(self.compiled_chain)
        marks = []
        for k, (_, message) in enumerate(rows):
            chain = link(chain, message)
            marks.append(Mark(position=self.compiled + k, chain=chain.hex()))
        return self.model_copy(
            update={
                "identity": identity,
                "rows": tuple(i for i, _ in rows),
                "row_marks": tuple(marks),
                "length": self.compiled + len(rows),
                "chain": chain.hex(),
            }
        )


@dataclass
class Bound:
    """What :func:`bind` made of a compile's messages."""

    messages: list[Message]
    moved: list[int]
    """For each input message, the index of the last output message at or before it
    (-1: none): where a cache breakpoint on it goes."""
    strip: ThinkingStrip
    record: SentRecord
    saved: int
    """Tokens the strip saved."""


def bind(
    messages: Sequence[Message],
    sources: Sequence[str | None],
    binding: ThinkingBinding,
    identity: RequestIdentity,
    record: SentRecord | None,
    count: Callable[[Message], int],
    compile_id: str,
) -> Bound:
    """Leave out of ``messages`` the bound thinking the model can no longer take.

    Parameters
    ----------
    messages : sequence of Message
        The request as compiled, injections placed.
    sources : sequence of str or None
        For each message, the stored message it shows verbatim (None otherwise).
    binding, identity
        The model's binding and the request's identity.
    record : SentRecord, optional
        The branch's record of the last request it sent.
    count : callable
        Tokens of a message.
    compile_id : str
        The compile's id, for the record of this request.

    Returns
    -------
    Bound
        The messages to send (a reply left with no block is dropped), where each input
        message went, the strip, and the record of this request should it be sent.
    """
    same = record is not None and record.identity == identity
    marks: dict[int, Mark] = {}
    length = 0
    end = ""
    was: set[str] = set()
    if record is not None:
        was = {*record.kept, *record.rows}
        if same:
            marks = {m.position: m for m in (*record.marks, *record.row_marks)}
            length, end = record.length, record.chain
    general: StripReason = "unrecorded" if record is None else "identity"
    out: list[Message] = []
    moved: list[int] = []
    kept: list[str] = []
    stripped: list[StrippedThinking] = []
    new_marks: list[Mark] = []
    chain = _SEED
    intact = same  # the request so far may still repeat the recorded one
    extends: bool | None = None  # it repeats the whole recorded request
    saved = 0
    for position, (message, source) in enumerate(zip(messages, sources, strict=True)):
        if same and extends is None and len(out) == length:
            extends = intact and chain.hex() == end if length else intact
        bound = (
            [b for b in message.content if binding.drop_block(b)]
            if message.participant == binding.participant
            else []
        )
        if not bound:
            out.append(message)
            chain = link(chain, message)
            moved.append(len(out) - 1)
            continue
        mark = marks.get(len(out)) if intact else None
        if mark is not None and mark.stripped is None:
            whole = link(chain, message)
            if whole.hex() == mark.chain:  # the recorded request carried it, so far the same
                out.append(message)
                chain = whole
                moved.append(len(out) - 1)
                new_marks.append(Mark(position=len(out) - 1, chain=whole.hex()))
                if source is not None:
                    kept.append(source)
                continue
        bare = without_blocks(message, binding.drop_block)
        reason: StripReason
        if not same:
            reason = general
        elif mark is not None and mark.stripped is not None:
            reason = mark.stripped
        elif len(out) >= length and extends:
            reason = "unnoted"
        else:
            reason = "chain"
        if bare is not None:
            after = link(chain, bare)
            if mark is not None and mark.stripped is not None and after.hex() == mark.chain:
                pass  # sent without it last time too: the chain goes on
            elif intact and len(out) < length:
                intact = False  # the content differs here from what was sent
            out.append(bare)
            chain = after
            new_marks.append(Mark(position=len(out) - 1, chain=after.hex(), stripped=reason))
        tokens = count(message) - (count(bare) if bare is not None else 0)
        saved += tokens
        moved.append(len(out) - 1)
        stripped.append(
            StrippedThinking(
                message_id=source,
                position=position,
                blocks=len(bound),
                tokens=tokens,
                reason=reason,
                was_sent=source is not None and source in was,
            )
        )
    new = SentRecord(
        compile_id=compile_id,
        identity=identity,
        compiled=len(out),
        compiled_chain=chain.hex(),
        marks=tuple(new_marks),
        kept=tuple(kept),
        length=len(out),
        chain=chain.hex(),
    )
    return Bound(out, moved, ThinkingStrip(kept=tuple(kept), stripped=tuple(stripped)), new, saved)
