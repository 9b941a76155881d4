"""Two reference policies written here, needing no optional package.

* :class:`ObservationMasking`: keep the last ``keep`` tool results verbatim,
  replace the content of older ones by a short placeholder, then drop the
  oldest exchanges while the request is still over budget.
* :class:`ClearToolUses`: the documented behaviour of Anthropic's server-side
  ``clear_tool_uses`` context edit (trigger, keep, clear_at_least,
  exclude_tools, clear_tool_inputs), applied on the client side.

Both are stateless: every request is computed from the full transcript, as a
client resending its whole history (or a server editing it) would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from context_manager.messages import Message, ToolResultBlock, ToolUseBlock
from context_manager.tokens import TokenCounter

from .base import PolicyRequest, audit, default_counter, request_tokens, split_system
from .settings import OURS, PeerSettings, Setting

__all__ = ["ClearToolUses", "ObservationMasking", "clear_tool_uses_settings", "exchanges"]


def exchanges(messages: Sequence[Message]) -> list[list[Message]]:
    """Split messages into units that can be dropped without orphaning a tool result.

    A unit starts at every message that carries no tool result; a message
    carrying tool results joins the unit of the message before it (the one
    holding the calls).

    Examples
    --------
    >>> from context_manager.messages import ToolUseBlock, ToolResultBlock
    >>> call = Message(participant="Claude", content=(ToolUseBlock(id="t1", name="ls"),))
    >>> result = Message(participant="Tool", content=(ToolResultBlock(tool_use_id="t1"),))
    >>> [len(u) for u in exchanges([Message.text_message("User", "go"), call, result])]
    [1, 2]
    """
    units: list[list[Message]] = []
    for m in messages:
        if units and m.tool_result_ids:
            units[-1].append(m)
        else:
            units.append([m])
    return units


_Position = tuple[int, int]
"""(message index, block index) of a tool result: ids may repeat in real transcripts."""


def _results(messages: Sequence[Message]) -> list[tuple[_Position, str]]:
    """Every tool result's position and the name of the call it answers, in order."""
    names: dict[str, str] = {}
    out: list[tuple[_Position, str]] = []
    for i, m in enumerate(messages):
        for j, b in enumerate(m.content):
            if isinstance(b, ToolUseBlock):
                names[b.id] = b.name
            elif isinstance(b, ToolResultBlock):
                out.append(((i, j), names.get(b.tool_use_id, "")))
    return out


def _update_blocks(
    messages: Sequence[Message], positions: set[_Position], update: dict[str, Any]
) -> list[Message]:
    """The messages with ``update`` applied to the blocks at ``positions``."""
    out: list[Message] = []
    for i, m in enumerate(messages):
        if any((i, j) in positions for j in range(len(m.content))):
            blocks = tuple(
                b.model_copy(update=update) if (i, j) in positions else b
                for j, b in enumerate(m.content)
            )
            m = m.model_copy(update={"content": blocks})
        out.append(m)
    return out


class ObservationMasking:
    """Mask old tool results, then drop the oldest exchanges while over budget.

    Parameters
    ----------
    keep : int
        How many of the most recent tool results stay verbatim.
    placeholder : str
        The text that replaces an older tool result's content (its id stays).
    counter : TokenCounter, optional
        The exact counter (``cl100k_base`` by default).

    Notes
    -----
    Leading system messages are never dropped, nor is the newest exchange:
    when those alone exceed the budget the request is over budget, and the
    audit records it.
    """

    name = "observation-masking"

    def __init__(
        self,
        *,
        keep: int = 5,
        placeholder: str = "[old tool output masked]",
        counter: TokenCounter | None = None,
    ) -> None:
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        self.keep = keep
        self.placeholder = placeholder
        self.counter = default_counter(counter)

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this baseline is set to at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens (not read: it is never dropped).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> ObservationMasking().settings(4000).values["fit to"]
        4000
        """
        items = {
            "keep": Setting(
                self.keep,
                "tool results kept verbatim: 5, as SWE-agent's LastNObservations "
                "configurations keep (n=5); a count, not sized to the window",
            ),
            "placeholder": Setting(self.placeholder, "what an older result's content becomes"),
            "fit to": Setting(
                budget,
                "the call's budget: the oldest exchanges (never the system prompt or the "
                "newest) are dropped while the request exceeds it",
            ),
        }
        library = "reimplemented from Lindenbauer et al., 'The Complexity Trap' (2025)"
        return PeerSettings.of(self.name, library, OURS, items)

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """Mask, then drop oldest exchanges until the request fits ``budget``."""
        results = [pos for pos, _ in _results(history)]
        old = results[: max(0, len(results) - self.keep)]
        masked = _update_blocks(history, set(old), {"content": self.placeholder})
        head, rest = split_system(masked)
        units = exchanges(rest)
        sizes = [request_tokens(u, self.counter) for u in units]
        total = request_tokens(head, self.counter) + sum(sizes)
        first = 0
        while total > budget and first < len(units) - 1:
            total -= sizes[first]
            first += 1
        out = head + [m for u in units[first:] for m in u]
        return audit(out, budget, self.counter)


class ClearToolUses:
    """Anthropic's ``clear_tool_uses`` context edit, on the client side.

    Once the request exceeds ``trigger`` tokens, the content of every tool
    result except the ``keep`` most recent (and except results of
    ``exclude_tools``) is replaced by ``placeholder``, oldest first. When the
    results that could be cleared hold fewer than ``clear_at_least`` tokens,
    nothing is cleared (clearing breaks the cached prefix, so it must be
    worth it).

    Parameters
    ----------
    trigger : int, optional
        Token threshold of the whole request; the call's budget when None.
    keep : int
        Most recent tool uses whose results stay.
    clear_at_least : int
        Minimum tokens a clearing must reclaim, else nothing is cleared.
    exclude_tools : sequence of str
        Tool names whose results are never cleared.
    clear_tool_inputs : bool
        Also empty the inputs of the cleared calls.
    placeholder : str
        Text of a cleared result.
    counter : TokenCounter, optional
        The exact counter (``cl100k_base`` by default).
    """

    name = "anthropic-clear-tool-uses"

    def __init__(
        self,
        *,
        trigger: int | None = None,
        keep: int = 3,
        clear_at_least: int = 0,
        exclude_tools: Sequence[str] = (),
        clear_tool_inputs: bool = False,
        placeholder: str = "[cleared]",
        counter: TokenCounter | None = None,
    ) -> None:
        if keep < 0 or clear_at_least < 0:
            raise ValueError("keep and clear_at_least must be >= 0")
        self.trigger = trigger
        self.keep = keep
        self.clear_at_least = clear_at_least
        self.exclude_tools = frozenset(exclude_tools)
        self.clear_tool_inputs = clear_tool_inputs
        self.placeholder = placeholder
        self.counter = default_counter(counter)

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this edit is set to at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens (not read: the trigger counts the whole request).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> ClearToolUses().settings(8000).values["trigger"]
        8000
        """
        library = "reimplemented from Anthropic's documented clear_tool_uses context edit"
        return PeerSettings.of(self.name, library, OURS, clear_tool_uses_settings(self, budget))

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """The full history, with old tool results cleared once over the trigger."""
        trigger = budget if self.trigger is None else self.trigger
        messages = list(history)
        before = request_tokens(messages, self.counter)
        if before > trigger:
            results = _results(messages)
            old = results[: max(0, len(results) - self.keep)]
            positions = {pos for pos, name in old if name not in self.exclude_tools}
            cleared = _update_blocks(messages, positions, {"content": self.placeholder})
            if self.clear_tool_inputs:
                cleared = _clear_inputs(cleared, positions)
            if before - request_tokens(cleared, self.counter) >= max(1, self.clear_at_least):
                messages = cleared
        return audit(messages, budget, self.counter)


def _clear_inputs(messages: list[Message], cleared: set[_Position]) -> list[Message]:
    """Empty the input of the call each cleared result answers (the nearest before it)."""
    calls: dict[str, _Position] = {}
    targets: set[_Position] = set()
    for i, m in enumerate(messages):
        for j, b in enumerate(m.content):
            if isinstance(b, ToolUseBlock):
                calls[b.id] = (i, j)
            elif isinstance(b, ToolResultBlock) and (i, j) in cleared and b.tool_use_id in calls:
                targets.add(calls[b.tool_use_id])
    return _update_blocks(messages, targets, {"input": {}})


def clear_tool_uses_settings(edit: Any, budget: int) -> dict[str, Setting]:
    """The settings of a ``clear_tool_uses`` edit, with the reason for each value.

    Shared by this module's :class:`ClearToolUses` and LangChain's policy
    (:class:`~foldbench.peers.langchain_peers.ClearToolUsesPolicy`), so both report
    the same settings.

    Parameters
    ----------
    edit : object
        The edit: its ``trigger`` (None: the budget) and the ``ClearToolUsesEdit``
        options, read from ``edit_options`` when it has them, else from its attributes
        (``keep``, ``clear_at_least``, ``exclude_tools``, ``clear_tool_inputs``,
        ``placeholder``).
    budget : int
        The call's input budget (the trigger when the edit has none).

    Returns
    -------
    dict of str to Setting
        ``trigger`` and each option, by name.

    Examples
    --------
    >>> sorted(clear_tool_uses_settings(ClearToolUses(), 8000))[:3]
    ['clear_at_least', 'clear_tool_inputs', 'exclude_tools']
    """
    options = getattr(edit, "edit_options", None) or {
        "keep": edit.keep,
        "clear_at_least": edit.clear_at_least,
        "exclude_tools": tuple(sorted(edit.exclude_tools)),
        "clear_tool_inputs": edit.clear_tool_inputs,
        "placeholder": edit.placeholder,
    }
    return {
        "trigger": Setting(
            budget if edit.trigger is None else edit.trigger,
            "the window: the request that would exceed it is cleared before it is sent "
            "(the default, 100,000 input tokens, is half a 200k window and never fires "
            "here)",
        ),
        "keep": Setting(
            options["keep"],
            "the default, 3 tool uses. The edit clears tool results and never drops "
            "text, so a request is sent over the window when the text and the kept "
            "results exceed it: library behaviour, not this count (measured: at 4k on "
            "long tool output a keep of 1 is still over, only clearing the newest result "
            "too would fit; on tau-bench at 4k and 8k the text alone is over)",
        ),
        "clear_at_least": Setting(options["clear_at_least"], "the default: no minimum"),
        "exclude_tools": Setting(tuple(options["exclude_tools"]), "the default: none"),
        "clear_tool_inputs": Setting(
            options["clear_tool_inputs"], "the default: the calls' inputs stay"
        ),
        "placeholder": Setting(options["placeholder"], "LangChain's ClearToolUsesEdit default"),
    }
