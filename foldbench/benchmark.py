"""The policy benchmark: replay transcripts through context policies and compare them.

Each transcript is replayed with teacher forcing: at every point where the
agent would call its model (:attr:`~foldbench.loaders.Transcript.call_points`),
each policy is handed the transcript so far and a budget and answers with the
request it would send. Every request is audited by one exact counter
(``cl100k_base``): its tokens, whether it is over the budget, whether a tool
result is orphaned or a tool call unanswered. The requests of one run are then
billed under two provider models, the same rules for every policy
(:mod:`foldbench.pricing`): explicit breakpoints (Anthropic-style; a policy is
billed by the marks its library places, or as a plain client that marks the
system prompt and the end) and automatic prefix caching (OpenAI-style). Where a
transcript carries facts (strings the agent must still be able to see), the
final request is searched for each. :meth:`BenchmarkReport.verdicts` then
holds the cache-aware solvers to the bar against the peers under each model.

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

import random
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from context_manager.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, text_of
from context_manager.tokens import TiktokenCounter, TokenCounter
from folding import Layout

from . import dataset
from .executors import Executor, LocalExecutor
from .loaders import Probe, Transcript, load_swe_agent, load_tau_bench
from .peers.base import call_points
from .plant import age_of, plant_facts, plant_parts
from .pricing import CACHE_TTL_CALLS, MIN_CACHEABLE_TOKENS, RequestPricer
from .records import CallRecord
from .registry import FULL_HISTORY, VARIANTS, check_available, is_known, make_policy, policy_names
from .report import (
    CACHE_AWARE,
    BenchmarkReport,
    RunSummary,
    Verdict,
)

__all__ = [
    "CACHE_AWARE",
    "CACHE_TTL_CALLS",
    "FULL_HISTORY",
    "MIN_CACHEABLE_TOKENS",
    "SWE_AGENT_FACTS",
    "SYNTHETIC_SELECTION",
    "TAU_BENCH_FACTS",
    "TAU_BENCH_FILE",
    "BenchmarkReport",
    "CallRecord",
    "RunSummary",
    "Verdict",
    "argument_values",
    "check_available",
    "concatenate",
    "dataset_of",
    "default_transcripts",
    "make_policy",
    "policy_names",
    "quick_transcripts",
    "replay_policy",
    "run",
    "synthetic_transcript",
    "tau_bench_transcript",
]

# --------------------------------------------------------------- transcripts

SWE_AGENT_FACTS = 6
"""Facts planted in each SWE-agent run: 2 early, 2 middle and 2 late. The runs are short
(12 to 28 messages), so six is about one in every two tool results or user turns: enough
to tell a policy that keeps the old observations from one that drops them, and the
shortest run still has a message for each."""
TAU_BENCH_FACTS = 2
"""Facts planted in each tau-bench session, before the sessions are joined: two of the
three ages, drawn per session, so the 20 sessions of the demo hold 40 facts spread over
the whole conversation, each third of every session included (a session is 6 to 62
messages, so more would put a fact in most of a short one's turns)."""
SYNTHETIC_SELECTION = ((160, 0), (240, 1), (360, 2))
"""(messages, seed) of the synthetic conversations in :func:`default_transcripts`: three
lengths, each long enough to be folded at every demo budget, 760 messages in all (a
replay's cost grows with the square of the length; 17 policies at 3 budgets replay each)."""


def _swe_agent_runs(data: str | Path | None, plant: bool) -> list[Transcript]:
    folder = Path(data) if data is not None else dataset("swe-agent")
    paths = sorted(folder.glob("*.traj")) if folder.is_dir() else []
    if not paths:
        raise FileNotFoundError(
            f"no SWE-agent .traj transcripts in {folder}; pass the folder that holds them"
        )
    runs = [
        Transcript.from_messages(
            p.stem, load_swe_agent(p), {"source": str(p), "dataset": "swe-agent"}
        )
        for p in paths
    ]
    return plant_parts(runs, count=SWE_AGENT_FACTS) if plant else runs


def default_transcripts(data: str | Path | None = None, *, plant: bool = True) -> list[Transcript]:
    """The bundled real transcripts (SWE-agent runs) and their concatenation, with
    planted facts, then seeded synthetic conversations of several lengths.

    Parameters
    ----------
    data : str or Path, optional
        A folder of SWE-agent ``.traj`` files (default: the bundled
        ``dataset("swe-agent")``).
    plant : bool
        Plant facts (:func:`foldbench.plant.plant_parts`): :data:`SWE_AGENT_FACTS` in
        each run, 2 early, 2 middle and 2 late, each found in no other run, so the
        concatenation holds every run's facts; the synthetic conversations
        (:data:`SYNTHETIC_SELECTION`) plant their 8 each over the same ages. False
        gives the data as it is, no fact anywhere.

    Returns
    -------
    list of Transcript
        The runs in file-name order, ``swe-agent-concatenated``, then the synthetic
        conversations (dataset ``"synthetic"``).

    Raises
    ------
    FileNotFoundError
        When the folder holds no ``.traj``.

    Examples
    --------
    >>> ts = default_transcripts()
    >>> [t.name for t in ts][-4:]
    ['swe-agent-concatenated', 'synthetic-160-0', 'synthetic-240-1', 'synthetic-360-2']
    >>> [len(t.facts) for t in ts]
    [6, 6, 6, 6, 24, 8, 8, 8]
    >>> sorted({r["age"] for r in ts[0].metadata["planted"]})
    ['early', 'late', 'middle']
    >>> any(t.facts for t in default_transcripts(plant=False))
    False
    """
    real = _swe_agent_runs(data, plant)
    synthetic = [
        synthetic_transcript(n, seed=seed, facts=8 if plant else 0)
        for n, seed in SYNTHETIC_SELECTION
    ]
    return [*real, concatenate(real, name="swe-agent-concatenated"), *synthetic]


def dataset_of(transcript: Transcript) -> str:
    """The dataset a transcript belongs to, as the report groups it: its metadata's
    ``dataset`` (``data_set`` for chitchat), else ``"other"``.

    >>> dataset_of(synthetic_transcript(20))
    'synthetic'
    """
    meta = transcript.metadata
    return str(meta.get("dataset") or meta.get("data_set") or "other")


def _common_dataset(transcripts: Sequence[Transcript]) -> str:
    names = {dataset_of(t) for t in transcripts}
    return names.pop() if len(names) == 1 else "mixed"


TAU_BENCH_FILE = "airline-gpt-4o-150.json"
"""The bundled tau-bench airline trajectories (150 GPT-4o runs with their tool calls)."""


def tau_bench_transcript(
    sessions: int | None = None, path: str | Path | None = None, *, plant: bool = True
) -> Transcript:
    """tau-bench airline sessions concatenated: one agent serving many customers in turn,
    the airline policy as its system prompt (the long-running form).

    Parameters
    ----------
    sessions : int, optional
        The first this many trajectories (default: all 150 bundled).
    path : str or Path, optional
        A tau-bench trajectory file (default: the bundled one).
    plant : bool
        Plant :data:`TAU_BENCH_FACTS` facts in each session's tool results and customer
        turns before they are joined (:func:`foldbench.plant.plant_parts`), at two of
        the three ages of that session, so the facts of the whole conversation reach
        from its first session to its last; none occurs in any session. False gives
        the sessions as they are.

    Returns
    -------
    Transcript
        Named ``tau-bench-<sessions>``, dataset ``"tau-bench"``.

    Examples
    --------
    >>> t = tau_bench_transcript(2)
    >>> t.name, dataset_of(t), t.messages[0].participant, len(t.facts)
    ('tau-bench-2', 'tau-bench', 'System', 4)
    >>> [r["part"] for r in t.metadata["planted"]]
    ['tau-0-0', 'tau-0-0', 'tau-1-0', 'tau-1-0']
    >>> tau_bench_transcript(2, plant=False).facts
    []
    """
    source = Path(path) if path is not None else dataset("tau-bench") / TAU_BENCH_FILE
    runs = load_tau_bench(source, limit=sessions)
    if plant:
        runs = plant_parts(runs, count=TAU_BENCH_FACTS)
    return concatenate(runs, name=f"tau-bench-{len(runs)}")


QUICK_TAU_SESSIONS = 4
"""tau-bench sessions in the quick selection."""
QUICK_SYNTHETIC_MESSAGES = 120
"""The length of the synthetic conversation in the quick selection."""


def quick_transcripts(data: str | Path | None = None, *, plant: bool = True) -> list[Transcript]:
    """A small selection for a first look: the shortest bundled SWE-agent run, a few
    tau-bench sessions served in turn, and a short synthetic conversation, each with
    planted facts (as in :func:`default_transcripts` and :func:`tau_bench_transcript`).

    Parameters
    ----------
    data : str or Path, optional
        As for :func:`default_transcripts`.
    plant : bool
        False: no fact planted anywhere.

    Returns
    -------
    list of Transcript

    Examples
    --------
    >>> [(t.name, len(t.facts)) for t in quick_transcripts()]
    [('test-repo-i1-gpt4', 6), ('tau-bench-4', 8), ('synthetic-120-0', 8)]
    """
    real = _swe_agent_runs(data, plant)
    shortest = min(real, key=lambda t: (len(t.call_points), t.name))
    return [
        shortest,
        tau_bench_transcript(QUICK_TAU_SESSIONS, plant=plant),
        synthetic_transcript(QUICK_SYNTHETIC_MESSAGES, facts=8 if plant else 0),
    ]


def concatenate(transcripts: Sequence[Transcript], *, name: str = "concatenated") -> Transcript:
    """One long conversation from several: later system prompts become user turns.

    Parameters
    ----------
    transcripts : sequence of Transcript
        Joined in order; their facts and probes are pooled (when some part has probes,
        the facts of the others become probes too, so none is lost). Plant facts in the
        parts (:func:`foldbench.plant.plant_parts`), not in the result, so each part
        has its own early, middle and late ones.
    name : str
        The name of the result.

    Returns
    -------
    Transcript
        ``metadata["planted"]`` pools the parts' records of planted facts, each with
        its ``index`` and ``age`` in the joined conversation, its ``part`` and its
        ``part_index`` and ``part_age`` there.

    Examples
    --------
    >>> a, b = synthetic_transcript(20, facts=1), synthetic_transcript(20, seed=1, facts=1)
    >>> joined = concatenate([a, b], name="ab")
    >>> len(joined.messages) == len(a.messages) + len(b.messages), joined.facts == a.facts + b.facts
    (True, True)
    >>> [m.participant for m in joined.messages].count("System")
    1
    >>> r = joined.metadata["planted"][1]
    >>> r["part"], r["index"] == len(a.messages) + r["part_index"]
    ('synthetic-20-1', True)
    """
    messages: list[Message] = []
    facts: list[str] = []
    planted: list[dict[str, Any]] = []
    total = sum(len(t.messages) for t in transcripts)
    for t in transcripts:
        offset = len(messages)
        for m in t.messages:
            if messages and m.participant == "System":
                m = m.model_copy(update={"participant": "User"})
            messages.append(m)
        facts.extend(t.facts)
        for record in t.metadata.get("planted", []):
            index = offset + record["index"]
            planted.append(
                {
                    **record,
                    "index": index,
                    "age": age_of(index, total),
                    "part": t.name,
                    "part_index": record["index"],
                    "part_age": record["age"],
                }
            )
    probes: list[Probe] = []
    if any(t.probes for t in transcripts):  # retention reads probes first: facts join them
        probes = [
            p
            for t in transcripts
            for p in t.probes
            or [Probe(f"{t.name}/fact-{i}", "", (f,)) for i, f in enumerate(t.facts)]
        ]
    metadata: dict[str, Any] = {
        "parts": [t.name for t in transcripts],
        "dataset": _common_dataset(transcripts),
    }
    if planted:
        metadata["planted"] = planted
    return Transcript(
        name,
        messages,
        facts=facts,
        probes=probes,
        call_points=call_points(messages),
        metadata=metadata,
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
        The same seed gives the same conversation and the same facts.
    facts : int
        How many facts to plant (fewer when the conversation is short).

    User requests, agent turns that call tools (``bash``, ``read``) and verbose tool
    results; then ``facts`` facts planted (:func:`foldbench.plant.plant_facts`) in its
    user turns and tool results, spread evenly over the early, middle and late
    thirds, named by :attr:`Transcript.facts`.

    Examples
    --------
    >>> t = synthetic_transcript(60, facts=3)
    >>> len(t.messages) >= 60, len(t.facts), all(f in " ".join(m.text for m in t.messages)
    ...                                           for f in t.facts)
    (True, 3, True)
    >>> [r["age"] for r in t.metadata["planted"]]
    ['early', 'middle', 'late']
    """
    if n_messages < 8:
        raise ValueError(f"n_messages must be at least 8, got {n_messages}")
    rng = random.Random(seed)
    messages = [Message.text_message("System", "You are a careful software agent.")]
    call = 0
    while len(messages) < n_messages:
        topic = rng.choice(_TOPICS)
        ask = f"Please look at the {topic} module (ticket {rng.randrange(1000, 9999)})."
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
    transcript = Transcript(
        f"synthetic-{n_messages}-{seed}",
        messages,
        call_points=call_points(messages),
        metadata={"seed": seed, "synthetic": True, "dataset": "synthetic"},
    )
    return plant_facts(transcript, seed=seed, count=facts) if facts else transcript


# ------------------------------------------------------------------ replays


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
    pricer = RequestPricer()
    points = transcript.call_points or call_points(transcript.messages)
    label = dataset_of(transcript)
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
            system = next(
                (k for k, m in enumerate(request.messages) if m.participant != "System"),
                len(request.messages),
            )
            bills = pricer.price(
                _layout(request.messages, counter), marks, system_messages=system, blocks=blocks
            )
            priced, automatic = bills["explicit"], bills["automatic"]
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
                    dataset=label,
                    cached_automatic=automatic.cached,
                    billed_automatic=automatic.billed,
                    summarizer_billed_automatic=request.summarizer_billed_automatic,
                    summarizer_input_tokens=request.summarizer_input_tokens,
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


# ---------------------------------------------------------------------- run


def run(
    transcripts: Sequence[Transcript],
    policies: Sequence[str],
    budgets: Sequence[int],
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
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
        Worker processes (1: in this process), when no ``executor`` is given.
    progress : callable, optional
        Called with (runs done, runs in all) after each run.
    executor : Executor, optional
        Where the runs go (:mod:`foldbench.executors`; a dask cluster, say). The
        records come back in the same order, and are the same, whichever runs them.

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
    unknown = [p for p in policies if not is_known(p)]
    if unknown:
        known = sorted(policy_names(peers=True, exact=True))
        raise KeyError(
            f"unknown policies {unknown}; known policies: {', '.join(known)}, and "
            f"ours:<solver> with the suffixes {', '.join(VARIANTS)}"
        )
    check_available(policies)  # before any job, not inside a worker
    jobs = [(t, p, b) for t in transcripts for p in policies for b in budgets]
    started = time.perf_counter()
    results = (executor or LocalExecutor(workers)).map(_job, jobs, progress=progress)
    records = [r for rs in results for r in rs]
    return BenchmarkReport(
        records=records,
        budgets=list(budgets),
        policies=list(policies),
        transcripts=[t.name for t in transcripts],
        wall_seconds=time.perf_counter() - started,
    )
