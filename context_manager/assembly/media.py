"""Media normalisation: images a model cannot or need not see become short notes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .wire import (
    AnyMessage,
    AssistantMessage,
    FunctionResultBlock,
    FunctionResultMessage,
    ImageBlock,
    TextBlock,
    UserMessage,
    is_plain_user,
)

__all__ = ["NO_VISION", "TOOL_IMAGE_AGED", "USER_IMAGE_AGED", "normalise_media"]

NO_VISION: Final = "[image omitted: model does not support vision]"
USER_IMAGE_AGED: Final = (
    "[user image omitted after use; ask the user to resend it if visual details are needed]"
)
TOOL_IMAGE_AGED: Final = (
    "[tool image omitted after use; re-call the function if visual details are needed]"
)


def _swap_images(
    content: tuple[Any, ...], top: str | None, nested: str | None
) -> tuple[Any, ...] | None:
    changed = False
    out: list[Any] = []
    for block in content:
        if isinstance(block, ImageBlock) and top is not None:
            out.append(TextBlock(text=top))
            changed = True
        elif isinstance(block, FunctionResultBlock) and nested is not None:
            inner = _swap_images(block.content, nested, None)
            if inner is None:
                out.append(block)
            else:
                out.append(block.model_copy(update={"content": inner}))
                changed = True
        else:
            out.append(block)
    return tuple(out) if changed else None


def normalise_media(
    messages: Sequence[AnyMessage], supports_vision: bool | None
) -> list[AnyMessage]:
    """Replace images the model cannot use; unknown vision support keeps every image.

    Without vision every image becomes :data:`NO_VISION`. With vision, walking
    from the newest message back: a user image is replaced once a plain user
    message follows a later assistant message; a function-result image (in a
    result message or an inline result) once any assistant message follows.
    Assistant images and every other block are kept.

    Examples
    --------
    >>> img = ImageBlock(mime="image/png", data="AAAA")
    >>> msgs = [UserMessage(content=(img,), timestamp=1)]
    >>> normalise_media(msgs, False)[0].content[0].text
    '[image omitted: model does not support vision]'
    >>> normalise_media(msgs, True)[0] is msgs[0]
    True
    """
    out = list(messages)
    if supports_vision is None:
        return out
    later_user = later_assistant = later_user_after_assistant = False
    for i in range(len(out) - 1, -1, -1):
        message = out[i]
        if not supports_vision:
            top: str | None = NO_VISION
            nested: str | None = NO_VISION
        else:
            tool = TOOL_IMAGE_AGED if later_assistant else None
            if isinstance(message, UserMessage):
                top = USER_IMAGE_AGED if later_user_after_assistant else None
            elif isinstance(message, FunctionResultMessage):
                top = tool
            else:
                top = None
            nested = tool
        if top is not None or nested is not None:
            content = _swap_images(message.content, top, nested)
            if content is not None:
                out[i] = message.model_copy(update={"content": content})
        if isinstance(message, AssistantMessage):
            later_user_after_assistant = later_user_after_assistant or later_user
            later_assistant = True
        elif is_plain_user(message):
            later_user = True
    return out
