"""Wire types of the assembly functions: messages, content blocks, models and tools.

Every type validates its JSON form and serialises back to it with :meth:`wire`:
the tag first, then the fields in declaration order, optional fields omitted
when absent. That serialisation is what the token estimate measures, so it is
spelled out field by field rather than left to a generic dump.

These are not the library's :class:`~context_manager.messages.Message`: the wire
format is a published contract and stays as it is whatever the library's model
becomes. :mod:`context_manager.assembly.convert` is the one conversion between the two.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_serializer

__all__ = [
    "AgentFunction",
    "AnyMessage",
    "AssistantMessage",
    "ContentBlock",
    "CustomMessage",
    "FileBlock",
    "FunctionCallBlock",
    "FunctionResultBlock",
    "FunctionResultMessage",
    "ImageBlock",
    "InnerBlock",
    "ModelInput",
    "ModelLimits",
    "TextBlock",
    "ThinkingBlock",
    "ThinkingLevel",
    "UserMessage",
    "WireMessage",
    "count_images",
    "is_plain_user",
    "is_safe_cut",
    "joined_text",
]

ThinkingLevel = Literal["minimal", "low", "medium", "high", "xhigh"]


def _own(value: Any) -> Any:
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


FreeJson = Annotated[Any, BeforeValidator(_own)]
"""Free-form JSON (arguments, details, usage...), copied on the way in so that a response
never shares a mutable object with the caller's request."""


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The JSON form: tag first, fields in order, absent optional fields left out."""
        raise NotImplementedError

    @model_serializer(mode="plain")
    def _serialise(self) -> dict[str, Any]:
        return self.wire()


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        d[key] = value


# ------------------------------------------------------------------ content blocks
class TextBlock(_Wire):
    """Plain text.

    Examples
    --------
    >>> TextBlock(text="hi").wire()
    {'type': 'text', 'text': 'hi'}
    """

    type: Literal["text"] = "text"
    text: str

    def wire(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


class ImageBlock(_Wire):
    """An image as base64 ``data``; its size never counts, only the fixed image price."""

    type: Literal["image"] = "image"
    mime: str
    data: str
    attachment_id: str | None = None

    def wire(self) -> dict[str, Any]:
        d = {"type": "image", "mime": self.mime, "data": self.data}
        _put(d, "attachment_id", self.attachment_id)
        return d


class FileBlock(_Wire):
    """A reference to an attached file; it adds nothing to estimates, pruning or summaries
    beyond its own JSON."""

    type: Literal["file"] = "file"
    attachment_id: str
    mime: str
    name: str
    size: int

    def wire(self) -> dict[str, Any]:
        return {
            "type": "file",
            "attachment_id": self.attachment_id,
            "mime": self.mime,
            "name": self.name,
            "size": self.size,
        }


class ThinkingBlock(_Wire):
    """The model's reasoning, with its ``signature`` when the provider signs it."""

    type: Literal["thinking"] = "thinking"
    text: str
    signature: str | None = None

    def wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": "thinking", "text": self.text}
        _put(d, "signature", self.signature)
        return d


class FunctionCallBlock(_Wire):
    """A function call: ``id`` pairs it with its result, ``function_id`` names the function."""

    type: Literal["function_call"] = "function_call"
    id: str
    function_id: str
    arguments: FreeJson

    def wire(self) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": self.id,
            "function_id": self.function_id,
            "arguments": self.arguments,
        }


InnerBlock = Annotated[TextBlock | ImageBlock | FileBlock, Field(discriminator="type")]
"""Blocks allowed inside an inline function result."""


class FunctionResultBlock(_Wire):
    """A function result carried inside another message (usually a user message)."""

    type: Literal["function_result"] = "function_result"
    function_call_id: str
    content: tuple[InnerBlock, ...]
    is_error: bool | None = None

    def wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "type": "function_result",
            "function_call_id": self.function_call_id,
            "content": [b.wire() for b in self.content],
        }
        _put(d, "is_error", self.is_error)
        return d


ContentBlock = Annotated[
    TextBlock | ImageBlock | FileBlock | ThinkingBlock | FunctionCallBlock | FunctionResultBlock,
    Field(discriminator="type"),
]
"""Any content block, tagged by ``type``."""


# ------------------------------------------------------------------ messages
class UserMessage(_Wire):
    """A user turn (or a user message carrying inline function results).

    Examples
    --------
    >>> m = UserMessage(content=(TextBlock(text="hello"),), timestamp=1001)
    >>> m.wire()
    {'role': 'user', 'content': [{'type': 'text', 'text': 'hello'}], 'timestamp': 1001}
    """

    role: Literal["user"] = "user"
    content: tuple[ContentBlock, ...]
    timestamp: int

    def wire(self) -> dict[str, Any]:
        return {
            "role": "user",
            "content": [b.wire() for b in self.content],
            "timestamp": self.timestamp,
        }


class AssistantMessage(_Wire):
    """A model turn with the model and provider that produced it."""

    role: Literal["assistant"] = "assistant"
    content: tuple[ContentBlock, ...]
    stop_reason: str
    native_stop_reason: str | None = None
    error_message: str | None = None
    error_kind: str | None = None
    warnings: FreeJson = None
    usage: FreeJson = None
    model: str
    provider: str
    timestamp: int

    def wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "role": "assistant",
            "content": [b.wire() for b in self.content],
            "stop_reason": self.stop_reason,
        }
        _put(d, "native_stop_reason", self.native_stop_reason)
        _put(d, "error_message", self.error_message)
        _put(d, "error_kind", self.error_kind)
        _put(d, "warnings", self.warnings)
        _put(d, "usage", self.usage)
        d["model"] = self.model
        d["provider"] = self.provider
        d["timestamp"] = self.timestamp
        return d


class FunctionResultMessage(_Wire):
    """The result of the call ``function_call_id``; ``details`` never reach the provider
    unless they are a denial envelope (``{"status": "denied", ...}``)."""

    role: Literal["function_result"] = "function_result"
    function_call_id: str
    function_id: str
    content: tuple[ContentBlock, ...]
    details: FreeJson = None
    is_error: bool = False
    timestamp: int

    def wire(self) -> dict[str, Any]:
        return {
            "role": "function_result",
            "function_call_id": self.function_call_id,
            "function_id": self.function_id,
            "content": [b.wire() for b in self.content],
            "details": self.details,
            "is_error": self.is_error,
            "timestamp": self.timestamp,
        }


class CustomMessage(_Wire):
    """An application message; ``assemble`` leaves it out of the request it builds."""

    role: Literal["custom"] = "custom"
    custom_type: str
    content: tuple[ContentBlock, ...]
    display: bool | None = None
    details: FreeJson = None
    timestamp: int

    def wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "role": "custom",
            "custom_type": self.custom_type,
            "content": [b.wire() for b in self.content],
        }
        _put(d, "display", self.display)
        _put(d, "details", self.details)
        d["timestamp"] = self.timestamp
        return d


WireMessage = Annotated[
    UserMessage | AssistantMessage | FunctionResultMessage | CustomMessage,
    Field(discriminator="role"),
]
"""Any message, tagged by ``role``."""

AnyMessage = UserMessage | AssistantMessage | FunctionResultMessage | CustomMessage


# ------------------------------------------------------------------ models and tools
class ModelLimits(_Wire):
    """Limits sent with the request; they take precedence over the model catalog."""

    context_window: int = Field(ge=0)
    max_output_tokens: int = Field(ge=0)
    input_limit: int | None = Field(default=None, ge=0)

    def wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "context_window": self.context_window,
            "max_output_tokens": self.max_output_tokens,
        }
        _put(d, "input_limit", self.input_limit)
        return d


class ModelInput(_Wire):
    """The model a request is for: ``id``, optional ``provider`` and optional inline limits."""

    id: str = Field(min_length=1)
    provider: str | None = None
    limits: ModelLimits | None = None

    def wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id}
        _put(d, "provider", self.provider)
        if self.limits is not None:
            d["limits"] = self.limits.wire()
        return d


class AgentFunction(_Wire):
    """A function (tool) offered to the model; its JSON counts towards the request."""

    name: str
    description: str
    parameters: FreeJson
    label: str | None = None
    execution_mode: Literal["parallel", "sequential"] | None = None

    def wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        _put(d, "label", self.label)
        _put(d, "execution_mode", self.execution_mode)
        return d


# ------------------------------------------------------------------ helpers
def is_plain_user(message: AnyMessage) -> bool:
    """A user message with no top-level inline function result."""
    return isinstance(message, UserMessage) and not any(
        isinstance(b, FunctionResultBlock) for b in message.content
    )


def is_safe_cut(message: AnyMessage) -> bool:
    """Whether a kept tail may begin at ``message``: an assistant or a plain user message."""
    return isinstance(message, AssistantMessage) or is_plain_user(message)


def joined_text(content: tuple[Any, ...]) -> str:
    """The text blocks of ``content`` joined with newlines."""
    return "\n".join(b.text for b in content if isinstance(b, TextBlock))


def count_images(content: tuple[Any, ...]) -> int:
    """Image blocks directly in ``content``."""
    return sum(1 for b in content if isinstance(b, ImageBlock))
