"""Planted facts: strings an agent would need again, placed in a real transcript.

A real agent transcript (a SWE-agent run, a tau-bench session) carries no list of
what must be remembered of it, so a benchmark can only measure whether a policy
keeps the arguments of later tool calls in view. :func:`plant_facts` adds such a
list: it appends a natural line to a few of the transcript's tool results and
user turns (``Note: the deploy token for staging is T-48213-C.``) at several
ages, early, middle and late in the conversation, and names the planted strings
as the transcript's :attr:`~foldbench.loaders.Transcript.facts` and
:attr:`~foldbench.loaders.Transcript.probes`. The benchmark then searches the
final request of every replay for each of them as a whole word.

Each fact is a fresh code, ticket id, measurement with its unit, path or hash
prefix that occurs nowhere else in the transcript (nor in the texts passed as
``avoid``), so finding it in a request shows that the message it was planted in,
or a summary that kept it, is still in view. Only text is changed: no message is
added or removed, tool calls stay paired with their results, and neither the
system prompt nor the newest message is touched. Everything is drawn from a
seeded :class:`random.Random`: the same transcript and seed give the same bytes.

:func:`plant_parts` plants each of several transcripts that are to be joined
(:func:`foldbench.benchmark.concatenate`), each with its own early, middle and
late facts, none of them occurring in any of the parts.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from context_manager.messages import ImageBlock, Message, TextBlock, ToolResultBlock, text_of

from .loaders import Probe, Transcript

__all__ = ["FACT_AGES", "PLANT_KINDS", "age_of", "plant_facts", "plant_parts"]

Age = Literal["early", "middle", "late"]
Kind = Literal["tool_result", "user"]

FACT_AGES: tuple[Age, ...] = ("early", "middle", "late")
"""The ages of a fact: planted in the first, second or last third of the messages."""

PLANT_KINDS: tuple[Kind, ...] = ("tool_result", "user")
"""Where a fact goes: a tool result's text, or the text of a user turn."""

_MAX_DRAWS = 1000
"""Redraws of one fact before giving up (a collision is rare: the codes are long)."""

_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"  # no I or O: they read as digits
_HEX = "0123456789abcdef"

# Phrasings, by where the line goes; {what} and {value} come from a fact maker.
_TEMPLATES: dict[Kind, tuple[str, ...]] = {
    "tool_result": (
        "Note: {what} is {value}.",
        "[note] {what}: {value}",
        "Remember for later: {what} is {value}.",
        "(info) {what} is {value}",
    ),
    "user": (
        "For later: {what} is {value}.",
        "By the way, {what} is {value}.",
        "Please keep in mind that {what} is {value}.",
        "Also, {what} is {value}; I will need it again.",
    ),
}


def _code(rng: random.Random) -> str:
    return f"{rng.choice(_LETTERS)}-{rng.randrange(10_000, 100_000)}-{rng.choice(_LETTERS)}"


def _ticket(rng: random.Random) -> str:
    return f"{rng.choice(('INC', 'OPS', 'SUP', 'REL', 'SEC'))}-{rng.randrange(1000, 100_000)}"


def _confirmation(rng: random.Random) -> str:
    chars = [rng.choice(_LETTERS) for _ in range(4)] + [str(rng.randrange(10)) for _ in range(2)]
    rng.shuffle(chars)
    return "".join(chars)


def _path(rng: random.Random) -> str:
    folder = rng.choice(("backups", "releases", "exports", "keys", "snapshots"))
    job = f"{rng.choice(('run', 'job', 'batch'))}-{rng.randrange(100, 100_000)}"
    name = rng.choice(("dump.tar.gz", "manifest.json", "state.db", "bundle.zip"))
    return f"/srv/{folder}/{job}/{name}"


def _hash(rng: random.Random) -> str:
    return "".join(rng.choice(_HEX) for _ in range(10))


def _measure(unit: str) -> Callable[[random.Random], str]:
    return lambda rng: f"{rng.randrange(1000, 100_000)} {unit}"


# (what it is, how its value is drawn): the kinds of thing an agent needs again.
_MAKERS: tuple[tuple[str, Callable[[random.Random], str]], ...] = (
    ("the deploy token for staging", _code),
    ("the access code of the build box", _code),
    ("the one-time code for the vault", _code),
    ("the ticket tracking this work", _ticket),
    ("the incident id of the outage", _ticket),
    ("the customer's confirmation code", _confirmation),
    ("the booking reference to quote", _confirmation),
    ("the path of the database backup", _path),
    ("the path of the export asked for", _path),
    ("the commit of the last good build", _hash),
    ("the hash prefix of the approved config", _hash),
    ("the peak memory of the nightly build", _measure("MiB")),
    ("the p99 latency of the last load test", _measure("ms")),
    ("the size of the release artifact", _measure("KiB")),
)


def age_of(index: int, length: int) -> Age:
    """The age of message ``index`` of ``length``: the third of the messages it falls in.

    Parameters
    ----------
    index : int
        A message index, ``0 <= index < length``.
    length : int
        The number of messages.

    Returns
    -------
    {"early", "middle", "late"}

    Examples
    --------
    >>> [age_of(i, 9) for i in (0, 2, 3, 5, 6, 8)]
    ['early', 'early', 'middle', 'middle', 'late', 'late']
    """
    if not 0 <= index < length:
        raise ValueError(f"index {index} is not a message of {length}")
    return FACT_AGES[min(2, 3 * index // length)]


class _Taken:
    """What a new fact must not occur in, case-folded: texts, and the facts drawn so far."""

    def __init__(self, texts: Iterable[str]) -> None:
        # one string (no fact holds a newline, so none is found across two texts): one
        # search a draw, however many messages
        self.texts = ["\n".join(texts).casefold()]
        self.facts: list[str] = []

    def clashes(self, value: str, line: str) -> bool:
        folded, folded_line = value.casefold(), line.casefold()
        return (
            folded_line.count(folded) != 1
            or any(folded in t for t in self.texts)
            or any(f in folded_line for f in self.facts)
        )

    def add(self, value: str, line: str) -> None:
        self.facts.append(value.casefold())
        self.texts.append(line.casefold())


def _candidates(messages: Sequence[Message], user: str) -> list[tuple[int, Kind]]:
    """The messages a fact may go in, with their kind: not a system prompt, not the
    newest message, and a tool result or a user turn holding text."""
    out: list[tuple[int, Kind]] = []
    for i, m in enumerate(messages[:-1]):
        if m.participant == "System":
            continue
        if any(isinstance(b, ToolResultBlock) for b in m.content):
            out.append((i, "tool_result"))
        elif m.participant == user and any(isinstance(b, TextBlock) for b in m.content):
            out.append((i, "user"))
    return out


def _choose(
    candidates: Sequence[tuple[int, Kind]],
    length: int,
    count: int,
    ages: Sequence[Age],
    rng: random.Random,
) -> list[tuple[int, Kind]]:
    """Messages for ``count`` facts, spread evenly over ``ages`` (the extra ones of an
    uneven split go to ages drawn by ``rng``), at most one a message, the kinds taking
    turns within each age. An age with too few messages leaves its share to the others."""
    share = {age: count // len(ages) for age in ages}
    for age in rng.sample(list(ages), count % len(ages)):
        share[age] += 1
    used = {kind: 0 for kind in PLANT_KINDS}
    left = list(candidates)
    chosen: list[tuple[int, Kind]] = []

    def take(pool: list[tuple[int, Kind]]) -> None:
        fewest = min(used[k] for k in PLANT_KINDS if any(c[1] == k for c in pool))
        kinds = [k for k in PLANT_KINDS if used[k] == fewest and any(c[1] == k for c in pool)]
        kind = kinds[0] if len(kinds) == 1 else rng.choice(kinds)
        pick = rng.choice([c for c in pool if c[1] == kind])
        used[kind] += 1
        chosen.append(pick)
        left.remove(pick)

    short = 0
    for age in ages:
        for _ in range(share[age]):
            pool = [c for c in left if age_of(c[0], length) == age]
            if pool:
                take(pool)
            else:
                short += 1
    for _ in range(min(short, len(left))):
        take(left)
    return sorted(chosen)


def _draw(rng: random.Random, kind: Kind, taken: _Taken, said: set[str]) -> tuple[str, str, str]:
    """A fact that clashes with nothing taken: (what it is, its value, the line). What
    it is is not one of ``said`` (the transcript's facts so far) while others are left,
    so no question about one transcript has two answers."""
    makers = [m for m in _MAKERS if m[0] not in said] or list(_MAKERS)
    for _ in range(_MAX_DRAWS):
        what, make = rng.choice(makers)
        value = make(rng)
        line = rng.choice(_TEMPLATES[kind]).format(what=what, value=value)
        if not taken.clashes(value, line):
            taken.add(value, line)
            return what, value, line
    raise RuntimeError(f"no fresh fact after {_MAX_DRAWS} draws")  # pragma: no cover


def _appended(text: str, line: str, sep: str) -> str:
    return f"{text}{'' if not text or text[-1].isspace() else sep}{line}"


def _with_line(message: Message, kind: Kind, line: str) -> tuple[Message, int]:
    """``message`` with ``line`` appended to the text of its last tool result (kind
    ``tool_result``) or last text block (kind ``user``), and that block's index."""
    blocks = list(message.content)
    if kind == "tool_result":
        at = max(i for i, b in enumerate(blocks) if isinstance(b, ToolResultBlock))
        result = blocks[at]
        assert isinstance(result, ToolResultBlock)
        content: str | list[TextBlock | ImageBlock]
        if isinstance(result.content, str):
            content = _appended(result.content, line, "\n")
        else:
            content = list(result.content)
            texts = [(j, b) for j, b in enumerate(content) if isinstance(b, TextBlock)]
            if texts:
                j, last = texts[-1]
                content[j] = TextBlock(text=_appended(last.text, line, "\n"))
            else:
                content.append(TextBlock(text=line))
        blocks[at] = result.model_copy(update={"content": content})
    else:
        at = max(i for i, b in enumerate(blocks) if isinstance(b, TextBlock))
        text = blocks[at]
        assert isinstance(text, TextBlock)
        blocks[at] = TextBlock(text=_appended(text.text, line, " "))
    return message.model_copy(update={"content": tuple(blocks)}), at


def _plant(
    transcript: Transcript,
    seed: int,
    count: int,
    ages: Sequence[Age],
    user: str,
    taken: _Taken,
) -> Transcript:
    if count < 0:
        raise ValueError(f"count must be at least 0, got {count}")
    if not ages or any(a not in FACT_AGES for a in ages) or len(set(ages)) != len(ages):
        raise ValueError(f"ages must be distinct ones of {', '.join(FACT_AGES)}, got {ages!r}")
    # seeded by the transcript's name too: parts planted with one seed draw different facts
    rng = random.Random(f"foldbench.plant/{seed}/{transcript.name}")
    messages = list(transcript.messages)
    chosen = _choose(_candidates(messages, user), len(messages), count, ages, rng)
    records: list[dict[str, Any]] = []
    probes: list[Probe] = []
    said: set[str] = set()
    for index, kind in chosen:
        what, value, line = _draw(rng, kind, taken, said)
        said.add(what)
        messages[index], block = _with_line(messages[index], kind, line)
        age = age_of(index, len(messages))
        records.append({"fact": value, "index": index, "block": block, "age": age, "kind": kind})
        probes.append(
            Probe(f"{transcript.name}/planted-{len(probes)}", f"What is {what}?", (value,), line)
        )
    old_probes = transcript.probes or [
        Probe(f"{transcript.name}/fact-{i}", "", (f,)) for i, f in enumerate(transcript.facts)
    ]
    metadata = dict(transcript.metadata)
    metadata["planted"] = [*metadata.get("planted", []), *records]
    metadata["plant_seed"] = seed
    return dataclasses.replace(
        transcript,
        messages=messages,
        facts=[*transcript.facts, *(r["fact"] for r in records)],
        probes=[*old_probes, *probes] if probes else list(transcript.probes),
        metadata=metadata,
    )


def _known(transcript: Transcript) -> list[str]:
    """Every text of a transcript a new fact must not occur in."""
    answers = [a for p in transcript.probes for a in p.answers]
    return [*(text_of(m.content) for m in transcript.messages), *transcript.facts, *answers]


def plant_facts(
    transcript: Transcript,
    *,
    seed: int = 0,
    count: int = 6,
    ages: Sequence[Age] = FACT_AGES,
    user: str = "User",
    avoid: Iterable[str] = (),
) -> Transcript:
    """Plant ``count`` facts in a transcript's tool results and user turns, spread
    evenly over ``ages``.

    Each fact is a fresh string an agent would need again (an access code, a
    ticket id, a confirmation code, a path, a hash prefix, a measurement with its
    unit) appended as a natural line to the text of one message: ``Note: the
    deploy token for staging is T-48213-C.`` after a tool result's output, ``By the
    way, the customer's confirmation code is ZK93QF.`` after a user turn's text. A
    message's age is the third of the transcript it falls in (:func:`age_of`);
    within an age the message is drawn, the kinds taking turns where both are
    there. At most one fact goes in a message; an age with too few messages leaves
    its share to the others, and a transcript with fewer eligible messages than
    ``count`` gets fewer facts.

    Parameters
    ----------
    transcript : Transcript
        The conversation. Its system prompts (``System`` messages) and its newest
        message are never changed; only text is appended, so the message count,
        tool pairing and call points stay as they are.
    seed : int
        The draws are seeded by ``seed`` and the transcript's name: the same
        transcript and seed give the same result, byte for byte.
    count : int
        How many facts to plant (0: none; the transcript is returned as a copy with
        empty planting records).
    ages : sequence of {"early", "middle", "late"}
        The ages to spread the facts over, each given once.
    user : str
        The participant of user turns.
    avoid : iterable of str
        Further texts no fact may occur in (the other parts of a conversation the
        transcript will join, facts planted elsewhere). The transcript's own text,
        facts and probe answers are always avoided.

    Returns
    -------
    Transcript
        The same name, call points and metadata, with the planted messages. Its
        :attr:`~foldbench.loaders.Transcript.facts` are the old facts then the
        planted ones; its probes are the old probes (or one per old fact), then one
        per planted fact (``<name>/planted-<k>``, the question ``What is <what>?``,
        the line as its source). ``metadata["planted"]`` lists, per fact, its
        ``fact``, message ``index``, ``block`` (in the message's content), ``age``
        and ``kind`` (``"tool_result"`` or ``"user"``); ``metadata["plant_seed"]``
        is ``seed``.

    Raises
    ------
    ValueError
        For a negative ``count``, or ``ages`` that are not distinct known ages.

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> t = Transcript("chat", [Message.text_message("System", "Be brief.")] + [
    ...     Message.text_message(who, f"turn {i}")
    ...     for i, who in enumerate(["User", "Claude"] * 6)])
    >>> planted = plant_facts(t, seed=1, count=3)
    >>> [(r["index"], r["age"], r["kind"]) for r in planted.metadata["planted"]]
    [(3, 'early', 'user'), (7, 'middle', 'user'), (11, 'late', 'user')]
    >>> planted.messages[3].text
    'turn 2 Please keep in mind that the ticket tracking this work is SEC-6739.'
    >>> planted.facts == [r["fact"] for r in planted.metadata["planted"]]
    True
    >>> plant_facts(t, seed=1, count=3) == planted  # the same seed, the same result
    True
    """
    taken = _Taken([*_known(transcript), *avoid])
    return _plant(transcript, seed, count, ages, user, taken)


def plant_parts(
    transcripts: Sequence[Transcript],
    *,
    seed: int = 0,
    count: int = 6,
    ages: Sequence[Age] = FACT_AGES,
    user: str = "User",
) -> list[Transcript]:
    """:func:`plant_facts` on each of several transcripts that are to be joined: each
    part gets its own facts over ``ages``, and no fact occurs in any part (nor is one
    fact found inside another), so the joined conversation states each fact once.

    Parameters
    ----------
    transcripts : sequence of Transcript
        The parts, in order.
    seed, count, ages, user
        As for :func:`plant_facts`, for each part (the draws are seeded by the part's
        name too, so parts differ).

    Returns
    -------
    list of Transcript
        The planted parts, in order.

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> chat = [Message.text_message(w, f"turn {i}") for i, w in enumerate(["User", "Claude"] * 4)]
    >>> a, b = plant_parts([Transcript("a", chat), Transcript("b", chat)], count=2)
    >>> len(a.facts), len(b.facts), set(a.facts) & set(b.facts)
    (2, 2, set())
    """
    taken = _Taken(text for t in transcripts for text in _known(t))
    return [_plant(t, seed, count, ages, user, taken) for t in transcripts]
