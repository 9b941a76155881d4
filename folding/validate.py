"""``check_plan``: the executable definition of a valid frontier."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .exceptions import PlanViolation, Violation
from .model import FoldProblem, Frontier
from .render import Layout, layout_of, parse_frontier, resolve_units

__all__ = ["check_levels", "check_plan", "is_valid"]


def check_plan(problem: FoldProblem, frontier: Frontier, *, enforce_budget: bool = True) -> Layout:
    """Check that ``frontier`` is a valid plan for ``problem`` and return its layout.

    A frontier is valid iff every leaf is represented exactly once, raw or
    through one existing summary covering it (protected raw leaves may sit
    inside a selected summary as holes); head and tail leaves are raw; every
    pin and lock holds; and, with ``enforce_budget``, the rendered total is at
    most ``budget.total``.

    Parameters
    ----------
    problem : FoldProblem
    frontier : mapping of str to int
        Leaf id -> level; leaves not named are raw.
    enforce_budget : bool, default True
        Also require ``layout.total <= problem.budget.total``.

    Returns
    -------
    Layout
        The rendered layout of the frontier.

    Raises
    ------
    PlanViolation
        Listing every broken rule (``unknown-leaf``, ``bad-level``,
        ``no-summary``, ``not-tileable``, ``zone``, ``pin``, ``lock``,
        ``budget``), each naming the leaf.

    Examples
    --------
    >>> from folding import FoldProblem, check_plan
    >>> p = FoldProblem.model_validate({
    ...     "leaves": [{"id": "a", "tokens": 50}, {"id": "b", "tokens": 50}],
    ...     "summaries": [{"id": "S", "level": 1, "tokens": 20, "children": ["a", "b"]}],
    ...     "pins": [{"leaves": ["b"]}], "budget": {"total": 100}})
    >>> check_plan(p, {"a": 1}).total     # b is a protected hole beside S's recall
    70
    >>> check_plan(p, {"a": 1, "b": 1})
    Traceback (most recent call last):
    ...
    folding.exceptions.PlanViolation: [pin] leaf 'b' is at level 1 but pin(raw) requires level 0
    """
    levels, early = parse_frontier(problem, frontier)
    if early:
        raise PlanViolation(early)
    return _check(problem, levels, enforce_budget)


def check_levels(
    problem: FoldProblem, levels: npt.ArrayLike, *, enforce_budget: bool = True
) -> Layout:
    """:func:`check_plan` on a level array (``levels[i]``: the level of leaf ``i``).

    The same rules and the same violations as ``check_plan(problem,
    frontier_from_levels(problem, levels))``, without building the frontier dict.

    Parameters
    ----------
    problem : FoldProblem
    levels : array_like of int, shape (n_leaves,)
    enforce_budget : bool, default True

    Returns
    -------
    Layout

    Raises
    ------
    PlanViolation
        As :func:`check_plan` (``bad-level`` for a negative level).
    ValueError
        If ``levels`` does not have one entry per leaf.
    """
    arr = np.asarray(levels, dtype=np.int64)
    if arr.shape != (problem.index.n,):
        raise ValueError(f"levels must have shape ({problem.index.n},), got {arr.shape}")
    negative = np.flatnonzero(arr < 0)
    if negative.size:
        ids = problem.hierarchy.leaf_ids
        raise PlanViolation(
            [
                Violation("bad-level", ids[i], f"leaf {ids[i]!r} has negative level {int(arr[i])}")
                for i in negative.tolist()
            ]
        )
    return _check(problem, arr, enforce_budget)


def _check(problem: FoldProblem, levels: np.ndarray, enforce_budget: bool) -> Layout:
    violations = constraint_violations(problem, levels)
    nodes, representation = resolve_units(problem, levels)
    violations.extend(representation)
    if violations:
        raise PlanViolation(sorted(violations, key=lambda v: _order(problem, v)))
    layout = layout_of(problem, nodes)
    if enforce_budget and layout.total > problem.budget.total:
        raise PlanViolation(
            [
                Violation(
                    "budget",
                    None,
                    f"the frontier renders {layout.total} tokens, over the wall "
                    f"budget.total={problem.budget.total} by {layout.total - problem.budget.total};"
                    " fold deeper or raise the budget",
                )
            ]
        )
    return layout


def is_valid(problem: FoldProblem, frontier: Frontier, *, enforce_budget: bool = True) -> bool:
    """True when :func:`check_plan` accepts ``frontier``."""
    try:
        check_plan(problem, frontier, enforce_budget=enforce_budget)
    except PlanViolation:
        return False
    return True


def _order(problem: FoldProblem, v: Violation) -> tuple[int, str]:
    index = problem.hierarchy.leaf_index
    return (index.get(v.node, -1) if v.node is not None else -1, v.rule)


def constraint_violations(problem: FoldProblem, levels: np.ndarray) -> list[Violation]:
    """The zone, pin and lock rules a level array breaks (representation not checked).

    The constraint half of :func:`check_levels`: with :func:`~folding.render.resolve_units`'
    violations it is every rule of a valid frontier but the budget.

    Parameters
    ----------
    problem : FoldProblem
    levels : ndarray of int, shape (n_leaves,)
        The level of each leaf in leaf order.

    Returns
    -------
    list of Violation
        ``zone`` (a head or tail leaf folded), ``pin`` and ``lock`` violations, each
        naming its leaf; empty when every constraint holds.

    Examples
    --------
    >>> from folding import FoldProblem
    >>> p = FoldProblem.model_validate({
    ...     "leaves": [{"id": "a", "tokens": 5}, {"id": "b", "tokens": 5}],
    ...     "summaries": [{"id": "S", "level": 1, "tokens": 2, "children": ["a", "b"]}],
    ...     "pins": [{"leaves": ["b"]}], "budget": {"total": 9}})
    >>> [(v.rule, v.node) for v in constraint_violations(p, np.array([1, 1]))]
    [('pin', 'b')]
    """
    h = problem.hierarchy
    idx = problem.index
    out: list[Violation] = []
    for i in np.flatnonzero((levels > 0) & idx.in_zone).tolist():
        zone = problem.leaves[i].zone
        if zone != "middle":
            out.append(
                Violation(
                    "zone",
                    h.leaf_ids[i],
                    f"leaf {h.leaf_ids[i]!r} is in the {zone} zone but at level "
                    f"{int(levels[i])}; {zone} leaves are always raw",
                )
            )
    for pin in problem.pins:
        positions = np.fromiter((h.leaf_index[x] for x in pin.leaves), dtype=np.int64)
        lo, hi = pin.bounds()
        avail = idx.avail[positions]
        want_lo = np.minimum(lo, avail)
        if pin.level is not None:
            want_hi = want_lo.copy()
        else:
            want_hi = np.full_like(avail, -1 if hi == float("inf") else int(hi))
        got = levels[positions]
        bad = (got < want_lo) | ((want_hi >= 0) & (got > want_hi))
        for p in np.flatnonzero(bad).tolist():
            i = int(positions[p])
            a, b = int(want_lo[p]), int(want_hi[p])
            required = (
                f"level {a}" if a == b else (f"level >= {a}" if b < 0 else f"level in [{a}, {b}]")
            )
            out.append(
                Violation(
                    "pin",
                    h.leaf_ids[i],
                    f"leaf {h.leaf_ids[i]!r} is at level {int(levels[i])} but "
                    f"{pin.describe()} requires {required}",
                )
            )
    for leaf in problem.locks:
        i = h.leaf_index[leaf]
        if levels[i] != idx.previous[i]:
            out.append(
                Violation(
                    "lock",
                    leaf,
                    f"leaf {leaf!r} is locked at its previous level {int(idx.previous[i])} "
                    f"but the frontier moves it to {int(levels[i])}; unlock it to move it",
                )
            )
    return out
