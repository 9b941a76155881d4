"""The JSON bodies of the manager's routes (the four stateless functions use the
assembly's own models, :mod:`context_manager.assembly.models`).

Messages and content blocks are the library's own models
(:class:`~context_manager.messages.Message`), so a message goes over the wire as
``Message.model_dump(mode="json")`` and comes back identical.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..messages import ContentBlock, Message

__all__ = [
    "AddMessage",
    "Added",
    "BranchInfo",
    "Branches",
    "CompileBody",
    "Compiled",
    "EditMessage",
    "InjectionBody",
    "MessageList",
    "NewBranch",
    "PinBody",
    "Pinned",
    "Pins",
    "Removed",
    "StoredMessageBody",
    "Summaries",
    "SwitchBranch",
    "Ticked",
]

_MAX_TOKENS = 2**40


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddMessage(_Body):
    """A message to append (``ContextManager.add_message``)."""

    participant: str
    content: str | list[ContentBlock]
    metadata: dict[str, Any] | None = None
    hold: bool | float = False
    timestamp: float | None = None


class Added(_Body):
    """The id the appended message was given."""

    id: str


class EditMessage(_Body):
    """New content for a stored message (``ContextManager.edit_message``)."""

    content: str | list[ContentBlock]


class StoredMessageBody(_Body):
    """One stored message: its id, its place in the store and the message."""

    id: str
    seq: int
    message: Message


class MessageList(_Body):
    """Stored messages, oldest first, and how many the branch holds in all."""

    messages: list[StoredMessageBody]
    total: int


class Removed(_Body):
    """Whether the message was removed."""

    removed: bool


class InjectionBody(_Body):
    """Content placed into one compile only (``Injection``)."""

    namespace: str = Field(min_length=1)
    position: Literal["system", "before_user", "after_user"]
    content: str | list[ContentBlock]


class CompileBody(_Body):
    """The arguments of one compile (``ContextManager.compile``).

    ``format`` chooses the form of ``request`` in the answer: ``messages`` (the
    library's messages only), ``anthropic`` (the keyword arguments of Anthropic's
    ``messages.create``) or ``openai`` (those of OpenAI's
    ``chat.completions.create``); ``model`` is put into a provider form.
    """

    max_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS)
    reserve_for_response: int | None = Field(default=None, ge=0, le=_MAX_TOKENS)
    injections: list[InjectionBody] = Field(default_factory=list)
    catch_up: bool | float = True
    dry_run: bool = False
    format: Literal["messages", "anthropic", "openai"] = "messages"
    model: str | None = None


class Compiled(_Body):
    """One compiled request."""

    compile_id: str
    messages: list[Message]
    system_prompt: str | None = None
    cache_breakpoints: list[int]
    render_stats: dict[str, Any]
    request: dict[str, Any] | None = None
    """The provider form asked for by ``format`` (absent for ``messages``)."""


class Ticked(_Body):
    """Whether a tick did a unit of compression work, and what is still queued."""

    worked: bool
    pending: list[str]


class Summaries(_Body):
    """Memories, as stored."""

    summaries: list[dict[str, Any]]


class PinBody(_Body):
    """A pin over a range of messages (``ContextManager.pin_range``)."""

    first_id: str = Field(min_length=1)
    last_id: str = Field(min_length=1)
    name: str | None = None
    level: int | None = Field(default=None, ge=0)
    max_level: int | None = Field(default=None, ge=0)


class Pinned(_Body):
    """The id of the new pin."""

    id: str


class Pins(_Body):
    """The pins in force."""

    pins: list[dict[str, Any]]


class BranchInfo(_Body):
    """One branch of an agent's store."""

    name: str
    current: bool
    details: dict[str, Any]


class Branches(_Body):
    """Every branch, and the current one."""

    current: str
    branches: list[BranchInfo]


class NewBranch(_Body):
    """Fork at the current head (and switch to it), or switch to ``switch_to``."""

    name: str | None = Field(default=None, min_length=1)


class SwitchBranch(_Body):
    """The branch to switch to."""

    name: str = Field(min_length=1)
