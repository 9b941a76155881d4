"""SWE-agent's ``LastNObservations`` and the Complexity Trap hybrid, reimplemented here.

Neither can be installed from a package index: SWE-agent 1.1.0 is not on PyPI (the
name ``sweagent`` there is a 2024 placeholder, version 0.0.1), and the hybrid of
Lindenbauer et al. (JetBrains Research, 2025, "The Complexity Trap", arXiv 2508.21433)
lives in a fork of SWE-agent. Both are written here from their documented behaviour,
need no optional package, and run offline and deterministically.

* :func:`last_n_observations` and :class:`LastNObservationsPolicy`: the history
  processor of ``sweagent/agent/history_processors.py`` (SWE-agent 1.1.0), with its
  ``polling`` option.
* :class:`ComplexityTrapHybrid`: observation masking plus an LLM summary. Every
  ``n`` turns (once ``n + m`` turns are unsummarised) the oldest ``n`` become one
  checkpoint message, the newest ``m`` stay raw, and ``LastNObservations(n=w)``
  masks the result.

How a transcript maps onto SWE-agent's history
----------------------------------------------
SWE-agent marks its history entries with a ``message_type``; ours carry no such
mark, so:

* The messages before the agent's first turn (system prompt, demonstrations, the
  task) are never hidden. The last non-system one of them is the instance template,
  SWE-agent's observation 0.
* Every tool result in a later user-side message is one observation (SWE-agent
  1.1.0's function-calling configurations answer each tool call with one ``tool``
  message; results sent in parallel in one of our messages count one each).
* A later user-side message with no tool result is an observation only when
  ``text_observations`` is set: SWE-agent's thought-action mode sends environment
  output as plain user messages, but in a chat transcript such a message is the
  user speaking, and the two cannot be told apart here.

Neither policy looks at the budget: SWE-agent sends what its processors return, so
a request over the budget is sent over it (the audit records it, nothing repairs it).
"""

from __future__ import annotations

from collections.abc import Sequence

from context_manager.messages import ImageBlock, Message, TextBlock, ToolResultBlock
from context_manager.summarizer import CompletionRequest, ExtractiveSummarizer, Summarizer
from context_manager.tokens import TokenCounter

from .base import SYSTEM, HistoryFeed, MeteredSummarizer, PolicyRequest, audit, default_counter
from .settings import OURS, PeerSettings, Setting

__all__ = [
    "BUDGET_NOT_READ",
    "OMITTED",
    "ComplexityTrapHybrid",
    "LastNObservationsPolicy",
    "last_n_observations",
]

OMITTED = "Old environment output: ({lines} lines omitted)"
"""What replaces a hidden observation (SWE-agent's wording); `` ({images} images omitted)``
follows when it held images."""

BUDGET_NOT_READ = (
    "never read: SWE-agent sends what its history processors return, so a request "
    "over the window is sent over it (library behaviour, as reimplemented)"
)
"""Why neither policy here reads the budget (their settings say so)."""

_Observation = tuple[int, int | None]
"""(message index, block index) of a tool result, or (message index, None) for a whole
message (the instance template, or a plain-text observation)."""


def _is_agent_side(message: Message, agent: str) -> bool:
    return message.participant in (agent, SYSTEM)


def _first_turn(messages: Sequence[Message], agent: str) -> int:
    """Index of the agent's first message (``len(messages)`` when it has none)."""
    return next((i for i, m in enumerate(messages) if m.participant == agent), len(messages))


def _observations(
    messages: Sequence[Message], agent: str, text_observations: bool
) -> list[_Observation]:
    """SWE-agent's observations in ``messages``, in order; observation 0 is the task."""
    start = _first_turn(messages, agent)
    task = [i for i in range(start) if messages[i].participant != SYSTEM]
    out: list[_Observation] = [(task[-1], None)] if task else []
    for i in range(start, len(messages)):
        m = messages[i]
        if _is_agent_side(m, agent):
            continue
        results = [j for j, b in enumerate(m.content) if isinstance(b, ToolResultBlock)]
        if results:
            out += [(i, j) for j in results]
        elif text_observations:
            out.append((i, None))
    return out


def _omitted(blocks: Sequence[TextBlock | ImageBlock] | str) -> str:
    """The placeholder for an observation holding ``blocks``: its text lines, its images."""
    if isinstance(blocks, str):
        lines, images = len(blocks.splitlines()), 0
    else:
        lines = sum(len(b.text.splitlines()) for b in blocks if isinstance(b, TextBlock))
        images = sum(1 for b in blocks if isinstance(b, ImageBlock))
    text = OMITTED.format(lines=lines)
    return text + f" ({images} images omitted)" if images else text


def last_n_observations(
    messages: Sequence[Message],
    n: int,
    polling: int = 1,
    *,
    agent: str = "Claude",
    text_observations: bool = False,
) -> list[Message]:
    """SWE-agent 1.1.0's ``LastNObservations`` history processor, on our messages.

    With ``C`` observations (the task counting as observation 0), observations
    ``1`` to ``floor(C / polling) * polling - n - 1`` are hidden: each one's content
    becomes :data:`OMITTED` with its line count (and image count). Roles, tool call
    ids and error flags stay, so tool pairing stays valid. With ``polling`` above 1
    the hidden range moves once every ``polling`` observations, keeping
    ``n + C mod polling`` recent ones, so the prefix a prompt cache holds changes
    less often.

    Parameters
    ----------
    messages : sequence of Message
        The history, oldest first.
    n : int
        Observations kept in full (SWE-agent's configurations use 5).
    polling : int
        Observations between moves of the hidden range (SWE-agent's default 1).
    agent : str
        The participant whose turns are the agent's.
    text_observations : bool
        Count a user-side message without tool results as an observation too
        (SWE-agent's thought-action mode); see the module notes.

    Returns
    -------
    list of Message
        The messages, hidden observations replaced; the others are the same objects.

    Raises
    ------
    ValueError
        When ``n`` or ``polling`` is not positive (SWE-agent rejects ``n <= 0``).

    Examples
    --------
    >>> from context_manager.messages import ToolUseBlock
    >>> out = [Message.text_message("User", "fix the bug")]
    >>> for k in range(3):
    ...     call = ToolUseBlock(id=f"t{k}", name="ls")
    ...     result = ToolResultBlock(tool_use_id=f"t{k}", content="a\\nb")
    ...     out += [Message(participant="Claude", content=(call,)),
    ...             Message(participant="Tool", content=(result,))]
    >>> for m in last_n_observations(out, n=1)[2::2]:
    ...     print(m.content[0].content)
    Old environment output: (2 lines omitted)
    Old environment output: (2 lines omitted)
    a
    b
    """
    if n <= 0 or polling <= 0:
        raise ValueError(f"n and polling must be positive, got n={n}, polling={polling}")
    observations = _observations(messages, agent, text_observations)
    last = max(0, (len(observations) // polling) * polling - n)
    hidden = observations[1:last]  # observation 0, the task, is never hidden
    if not hidden:
        return list(messages)
    out = list(messages)
    by_message: dict[int, set[int | None]] = {}
    for i, j in hidden:
        by_message.setdefault(i, set()).add(j)
    for i, blocks in by_message.items():
        m = out[i]
        if None in blocks:  # a whole plain-text observation
            kept = [b for b in m.content if isinstance(b, TextBlock | ImageBlock)]
            out[i] = m.model_copy(update={"content": (TextBlock(text=_omitted(kept)),)})
            continue
        content = tuple(
            b.model_copy(update={"content": _omitted(b.content)})
            if j in blocks and isinstance(b, ToolResultBlock)
            else b
            for j, b in enumerate(m.content)
        )
        out[i] = m.model_copy(update={"content": content})
    return out


class LastNObservationsPolicy:
    """SWE-agent's ``LastNObservations`` history processor, its polling option included.

    Reimplemented from SWE-agent 1.1.0 ``sweagent/agent/history_processors.py``;
    not on PyPI. Every request is the whole history with all but the last ``n``
    observations hidden (:func:`last_n_observations`); nothing else is done, and
    nothing about the budget: SWE-agent sends what the processor returns.

    Parameters
    ----------
    n : int
        Observations kept in full (5, as SWE-agent's configurations set it).
    polling : int
        Observations between moves of the hidden range (SWE-agent's default 1).
    agent : str
        The participant whose turns are the agent's.
    counter : TokenCounter, optional
        The exact counter of the audit (``cl100k_base`` by default).
    text_observations : bool
        Also hide plain-text user-side messages (SWE-agent's thought-action mode).

    Attributes
    ----------
    name : str
        ``swe-agent-last-<n>-observations``, with ``-polling`` when ``polling > 1``.
    """

    def __init__(
        self,
        *,
        n: int = 5,
        polling: int = 1,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        text_observations: bool = False,
    ) -> None:
        if n <= 0 or polling <= 0:
            raise ValueError(f"n and polling must be positive, got n={n}, polling={polling}")
        self.n = n
        self.polling = polling
        self.agent = agent
        self.counter = default_counter(counter)
        self.text_observations = text_observations
        self.name = f"swe-agent-last-{n}-observations" + ("-polling" if polling > 1 else "")

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this processor is set to, and why (the same at every budget).

        Parameters
        ----------
        budget : int
            The call's input budget (not read).
        system_tokens : int
            The system prompt's tokens (not read).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> LastNObservationsPolicy(polling=5).settings(4000).values["polling"]
        5
        """
        items = {
            "n": Setting(self.n, "SWE-agent's configurations keep the last 5 observations"),
            "polling": Setting(
                self.polling,
                "SWE-agent's default: the hidden range moves with every observation"
                if self.polling == 1
                else "the hidden range moves every 5 observations, so a cached prefix "
                "lasts longer (SWE-agent's option, this variant's point)",
            ),
            "text_observations": Setting(
                self.text_observations,
                "function calling, as SWE-agent 1.1.0's default configurations: plain "
                "user messages are the user, not observations",
            ),
            "budget": Setting("not read", BUDGET_NOT_READ),
        }
        library = "reimplemented from SWE-agent 1.1.0 sweagent/agent/history_processors.py"
        return PeerSettings.of(self.name, library, OURS, items)

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """The history with old observations hidden, whatever its size."""
        out = last_n_observations(
            history,
            self.n,
            self.polling,
            agent=self.agent,
            text_observations=self.text_observations,
        )
        return audit(out, budget, self.counter)


CHECKPOINT = "Checkpoint for the last {turns} turns:\n{summary}"
"""The agent-side message that replaces the summarised turns (the authors' wording)."""

SUMMARY_SYSTEM = (
    "You keep the state summary of an interactive software agent. You are given the "
    "previous checkpoint (or, the first time, the problem statement) and the agent's "
    "latest turns. Track the user's goal and requirements, what is completed and what "
    "is pending, the current state of the code (files, functions, edits), tests and "
    "their errors, and dependencies. Keep every section concise and skip what does "
    "not matter for the task."
)
"""The summariser's instructions, in the spirit of the state-summary prompt the hybrid
configuration uses (the extractive summariser reads the messages, not this text)."""


def _turns(messages: Sequence[Message], agent: str) -> tuple[list[Message], list[list[Message]]]:
    """The messages before the agent's first turn, and the turns after.

    A turn is an agent message and the user-side messages up to the agent's next
    message (its tool results, or the observation that answers it).
    """
    start = _first_turn(messages, agent)
    turns: list[list[Message]] = []
    for m in messages[start:]:
        if m.participant == agent or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return list(messages[:start]), turns


class ComplexityTrapHybrid:
    """Observation masking plus an LLM summary: the hybrid of "The Complexity Trap".

    Lindenbauer et al., JetBrains Research, 2025 (arXiv 2508.21433), reimplemented
    here (their code is a fork of SWE-agent, not on PyPI). Their configuration
    ``summarize_every_n_turns`` (``n=43``, ``keep_last_m_turns=10``, static
    checkpointing) followed by ``last_n_observations`` (``n=10``):

    1. A turn is an agent message followed by its tool results. Once the turns not
       yet summarised number ``n + m``, the oldest ``n`` of them are summarised and
       the newest stay raw.
    2. The summariser reads those ``n`` turns unmasked, after the previous checkpoint
       (the first time: the problem statement), each wrapped in the authors' tags
       (``<PREVIOUS_CHECKPOINT>``, ``<PROBLEM_STATEMENT>``).
    3. The summary becomes one agent-side message, ``"Checkpoint for the last n
       turns:\\n<summary>"``, placed right after the task; it replaces the previous
       checkpoint (only the latest is kept).
    4. ``LastNObservations(n=w)`` (:func:`last_n_observations`) masks the result.

    Nothing else looks at the budget, as in the authors' agent. The summaries are
    written by the deterministic extractive summariser and metered.

    Parameters
    ----------
    n : int
        Turns per summary (43 in the paper).
    m : int
        Recent turns kept raw when summarising (10 in the paper).
    w : int
        Observations the masking keeps (its window, 10 in the paper).
    agent : str
        The participant whose turns are the agent's.
    counter : TokenCounter, optional
        The exact counter of the audit and the meter (``cl100k_base`` by default).
    summarizer : Summarizer, optional
        Writes the checkpoints; :class:`ExtractiveSummarizer` by default.
    summary_tokens : int
        Length asked of the summariser.

    Notes
    -----
    Between two summaries the request is the task, the checkpoint and every turn
    since, so it grows by a turn per call. Restarts (a different transcript) drop
    the checkpoint.
    """

    name = "complexity-trap-hybrid"

    def __init__(
        self,
        *,
        n: int = 43,
        m: int = 10,
        w: int = 10,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        summary_tokens: int = 400,
    ) -> None:
        if n <= 0 or m < 0 or w <= 0:
            raise ValueError(f"need n > 0, m >= 0 and w > 0, got n={n}, m={m}, w={w}")
        self.n, self.m, self.w = n, m, w
        self.agent = agent
        self.counter = default_counter(counter)
        self.meter = MeteredSummarizer(summarizer or ExtractiveSummarizer(), self.counter)
        self.summary_tokens = summary_tokens
        self._feed = HistoryFeed()
        self._checkpoint: Message | None = None
        self._summarised = 0  # turns the checkpoint covers

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What the hybrid is set to, and why (the same at every budget).

        Parameters
        ----------
        budget : int
            The call's input budget (not read).
        system_tokens : int
            The system prompt's tokens (not read).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> ComplexityTrapHybrid().settings(4000).values["n"]
        43
        """
        items = {
            "n": Setting(self.n, "turns per summary, the paper's configuration (43)"),
            "m": Setting(self.m, "recent turns kept raw when summarising, the paper's (10)"),
            "w": Setting(self.w, "observations the masking keeps, the paper's window (10)"),
            "checkpoint": Setting(
                "static, the latest only", "the paper's checkpointing: one summary kept"
            ),
            "summary_tokens": Setting(
                self.summary_tokens,
                "length asked of the extractive stand-in, as of the LangChain summarising "
                "peer (the authors' prompt asks for concise sections, not a length)",
            ),
            "budget": Setting("not read", BUDGET_NOT_READ),
        }
        library = "reimplemented from Lindenbauer et al., 'The Complexity Trap' (arXiv 2508.21433)"
        return PeerSettings.of(self.name, library, OURS, items)

    def _summarise(self, turns: list[list[Message]], context: str) -> Message:
        request = CompletionRequest(
            model="extractive",
            system=SUMMARY_SYSTEM,
            messages=(
                Message.text_message("User", context),
                *(m for turn in turns for m in turn),
            ),
            target_tokens=self.summary_tokens,
            agent=self.agent,
        )
        summary = self.meter.complete(request).text
        return Message.text_message(
            self.agent, CHECKPOINT.format(turns=len(turns), summary=summary)
        )

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """Summarise when ``n + m`` turns are unsummarised, then mask; send the result."""
        _, restart = self._feed.new_messages(history)
        if restart:
            self._checkpoint, self._summarised = None, 0
        head, turns = _turns(history, self.agent)
        pending = turns[self._summarised :]
        if len(pending) >= self.n + self.m:
            if self._checkpoint is not None:
                context = (
                    f"<PREVIOUS_CHECKPOINT>\n{self._checkpoint.text}\n</PREVIOUS_CHECKPOINT>\n"
                )
            else:
                task = [m for m in head if m.participant != SYSTEM]
                problem = task[-1].text if task else ""
                context = f"<PROBLEM_STATEMENT>\n{problem}\n</PROBLEM_STATEMENT>\n"
            self._checkpoint = self._summarise(pending[: self.n], context)
            self._summarised += self.n
            pending = pending[self.n :]
        out = head + ([self._checkpoint] if self._checkpoint else [])
        out += [m for turn in pending for m in turn]
        return audit(
            last_n_observations(out, self.w, agent=self.agent), budget, self.counter, self.meter
        )
