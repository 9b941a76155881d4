"""How record bodies are kept and read back.

A body is stored as compact JSON text and parsed on first access, a damaged one named
by its table, row and column (:func:`load_stored`); the base64 data of a large image
(:data:`MEDIA_BLOB_MIN_CHARS`) is kept once in the content-addressed blob table and
named from the body by its sha256. :class:`Item` is one live item of an append slot,
its body read lazily.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from .errors import damaged

_UNPARSED: Any = object()

MEDIA_BLOB_MIN_CHARS = 1024
"""Base64 image data at least this long is kept once in the blob table (by sha256) and
named from the record that holds it; shorter data stays inline."""
BLOB_KEY = "data_sha256"
"""The key an image block holds its blob's sha256 under, in place of ``data``."""
_BLOB_MARK = f'"{BLOB_KEY}":"'


def load_stored(text: str, path: str, where: str) -> Any:
    """Stored JSON ``text``, parsed; a :class:`StoreCorruptError` naming ``where`` when it
    is not JSON or holds text that was not valid UTF-8."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise damaged(path, where, f"not JSON: {exc}") from None
    if _has_bad_utf8(text):
        raise damaged(path, where, "bytes that are not UTF-8")
    return value


def _has_bad_utf8(text: str) -> bool:
    """Whether ``text`` holds bytes that were not UTF-8 (read as lone surrogates,
    :func:`sqlite_text`)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def sqlite_text(raw: bytes) -> str:
    """SQLite text as a str: bytes that are not UTF-8 kept as lone surrogates, so the row
    that holds them is named when it is read (:func:`load_stored`), not the query failing."""
    return raw.decode("utf-8", "surrogateescape")


def dump_stored(body: Any) -> str | None:
    """``body`` as compact JSON text, as a record holds it (None for None)."""
    return None if body is None else json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def externalise(body: Any, put: Callable[[bytes], str]) -> Any:
    """``body`` with the data of each image block of at least
    :data:`MEDIA_BLOB_MIN_CHARS` characters stored by ``put`` and named by its digest;
    the body itself when it holds none (nothing is copied)."""
    if isinstance(body, dict):
        data = body.get("data")
        if (
            body.get("type") == "image"
            and isinstance(data, str)
            and len(data) >= MEDIA_BLOB_MIN_CHARS
            and BLOB_KEY not in body
        ):
            return {**body, "data": None, BLOB_KEY: put(data.encode("utf-8"))}
        out = {k: externalise(v, put) for k, v in body.items()}
        return body if all(out[k] is body[k] for k in body) else out
    if isinstance(body, list):
        items = [externalise(v, put) for v in body]
        return body if all(a is b for a, b in zip(items, body, strict=True)) else items
    return body


def blob_digests(body: Any) -> Iterator[str]:
    """The sha256 of every blob an externalised body names."""
    if isinstance(body, dict):
        digest = body.get(BLOB_KEY)
        if isinstance(digest, str):
            yield digest
        for value in body.values():
            yield from blob_digests(value)
    elif isinstance(body, list):
        for value in body:
            yield from blob_digests(value)


def _inline(body: Any, get: Callable[[str], bytes]) -> Any:
    """``body`` with every externalised image block's data read back by ``get``."""
    if isinstance(body, dict):
        if BLOB_KEY in body and body.get("type") == "image":
            out = {k: v for k, v in body.items() if k != BLOB_KEY}
            out["data"] = get(body[BLOB_KEY]).decode("utf-8")
            return out
        return {k: _inline(v, get) for k, v in body.items()}
    if isinstance(body, list):
        return [_inline(v, get) for v in body]
    return body


class Item:
    """One live item of an append slot.

    Attributes
    ----------
    id : str
        The item id, unique in the store.
    seq : int
        The sequence of its append.
    body : Any
        Its body, edits applied (parsed from the stored JSON on first access).
    rev : int
        The id of the record holding the current body: unique in the store and
        changed by every edit, so ``(id, rev)`` names one version of the item on
        any branch.
    """

    __slots__ = ("_blobs", "_body", "_text", "id", "rev", "seq")

    def __init__(
        self,
        id: str,
        seq: int,
        body: Any = _UNPARSED,
        *,
        rev: int = 0,
        text: str | None = None,
        blobs: Callable[[str], bytes] | None = None,
    ) -> None:
        self.id = id
        self.seq = seq
        self.rev = rev
        self._body = body
        self._text = text if body is _UNPARSED else None
        self._blobs = blobs
        """Reads back media kept in the blob table, when the body is parsed and has any."""

    @property
    def origin(self) -> str:
        """The path of the store this item was read from, while its body is unparsed
        (``"the store"`` after, or for an item built in memory): what an error about its
        body names."""
        return str(getattr(getattr(self._blobs, "__self__", None), "path", "the store"))

    @property
    def body(self) -> Any:
        """The item's body (parsed on first access, then kept)."""
        if self._body is _UNPARSED:
            text = self._text
            if text is None:
                body = None
            else:
                path = self.origin
                where = f"table records, row {self.rev} (item {self.id}), column body"
                body = load_stored(text, path, where)
            if self._blobs is not None and text is not None and _BLOB_MARK in text:
                body = _inline(body, self._blobs)
            self._body = body
            self._text = None
            self._blobs = None
        return self._body

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Item):
            return NotImplemented
        return (self.id, self.seq, self.body) == (other.id, other.seq, other.body)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Item(id={self.id!r}, seq={self.seq}, body={self.body!r})"
