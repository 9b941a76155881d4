"""The render stats of a compile, as a typed model: :class:`RenderStats`.

:attr:`CompileResult.render_stats <context_manager.CompileResult.render_stats>` and
:meth:`ContextManager.get_render_stats <context_manager.ContextManager.get_render_stats>`
are plain dicts (``render_stats["tokens"]`` reads them), shaped as :class:`RenderStats`
says: the keys every compile reports, those of the shipped strategies, and the type of
each. A strategy of one's own may add keys of its own. The model is checked against
real compiles by the tests (:data:`RENDER_STATS` validates a dict with pydantic);
``typing.cast(RenderStats, result.render_stats)`` gives type-checked access.

Examples
--------
>>> from context_manager import CharsCounter, ContextManager
>>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
...     _ = cm.add_message("User", "hello there")
...     stats = cm.compile(max_tokens=1000, reserve_for_response=100).render_stats
>>> RENDER_STATS.validate_python(stats)["request"]["total"] == stats["tokens"]
True
"""

from __future__ import annotations

from typing import Any, NotRequired

from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict

__all__ = [
    "RENDER_STATS",
    "Bucket",
    "CappedResults",
    "CatchUp",
    "Composition",
    "ImagesSent",
    "LevelBucket",
    "Pending",
    "RenderStats",
    "RequestParts",
    "Stated",
    "Truncated",
]

_CLOSED = ConfigDict(extra="forbid")


@with_config(_CLOSED)
class Bucket(TypedDict):
    """Stored messages shown raw in one part of the history, and their tokens as sent."""

    messages: int
    tokens: int


@with_config(_CLOSED)
class LevelBucket(TypedDict):
    """Memories shown at one level (each as its recall pair), and their tokens."""

    count: int
    tokens: int


@with_config(_CLOSED)
class RequestParts(TypedDict):
    """The request's tokens by part; ``total`` is the whole request."""

    system: int
    tools: int
    other: int
    injections: int
    messages: int
    total: int


@with_config(_CLOSED)
class Pending(TypedDict):
    """Work queued once the compile asked for what it wanted."""

    chunks: int
    """Chunks ready to become memories."""
    merges: int
    """Groups of memories ready to merge."""


@with_config(_CLOSED)
class CatchUp(TypedDict):
    """How a compile caught up (``compile(catch_up=...)``)."""

    ticks: int
    """Ticks run before the request fitted."""


@with_config(_CLOSED)
class CappedResults(TypedDict):
    """Tool results capped in the copy sent because nothing else fitted."""

    messages: int
    results: int
    cap_tokens: int | None
    tokens_saved: int


@with_config(_CLOSED)
class ImagesSent(TypedDict):
    """The images of the request's raw messages, by what the strategy's
    :class:`~context_manager.images.ImagePolicy` did with them."""

    live: int
    """Images sent."""
    dropped: int
    """Images replaced by :data:`~context_manager.images.IMAGE_DROPPED`."""
    messages: int
    """Messages that lost an image."""


@with_config(_CLOSED)
class Truncated(TypedDict):
    """What the strategy's :class:`~context_manager.message_caps.MessageCaps` cut in
    the copy sent."""

    messages: int
    """Messages whose text was cut to ``max_message_tokens``."""
    inputs: int
    """Tool call inputs over ``tool_use_input_max_tokens``, sent as their keys."""
    results: int
    """Tool results past their tool's newest ``tool_result_max_last_n``, sent as a note."""


@with_config(_CLOSED)
class Composition(TypedDict):
    """The autobiographical strategy's summary of a rendered plan: its memories by
    level, the work queued and the totals (a memory counts as two messages)."""

    summaries: dict[str, LevelBucket]
    summary_levels: dict[str, LevelBucket]
    pending: Pending
    total: Bucket


@with_config(_CLOSED)
class Stated(TypedDict):
    """The size of the fold problem the solver was given."""

    leaves: int
    summaries: int
    blocks: int


@with_config(ConfigDict(extra="allow"))  # a strategy of one's own may add keys
class RenderStats(TypedDict):
    """How one compile composed its request.

    Every compile that sends a request reports ``tokens``, ``request`` and ``kv_cost``
    (a dry compile that cannot fit reports ``fits: False`` with ``diagnostics``); the rest
    is the strategy's (the autobiographical strategy's composition, the passthrough
    strategy's ``messages`` and ``dropped``), and ``catch_up`` / ``bookkeeping`` when
    they happen.
    """

    tokens: int
    """The whole request, by the manager's counter (in a dry compile that cannot fit,
    what the most folded context would need, when the strategy can say)."""
    request: NotRequired[RequestParts]
    """Absent only from a dry compile that cannot fit."""
    kv_cost: NotRequired[int]
    """Tokens re-read from the first difference with the previous live request (all of
    them for the first); absent only from a dry compile that cannot fit."""
    head: NotRequired[Bucket]
    """Raw messages of the head window."""
    task: NotRequired[Bucket]
    """The task kept at the start (the first user turn)."""
    tail: NotRequired[Bucket]
    """Raw messages of the recent window."""
    middle_raw: NotRequired[Bucket]
    """Raw messages between head and tail."""
    summaries: NotRequired[dict[str, LevelBucket]]
    """Memories shown by level, ``l1``, ``l2`` and ``l3`` (level 3 and above)."""
    summary_levels: NotRequired[dict[str, LevelBucket]]
    """Memories shown at every level, ``L1`` ... ``Lk``."""
    pending: NotRequired[Pending]
    total: NotRequired[Bucket]
    """The raw messages plus two per memory shown, and the tokens of all the buckets."""
    fits: NotRequired[bool]
    """False only for a dry compile that cannot fit (with ``diagnostics``)."""
    diagnostics: NotRequired[dict[str, Any]]
    solver: NotRequired[str]
    status: NotRequired[str]
    budget: NotRequired[int]
    decision: NotRequired[str | None]
    solver_kv_cost: NotRequired[int | None]
    stated: NotRequired[Stated]
    capped_results: NotRequired[CappedResults]
    images: NotRequired[ImagesSent]
    """Set when the request's raw messages carry images."""
    truncated: NotRequired[Truncated]
    """Set when a per-message cap cut something in the copy sent."""
    grace_tokens: NotRequired[int]
    """Tokens over the input budget the strategy's grace allowed."""
    unshowable_summaries: NotRequired[list[str]]
    catch_up: NotRequired[CatchUp]
    bookkeeping: NotRequired[dict[str, Any]]
    """Set when the request was built but its bookkeeping could not be stored."""
    messages: NotRequired[int]
    """Passthrough: the stored messages sent."""
    dropped: NotRequired[int]
    """Passthrough: the stored messages left out."""


RENDER_STATS: TypeAdapter[RenderStats] = TypeAdapter(RenderStats)
"""Validates a render-stats dict against :class:`RenderStats` (pydantic)."""
