"""Per-message caps on the copy sent: a message too long, or a tool call's input too
large, is cut in what each compile sends, whatever the budget; the store keeps it whole.

:class:`MessageCaps` holds the two caps of the reference's options:

* ``max_message_tokens``: a message over this many tokens has its text (text blocks
  and tool results' text) cut to its head and tail around :func:`truncation_marker`,
  each text by the same share, until the message fits. Tool results are cut, never
  dropped; images and tool calls are left as they are, and a message whose images and
  calls alone fill the cap is sent whole (cutting its text could not make it fit).
* ``tool_use_input_max_tokens``: a tool call whose input, as compact JSON, is over
  this many tokens is sent with the input ``{"_truncated": true, "_originalTokens": N,
  "_keys": [...]}`` (its keys, sorted).

The caps are part of a message's send form (:func:`cap_form`), so the request is
priced as it is sent and the fold plan knows what a capped message costs. They depend
on the message alone: a message is cut the same way on every compile, and the cut
bytes stay in the prompt cache. :func:`truncated_counts` counts what a request holds
of them (``render_stats["truncated"]``).

Examples
--------
>>> from context_manager import CharsCounter, Message, TextBlock
>>> caps = MessageCaps(max_message_tokens=50)
>>> long = Message(participant="User", content=[TextBlock(text="word " * 200)])
>>> cut = caps.cap(long, CharsCounter())
>>> CharsCounter().count_message(cut) <= 50, "truncated" in cut.text
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from .messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from .pairing import SendForm
from .tokens import TokenCounter, compact_json

__all__ = [
    "INPUT_TRUNCATED",
    "MessageCaps",
    "cap_form",
    "keep_last_results",
    "older_result_note",
    "truncated_counts",
    "truncation_marker",
]

INPUT_TRUNCATED: Final = "_truncated"
"""The key a capped tool call's input carries."""

_MARKER_HEAD: Final = "\n[…truncated: the message was ~"
_ROUNDS: Final = 4


def truncation_marker(tokens: int) -> str:
    """What replaces the middle of a capped message's text.

    Examples
    --------
    >>> truncation_marker(9000)
    '\\n[…truncated: the message was ~9000 tokens; middle omitted]\\n'
    """
    return f"{_MARKER_HEAD}{tokens} tokens; middle omitted]\n"


class MessageCaps(BaseModel):
    """Caps on each message sent (0 turns a cap off).

    Parameters
    ----------
    max_message_tokens : int
        The most tokens one message may take in a request; its text is cut to fit.
    tool_use_input_max_tokens : int
        The most tokens a tool call's input may take (as compact JSON); a larger one is
        sent as its keys and size.
    tool_result_max_last_n : int or dict of str to int, optional
        How many of each tool's newest results a request carries whole.

    Examples
    --------
    >>> MessageCaps().active, MessageCaps(max_message_tokens=8000).key
    (False, 'caps:m8000:u0')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_message_tokens: int = Field(default=0, ge=0)
    tool_use_input_max_tokens: int = Field(default=0, ge=0)
    tool_result_max_last_n: int | dict[str, int] | None = Field(default=None)
    """Each tool's newest N results are sent; older ones become :func:`older_result_note`
    (one N for every tool, or N by tool name: a tool not named keeps every result).
    Applied to the request, after the fold plan (:func:`keep_last_results`)."""

    @property
    def active(self) -> bool:
        """Whether a cap on single messages is on (those the send forms carry)."""
        return bool(self.max_message_tokens or self.tool_use_input_max_tokens)

    @property
    def key(self) -> str:
        """What keys the send forms' saved values: forms under other caps differ."""
        return f"caps:m{self.max_message_tokens}:u{self.tool_use_input_max_tokens}"

    def cap(self, message: Message, counter: TokenCounter) -> Message:
        """``message`` as sent under the caps (itself when no cap applies)."""
        out = message
        if self.tool_use_input_max_tokens:
            out = _cap_inputs(out, self.tool_use_input_max_tokens, counter)
        if self.max_message_tokens:
            out = _cap_text(out, self.max_message_tokens, counter)
        return out


def cap_form(form: SendForm, caps: MessageCaps, counter: TokenCounter) -> SendForm:
    """A send form with each of its messages capped (the form itself when none is).

    Examples
    --------
    >>> from context_manager import CharsCounter
    >>> form = SendForm((Message(participant="User", content=[TextBlock(text="hi")]),))
    >>> cap_form(form, MessageCaps(max_message_tokens=10), CharsCounter()) is form
    True
    """
    if not caps.active or not form.messages:
        return form
    capped = tuple(caps.cap(m, counter) for m in form.messages)
    if all(a is b for a, b in zip(capped, form.messages, strict=True)):
        return form
    return SendForm(capped, form.tied)


def _cap_inputs(message: Message, cap: int, counter: TokenCounter) -> Message:
    content: list[ContentBlock] = []
    changed = False
    for block in message.content:
        if isinstance(block, ToolUseBlock) and block.input:
            tokens = counter.count_text(compact_json(block.input))
            if tokens > cap:
                stub = {
                    INPUT_TRUNCATED: True,
                    "_originalTokens": tokens,
                    "_keys": sorted(block.input),
                }
                block = block.model_copy(update={"input": stub})
                changed = True
        content.append(block)
    return message.model_copy(update={"content": tuple(content)}) if changed else message


def _texts(message: Message) -> list[tuple[int, int | None, str]]:
    """The cuttable texts of a message: (block, inner block or None for a string
    result or a text block, text)."""
    found: list[tuple[int, int | None, str]] = []
    for b, block in enumerate(message.content):
        if isinstance(block, TextBlock) and block.text:
            found.append((b, None, block.text))
        elif isinstance(block, ToolResultBlock):
            if isinstance(block.content, str):
                if block.content:
                    found.append((b, None, block.content))
            else:
                found += [
                    (b, k, c.text)
                    for k, c in enumerate(block.content)
                    if isinstance(c, TextBlock) and c.text
                ]
    return found


def _cut(text: str, keep: float, marker: str) -> str:
    """``text`` cut to ``keep`` of its characters, head and tail around ``marker``."""
    chars = int(len(text) * keep)
    if chars >= len(text):
        return text
    head = chars * 6 // 10
    tail = chars - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def _with_texts(message: Message, texts: dict[tuple[int, int | None], str]) -> Message:
    content: list[Any] = list(message.content)
    for (b, k), text in texts.items():
        block = content[b]
        if isinstance(block, TextBlock):
            content[b] = block.model_copy(update={"text": text})
        elif isinstance(block, ToolResultBlock) and k is None:
            content[b] = block.model_copy(update={"content": text})
        elif isinstance(block, ToolResultBlock):
            inner = list(block.content)
            inner[k] = inner[k].model_copy(update={"text": text})  # type: ignore[index, union-attr]
            content[b] = block.model_copy(update={"content": inner})
    return message.model_copy(update={"content": tuple(content)})


def _cap_text(message: Message, cap: int, counter: TokenCounter) -> Message:
    """Cut the message's texts, each by the same share, until it fits ``cap``."""
    total = counter.count_message(message)
    if total <= cap:
        return message
    texts = _texts(message)
    cuttable = sum(counter.count_text(t) for _, _, t in texts)
    if not cuttable or total - cuttable >= cap:
        return message  # what is not text fills the cap alone: cutting the text is no use
    marker = truncation_marker(total)
    room = len(texts) * counter.count_text(marker)  # the markers the cut adds
    out = message
    share = 1.0  # of each text's characters kept
    for _ in range(_ROUNDS):
        over = counter.count_message(out) - cap
        if over <= 0 or share == 0.0:
            break
        spare = room if out is message else 0
        share = max(0.0, (cuttable * share - over * 1.1 - spare) / cuttable)
        out = _with_texts(message, {(b, k): _cut(text, share, marker) for b, k, text in texts})
    return out


def truncated_counts(messages: Sequence[Message]) -> dict[str, int]:
    """How many of ``messages`` were cut by :class:`MessageCaps`, and how many tool call
    inputs they hold that were replaced (keys ``messages`` and ``inputs``).

    Examples
    --------
    >>> plain = Message(participant="User", content=[TextBlock(text="hi")])
    >>> truncated_counts([plain])
    {'messages': 0, 'inputs': 0}
    """
    cut = inputs = 0
    for message in messages:
        if any(_MARKER_HEAD in text for _, _, text in _texts(message)):
            cut += 1
        inputs += sum(
            1
            for b in message.content
            if isinstance(b, ToolUseBlock) and b.input.get(INPUT_TRUNCATED) is True
        )
    return {"messages": cut, "inputs": inputs}


def older_result_note(tool: str) -> str:
    """What an older result of ``tool`` is sent as, past its newest N.

    The note does not count the newer results: it stays the same as more arrive, so the
    prompt before it is not rewritten.

    Examples
    --------
    >>> older_result_note("bash")
    '[older bash result truncated; the newer results of bash are below]'
    """
    return f"[older {tool} result truncated; the newer results of {tool} are below]"


def keep_last_results(
    messages: Sequence[Message],
    last_n: int | dict[str, int] | None,
    price: Callable[[Message], int] | None = None,
) -> tuple[list[Message], int]:
    """``messages`` with each tool's results past its newest ``last_n`` replaced by
    :func:`older_result_note` (newest first, by the tool its call names; a result whose
    call is not in ``messages`` counts under ``"the tool"``). With ``price``, a message
    whose notes would cost more than its results is sent as it is.

    Returns
    -------
    (list of Message, int)
        The messages (the same objects where nothing changed) and the results replaced.

    Examples
    --------
    >>> call = lambda i: Message(
    ...     participant="Claude", content=[ToolUseBlock(id=f"t{i}", name="ls")]
    ... )
    >>> answer = lambda i: Message(
    ...     participant="User", content=[ToolResultBlock(tool_use_id=f"t{i}", content=f"out {i}")]
    ... )
    >>> chat = [m for i in range(3) for m in (call(i), answer(i))]
    >>> sent, replaced = keep_last_results(chat, 1)
    >>> replaced, sent[1].content[0].content
    (2, '[older ls result truncated; the newer results of ls are below]')
    """
    out = list(messages)
    if last_n is None:
        return out, 0
    names = {b.id: b.name for m in out for b in m.content if isinstance(b, ToolUseBlock)}
    seen: dict[str, int] = {}
    replaced = 0
    for at in range(len(out) - 1, -1, -1):
        message = out[at]
        content: list[ContentBlock] = []
        changed = 0
        for block in reversed(message.content):
            if isinstance(block, ToolResultBlock):
                tool = names.get(block.tool_use_id, "the tool")
                limit = last_n if isinstance(last_n, int) else last_n.get(tool)
                if limit is not None:
                    seen[tool] = seen.get(tool, 0) + 1
                    if seen[tool] > limit:
                        block = block.model_copy(update={"content": older_result_note(tool)})
                        changed += 1
            content.append(block)
        if changed:
            new = message.model_copy(update={"content": tuple(reversed(content))})
            if price is None or price(new) <= price(message):
                out[at] = new
                replaced += changed
    return out, replaced
