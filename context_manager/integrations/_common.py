"""What the framework drop-ins share: compiling with a catch-up, and mapping a compiled
message back onto the framework objects it was made from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ..manager import CompileResult, ContextManager
from ..messages import ContentBlock, TextBlock

__all__ = [
    "atomically",
    "compile_folded",
    "content_of",
    "default_manager",
    "regroup",
    "window_reserve",
]

_T = TypeVar("_T")


def default_manager(max_tokens: int) -> ContextManager:
    """A manager on a fresh in-memory store, folded by the autobiographical strategy
    sized for a ``max_tokens`` window
    (:meth:`~context_manager.strategies.autobiographical.AutobiographicalConfig.for_window`)
    with the extractive summariser.

    Raises
    ------
    ValueError
        For a window under 1,024 tokens.
    """
    from ..strategies.autobiographical import AutobiographicalConfig, AutobiographicalStrategy
    from ..summarizer import ExtractiveSummarizer

    config = AutobiographicalConfig.for_window(max_tokens, compression_model="extractive")
    return ContextManager.open(
        path=":memory:",
        strategy=AutobiographicalStrategy(config=config),
        summarizer=ExtractiveSummarizer(),
    )


def atomically(manager: ContextManager, call: Callable[[], _T]) -> _T:
    """``call()`` as one write operation of ``manager``: one store transaction.

    Every write ``call`` makes (through the manager's methods or its store) commits
    together or not at all: under the store's lock (other threads' operations on the
    store wait), and when it raises nothing it wrote is stored and the manager reloads
    what it holds in memory from the store. Listeners of the manager hear of the
    messages once the transaction has committed.

    Examples
    --------
    >>> from context_manager import CharsCounter, ContextManager
    >>> cm = ContextManager.open(path=":memory:", counter=CharsCounter())
    >>> def two() -> None:
    ...     cm.add_message("User", "one")
    ...     raise RuntimeError("the second write failed")
    >>> try:
    ...     atomically(cm, two)
    ... except RuntimeError:
    ...     pass
    >>> cm.get_message_count()
    0
    >>> cm.close()
    """
    return manager._gate.run(call, writes=True, one_transaction=True)


def window_reserve(max_tokens: int) -> int:
    """The response reserve of a ``max_tokens`` window: an eighth (256 to 16,000 tokens,
    as ``AutobiographicalConfig.for_window`` sizes it), at most half the window.

    Examples
    --------
    >>> window_reserve(1500), window_reserve(100_000), window_reserve(400)
    (256, 12500, 200)
    """
    return min(max(256, min(16_000, max_tokens // 8)), max_tokens // 2)


def compile_folded(
    manager: ContextManager, *, max_tokens: int, reserve_for_response: int, ticks: int
) -> CompileResult:
    """Tick up to ``ticks`` times, then compile, catching up on the pending compression
    a fit needs before refusing (``compile(catch_up=True)``).

    Raises
    ------
    OverBudgetError
        When even the fully compressed history does not fit.
    """
    for _ in range(ticks):
        if not manager.tick():
            break
    return manager.compile(
        max_tokens=max_tokens, reserve_for_response=reserve_for_response, catch_up=True
    )


def content_of(blocks: Sequence[ContentBlock]) -> tuple[ContentBlock, ...]:
    """Blocks to store: an empty text block stands in for none."""
    return tuple(blocks) or (TextBlock(text=""),)


def regroup(
    content: Sequence[ContentBlock], originals: Sequence[tuple[_T, Sequence[ContentBlock]]]
) -> list[_T | ContentBlock]:
    """A compiled message's content, as the original objects it shows whole and the
    blocks that come from none of them.

    Parameters
    ----------
    content : sequence of ContentBlock
        The compiled message's blocks.
    originals : sequence of (object, blocks)
        The framework objects the stored message was made from, each with the blocks it
        was converted to.

    Returns
    -------
    list
        In the order of ``content``: an original wherever all of its blocks are sent
        unchanged (once, at its first block), and every other block as it is (a
        placeholder result, a capped result, what is left of a repaired message).

    Examples
    --------
    >>> a, b = TextBlock(text="a"), TextBlock(text="b")
    >>> regroup([a, TextBlock(text="c")], [("A", [a]), ("B", [b])])
    ['A', TextBlock(type='text', text='c')]
    """
    remaining = [list(blocks) for _, blocks in originals]
    owners: list[int | None] = []
    for block in content:  # each block is claimed by the first original still missing it
        owner = next((k for k, left in enumerate(remaining) if block in left), None)
        if owner is not None:
            remaining[owner].remove(block)
        owners.append(owner)
    whole = {k for k, left in enumerate(remaining) if not left and originals[k][1]}
    out: list[_T | ContentBlock] = []
    emitted: set[int] = set()
    for block, owner in zip(content, owners, strict=True):
        if owner is None or owner not in whole:
            out.append(block)
        elif owner not in emitted:
            emitted.add(owner)
            out.append(originals[owner][0])
    return out
