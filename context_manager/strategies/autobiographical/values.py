"""The exact values each memory is written with (:mod:`context_manager.exact_values`).

An L1 keeps the best values of its chunk's messages, a merge the best of its children's
values re-ranked over the messages it covers; each within the allowance of its level
(:meth:`~.config.AutobiographicalConfig.values_tokens`), as the strategy's counter counts
the line that shows them. An L1's values also cost at most a quarter of what its
messages cost raw, so a memory never costs much more for its values than for its prose.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...exact_values import cap_values, extract_values, merge_values
from ...messages import Message
from ...tokens import TokenCounter
from .config import AutobiographicalConfig
from .records import SummaryEntry

__all__ = ["RAW_SHARE", "l1_values", "parent_values"]

RAW_SHARE = 4
"""An L1's values cost at most 1 / this of the messages it covers, raw."""


def l1_values(
    config: AutobiographicalConfig,
    counter: TokenCounter,
    messages: Sequence[Message],
    prose: str,
    *,
    raw: int | None = None,
) -> tuple[str, ...]:
    """The values an L1 with text ``prose`` over ``messages`` keeps, best first.

    Parameters
    ----------
    config : AutobiographicalConfig
        Its ``values_tokens(1)`` is the allowance (0: no values).
    counter : TokenCounter
        Counts the values' line, and the messages' raw cost.
    messages : sequence of Message
        The chunk's messages.
    prose : str
        The memory's text: the values it holds are not repeated.
    raw : int, optional
        What the messages cost raw, when the caller has counted it already (the
        strategy's tokens as sent); counted with ``counter`` when None.

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> from context_manager import CharsCounter, Message
    >>> config = AutobiographicalConfig(memory_values_tokens=12)
    >>> chunk = [
    ...     Message.text_message("User", "Please move booking ZFA04Y to flight HAT136, the "
    ...                          "one leaving at 10:30 AM on May 20th."),
    ...     Message.text_message("Claude", "Sure. I will check the seats on that flight "
    ...                          "first, then change the booking and then tell you the new fare."),
    ... ]
    >>> l1_values(config, CharsCounter(), chunk, "The user asked to move a booking.")
    ('ZFA04Y', 'HAT136', 'May 20th', '10:30 AM')
    >>> l1_values(config, CharsCounter(), chunk, "Moved ZFA04Y to HAT136.")
    ('May 20th', '10:30 AM')
    """
    allowance = config.values_tokens(1)
    if allowance > 0:
        if raw is None:
            raw = sum(counter.count_message(m) for m in messages)
        allowance = min(allowance, raw // RAW_SHARE)
    if allowance <= 0:
        return ()
    return cap_values(extract_values(messages, prose=prose), allowance, counter.count_text)


def parent_values(
    config: AutobiographicalConfig,
    counter: TokenCounter,
    sources: Sequence[SummaryEntry],
    covered: Sequence[Message] | None,
    prose: str,
) -> tuple[str, ...]:
    """The values of the memory with text ``prose`` merged from ``sources``: the union of
    theirs, re-ranked over the ``covered`` messages (those of theirs still stored), or
    taken rank by rank from theirs when ``covered`` is None (:func:`merge_values`),
    within the allowance of the merge's level. Their line costs no more than the
    children's lines together.

    The writer reads the covered messages for an L2 only, whose messages are a bounded
    number of chunks; a merge above it ranks its children's values, each already ranked
    over its own messages, so writing a memory costs the same however much history it
    stands for.

    Examples
    --------
    >>> from context_manager import CharsCounter, Message
    >>> from context_manager.strategies.autobiographical.records import SummaryEntry
    >>> a = SummaryEntry("", "L1-0", 1, "Opened a ticket.", 4, ["1"], "1", "1",
    ...                  values=("T-48213-C",))
    >>> b = SummaryEntry("", "L1-1", 1, "Opened another.", 4, ["2"], "2", "2",
    ...                  values=("T-50077-A",))
    >>> covered = [Message.text_message("User", "Open ticket T-48213-C."),
    ...            Message.text_message("User", "Open ticket T-50077-A.")]
    >>> config = AutobiographicalConfig(memory_values_tokens=12)
    >>> parent_values(config, CharsCounter(), [a, b], covered, "Opened two tickets.")
    ('T-48213-C', 'T-50077-A')
    >>> parent_values(config.model_copy(update={"memory_values_tokens": 8}),
    ...               CharsCounter(), [a, b], covered, "Opened two tickets.")
    ('T-48213-C',)
    """
    allowance = config.values_tokens(sources[0].level + 1)
    if allowance <= 0 or not any(s.values for s in sources):
        return ()
    ranked = merge_values([s.values for s in sources], covered, prose=prose)
    return cap_values(ranked, allowance, counter.count_text)
