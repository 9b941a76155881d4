"""Secrets taken out of provider error text before it is logged or returned.

A provider's error body is copied into the diagnostics of the summarisers (the
log of a retried failure, the text of an ``error`` completion). A server or proxy
that echoes the request, its headers included, would put the API key there;
:func:`redact` removes it first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "client_secrets", "redact"]

REDACTED = "[redacted]"
"""What a secret is replaced by."""

MIN_SECRET_LENGTH = 6
"""A known secret shorter than this is not searched for: replacing every match of a
short string would garble the message without protecting a real key."""

_BEARER = re.compile(r"(?i)\b(bearer)(\s+)(?!\[redacted\])[A-Za-z0-9._~+/=-]+")
"""``Bearer <token>`` wherever it stands (a header, a repr, a sentence)."""

_HEADER = re.compile(
    r"""(?ix)
    \b(x-api-key|x-goog-api-key|api[-_]?key|authorization|proxy-authorization|auth[-_]?token)
    (["']?\s*[:=]\s*["']?)          # ': ' or '": "' or '=' between name and value
    (?:(bearer|basic|token)\s+)?+    # a scheme, kept (possessive: never taken as the value)
    (?!\[redacted\])[^\s"',;&}\])]+  # the value
    """
)
"""A credential header or parameter and its value: ``x-api-key: ...``,
``'authorization': 'Bearer ...'``, ``api_key=...``."""

_KEY_SHAPE = re.compile(r"\bsk-[A-Za-z0-9_-]{17,}")
"""A token shaped like an API key of Anthropic or OpenAI (``sk-...``, ``sk-ant-...``,
``sk-proj-...``), 20 characters or more."""


def _header(match: re.Match[str]) -> str:
    name, between, scheme = match.group(1), match.group(2), match.group(3)
    return f"{name}{between}{scheme + ' ' if scheme else ''}{REDACTED}"


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with its secrets replaced by :data:`REDACTED`.

    Removed: each of ``secrets`` (the exact API key a client was configured with)
    of at least :data:`MIN_SECRET_LENGTH` characters; the token after ``Bearer``;
    the value of an ``x-api-key``, ``authorization``, ``api-key``/``api_key`` or
    ``auth-token`` header or parameter; and any ``sk-...`` token of 20 characters
    or more. The rest of the text is kept, so the diagnostic stays useful.

    Parameters
    ----------
    text : str
        A diagnostic, such as a provider's error message.
    secrets : iterable of str or None
        Strings known to be secret; None and short ones are skipped.

    Returns
    -------
    str
        The text without the secrets; redacting it again changes nothing.

    Examples
    --------
    >>> redact("HTTP 401: bad key {'x-api-key': 'k-4f9a2c7e'}")
    "HTTP 401: bad key {'x-api-key': '[redacted]'}"
    >>> redact("Authorization: Bearer abc.def-123 was refused")
    'Authorization: Bearer [redacted] was refused'
    >>> redact("key sk-ant-api03-0123456789abcdefXYZ is revoked")
    'key [redacted] is revoked'
    >>> redact("you sent my-own-secret", secrets=["my-own-secret"])
    'you sent [redacted]'
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(secret.strip()) >= MIN_SECRET_LENGTH:
            text = text.replace(secret, REDACTED)
    text = _HEADER.sub(_header, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _KEY_SHAPE.sub(REDACTED, text)


def client_secrets(client: object) -> tuple[str, ...]:
    """The credentials an SDK client holds (its ``api_key`` and ``auth_token``).

    Parameters
    ----------
    client : object
        An ``anthropic.Anthropic`` or ``openai.OpenAI`` client, or any object.

    Returns
    -------
    tuple of str
        The non-empty string values of those attributes.

    Examples
    --------
    >>> class Client:
    ...     api_key, auth_token = "k-123456", None
    >>> client_secrets(Client())
    ('k-123456',)
    """
    found: list[str] = []
    for name in ("api_key", "auth_token"):
        try:
            value = getattr(client, name, None)
        except Exception:  # a property that fails is no credential we can know
            continue
        if isinstance(value, str) and value:
            found.append(value)
    return tuple(found)
