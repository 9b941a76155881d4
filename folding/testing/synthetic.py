"""Seeded fold-problem generators for examples, tests and benchmarks.

Every generator is deterministic: the same arguments (and seed) give the same
:class:`~folding.FoldProblem`. Leaves are named ``m0, m1, ...`` in order and
summaries ``L<level>-<k>``, numbered from the oldest at each level. The
generators need nothing beyond the library's own dependencies (numpy), so
examples and tests of any layer can use them.

Examples
--------
>>> from folding.testing import chronicle
>>> problem = chronicle(12, chunk=6, leaf_tokens=100)
>>> problem.n_leaves, [s.id for s in problem.summaries]
(12, ['L1-0', 'L1-1'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..frontiers import cheapest_frontier
from ..model import FoldProblem

__all__ = ["agent_history", "chronicle", "chunked_history", "random_problem", "summaries_over"]


def summaries_over(
    leaf_ids: list[str],
    chunk_sizes: list[int],
    *,
    merge: int = 6,
    recall_tokens: int | list[int] = 200,
    max_level: int = 8,
    start: int = 0,
) -> list[dict[str, Any]]:
    """Summary dicts for a chronicle: one L1 per chunk, then merges ``merge`` at a time.

    Chunks tile ``leaf_ids`` from position ``start``; leaves after the last
    chunk stay uncovered. At every level, parentless summaries are merged
    ``merge`` at a time from the oldest; a remainder smaller than ``merge``
    stays unmerged (as in a live store, where the newest siblings wait).

    Parameters
    ----------
    leaf_ids : list of str
        The leaves, oldest first.
    chunk_sizes : list of int
        The number of leaves under each L1 summary, oldest first.
    merge : int, default 6
        How many summaries of one level a summary of the next level covers (>= 2).
    recall_tokens : int or list of int, default 200
        The tokens of every summary, or a list of prices used in turn (the k-th
        summary made costs ``recall_tokens[k % len(recall_tokens)]``).
    max_level : int, default 8
        No summary above this level is made.
    start : int, default 0
        The position of the first leaf of the first chunk.

    Returns
    -------
    list of dict
        JSON-ready summaries (``id``, ``level``, ``tokens``, ``children``), the L1s
        first, then each level in turn.

    Raises
    ------
    ValueError
        When ``merge`` < 2.

    Examples
    --------
    >>> [(s["id"], s["children"]) for s in summaries_over(["a", "b", "c", "d"], [2, 2], merge=2)]
    [('L1-0', ['a', 'b']), ('L1-1', ['c', 'd']), ('L2-0', ['L1-0', 'L1-1'])]
    """
    if merge < 2:
        raise ValueError(f"merge must be >= 2, got {merge}")
    out: list[dict[str, Any]] = []

    def price(i: int) -> int:
        if isinstance(recall_tokens, int):
            return recall_tokens
        return recall_tokens[i % len(recall_tokens)]

    pos = start
    level_ids: list[str] = []
    for c, size in enumerate(chunk_sizes):
        sid = f"L1-{c}"
        out.append(
            {
                "id": sid,
                "level": 1,
                "tokens": price(len(out)),
                "children": leaf_ids[pos : pos + size],
            }
        )
        level_ids.append(sid)
        pos += size
    level = 1
    while len(level_ids) >= merge and level < max_level:
        level += 1
        nxt: list[str] = []
        for g in range(len(level_ids) // merge):
            sid = f"L{level}-{g}"
            children = level_ids[g * merge : (g + 1) * merge]
            out.append({"id": sid, "level": level, "tokens": price(len(out)), "children": children})
            nxt.append(sid)
        level_ids = nxt
    return out


def chronicle(
    n_leaves: int,
    *,
    leaf_tokens: int = 1000,
    chunk: int = 6,
    merge: int = 6,
    recall_tokens: int = 200,
    total: int | None = None,
    target: int | None = None,
    head: int = 0,
    tail: int = 0,
    fixed_tokens: int = 0,
) -> FoldProblem:
    """A regular chronicle: equal leaves, an L1 per ``chunk`` leaves, merges by ``merge``.

    Head and tail leaves are left out of every chunk. The default budget is
    half the raw tokens.

    Parameters
    ----------
    n_leaves : int
        The number of leaves.
    leaf_tokens : int, default 1000
        The tokens of every leaf.
    chunk : int, default 6
        Leaves under each L1 summary; a middle remainder shorter than ``chunk``
        stays uncovered.
    merge : int, default 6
        Summaries of one level under each summary of the next (see
        :func:`summaries_over`).
    recall_tokens : int, default 200
        The tokens of every summary.
    total : int, optional
        The budget's wall (default: half the raw tokens, fixed tokens included).
    target : int, optional
        The budget's target (default: the model's).
    head, tail : int, default 0
        The number of leaves in the head and the tail zones.
    fixed_tokens : int, default 0
        The problem's fixed tokens.

    Returns
    -------
    FoldProblem

    Raises
    ------
    ValueError
        When ``head + tail`` exceeds ``n_leaves``.

    Examples
    --------
    >>> p = chronicle(90)
    >>> sorted({s.level for s in p.summaries}), len(p.summaries)
    ([1, 2], 17)
    """
    ids = [f"m{i}" for i in range(n_leaves)]
    middle = n_leaves - head - tail
    if middle < 0:
        raise ValueError(f"head + tail = {head + tail} exceeds n_leaves = {n_leaves}")
    sizes = [chunk] * (middle // chunk)
    zone = ["head"] * head + ["middle"] * middle + ["tail"] * tail
    leaves = [{"id": i, "tokens": leaf_tokens, "zone": z} for i, z in zip(ids, zone, strict=True)]
    raw = n_leaves * leaf_tokens + fixed_tokens
    budget: dict[str, Any] = {"total": total if total is not None else max(1, raw // 2)}
    if target is not None:
        budget["target"] = target
    return FoldProblem.model_validate(
        {
            "leaves": leaves,
            "summaries": summaries_over(
                ids, sizes, merge=merge, recall_tokens=recall_tokens, start=head
            ),
            "budget": budget,
            "fixed_tokens": fixed_tokens,
        }
    )


def random_problem(
    seed: int,
    *,
    n_leaves: int = 200,
    mean_tokens: int = 400,
    chunk_range: tuple[int, int] = (3, 9),
    merge: int = 6,
    recall_tokens: int = 300,
    head: int = 2,
    tail: int = 10,
    n_pins: int = 0,
    n_locks: int = 0,
    dag: bool = False,
    budget_ratio: float = 0.5,
    carry_previous: bool = False,
) -> FoldProblem:
    """A seeded random problem shaped like a real conversation.

    Leaf tokens are log-normal around ``mean_tokens``; chunk sizes are drawn in
    ``chunk_range``; salience is drawn in [0.2, 1]. With ``dag`` an extra L1
    with shifted boundaries is added over a covered run. Pins are raw pins or
    ``max_level`` caps on single middle leaves; locks hold a carried level
    (``carry_previous`` carries the cheapest frontier so locks bite). The
    budget is ``budget_ratio`` x raw tokens. Same seed, same problem.

    Parameters
    ----------
    seed : int
        The seed of every draw.
    n_leaves : int, default 200
        The number of leaves.
    mean_tokens : int, default 400
        The median of the log-normal leaf tokens (at least 1 each).
    chunk_range : tuple of int, default (3, 9)
        The smallest and largest chunk under an L1 summary (inclusive).
    merge : int, default 6
        Summaries of one level under each summary of the next.
    recall_tokens : int, default 300
        The tokens of every summary.
    head : int, default 2
        The number of head leaves (at most ``n_leaves``).
    tail : int, default 10
        The number of tail leaves (at most what the head leaves).
    n_pins : int, default 0
        Pins drawn on middle leaves (at most the number of middle leaves).
    n_locks : int, default 0
        Locks drawn on middle leaves (duplicates merge); any lock carries the
        cheapest frontier as ``previous``.
    dag : bool, default False
        Add an L1 summary overlapping the first chunks, so the hierarchy is not
        laminar.
    budget_ratio : float, default 0.5
        The wall as a fraction of the raw tokens (at least 1 token).
    carry_previous : bool, default False
        Carry the cheapest frontier as ``previous`` even when no lock is drawn.

    Returns
    -------
    FoldProblem

    Examples
    --------
    >>> a = random_problem(3, n_leaves=60, dag=True, n_pins=2)
    >>> a == random_problem(3, n_leaves=60, dag=True, n_pins=2), a.hierarchy.is_laminar
    (True, False)
    """
    rng = np.random.default_rng(seed)
    ids = [f"m{i}" for i in range(n_leaves)]
    tokens = np.maximum(1, rng.lognormal(np.log(mean_tokens), 0.8, n_leaves)).astype(int)
    salience = np.round(rng.uniform(0.2, 1.0, n_leaves), 3)
    head = min(head, n_leaves)
    tail = min(tail, n_leaves - head)
    zones = ["head"] * head + ["middle"] * (n_leaves - head - tail) + ["tail"] * tail
    sizes: list[int] = []
    covered = head
    while True:
        size = int(rng.integers(chunk_range[0], chunk_range[1] + 1))
        if covered + size > n_leaves - tail:
            break
        sizes.append(size)
        covered += size
    summaries = summaries_over(ids, sizes, merge=merge, recall_tokens=recall_tokens, start=head)
    if dag and sizes and sizes[0] > 1:
        a = head + 1
        b = min(head + sizes[0] + (sizes[1] if len(sizes) > 1 else 0) // 2, covered)
        summaries.append(
            {"id": "L1-alt", "level": 1, "tokens": recall_tokens, "children": ids[a:b]}
        )
    leaves = [
        {"id": i, "tokens": int(t), "salience": float(s), "zone": z}
        for i, t, s, z in zip(ids, tokens, salience, zones, strict=True)
    ]
    middle = [i for i, z in zip(ids, zones, strict=True) if z == "middle"]
    pins: list[dict[str, Any]] = []
    for _ in range(min(n_pins, len(middle))):
        leaf = middle[int(rng.integers(len(middle)))]
        if rng.random() < 0.5:
            pins.append({"leaves": [leaf]})
        else:
            pins.append({"leaves": [leaf], "max_level": int(rng.integers(0, 3))})
    raw = int(tokens.sum())
    data: dict[str, Any] = {
        "leaves": leaves,
        "summaries": summaries,
        "pins": pins,
        "budget": {"total": max(1, int(raw * budget_ratio))},
    }
    if carry_previous or n_locks:
        base = FoldProblem.model_validate(data)
        data["previous"] = cheapest_frontier(base) or {}
        locks = (
            sorted({middle[int(rng.integers(len(middle)))] for _ in range(n_locks)})
            if middle
            else []
        )
        data["locks"] = locks
    return FoldProblem.model_validate(data)


def chunked_history(
    n_leaves: int,
    *,
    mean_tokens: int = 900,
    spread: float = 0.3,
    target_chunk_tokens: int = 3000,
    min_chunk_leaves: int = 4,
    summary_tokens: int = 600,
    merge: int = 6,
    head: int = 0,
    seed: int = 0,
    total: int | None = None,
) -> FoldProblem:
    """A conversation chunked the way the autobiographical strategy chunks it.

    Leaf tokens are uniform in ``mean_tokens x [1 - spread, 1 + spread]``. A
    chunk closes once it holds at least ``target_chunk_tokens`` tokens and
    ``min_chunk_leaves`` leaves; the trailing partial chunk stays unsummarised.
    Summaries cost ``summary_tokens`` at every level and merge ``merge`` at a
    time. The default budget is the raw total.

    Parameters
    ----------
    n_leaves : int
        The number of leaves.
    mean_tokens : int, default 900
        The centre of the uniform leaf tokens.
    spread : float, default 0.3
        The half-width of the leaf tokens' range, as a fraction of ``mean_tokens``.
    target_chunk_tokens : int, default 3000
        The tokens a chunk must reach to close.
    min_chunk_leaves : int, default 4
        The leaves a chunk must hold to close.
    summary_tokens : int, default 600
        The tokens of every summary.
    merge : int, default 6
        Summaries of one level under each summary of the next.
    head : int, default 0
        The number of head leaves, left out of every chunk.
    seed : int, default 0
        The seed of the leaf tokens.
    total : int, optional
        The budget's wall (default: the raw tokens).

    Returns
    -------
    FoldProblem

    Examples
    --------
    >>> p = chunked_history(220)
    >>> p.n_leaves, sorted({s.level for s in p.summaries})
    (220, [1, 2, 3])
    """
    rng = np.random.default_rng(seed)
    low, high = mean_tokens * (1 - spread), mean_tokens * (1 + spread)
    tokens = np.rint(rng.uniform(low, high, n_leaves)).astype(int)
    ids = [f"m{i}" for i in range(n_leaves)]
    sizes: list[int] = []
    size = acc = 0
    for i in range(head, n_leaves):
        size += 1
        acc += int(tokens[i])
        if acc >= target_chunk_tokens and size >= min_chunk_leaves:
            sizes.append(size)
            size = acc = 0
    leaves = [
        {"id": x, "tokens": int(t), "zone": "head" if i < head else "middle"}
        for i, (x, t) in enumerate(zip(ids, tokens, strict=True))
    ]
    raw = int(tokens.sum())
    return FoldProblem.model_validate(
        {
            "leaves": leaves,
            "summaries": summaries_over(
                ids, sizes, merge=merge, recall_tokens=summary_tokens, start=head
            ),
            "budget": {"total": total if total is not None else max(1, raw)},
        }
    )


def agent_history(
    n_leaves: int,
    *,
    seed: int = 0,
    leaf_tokens: tuple[int, int] = (50, 200),
    chunk_range: tuple[int, int] = (24, 36),
    summary_tokens: tuple[int, int] = (400, 600),
    merge: int = 6,
    head: int = 2,
    tail_tokens: int = 8_000,
    total: int = 32_000,
    target_ratio: float = 0.85,
    previous: Mapping[str, int] | None = None,
) -> FoldProblem:
    """A long agent history shaped like a live store: the scale benchmarks' problem.

    Leaf tokens are uniform in ``leaf_tokens``; chunks of ``chunk_range`` leaves tile
    the middle from the oldest, each with an L1 summary; parentless summaries merge
    ``merge`` at a time, level by level, with no fixed top (a remainder smaller than
    ``merge`` waits). Summaries cost uniform ``summary_tokens``. The newest leaves
    holding about ``tail_tokens`` form the raw tail (a chunk reaching into it is not
    summarised yet); the first ``head`` leaves are the head. The wall is ``total``,
    the target ``target_ratio`` of it.

    Every draw is made per position, so ``agent_history(n - k, seed=s)`` is the same
    history minus its last ``k`` leaves (and the summaries those leaves complete):
    solve that one and pass its frontier as ``previous`` to carry it.

    Parameters
    ----------
    n_leaves : int
        The number of leaves.
    seed : int, default 0
        The seed of every draw.
    leaf_tokens : tuple of int, default (50, 200)
        The range of the leaf tokens (inclusive).
    chunk_range : tuple of int, default (24, 36)
        The range of the number of leaves under an L1 summary (inclusive).
    summary_tokens : tuple of int, default (400, 600)
        The range of the summary tokens (inclusive).
    merge : int, default 6
        Summaries of one level under each summary of the next (>= 2).
    head : int, default 2
        The number of head leaves.
    tail_tokens : int, default 8000
        The size of the raw tail: the longest run of newest leaves holding fewer
        tokens than this (never reaching into the head).
    total : int, default 32000
        The budget's wall.
    target_ratio : float, default 0.85
        The budget's target as a fraction of ``total``, in [0, 1].
    previous : mapping of str to int, optional
        The frontier carried from the previous call.

    Returns
    -------
    FoldProblem

    Raises
    ------
    ValueError
        When ``merge`` < 2 or ``target_ratio`` lies outside [0, 1].

    Examples
    --------
    >>> p = agent_history(2_000)
    >>> p.n_leaves, p.budget.total, p.budget.target, p.hierarchy.depth
    (2000, 32000, 27200, 3)
    >>> q = agent_history(1_995)
    >>> [leaf.tokens for leaf in q.leaves] == [leaf.tokens for leaf in p.leaves[:1_995]]
    True
    """
    if merge < 2:
        raise ValueError(f"merge must be >= 2, got {merge}")
    if not 0.0 <= target_ratio <= 1.0:
        raise ValueError(f"target_ratio must lie in [0, 1], got {target_ratio}")
    # independent streams, each drawn in order of position: prefixes agree
    tokens = np.random.default_rng([seed, 0]).integers(leaf_tokens[0], leaf_tokens[1] + 1, n_leaves)
    most_chunks = n_leaves // max(1, chunk_range[0]) + 1
    sizes = np.random.default_rng([seed, 1]).integers(
        chunk_range[0], chunk_range[1] + 1, most_chunks
    )
    head = min(head, n_leaves)
    newer = np.cumsum(tokens[::-1])[::-1]  # tokens at and after each leaf
    tail_start = max(head, int(np.searchsorted(-newer, -tail_tokens, side="right")))
    ids = [f"m{i}" for i in range(n_leaves)]
    zones = ["head"] * head + ["middle"] * (tail_start - head) + ["tail"] * (n_leaves - tail_start)
    leaves = [
        {"id": i, "tokens": int(t), "zone": z} for i, t, z in zip(ids, tokens, zones, strict=True)
    ]
    ends = head + np.cumsum(sizes)
    n_chunks = int(np.searchsorted(ends, tail_start, side="right"))
    price_rng = np.random.default_rng([seed, 2])
    summaries: list[dict[str, Any]] = []
    level_ids: list[str] = []
    prices = price_rng.integers(summary_tokens[0], summary_tokens[1] + 1, most_chunks)
    start = head
    for c in range(n_chunks):
        stop = int(ends[c])
        sid = f"L1-{c}"
        summaries.append(
            {"id": sid, "level": 1, "tokens": int(prices[c]), "children": ids[start:stop]}
        )
        level_ids.append(sid)
        start = stop
    level = 1
    while len(level_ids) >= merge:
        level += 1
        prices = np.random.default_rng([seed, 2, level]).integers(
            summary_tokens[0], summary_tokens[1] + 1, len(level_ids) // merge
        )
        nxt: list[str] = []
        for g in range(len(level_ids) // merge):
            sid = f"L{level}-{g}"
            children = level_ids[g * merge : (g + 1) * merge]
            summaries.append(
                {"id": sid, "level": level, "tokens": int(prices[g]), "children": children}
            )
            nxt.append(sid)
        level_ids = nxt
    data: dict[str, Any] = {
        "leaves": leaves,
        "summaries": summaries,
        "budget": {"total": total, "target": int(total * target_ratio)},
    }
    if previous is not None:
        data["previous"] = dict(previous)
    return FoldProblem.model_validate(data)
