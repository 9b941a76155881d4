"""The policy benchmark: replay transcripts through context policies and compare them.

Each transcript is replayed with teacher forcing: at every point where the
agent would call its model (:attr:`~foldbench.loaders.Transcript.call_points`),
each policy is handed the transcript so far and a budget and answers with the
request it would send. Every request is audited by one exact counter
(``cl100k_base``): its tokens, whether it is over the budget, whether a tool
result is orphaned or a tool call unanswered. The requests of one run then go
through a provider prompt cache (:class:`folding.CacheSimulator`: Anthropic
prices, at most 4 breakpoints with a 20-block lookback, 1,024-token minimum, a
5-minute TTL at one call every 30 s), which gives the reusable prefix and the
billed input cost. A policy that marks its own breakpoints (ours do) is billed
by them; for the others the simulator places them. Where a transcript carries
facts (strings the agent must still be able to see), the final request is
searched for each. :meth:`BenchmarkReport.verdicts` then holds the cache-aware
solvers to the bar against the peers.

Policies are named (:func:`policy_names`): ``ours:<solver>`` for the context
manager with each registered solver, ``assemble`` for the stateless
assembly, the two baselines, and the peers of the ``bench`` extra when they
are installed. Every policy that summarises uses the same deterministic
:class:`~context_manager.summarizer.ExtractiveSummarizer`, so differences come
from the policy.

Runs of independent (transcript, policy, budget) triples go to worker
processes; results do not depend on the order they finish in.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from context_manager.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, text_of
from context_manager.tokens import TiktokenCounter, TokenCounter
from folding import CachePrices, CacheSimulator, Layout

from . import dataset
from .loaders import Probe, Transcript, load_swe_agent
from .peers.base import (
    HOUR_WRITE_PRICE,
    MIN_CACHEABLE_TOKENS,
    OUTPUT_PRICE,
    call_points,
)
from .registry import check_available, make_policy, policy_names

__all__ = [
    "CACHE_AWARE",
    "CACHE_TTL_CALLS",
    "COST_BAR",
    "FRONT_REWRITERS",
    "BenchmarkReport",
    "CallRecord",
    "RunSummary",
    "Verdict",
    "check_available",
    "concatenate",
    "default_transcripts",
    "make_policy",
    "policy_names",
    "replay_policy",
    "run",
    "synthetic_transcript",
]

CACHE_TTL_CALLS = 10
"""A 5-minute cache TTL at one model call every 30 seconds."""
CACHE_AWARE = ("ours:kv-stable", "ours:kv-unified")
"""Our solvers that weigh the provider's prompt cache; :meth:`BenchmarkReport.verdicts`
holds them to the bar."""
FRONT_REWRITERS = ("langchain-trim-messages", "observation-masking")
"""Peers that rewrite the front of the context on every turn once it is full."""
COST_BAR = 2.0
"""How many times less a cache-aware solver should bill than each front rewriter."""


# --------------------------------------------------------------- transcripts


def default_transcripts(data: str | Path | None = None) -> list[Transcript]:
    """The bundled real transcripts (SWE-agent runs), their concatenation, and a
    seeded synthetic conversation with planted facts.

    Parameters
    ----------
    data : str or Path, optional
        A folder of SWE-agent ``.traj`` files (default: the bundled
        ``dataset("swe-agent")``).

    Returns
    -------
    list of Transcript

    Raises
    ------
    FileNotFoundError
        When the folder holds no ``.traj``.
    """
    folder = Path(data) if data is not None else dataset("swe-agent")
    paths = sorted(folder.glob("*.traj")) if folder.is_dir() else []
    if not paths:
        raise FileNotFoundError(
            f"no SWE-agent .traj transcripts in {folder}; pass the folder that holds them"
        )
    real = [_transcript(p.stem, load_swe_agent(p), {"source": str(p)}) for p in paths]
    return [*real, concatenate(real, name="swe-agent-concatenated"), synthetic_transcript(240)]


def _transcript(name: str, messages: list[Message], metadata: dict[str, Any]) -> Transcript:
    return Transcript(name, messages, call_points=call_points(messages), metadata=metadata)


def concatenate(transcripts: Sequence[Transcript], *, name: str = "concatenated") -> Transcript:
    """One long conversation from several: later system prompts become user turns.

    Parameters
    ----------
    transcripts : sequence of Transcript
        Joined in order; their facts and probes are pooled (when some part has probes,
        the facts of the others become probes too, so none is lost).
    name : str
        The name of the result.

    Returns
    -------
    Transcript
    """
    messages: list[Message] = []
    facts: list[str] = []
    for t in transcripts:
        for m in t.messages:
            if messages and m.participant == "System":
                m = m.model_copy(update={"participant": "User"})
            messages.append(m)
        facts.extend(t.facts)
    probes: list[Probe] = []
    if any(t.probes for t in transcripts):  # retention reads probes first: facts join them
        probes = [
            p
            for t in transcripts
            for p in t.probes
            or [Probe(f"{t.name}/fact-{i}", "", (f,)) for i, f in enumerate(t.facts)]
        ]
    return Transcript(
        name,
        messages,
        facts=facts,
        probes=probes,
        call_points=call_points(messages),
        metadata={"parts": [t.name for t in transcripts]},
    )


_TOPICS = ("parser", "cache", "scheduler", "billing", "auth", "exporter", "search", "queue")
_VERBS = ("inspected", "refactored", "profiled", "patched", "reviewed", "benchmarked")


def synthetic_transcript(n_messages: int, *, seed: int = 0, facts: int = 8) -> Transcript:
    """A seeded agent conversation of about ``n_messages`` messages with planted facts.

    Parameters
    ----------
    n_messages : int
        At least 8; the conversation ends at the first whole turn past it.
    seed : int
        The same seed gives the same conversation.
    facts : int
        How many facts to plant (fewer when the conversation is short).

    User requests, agent turns that call tools (``bash``, ``read``), verbose
    tool results, and, early on, ``facts`` statements of the form ``The
    <thing> is <code>.`` whose codes are :attr:`Transcript.facts`.

    Examples
    --------
    >>> t = synthetic_transcript(60, facts=2)
    >>> len(t.messages) >= 60, len(t.facts), all(f in " ".join(m.text for m in t.messages)
    ...                                           for f in t.facts)
    (True, 2, True)
    """
    if n_messages < 8:
        raise ValueError(f"n_messages must be at least 8, got {n_messages}")
    rng = random.Random(seed)
    messages = [Message.text_message("System", "You are a careful software agent.")]
    planted: list[str] = []
    early = range(1, max(2, n_messages // 8))  # facts come in turns 1 .. n_messages / 8
    fact_turns = set(rng.sample(early, k=min(facts, len(early))))
    call = 0
    turn = 0
    while len(messages) < n_messages:
        turn += 1
        topic = rng.choice(_TOPICS)
        ask = f"Please look at the {topic} module (ticket {rng.randrange(1000, 9999)})."
        if turn in fact_turns:
            code = f"K-{rng.randrange(10_000, 99_999)}-{rng.choice('ABCDEFGH')}"
            planted.append(code)
            ask += f" For later: the access code of the {topic} staging box is {code}."
        messages.append(Message.text_message("User", ask))
        for _ in range(rng.randrange(1, 4)):
            call += 1
            tool = rng.choice(("bash", "read"))
            use = ToolUseBlock(id=f"call-{call}", name=tool, input={"arg": f"{topic}/{call}.py"})
            messages.append(
                Message(
                    participant="Claude",
                    content=(TextBlock(text=f"I will run {tool} on {topic}."), use),
                )
            )
            lines = [
                f"{topic}/{call}.py:{i}: {rng.choice(_VERBS)} value={rng.randrange(10**6)}"
                for i in range(rng.randrange(20, 80))
            ]
            result = ToolResultBlock(tool_use_id=use.id, content="\n".join(lines))
            messages.append(Message(participant="User", content=(result,)))
        messages.append(
            Message.text_message(
                "Claude", f"I {rng.choice(_VERBS)} the {topic} module; the change is in place."
            )
        )
    return Transcript(
        f"synthetic-{n_messages}-{seed}",
        messages,
        facts=planted,
        call_points=call_points(messages),
        metadata={"seed": seed, "synthetic": True},
    )


# ------------------------------------------------------------------ replays


@dataclass(frozen=True)
class CallRecord:
    """One request of one policy, audited and priced.

    ``tokens`` is the request's size by the exact counter; ``invalid`` means over
    budget, a pairing problem, the newest turn missing or an error (``problems`` and
    ``error`` say which); ``cached`` and ``billed`` come from the cache simulator;
    the last call of a transcript with facts carries ``facts_total`` and
    ``facts_retained``.
    """

    transcript: str
    policy: str
    budget: int
    call: int
    messages_so_far: int
    tokens: int
    over_budget: bool
    invalid: bool
    problems: tuple[str, ...]
    error: str | None
    summarizer_calls: int
    summarizer_tokens: int
    cpu_ms: float
    cached: int
    billed: float
    facts_total: int = 0
    facts_retained: int | None = None
    new_tokens: int = 0
    """Tokens of the messages added since the previous call: the turn this request
    has to carry."""
    unpaired: bool = False
    """The request holds an orphan tool result or an unanswered tool call."""
    written: int = 0
    """Tokens the request wrote to the cache (``cached + written + missed`` is its size
    in the simulator)."""
    missed: int = 0
    """Tokens sent uncached and not written."""
    summarizer_billed: float = 0.0
    """What the summariser calls made for this request cost, in base-price input tokens
    (:class:`~foldbench.peers.base.MeteredSummarizer`)."""
    arguments_total: int = 0
    """Argument values of the tool calls the agent really made next
    (:func:`argument_values`) that the whole history before the call shows."""
    arguments_kept: int = 0
    """How many of those the request shows (none when it was refused)."""

    @property
    def resent(self) -> int:
        """Tokens of history sent at more than the read price: what the request did not
        read from the cache beyond the new turn (capped at the budget) it had to carry.
        A policy that only appends re-sends nothing once its prefix is cached."""
        return max(0, self.written + self.missed - min(self.new_tokens, self.budget))

    @property
    def resent_billed(self) -> float:
        """What :attr:`resent` cost: the request is its cached prefix, then what it wrote,
        then what it sent uncached, and the new turn is at its end, so the re-sent
        history is priced as writes first, then as misses."""
        p = CachePrices()
        return (
            min(self.resent, self.written) * p.write + max(0, self.resent - self.written) * p.miss
        )


def argument_values(message: Message) -> list[str]:
    """The argument values of a message's tool calls that a context can be checked for:
    strings of 3 or more characters and numbers of 2 or more digits, from the calls'
    JSON arguments (nested ones included), distinct, in order.

    Examples
    --------
    >>> from context_manager.messages import ToolUseBlock
    >>> call = ToolUseBlock(id="c", name="book", input={
    ...     "user": "mia_li_3668", "seats": 2, "flight": {"no": "HAT136", "price": 1240.5}})
    >>> argument_values(Message(participant="Claude", content=(call,)))
    ['mia_li_3668', 'HAT136', '1240.5']
    """
    out: dict[str, None] = {}

    def walk(value: Any) -> None:
        if isinstance(value, bool) or value is None:
            return
        if isinstance(value, str):
            if len(value.strip()) >= 3:
                out[value.strip()] = None
        elif isinstance(value, int | float):
            text = repr(value)
            if sum(c.isdigit() for c in text) >= 2:
                out[text] = None
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)

    for block in message.content:
        if isinstance(block, ToolUseBlock):
            walk(block.input)
    return list(out)


def _layout(messages: Sequence[Message], counter: TokenCounter) -> Layout:
    return Layout.from_units([("msg", m.digest(), counter.count_message(m)) for m in messages])


def _text(messages: Sequence[Message]) -> str:
    return "\n".join(text_of(m.content) for m in messages)


def _fact_patterns(transcript: Transcript) -> list[list[re.Pattern[str]]]:
    """Per fact, its accepted answers as whole-word patterns; only the facts that the
    whole transcript states, so a policy that keeps everything retains them all."""
    answers = [p.answers for p in transcript.probes] or [(f,) for f in transcript.facts]
    full = _text(transcript.messages)
    out = []
    for accepted in answers:
        patterns = [
            re.compile(rf"(?<!\w){re.escape(a)}(?!\w)", re.IGNORECASE) for a in accepted if a
        ]
        if any(p.search(full) for p in patterns):
            out.append(patterns)
    return out


def _retained(messages: Sequence[Message], facts: Sequence[list[re.Pattern[str]]]) -> int:
    text = _text(messages)
    return sum(1 for patterns in facts if any(p.search(text) for p in patterns))


def _newest_turn_missing(history: Sequence[Message], messages: Sequence[Message]) -> bool:
    """The request no longer shows the message the model is called to answer."""
    probe = text_of(history[-1].content).strip()[:120] if history else ""
    return bool(probe) and probe not in _text(messages)


def replay_policy(
    transcript: Transcript,
    policy: str,
    budget: int,
    *,
    counter: TokenCounter | None = None,
) -> list[CallRecord]:
    """Replay one transcript through one policy at one budget.

    Parameters
    ----------
    transcript : Transcript
    policy : str
        A name from :func:`policy_names`.
    budget : int
        The input token budget of every call.
    counter : TokenCounter, optional
        The exact counter of the audit (``cl100k_base`` by default).

    Returns
    -------
    list of CallRecord
        One per call point, in order; the last carries the fact retention.
    """
    counter = counter if counter is not None else TiktokenCounter()
    instance = make_policy(policy, counter=counter)
    facts = _fact_patterns(transcript)
    cache = CacheSimulator(ttl=CACHE_TTL_CALLS, min_cacheable_tokens=MIN_CACHEABLE_TOKENS)
    points = transcript.call_points or call_points(transcript.messages)
    out: list[CallRecord] = []
    seen = 0
    try:
        for i, n in enumerate(points):
            new_tokens = sum(counter.count_message(m) for m in transcript.messages[seen:n])
            seen = max(seen, n)
            started = time.process_time()
            history = transcript.messages[:n]
            request = instance.request(history, budget)
            cpu = (time.process_time() - started) * 1000.0
            problems = request.problems
            if request.error is None and _newest_turn_missing(history, request.messages):
                problems = (*problems, "the newest turn is not in the request")
            marks = None if request.breakpoints is None else [k + 1 for k in request.breakpoints]
            blocks = [max(1, len(m.content)) for m in request.messages]
            priced = cache.request(_layout(request.messages, counter), marks, blocks=blocks)
            last = i == len(points) - 1
            values = argument_values(transcript.messages[n]) if n < len(transcript.messages) else []
            full = _text(history) if values else ""
            present = [v for v in values if v in full]
            sent = _text(request.messages) if present and request.error is None else ""
            out.append(
                CallRecord(
                    transcript=transcript.name,
                    policy=policy,
                    budget=budget,
                    call=i,
                    messages_so_far=n,
                    tokens=request.tokens,
                    over_budget=request.tokens > budget,
                    invalid=bool(problems) or request.error is not None,
                    problems=problems,
                    error=request.error,
                    summarizer_calls=request.summarizer_calls,
                    summarizer_tokens=request.summarizer_tokens,
                    summarizer_billed=request.summarizer_billed,
                    cpu_ms=cpu,
                    cached=priced.cached,
                    billed=priced.billed,
                    facts_total=len(facts) if last else 0,
                    facts_retained=_retained(request.messages, facts) if last and facts else None,
                    new_tokens=new_tokens,
                    unpaired=request.unpaired,
                    written=priced.written,
                    missed=priced.missed,
                    arguments_total=len(present),
                    arguments_kept=sum(v in sent for v in present),
                )
            )
    finally:
        close = getattr(instance, "close", None)
        if callable(close):
            close()
    return out


def _job(args: tuple[Transcript, str, int]) -> list[CallRecord]:
    transcript, policy, budget = args
    return replay_policy(transcript, policy, budget)


# ------------------------------------------------------------------- report


@dataclass(frozen=True)
class RunSummary:
    """The metrics of one policy at one budget, over every transcript.

    Token statistics leave out failed calls (counted in ``errors``); ``cache_reuse``
    is cached tokens over all tokens sent; ``billed`` sums the simulated bills.
    """

    policy: str
    budget: int
    calls: int
    tokens_mean: float
    tokens_p95: float
    tokens_peak: int
    over_budget: int
    invalid: int
    errors: int
    cache_reuse: float
    billed: float
    summarizer_calls: int
    summarizer_tokens: int
    cpu_p50_ms: float
    cpu_p95_ms: float
    facts_total: int
    facts_retained: int | None
    unpaired: int = 0
    """Requests with an orphan tool result or an unanswered tool call."""
    new_turns_billed: float = 0.0
    """The new turns alone, capped at the budget, at the cheapest price a token never
    sent before can have (a miss; a cache write costs more): a floor for any policy
    whose requests carry each new turn whole."""
    cached: int = 0
    """Tokens read from the cache."""
    written: int = 0
    """Tokens written to the cache."""
    missed: int = 0
    """Tokens sent uncached and not written."""
    resent: int = 0
    """Tokens of history sent again at more than the read price (see
    :attr:`CallRecord.resent`): the cost of rewriting the front of the context."""
    resent_billed: float = 0.0
    """What they cost, in base-price tokens."""
    summarizer_billed: float = 0.0
    """What the summariser calls cost, in base-price input tokens."""
    arguments_total: int = 0
    """Argument values of the agent's next tool calls that the full history shows."""
    arguments_kept: int = 0
    """How many of them the requests showed."""

    @property
    def argument_support(self) -> float | None:
        """Share of the agent's next tool-call argument values the requests showed,
        relative to the full history (None without tool calls)."""
        return self.arguments_kept / self.arguments_total if self.arguments_total else None

    @property
    def billed_with_summaries(self) -> float:
        """The billed input plus what the summariser calls cost (their input through a
        prompt cache where they mark breakpoints, their output at the output price)."""
        return self.billed + self.summarizer_billed

    @property
    def retention(self) -> float | None:
        """Share of facts still visible in the final requests (None without facts)."""
        if self.facts_retained is None or not self.facts_total:
            return None
        return self.facts_retained / self.facts_total


_BETTER: dict[str, tuple[Callable[[RunSummary], float | None], bool, str]] = {
    # metric: (value, higher is better, format)
    "billed": (lambda s: s.billed / 1000, False, "{:,.1f}k"),
    "billed + summaries": (lambda s: s.billed_with_summaries / 1000, False, "{:,.1f}k"),
    "cache reuse": (lambda s: s.cache_reuse, True, "{:.0%}"),
    "retained": (lambda s: s.retention, True, "{:.0%}"),
    "invalid": (lambda s: s.invalid, False, "{:,.0f}"),
    "cpu p95": (lambda s: s.cpu_p95_ms, False, "{:.1f} ms"),
}


@dataclass(frozen=True)
class Verdict:
    """One cache-aware solver at one budget, held to the bar.

    The bar: no call over budget, no invalid request, no valid peer (no invalid
    request of its own) both cheaper and retaining more facts, and at least
    :data:`COST_BAR` times less billed input than each front rewriter.
    """

    policy: str
    budget: int
    over_budget: int
    invalid: int
    billed: float
    new_turns_billed: float
    retention: float | None
    """Ours; None without facts to retain (dominance cannot be judged)."""
    ratios: dict[str, float]
    """Front rewriter that ran without a failed call -> its billed input over ours."""
    dominated_by: list[str]
    """Valid peers both cheaper (billed) and retaining more facts."""
    dominated_with_summaries: list[str]
    """Valid peers both cheaper once the summariser calls are added and retaining more
    facts (shown, not part of the bar)."""
    beaten_on: dict[str, list[str]]
    """Metric -> peers strictly better on it, with their value."""

    @property
    def failures(self) -> list[str]:
        """The parts of the bar that fail, in words (empty when none does)."""
        out = [f"{self.over_budget} calls over budget"] if self.over_budget else []
        out += [f"{self.invalid} invalid requests"] if self.invalid else []
        out += [f"dominated by {', '.join(self.dominated_by)}"] if self.dominated_by else []
        out += [f"{p} bills only {_times(r)} ours" for p, r in self.ratios.items() if r < COST_BAR]
        return out

    @property
    def meets_bar(self) -> bool | None:
        """True when every part of the bar holds, False when one fails, None when none
        fails but one could not be judged (a front rewriter missing or failing calls,
        or no facts)."""
        if self.failures:
            return False
        if set(self.ratios) != set(FRONT_REWRITERS) or self.retention is None:
            return None
        return True

    @property
    def outcome(self) -> str:
        """``met``, ``not met`` or ``not judged``."""
        return {True: "met", False: "not met", None: "not judged"}[self.meets_bar]


def _times(ratio: float) -> str:
    return f"{ratio:.2f}x" if math.isfinite(ratio) else "unbounded (we billed nothing)"


def _is_peer(policy: str) -> bool:
    """Not one of this library's own policies (``ours:*`` and ``assemble``)."""
    return not policy.startswith("ours:") and policy != "assemble"


def _dominating(
    ours: RunSummary, peers: Sequence[RunSummary], cost: Callable[[RunSummary], float]
) -> list[str]:
    """Valid peers both cheaper than ``ours`` by ``cost`` and retaining more facts (a
    peer with an invalid request is not a point within the budget)."""
    mine = ours.retention
    if mine is None:
        return []
    return [
        p.policy
        for p in peers
        if p.invalid == 0
        and cost(p) < cost(ours)
        and (kept := p.retention) is not None
        and kept > mine
    ]


_NEW_TOKEN_PRICE = min(CachePrices().miss, CachePrices().write)
"""The cheapest a token never sent before can cost (a miss; a cache write costs more)."""


def _new_turn_bill(new_tokens: int, budget: int) -> float:
    return min(new_tokens, budget) * _NEW_TOKEN_PRICE


def _bill_lines(rows: Sequence[RunSummary]) -> list[str]:
    """Where each policy's bill goes: cache reads, cache writes, uncached input, and the
    history it sent again after changing the front of its context."""
    p = CachePrices()
    lines = [
        "",
        "## Where the bill goes",
        "",
        f"Tokens in thousands. A read costs {p.read:g}, a write {p.write:g} and an uncached "
        f"token {p.miss:g} of the base price. *Re-sent history*: tokens written or sent "
        "uncached beyond each call's new turn, the price of rewriting the front of the "
        "context; *its share* is what they cost, as a share of the bill.",
        "",
        "| policy | budget | read | written | uncached | re-sent history | its share | billed |",
        "|---|" + "---:|" * 7,
    ]
    for s in rows:
        share = s.resent_billed / s.billed if s.billed else 0.0
        lines.append(
            f"| {s.policy} | {s.budget:,} | {s.cached / 1000:,.1f} | {s.written / 1000:,.1f} | "
            f"{s.missed / 1000:,.1f} | {s.resent / 1000:,.1f} | {share:.0%} | "
            f"{s.billed / 1000:,.1f} |"
        )
    return lines


def _p(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)])


@dataclass
class BenchmarkReport:
    """Every audited request of a benchmark run, and the views of it."""

    records: list[CallRecord]
    budgets: list[int] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    transcripts: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    def summaries(self) -> list[RunSummary]:
        """One :class:`RunSummary` per (policy, budget), in policy then budget order."""
        runs: dict[tuple[str, int], list[CallRecord]] = {}
        for r in self.records:
            runs.setdefault((r.policy, r.budget), []).append(r)
        out = []
        for policy in self.policies:
            for budget in self.budgets:
                rs = runs.get((policy, budget))
                if not rs:
                    continue
                # a failed call sent nothing: it counts as an error, not as a small request
                tokens = [r.tokens for r in rs if r.error is None] or [0]
                cpu = [r.cpu_ms for r in rs]
                total = sum(tokens)
                cached = sum(r.cached for r in rs)
                with_facts = [r for r in rs if r.facts_retained is not None]
                out.append(
                    RunSummary(
                        policy=policy,
                        budget=budget,
                        calls=len(rs),
                        tokens_mean=statistics.fmean(tokens),
                        tokens_p95=_p(tokens, 0.95),
                        tokens_peak=max(tokens),
                        over_budget=sum(r.over_budget for r in rs),
                        invalid=sum(r.invalid for r in rs),
                        errors=sum(r.error is not None for r in rs),
                        cache_reuse=cached / total if total else 0.0,
                        billed=sum(r.billed for r in rs),
                        summarizer_calls=sum(r.summarizer_calls for r in rs),
                        summarizer_tokens=sum(r.summarizer_tokens for r in rs),
                        summarizer_billed=sum(r.summarizer_billed for r in rs),
                        cpu_p50_ms=_p(cpu, 0.5),
                        cpu_p95_ms=_p(cpu, 0.95),
                        facts_total=sum(r.facts_total for r in with_facts),
                        facts_retained=(
                            sum(r.facts_retained or 0 for r in with_facts) if with_facts else None
                        ),
                        unpaired=sum(r.unpaired for r in rs),
                        new_turns_billed=sum(_new_turn_bill(r.new_tokens, budget) for r in rs),
                        cached=cached,
                        written=sum(r.written for r in rs),
                        missed=sum(r.missed for r in rs),
                        resent=sum(r.resent for r in rs),
                        resent_billed=sum(r.resent_billed for r in rs),
                        arguments_total=sum(r.arguments_total for r in rs),
                        arguments_kept=sum(r.arguments_kept for r in rs),
                    )
                )
        return out

    def verdicts(self) -> list[Verdict]:
        """Each cache-aware solver (:data:`CACHE_AWARE`) at each budget against the peers
        (every policy but this library's own: ``ours:*`` and ``assemble``) at the same
        budget."""
        return self._verdicts(self.summaries())

    def _verdicts(self, rows: Sequence[RunSummary]) -> list[Verdict]:
        out = []
        for ours in (s for s in rows if s.policy in CACHE_AWARE):
            peers = [s for s in rows if s.budget == ours.budget and _is_peer(s.policy)]
            beaten: dict[str, list[str]] = {}
            for metric, (value, higher, fmt) in _BETTER.items():
                mine = value(ours)
                if mine is None:
                    continue
                better = [
                    (p, v)
                    for p in peers
                    if (v := value(p)) is not None and (v > mine if higher else v < mine)
                ]
                if better:
                    better.sort(key=lambda pv: -pv[1] if higher else pv[1])
                    beaten[metric] = [
                        f"{p.policy} ({fmt.format(v)}"
                        + (f", {p.invalid} invalid)" if p.invalid and metric != "invalid" else ")")
                        for p, v in better
                    ]
            out.append(
                Verdict(
                    policy=ours.policy,
                    budget=ours.budget,
                    over_budget=ours.over_budget,
                    invalid=ours.invalid,
                    billed=ours.billed,
                    new_turns_billed=ours.new_turns_billed,
                    retention=ours.retention,
                    ratios={  # a failed call bills nothing: such a run is not comparable
                        p.policy: p.billed / ours.billed if ours.billed else math.inf
                        for p in peers
                        if p.policy in FRONT_REWRITERS and p.errors == 0
                    },
                    dominated_by=_dominating(ours, peers, lambda s: s.billed),
                    dominated_with_summaries=_dominating(
                        ours, peers, lambda s: s.billed_with_summaries
                    ),
                    beaten_on=beaten,
                )
            )
        return out

    def _verdict_lines(self, rows: Sequence[RunSummary]) -> list[str]:
        verdicts = self._verdicts(rows)
        if not verdicts:
            return []
        runs = {(s.policy, s.budget): s for s in rows}
        lines = [
            "",
            "## Our cache-aware solvers against the bar",
            "",
            f"The bar: no call over budget, no invalid request, no valid peer both cheaper "
            f"and retaining more, and at least {COST_BAR:g}x less billed input than "
            f"{' and '.join(f'`{p}`' for p in FRONT_REWRITERS)}. The summariser calls are not "
            "in the bar; the column *the same, with summaries* adds them. *New turns alone* bills "
            "only each call's new messages, capped at the budget, at the miss price (the "
            "cheapest for tokens never sent before): no policy whose requests carry each new "
            "turn whole bills less.",
            "",
            "| policy | budget | over | invalid | billed (k) | new turns alone (k) | "
            + " | ".join(f"{p} / ours" for p in FRONT_REWRITERS)
            + " | cheaper and retaining more | the same, with summaries | bar |",
            "|---|---:|---:|---:|---:|---:|" + "---:|" * len(FRONT_REWRITERS) + "---|---|---|",
        ]
        for v in verdicts:
            ratios = " | ".join(
                _times(v.ratios[p]) if p in v.ratios else "-" for p in FRONT_REWRITERS
            )
            lines.append(
                f"| {v.policy} | {v.budget:,} | {v.over_budget} | {v.invalid} | "
                f"{v.billed / 1000:,.1f} | {v.new_turns_billed / 1000:,.1f} | {ratios} | "
                f"{', '.join(v.dominated_by) or 'none'} | "
                f"{', '.join(v.dominated_with_summaries) or 'none'} | "
                f"{'**not met**' if v.meets_bar is False else v.outcome} |"
            )
        lines += ["", "## Where a peer beats us", ""]
        for v in verdicts:
            if not v.beaten_on:
                lines.append(f"- `{v.policy}` at {v.budget:,}: no peer is better on any metric.")
                continue
            mine = runs[v.policy, v.budget]
            parts = []
            for metric, peers in v.beaten_on.items():
                value, _, fmt = _BETTER[metric]
                parts.append(f"{metric} (ours {fmt.format(value(mine))}): {', '.join(peers)}")
            lines.append(f"- `{v.policy}` at {v.budget:,}: " + "; ".join(parts) + ".")
        return lines

    def to_markdown(self) -> str:
        """The comparison table (one row per policy and budget), with how it was made,
        then the cache-aware solvers against the bar and where a peer beats them."""
        lines = [
            "# Context policies replayed on real transcripts",
            "",
            f"Transcripts: {', '.join(self.transcripts)}. Budgets: "
            f"{', '.join(f'{b:,}' for b in self.budgets)} tokens. "
            f"{len(self.records):,} requests audited in {self.wall_seconds:.0f} s.",
            "",
            "Tokens by `cl100k_base`. Cache: Anthropic prices (write 1.25, read 0.1), at "
            "most 4 breakpoints with a 20-block lookback, 1,024-token minimum, 5-minute TTL "
            "at one call per 30 s. Our folding policies mark their own breakpoints (the ends "
            "of the system prompt, the merged memories, the memories and the request); for "
            "the others the simulator places them as an automatic client would (the end, "
            "where the cached prefix ends, and spread over the request). *Billed* is "
            "the agent's input cost in thousands of base-price tokens, and *+ summaries* adds "
            "the summariser calls: their input through a prompt cache of their own where "
            f"they mark breakpoints (ours do; one-hour writes at {HOUR_WRITE_PRICE:g}) and at "
            f"the base price where they do not, their output at {OUTPUT_PRICE:g}. *Unpaired*: "
            "an orphan tool result or an "
            "unanswered tool call. *Invalid*: over budget, unpaired, the newest turn missing, "
            "or an error. *Retained*: "
            "facts (any accepted answer, as a whole word) still visible in the final request, "
            "of those the whole transcript states. A concatenation replays its parts again.",
            "",
            "| policy | budget | calls | mean tok | p95 tok | peak | over | unpaired | invalid | "
            "cache reuse | billed (k) | + summaries (k) | summary calls | summary tok | "
            "cpu p50 ms | cpu p95 ms | retained |",
            "|---|" + "---:|" * 16,
        ]
        rows = self.summaries()
        for s in rows:
            retained = "-" if s.retention is None else f"{s.facts_retained}/{s.facts_total}"
            lines.append(
                f"| {s.policy} | {s.budget:,} | {s.calls} | {s.tokens_mean:,.0f} | "
                f"{s.tokens_p95:,.0f} | {s.tokens_peak:,} | {s.over_budget} | {s.unpaired} | "
                f"{s.invalid} | "
                f"{s.cache_reuse:.0%} | {s.billed / 1000:,.1f} | "
                f"{s.billed_with_summaries / 1000:,.1f} | {s.summarizer_calls} | "
                f"{s.summarizer_tokens:,} | {s.cpu_p50_ms:.1f} | {s.cpu_p95_ms:.1f} | "
                f"{retained} |"
            )
        errors = sorted({(r.policy, r.error) for r in self.records if r.error})
        if errors:
            lines += ["", "Errors (first of each kind):", ""]
            seen: set[str] = set()
            for policy, error in errors:
                if policy not in seen:
                    seen.add(policy)
                    lines.append(f"- `{policy}`: {error}")
        lines += _bill_lines(rows)
        lines += self._verdict_lines(rows)
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """Every record, as JSON."""
        return json.dumps([asdict(r) for r in self.records], indent=1)

    def plot(
        self, path: str | Path, *, transcript: str | None = None, budget: int | None = None
    ) -> Path:
        """Tokens per call and cumulative billed cost per policy on one run, as a PNG.

        Parameters
        ----------
        path : str or Path
            Where the PNG goes.
        transcript : str, optional
            Default: the transcript with the most calls.
        budget : int, optional
            Default: the middle budget of the run.

        Returns
        -------
        Path
            ``path``.

        Raises
        ------
        ValueError
            For a transcript or budget the run does not have.
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if transcript is None:
            calls = {t: sum(1 for r in self.records if r.transcript == t) for t in self.transcripts}
            transcript = max(self.transcripts, key=lambda t: (calls[t], t))
        if budget is None:
            budget = self.budgets[len(self.budgets) // 2]
        if transcript not in self.transcripts or budget not in self.budgets:
            raise ValueError(
                f"the run has no transcript {transcript!r} at budget {budget}; transcripts: "
                f"{', '.join(self.transcripts)}; budgets: {self.budgets}"
            )
        fig, (ax_tokens, ax_cost) = plt.subplots(1, 2, figsize=(13, 4.8))
        tab20 = plt.get_cmap("tab20")
        palette = [tab20(k) for k in range(20)]
        for number, policy in enumerate(self.policies):
            color = palette[number % len(palette)]
            rs = [
                r
                for r in self.records
                if r.policy == policy and r.transcript == transcript and r.budget == budget
            ]
            if not rs:
                continue
            style = "-" if policy.startswith("ours:") else "--"
            x = [r.call for r in rs]
            ax_tokens.plot(
                x, [r.tokens for r in rs], style, color=color, label=policy, linewidth=1.2
            )
            cumulative, running = [], 0.0
            for r in rs:
                running += r.billed
                cumulative.append(running / 1000)
            ax_cost.plot(x, cumulative, style, color=color, label=policy, linewidth=1.2)
        ax_tokens.axhline(budget, color="black", linewidth=0.8, linestyle=":")
        ax_tokens.set(
            title=f"tokens sent per call ({transcript}, budget {budget:,})",
            xlabel="model call",
            ylabel="tokens",
        )
        ax_cost.set(
            title="cumulative billed input (cache-aware)",
            xlabel="model call",
            ylabel="thousands of base-price tokens",
        )
        ax_cost.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out, dpi=110)
        plt.close(fig)
        return out


# ---------------------------------------------------------------------- run


def run(
    transcripts: Sequence[Transcript],
    policies: Sequence[str],
    budgets: Sequence[int],
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> BenchmarkReport:
    """Replay every transcript through every policy at every budget.

    Parameters
    ----------
    transcripts : sequence of Transcript
    policies : sequence of str
        Names from :func:`policy_names`.
    budgets : sequence of int
        Input token budgets.
    workers : int
        Worker processes (1: in this process).
    progress : callable, optional
        Called with (runs done, runs in all) after each run.

    Raises
    ------
    ValueError
        For an empty selection or a non-positive budget.
    KeyError
        For an unknown policy name.
    ModuleNotFoundError
        For a peer whose package (the ``bench`` extra) is not installed.
    """
    if not transcripts or not policies or not budgets:
        raise ValueError("run needs at least one transcript, one policy and one budget")
    policies, budgets = list(dict.fromkeys(policies)), list(dict.fromkeys(budgets))
    bad = [b for b in budgets if b <= 0]
    if bad:
        raise ValueError(f"budgets must be positive token counts, got {bad}")
    known = set(policy_names(peers=True, exact=True))
    unknown = [p for p in policies if p not in known]
    if unknown:
        raise KeyError(f"unknown policies {unknown}; known policies: {', '.join(sorted(known))}")
    check_available(policies)  # before any job, not inside a worker
    jobs = [(t, p, b) for t in transcripts for p in policies for b in budgets]
    started = time.perf_counter()
    results: list[list[CallRecord]] = []
    if workers <= 1:
        for done, job in enumerate(jobs, 1):
            results.append(_job(job))
            if progress:
                progress(done, len(jobs))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for done, out in enumerate(pool.map(_job, jobs), 1):
                results.append(out)
                if progress:
                    progress(done, len(jobs))
    records = [r for rs in results for r in rs]
    return BenchmarkReport(
        records=records,
        budgets=list(budgets),
        policies=list(policies),
        transcripts=[t.name for t in transcripts],
        wall_seconds=time.perf_counter() - started,
    )
