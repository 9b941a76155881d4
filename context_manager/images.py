"""Live images: which images a request carries, and the note left for the others.

A long conversation with images would otherwise send every one of them on every call:
screenshots an agent looked at an hour ago cost as much as the one it is looking at
now. :class:`ImagePolicy` bounds the images a compile sends, newest first, by count
(``max_live_images``), by depth (``image_strip_depth_tokens``: an image further than
this many tokens from the newest message is not sent) and by size
(``max_live_image_bytes``). An image left out is replaced, in the copy sent, by the
note :data:`IMAGE_DROPPED`; the stored message never changes, so a memory written
later, and :meth:`~context_manager.ContextManager.get_message`, still see it.

:func:`live_images` applies a policy to the messages of one request. A dropped image
stays dropped while the history only grows (each rule only tightens as newer messages
arrive), so the prompt is rewritten once, where the image was, not on every call.
:func:`cap_image_bytes` keeps the images of a memory request within a byte budget.

Examples
--------
>>> from context_manager import ImageBlock, Message, TextBlock
>>> picture = ImageBlock(media_type="image/png", data="AAAA")
>>> shot = lambda i: Message(
...     participant="User", content=[TextBlock(text=f"screenshot {i}"), picture]
... )
>>> chars = lambda m: len(m.text)
>>> sent = live_images([shot(i) for i in range(4)], ImagePolicy(max_live_images=2), chars)
>>> [sum(isinstance(b, ImageBlock) for b in m.content) for m in sent.messages]
[0, 0, 1, 1]
>>> sent.messages[0].content[1].text
'[image dropped from live context]'
>>> sent.live, sent.dropped
(2, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from .messages import ContentBlock, ImageBlock, Message, TextBlock, ToolResultBlock

__all__ = [
    "IMAGE_DROPPED",
    "IMAGE_OVER_BYTES",
    "ImagePolicy",
    "LiveImages",
    "cap_image_bytes",
    "has_images",
    "image_bytes",
    "live_images",
    "without_images",
]

IMAGE_DROPPED: Final = "[image dropped from live context]"
"""What a request carries in place of an image the policy left out."""

IMAGE_OVER_BYTES: Final = "[image omitted: the request's image budget is spent]"
"""What a memory request carries in place of an image over its byte budget."""

MIB: Final = 1024 * 1024


class ImagePolicy(BaseModel):
    """How many images a compile sends live, newest first (0 turns a limit off).

    Parameters
    ----------
    max_live_images : int
        At most this many images, the newest ones. Default 6.
    image_strip_depth_tokens : int
        No image further than this many tokens (of the messages sent after it) from
        the newest message. Default 30,000.
    max_live_image_bytes : int
        The newest images whose decoded sizes sum to at most this; once one does not
        fit, no older image is sent. Default 20 MiB.

    Examples
    --------
    >>> ImagePolicy().max_live_images, ImagePolicy.off().active
    (6, False)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_live_images: int = Field(default=6, ge=0)
    image_strip_depth_tokens: int = Field(default=30_000, ge=0)
    max_live_image_bytes: int = Field(default=20 * MIB, ge=0)

    @classmethod
    def off(cls) -> ImagePolicy:
        """The policy that sends every image (every limit 0)."""
        return cls(max_live_images=0, image_strip_depth_tokens=0, max_live_image_bytes=0)

    @property
    def active(self) -> bool:
        """Whether any limit is on."""
        return bool(
            self.max_live_images or self.image_strip_depth_tokens or self.max_live_image_bytes
        )


def image_bytes(block: ImageBlock) -> int:
    """The decoded size of an image's base64 ``data`` (0 for an image by ``url``).

    Examples
    --------
    >>> image_bytes(ImageBlock(media_type="image/png", data="AAAA"))
    3
    >>> image_bytes(ImageBlock(url="https://example.com/a.png"))
    0
    """
    data = block.data
    if not data:
        return 0
    return len(data) * 3 // 4 - data.endswith("=") - data.endswith("==")


def _images_of(message: Message) -> list[ImageBlock]:
    """The images of a message in the order they appear (tool results' included)."""
    found: list[ImageBlock] = []
    for block in message.content:
        if isinstance(block, ImageBlock):
            found.append(block)
        elif isinstance(block, ToolResultBlock) and not isinstance(block.content, str):
            found.extend(b for b in block.content if isinstance(b, ImageBlock))
    return found


def has_images(message: Message) -> bool:
    """Whether a message carries an image, at its top level or in a tool result.

    Examples
    --------
    >>> has_images(Message(participant="User", content=[TextBlock(text="hi")]))
    False
    """
    return bool(_images_of(message))


def _replaced(message: Message, drop: Callable[[int, ImageBlock], str | None]) -> Message:
    """``message`` with each image ``drop(k, image)`` names (``k``: the image's place
    in the message) replaced by the note it returns; the message itself when none is."""
    k = 0
    changed = False

    def swap(block: ImageBlock) -> TextBlock | ImageBlock:
        nonlocal k, changed
        note = drop(k, block)
        k += 1
        if note is None:
            return block
        changed = True
        return TextBlock(text=note)

    content: list[ContentBlock] = []
    for block in message.content:
        if isinstance(block, ImageBlock):
            content.append(swap(block))
        elif isinstance(block, ToolResultBlock) and not isinstance(block.content, str):
            inner = [swap(b) if isinstance(b, ImageBlock) else b for b in block.content]
            content.append(block.model_copy(update={"content": inner}))
        else:
            content.append(block)
    if not changed:
        return message
    return message.model_copy(update={"content": tuple(content)})


def _keeping(keep: set[int], note: str) -> Callable[[int, ImageBlock], str | None]:
    """Drops every image of a message but those at the places ``keep``, for ``note``."""
    return lambda k, _image: None if k in keep else note


def without_images(message: Message, note: str = IMAGE_DROPPED) -> Message:
    """``message`` with every image replaced by ``note`` (itself when it has none).

    Examples
    --------
    >>> m = Message(participant="User", content=[ImageBlock(url="https://example.com/a.png")])
    >>> without_images(m).text
    '[image dropped from live context]'
    """
    return _replaced(message, lambda _k, _image: note)


@dataclass(frozen=True)
class LiveImages:
    """What :func:`live_images` sends."""

    messages: list[Message]
    """The messages, with the images left out replaced by :data:`IMAGE_DROPPED`."""
    live: int
    """Images sent."""
    dropped: int
    """Images replaced by the note."""
    changed: tuple[int, ...]
    """Positions of the messages that lost an image."""

    def stats(self) -> dict[str, int]:
        """The counts a compile reports (``render_stats["images"]``)."""
        return {"live": self.live, "dropped": self.dropped, "messages": len(self.changed)}


def live_images(
    messages: Sequence[Message], policy: ImagePolicy, count: Callable[[Message], int]
) -> LiveImages:
    """The images of a request the policy keeps, newest first; the rest become notes.

    Walking from the newest message back, an image is sent while fewer than
    ``max_live_images`` newer ones were, the messages after its own take at most
    ``image_strip_depth_tokens`` (counted as sent, by ``count``) and the images sent
    so far, it included, take at most ``max_live_image_bytes``. The first image over
    the byte budget ends the walk: no older image is sent either, so an image dropped
    stays dropped as the history grows.

    Parameters
    ----------
    messages : sequence of Message
        The request's messages, oldest first.
    policy : ImagePolicy
    count : callable
        Tokens of a message as sent (used only for the depth limit, and only for the
        messages after an image still in question).

    Returns
    -------
    LiveImages
        The messages themselves (the same objects) where nothing is dropped.

    Examples
    --------
    >>> picture = ImageBlock(media_type="image/png", data="AAAA")
    >>> later = Message(participant="Claude", content=[TextBlock(text="x" * 40)])
    >>> msgs = [Message(participant="User", content=[picture]), later]
    >>> live_images(msgs, ImagePolicy(image_strip_depth_tokens=10), lambda m: len(m.text)).dropped
    1
    """
    out = list(messages)
    if not policy.active or not any(has_images(m) for m in out):
        return LiveImages(out, sum(len(_images_of(m)) for m in out), 0, ())
    limit, depth_limit, byte_limit = (
        policy.max_live_images,
        policy.image_strip_depth_tokens,
        policy.max_live_image_bytes,
    )
    live = dropped = spent = depth = 0
    closed = False  # every older image is dropped
    changed: list[int] = []
    for at in range(len(out) - 1, -1, -1):
        message = out[at]
        images = _images_of(message)
        if images:
            if not closed and depth_limit and depth > depth_limit:
                closed = True
            keep: set[int] = set()
            for k in range(len(images) - 1, -1, -1):  # later blocks are newer
                if closed or (limit and live >= limit):
                    closed = True
                    continue
                size = image_bytes(images[k])
                if byte_limit and spent + size > byte_limit:
                    closed = True
                    continue
                keep.add(k)
                live += 1
                spent += size
            dropped += len(images) - len(keep)
            if len(keep) < len(images):
                out[at] = message = _replaced(message, _keeping(keep, IMAGE_DROPPED))
                changed.append(at)
        if closed:
            dropped += sum(len(_images_of(m)) for m in out[:at])
            for j in range(at):
                if has_images(out[j]):
                    out[j] = without_images(out[j])
                    changed.append(j)
            break
        if depth_limit:
            depth += count(message)
    return LiveImages(out, live, dropped, tuple(sorted(changed)))


def cap_image_bytes(
    messages: Sequence[Message], max_bytes: int, note: str = IMAGE_OVER_BYTES
) -> tuple[list[Message], int]:
    """The newest images of ``messages`` within ``max_bytes`` (0: no cap); every older
    image, from the first that does not fit, becomes ``note``.

    Returns
    -------
    (list of Message, int)
        The messages and how many images were replaced.

    Examples
    --------
    >>> picture = ImageBlock(media_type="image/png", data="AAAA")  # 3 bytes
    >>> msgs = [Message(participant="User", content=[picture, picture])]
    >>> capped, replaced = cap_image_bytes(msgs, 5)
    >>> replaced, [type(b).__name__ for b in capped[0].content]
    (1, ['TextBlock', 'ImageBlock'])
    """
    out = list(messages)
    if not max_bytes:
        return out, 0
    spent = 0
    replaced = 0
    closed = False
    for at in range(len(out) - 1, -1, -1):
        images = _images_of(out[at])
        if not images:
            continue
        keep: set[int] = set()
        for k in range(len(images) - 1, -1, -1):
            size = image_bytes(images[k])
            if closed or spent + size > max_bytes:
                closed = True
                continue
            keep.add(k)
            spent += size
        if len(keep) < len(images):
            replaced += len(images) - len(keep)
            out[at] = _replaced(out[at], _keeping(keep, note))
    return out, replaced
