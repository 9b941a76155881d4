"""The options of what a strategy sends in each request's copy of a message, shared by
the shipped strategies' configs: per-message caps (:mod:`context_manager.message_caps`)
and live-image limits (:mod:`context_manager.images`). The store always keeps the
message whole."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..images import ImagePolicy
from ..message_caps import MessageCaps

__all__ = ["SendCopyOptions"]


class SendCopyOptions(BaseModel):
    """Per-message caps and image limits of the copy sent (base of the shipped configs).

    Examples
    --------
    >>> options = SendCopyOptions(max_message_tokens=8_000, max_live_images=2)
    >>> options.message_caps().max_message_tokens, options.image_policy().max_live_images
    (8000, 2)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_message_tokens: int = Field(
        default=0,
        ge=0,
        description="The most tokens one message may take in a request: its text (text "
        "blocks and tool results' text) is cut to its head and tail around a marker in the "
        "copy sent, whatever the budget; the store keeps it whole. 0: no cap.",
    )
    tool_use_input_max_tokens: int = Field(
        default=0,
        ge=0,
        description="A tool call whose input takes more tokens than this (as compact JSON) "
        "is sent with the input {'_truncated': true, '_originalTokens': N, '_keys': [...]}. "
        "0: no cap.",
    )
    tool_result_max_last_n: int | dict[str, int] | None = Field(
        default=None,
        description="Each tool's newest N results are sent whole; older ones become a "
        "note naming the tool. One N for every tool, or N by tool name (a tool not named "
        "keeps every result). None: every result.",
    )
    max_live_images: int = Field(
        default=6,
        ge=0,
        description="Each compile sends at most this many images, the newest; the others "
        "become the note '[image dropped from live context]' in the copy sent (the store "
        "keeps them). 0: no limit. See context_manager.images.",
    )
    image_strip_depth_tokens: int = Field(
        default=30_000,
        ge=0,
        description="No image is sent whose message is further than this many tokens "
        "(of the messages sent after it) from the newest message. 0: no limit.",
    )
    max_live_image_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=0,
        description="The images sent, newest first, take at most this many (decoded) "
        "bytes; from the first that does not fit, no older image is sent. 0: no limit.",
    )

    def message_caps(self) -> MessageCaps:
        """The per-message caps these options set."""
        return MessageCaps(
            max_message_tokens=self.max_message_tokens,
            tool_use_input_max_tokens=self.tool_use_input_max_tokens,
            tool_result_max_last_n=self.tool_result_max_last_n,
        )

    def image_policy(self) -> ImagePolicy:
        """The live-image limits these options set."""
        return ImagePolicy(
            max_live_images=self.max_live_images,
            image_strip_depth_tokens=self.image_strip_depth_tokens,
            max_live_image_bytes=self.max_live_image_bytes,
        )
