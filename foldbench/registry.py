"""The named policies of the benchmark: ours, the baselines and the peers.

Each peer is registered once with the packages it imports and one line saying
what it is and where it comes from; the report prints that line beside its
rows. ``ours:<solver>`` names the context manager with any registered solver
(``ours:<solver>+full`` states the whole history on every call, and
``ours:<solver>+source-only`` writes each memory from its chunk alone).

>>> describe("observation-masking").startswith("Observation masking")
True
>>> "ours:kv-stable" in policy_names(peers=False)
True

Every policy says what the harness sets on it at a budget (:func:`peer_settings`):

>>> peer_settings("observation-masking", 4000).settings["fit to"]
'4000'
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from context_manager.tokens import TiktokenCounter, TokenCounter

from .peers.base import Policy
from .peers.settings import PeerSettings

__all__ = [
    "FULL_HISTORY",
    "PEERS",
    "PeerSettings",
    "PolicyInfo",
    "check_available",
    "describe",
    "is_known",
    "is_ours",
    "make_policy",
    "missing_packages",
    "peer_settings",
    "policy_names",
]

FULL_HISTORY = "+full"
"""Suffix of an ``ours:<solver>`` policy that states the whole history on every call
(``fold_window=False``): the reference the windowed compile is measured against."""
WITH_CONTEXT = "+with-context"
"""Suffix of an ``ours:<solver>`` policy whose memories are each written with the context
before their chunk (``compression_source_only=False``): the head, recall ladder and
unremembered middle in the summariser's request, as the strategy does by default."""
README_LOOP = "+readme-loop"
"""Suffix of an ``ours:<solver>`` policy whose host runs the README's agent loop: one
``tick()`` per model call and a plain ``compile()`` (a refusal is the request's error)."""
VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    FULL_HISTORY: ({"fold_window": False}, "the whole history stated on every call"),
    README_LOOP: (
        {"loop": "readme"},
        "its host running the README's loop (one tick() per call, a plain compile())",
    ),
    WITH_CONTEXT: (
        {"compression_source_only": False},
        "each memory written with the context before its chunk (head, recall, middle)",
    ),
}
"""The suffixes an ``ours:<solver>`` name may end with (in any order): the strategy
options each sets, and what the report says of it."""


def _variant(name: str) -> tuple[str, dict[str, Any], list[str]]:
    """The solver of ``ours:<solver><suffix>...``, the options its suffixes set and what
    they are."""
    method = name.removeprefix("ours:")
    options: dict[str, Any] = {}
    said: list[str] = []
    found = True
    while found:
        found = False
        for suffix, (sets, about) in VARIANTS.items():
            if method.endswith(suffix):
                method = method.removesuffix(suffix)
                options.update(sets)
                said.insert(0, about)
                found = True
    return method, options, said


BENCH_EXTRA = "pip install 'context-folding[bench]'"


@dataclass(frozen=True)
class PolicyInfo:
    """One named policy: where its class lives, what it needs, what it is.

    Attributes
    ----------
    name : str
        The name the benchmark and ``ctxfold -p`` take.
    module, cls : str
        ``foldbench.peers.<module>.<cls>``, imported only when the policy is built.
    about : str
        One line: what the policy is and where it comes from.
    requires : tuple of str
        The importable packages it needs (empty: only the library's own).
    options : dict
        Keyword arguments for ``cls`` beside the counter.
    ours : bool
        Ours (the context manager or its stateless assembly) rather than a peer.
    """

    name: str
    module: str
    cls: str
    about: str
    requires: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    ours: bool = False

    def build(self, counter: TokenCounter) -> Policy:
        """A fresh instance counting with ``counter``."""
        module = importlib.import_module(f"foldbench.peers.{self.module}")
        policy: Policy = getattr(module, self.cls)(counter=counter, **self.options)
        return policy


_LC = ("langchain_core", "langchain")
PEERS: dict[str, PolicyInfo] = {
    info.name: info
    for info in (
        PolicyInfo(
            "assemble",
            "ours",
            "AssemblePolicy",
            "Ours, stateless: context_manager.assembly caps, prunes, then summarises the "
            "head into the system prompt; the host keeps the summary and the tail boundary "
            "and passes previous_summary on the next call, as the assembly documents.",
            ours=True,
        ),
        PolicyInfo(
            "observation-masking",
            "baselines",
            "ObservationMasking",
            "Observation masking (Lindenbauer et al., 'The Complexity Trap', 2025): old "
            "tool results replaced by a placeholder, oldest turns dropped while over budget.",
        ),
        PolicyInfo(
            "anthropic-clear-tool-uses",
            "baselines",
            "ClearToolUses",
            "Anthropic's clear_tool_uses context edit (client side): the oldest tool "
            "results cleared past a trigger, keeping the newest.",
        ),
        PolicyInfo(
            "langchain-trim-messages",
            "langchain_peers",
            "TrimMessagesPolicy",
            "LangChain trim_messages (langchain-core), strategy 'last': the newest "
            "messages that fit.",
            requires=_LC,
        ),
        PolicyInfo(
            "langchain-summarization-middleware",
            "langchain_peers",
            "SummarizationMiddlewarePolicy",
            "LangChain v1 SummarizationMiddleware (langchain): the older part summarised "
            "into one message once a trigger is crossed.",
            requires=_LC,
        ),
        PolicyInfo(
            "langchain-clear-tool-uses",
            "langchain_peers",
            "ClearToolUsesPolicy",
            "LangChain v1 ContextEditingMiddleware with ClearToolUsesEdit (langchain).",
            requires=_LC,
        ),
        PolicyInfo(
            "llamaindex-memory",
            "llamaindex_peers",
            "MemoryPolicy",
            "LlamaIndex Memory (llama-index-core): a FIFO chat queue flushed by token limit.",
            requires=("llama_index.core",),
            options={"facts": False},
        ),
        PolicyInfo(
            "llamaindex-memory-facts",
            "llamaindex_peers",
            "MemoryPolicy",
            "LlamaIndex Memory with its FactExtractionMemoryBlock (llama-index-core).",
            requires=("llama_index.core",),
            options={"facts": True},
        ),
        PolicyInfo(
            "swe-agent-last-5-observations",
            "swe_agent_peers",
            "LastNObservationsPolicy",
            "SWE-agent LastNObservations history processor (n=5), reimplemented from "
            "SWE-agent 1.1.0 sweagent/agent/history_processors.py; not on PyPI.",
            options={"n": 5, "polling": 1},
        ),
        PolicyInfo(
            "swe-agent-last-5-observations-polling",
            "swe_agent_peers",
            "LastNObservationsPolicy",
            "SWE-agent LastNObservations with polling=5 (the hidden range moves every 5 "
            "observations), reimplemented from SWE-agent 1.1.0; not on PyPI.",
            options={"n": 5, "polling": 5},
        ),
        PolicyInfo(
            "langmem-summarize-messages",
            "langmem_peers",
            "SummarizeMessagesPolicy",
            "LangMem summarize_messages (langmem.short_term): older messages folded into "
            "a running summary past a token threshold.",
            requires=("langmem", "langchain_core"),
        ),
        PolicyInfo(
            "complexity-trap-hybrid",
            "swe_agent_peers",
            "ComplexityTrapHybrid",
            "The Complexity Trap hybrid (Lindenbauer et al., JetBrains, 2025): summaries of "
            "43 turns plus masking to 10 observations; reimplemented, not on PyPI.",
        ),
    )
}
"""Every named policy but ``ours:<solver>``, in report order."""


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def missing_packages(name: str) -> list[str]:
    """The packages policy ``name`` needs that are not installed here (``[]`` if none)."""
    info = PEERS.get(name)
    return [] if info is None else [m for m in info.requires if not _importable(m)]


def policy_names(*, peers: bool | None = None, exact: bool = False) -> list[str]:
    """Names :func:`make_policy` accepts.

    Parameters
    ----------
    peers : bool, optional
        Include the peers that need packages of the ``bench`` extra: ``True`` all of
        them, ``False`` none, ``None`` (default) those installed here.
    exact : bool
        Include ``ours:exact`` (proves optimality with CP-SAT: slow on long runs).
    """
    import solvers

    names = [
        f"ours:{m}"
        for m in solvers.names()
        if not solvers.capabilities(m).oracle
        and (exact or not solvers.capabilities(m).searches_slowly)
    ]
    for name, info in PEERS.items():
        if not info.requires or peers or (peers is None and not missing_packages(name)):
            names.append(name)
    return names


def is_known(name: str) -> bool:
    """Whether :func:`make_policy` builds ``name``: a name of :func:`policy_names` (all
    peers, ``ours:exact`` included), or ``ours:<solver>`` with variant suffixes
    (:data:`VARIANTS`).

    >>> is_known("ours:kv-stable+with-context"), is_known("ours:nope+full")
    (True, False)
    """
    if name in policy_names(peers=True, exact=True):
        return True
    if not name.startswith("ours:"):
        return False
    import solvers

    method, options, _ = _variant(name)
    return bool(options) and method in solvers.names()


def is_ours(name: str) -> bool:
    """Whether policy ``name`` is this library's own (``ours:*`` and those registered
    with ``ours=True``) rather than a peer.

    >>> is_ours("ours:kv-stable"), is_ours("assemble"), is_ours("observation-masking")
    (True, True, False)
    """
    info = PEERS.get(name)
    return name.startswith("ours:") or (info is not None and info.ours)


def describe(name: str) -> str:
    """The one line the report prints beside policy ``name``."""
    if name.startswith("ours:"):
        method, _, said = _variant(name)
        return (
            f"Ours: the context manager with the autobiographical strategy and the "
            f"{method} solver" + "".join(f", {about}" for about in said) + "."
        )
    if name not in PEERS:
        raise KeyError(f"unknown policy {name!r}")
    return PEERS[name].about


def check_available(policies: Sequence[str]) -> None:
    """Raise before a run when a named peer's package is not installed.

    Raises
    ------
    ModuleNotFoundError
        Naming each such policy and the packages it lacks.
    """
    missing = {p: missing_packages(p) for p in policies}
    lacking = {p: m for p, m in missing.items() if m}
    if lacking:
        detail = "; ".join(f"{p} needs {', '.join(m)}" for p, m in lacking.items())
        raise ModuleNotFoundError(
            f"{detail}: these come with the bench extra: {BENCH_EXTRA}",
            name=next(iter(lacking.values()))[0],
        )


def make_policy(name: str, *, counter: TokenCounter | None = None) -> Policy:
    """A fresh policy called ``name`` (see :func:`policy_names`).

    Raises
    ------
    KeyError
        For an unknown name; the message lists the valid ones.
    ModuleNotFoundError
        For a peer whose package (the ``bench`` extra) is not installed.
    """
    counter = counter if counter is not None else TiktokenCounter()
    if name.startswith("ours:"):
        import solvers

        from .peers.ours import FoldingPolicy

        method, options, _ = _variant(name)
        if method not in solvers.names():
            raise KeyError(f"unknown solver {method!r} in policy {name!r}")
        return FoldingPolicy(method, counter=counter, **options)
    if name not in PEERS:
        known = policy_names(peers=True, exact=True)
        raise KeyError(f"unknown policy {name!r}; known policies: {', '.join(known)}")
    check_available([name])
    return PEERS[name].build(counter)


def peer_settings(name: str, budget: int, *, system_tokens: int = 0) -> PeerSettings:
    """Every setting the harness chooses for policy ``name`` at ``budget``, and why.

    The policy is built (as :func:`make_policy` builds it) and asked for its
    ``settings(budget)``: the values it passes to its library, resolved at that budget,
    the library and its installed version, and a reason for each value.

    Parameters
    ----------
    name : str
        A name :func:`make_policy` accepts.
    budget : int
        The input token budget of every call.
    system_tokens : int
        The system prompt's tokens, for the sizes that leave it out (0: none).

    Returns
    -------
    PeerSettings
        Named ``name`` (a variant's suffixes included).

    Raises
    ------
    KeyError
        For an unknown name.
    ModuleNotFoundError
        For a peer whose package is not installed.

    Examples
    --------
    >>> s = peer_settings("swe-agent-last-5-observations", 8000)
    >>> s.values["n"], s.library.startswith("reimplemented from SWE-agent 1.1.0")
    (5, True)
    >>> peer_settings("ours:kv-stable+full", 4000).settings["fold_window"]
    'False'
    """
    policy: Any = make_policy(name)
    try:
        found: PeerSettings = policy.settings(budget, system_tokens=system_tokens)
    finally:
        close = getattr(policy, "close", None)
        if callable(close):
            close()
    return dataclasses.replace(found, policy=name)
