"""The fold problem: leaves, summaries, constraints and budget, as pydantic models.

The JSON form of :class:`FoldProblem` is a public, stable contract::

    {"leaves": [{"id": "m0", "tokens": 120, "salience": 1.0, "zone": "middle"}],
     "summaries": [{"id": "L1-0", "level": 1, "tokens": 200, "children": ["m0", "m1"]}],
     "pins": [{"leaves": ["m3"], "level": null, "max_level": null, "min_level": null}],
     "locks": ["m5"],
     "budget": {"total": 30000, "target": 27000, "grace": 0.02},
     "previous": {"m0": 1, "m1": 1},
     "fixed_tokens": 0}

Unknown fields are rejected, so a typo never silently drops a constraint.

Ranges. Every number is bounded so that every sum the model and the solvers
compute (layout totals and offsets, running sums, scaled integer models) fits
a 64-bit integer with room to spare; out-of-range input is refused when the
problem is built, never wrapped:

* each leaf's and summary's ``tokens``, ``fixed_tokens`` and ``budget.total``:
  integers in ``[0, MAX_TOKENS]`` (``2**40``; the total at least 1);
* the sum of ``fixed_tokens`` and every leaf's and summary's tokens: at most
  ``MAX_TOTAL_TOKENS`` (``2**50``);
* summary levels in ``[1, MAX_LEVEL]``, pin levels and the levels of
  ``previous`` in ``[0, MAX_LEVEL]`` (``2**20``);
* ``budget.grace``: a finite ratio in ``[0, MAX_GRACE]`` (1.0); ``salience`` a
  finite number in (0, 1].
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, model_validator

from .exceptions import (
    BudgetError,
    InvalidProblemError,
    LevelError,
    PinConflictError,
    TokenCostError,
    UnknownIdError,
)

if TYPE_CHECKING:
    from ._index import ProblemIndex
    from .hierarchy import Hierarchy

__all__ = [
    "MAX_GRACE",
    "MAX_LEVEL",
    "MAX_TOKENS",
    "MAX_TOTAL_TOKENS",
    "Budget",
    "Conflict",
    "FoldProblem",
    "Frontier",
    "Leaf",
    "Pin",
    "Summary",
    "Zone",
]

MAX_TOKENS = 2**40
"""Largest token count of one leaf, one summary, ``fixed_tokens`` and ``budget.total``."""
MAX_TOTAL_TOKENS = 2**50
"""Largest sum of ``fixed_tokens`` and every leaf's and summary's tokens in one problem."""
MAX_LEVEL = 2**20
"""Deepest summary level, and the largest level a pin or the previous frontier may name."""
MAX_GRACE = 1.0
"""Largest ``budget.grace`` ratio."""

Zone = Literal["head", "middle", "tail"]

Frontier = Mapping[str, int]
"""A frontier: leaf id -> fold level (0 = raw). Leaves not named are raw."""


def _check_tokens(kind: str, node: object, value: object, field: str) -> None:
    if type(value) is int and 0 <= value <= MAX_TOKENS:
        return  # the common case, without the abstract-class checks
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 0:
        raise TokenCostError(
            f"{kind} {node!r}: tokens must be a non-negative integer, got {value!r}; "
            "round a token estimate up to a whole number",
            field=field,
            node=str(node),
        )
    if int(value) > MAX_TOKENS:
        raise TokenCostError(
            f"{kind} {node!r}: tokens must be at most {MAX_TOKENS} (2**40), got {int(value)}; "
            "a token count this large is a corrupted or mis-scaled estimate",
            field=field,
            node=str(node),
        )


def _is_level(value: object, lowest: int) -> bool:
    if type(value) is int:
        return lowest <= value <= MAX_LEVEL
    return (
        not isinstance(value, bool)
        and isinstance(value, Integral)
        and lowest <= int(value) <= MAX_LEVEL
    )


_TOKENS_DOC = f"An integer number of tokens in [0, {MAX_TOKENS}] (2**40)."
_LEVEL_DOC = f"A fold level in [0, {MAX_LEVEL}] (2**20); 0 is raw."


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Leaf(_Model):
    """One stored message (or one shard of a huge message), in chronological order.

    Parameters
    ----------
    id : str
        Unique id among leaves and summaries.
    tokens : int
        Raw token cost when shown verbatim, in ``[0, MAX_TOKENS]``.
    salience : float, default 1.0
        Importance in (0, 1]; low-salience material folds first.
    zone : {"middle", "head", "tail"}
        ``head`` and ``tail`` leaves are always shown raw.
    span : int, default 1
        How many messages the leaf stands for: a leaf that is a run of messages
        (or a memory shown as one unit) ages by all of them, so
        :func:`folding.fidelity_weights` counts ages in messages, not leaves.
    raw_tokens : int, optional
        The raw size of what the leaf stands for, weighed by the fidelity loss
        (default: ``tokens``, or the sum of ``parts``). A memory stated as a leaf
        costs its recall tokens but stands for its messages' raw tokens.
    parts : tuple of int, optional
        The raw tokens of each of the ``span`` units the leaf stands for, oldest
        first (``len(parts) == span``): :func:`folding.fidelity_weights` then weighs
        each part at its own age, so a leaf standing for units weighs exactly what
        those units weigh as leaves of their own.
    """

    id: str = Field(min_length=1)
    tokens: int = Field(ge=0, le=MAX_TOKENS, description=_TOKENS_DOC)
    salience: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    zone: Zone = "middle"
    # left out of the dump at their defaults: a plain leaf reads as it always did
    span: int = Field(default=1, ge=1, le=MAX_TOKENS, exclude_if=lambda v: v == 1)
    raw_tokens: int | None = Field(
        default=None, ge=0, le=MAX_TOKENS, exclude_if=lambda v: v is None
    )
    parts: tuple[Annotated[int, Field(ge=0, le=MAX_TOKENS)], ...] | None = Field(
        default=None, min_length=1, exclude_if=lambda v: v is None
    )

    @model_validator(mode="before")
    @classmethod
    def _tokens(cls, data: Any) -> Any:
        if type(data) is dict:  # the common case, checked inline
            tokens = data.get("tokens")
            if type(tokens) is int and 0 <= tokens <= MAX_TOKENS:
                return data
        if (type(data) is dict or isinstance(data, Mapping)) and "tokens" in data:
            _check_tokens("leaf", data.get("id"), data["tokens"], "leaves")
        return data


class Summary(_Model):
    """A summary at ``level`` >= 1 over ``children``.

    An L1 summary's children are leaves; an L_k summary's children are
    summaries of level k - 1. ``tokens`` is the rendered cost of its recall
    pair. Its covered leaves must form one contiguous run of the leaf order.
    ``level`` lies in ``[1, MAX_LEVEL]`` and ``tokens`` in ``[0, MAX_TOKENS]``.
    """

    id: str = Field(min_length=1)
    level: int = Field(
        ge=1, le=MAX_LEVEL, description=f"The summary's level, in [1, {MAX_LEVEL}] (2**20)."
    )
    tokens: int = Field(ge=0, le=MAX_TOKENS, description=_TOKENS_DOC)
    children: tuple[str, ...]

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        if type(data) is dict or isinstance(data, Mapping):
            node = data.get("id")
            if "tokens" in data:
                _check_tokens("summary", node, data["tokens"], "summaries")
            level = data.get("level")
            if "level" in data and not _is_level(level, 1):
                raise LevelError(
                    f"summary {node!r}: level must be an integer >= 1 and at most {MAX_LEVEL}, "
                    f"got {level!r}",
                    field="summaries",
                    node=None if node is None else str(node),
                )
            children = data.get("children")
            # anything but a list is left to the field's own check, which names it
            if isinstance(children, list | tuple) and len(children) == 0:
                raise InvalidProblemError(
                    f"summary {node!r} has no children; a summary must cover at least one leaf",
                    field="summaries",
                    node=None if node is None else str(node),
                )
        return data


class Pin(_Model):
    """A constraint on the levels of some leaves.

    With every bound ``None`` the pin is a raw pin (level 0). ``level`` pins an
    exact level; ``max_level`` / ``min_level`` bound it. Levels deeper than the
    deepest summary that exists over a leaf are clamped to that depth (a pin
    at L3 renders at L2 until an L3 exists). Several pins on one leaf are
    intersected; an empty intersection is an infeasibility reported by
    :meth:`FoldProblem.conflicts`, not a construction error. Levels lie in
    ``[0, MAX_LEVEL]``.
    """

    leaves: tuple[str, ...] = Field(min_length=1)
    level: int | None = Field(default=None, ge=0, le=MAX_LEVEL, description=_LEVEL_DOC)
    max_level: int | None = Field(default=None, ge=0, le=MAX_LEVEL, description=_LEVEL_DOC)
    min_level: int | None = Field(default=None, ge=0, le=MAX_LEVEL, description=_LEVEL_DOC)

    @model_validator(mode="after")
    def _bounds(self) -> Pin:
        lo, hi = self.bounds()
        if lo > hi:
            raise PinConflictError(
                f"pin on {list(self.leaves)!r} contradicts itself "
                f"(level={self.level}, min_level={self.min_level}, max_level={self.max_level}); "
                "give either an exact level or a range with min_level <= max_level",
                field="pins",
                node=self.leaves[0],
            )
        return self

    @property
    def is_raw(self) -> bool:
        """True when the pin keeps its leaves raw."""
        return self.bounds()[1] == 0

    def bounds(self) -> tuple[int, float]:
        """The pin's own (lowest, highest) allowed level, before clamping."""
        if self.level is None and self.max_level is None and self.min_level is None:
            return 0, 0
        lo: int = 0
        hi: float = math.inf
        if self.level is not None:
            lo, hi = self.level, self.level
        if self.min_level is not None:
            lo = max(lo, self.min_level)
        if self.max_level is not None:
            hi = min(hi, self.max_level)
        return lo, hi

    def describe(self) -> str:
        """A short human description, e.g. ``pin(level=2)`` or ``pin(raw)``."""
        if self.is_raw and self.level is None:
            return "pin(raw)"
        parts = [
            f"{name}={value}"
            for name, value in (
                ("level", self.level),
                ("min_level", self.min_level),
                ("max_level", self.max_level),
            )
            if value is not None
        ]
        return f"pin({', '.join(parts)})"


class Budget(_Model):
    """Token budget of one request.

    Parameters
    ----------
    total : int
        The hard wall W: no returned plan may exceed it. In ``[1, MAX_TOKENS]``.
    target : int, optional
        The soft target solvers aim for, in ``[0, total]``; defaults to
        ``floor(0.9 * total)``.
    grace : float, default 0.02
        Allowed relative drift between the estimate and an exact count, for
        the application layer (see :attr:`wall`): finite, in ``[0, MAX_GRACE]``.
    """

    total: int = Field(
        gt=0, le=MAX_TOKENS, description=f"The hard wall, in [1, {MAX_TOKENS}] tokens (2**40)."
    )
    target: int = Field(default=-1, description="The soft target, in [0, total].")
    grace: float = Field(
        default=0.02,
        ge=0.0,
        le=MAX_GRACE,
        allow_inf_nan=False,
        description=f"Relative estimator drift allowed, a finite ratio in [0, {MAX_GRACE}].",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_target(cls, data: Any) -> Any:
        if type(data) is dict or isinstance(data, Mapping):
            data = dict(data)
            total = data.get("total")
            for name in ("total", "target"):
                value = data.get(name)
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, Integral)
                ):
                    raise BudgetError(
                        f"budget.{name} must be an integer number of tokens, got {value!r}",
                        field="budget",
                    )
            # an out-of-range total gets no default: the field's own check names it
            if (
                data.get("target") is None
                and isinstance(total, Integral)
                and 0 < int(total) <= MAX_TOKENS
            ):
                data["target"] = math.floor(0.9 * int(total))
        return data

    @model_validator(mode="after")
    def _order(self) -> Budget:
        if self.target < 0 or self.target > self.total:
            raise BudgetError(
                f"budget.target={self.target} must lie in [0, total={self.total}]; "
                "lower the target or raise the total",
                field="budget",
            )
        return self

    @property
    def wall(self) -> int:
        """``floor(total * (1 + grace))``: the wall an exact count is held to."""
        return math.floor(self.total * (1.0 + self.grace))


@dataclass(frozen=True, slots=True)
class Conflict:
    """A leaf whose constraints leave no level to show it at.

    Attributes
    ----------
    leaf : str
        The leaf id.
    available : tuple of int
        The levels that exist for the leaf (0 = raw, then each summary depth).
    constraints : tuple of str
        Every constraint on the leaf, described (``zone=head``, ``pin(level=2)``, ``lock@1``...).
    """

    leaf: str
    available: tuple[int, ...]
    constraints: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"leaf {self.leaf!r}: available levels {list(self.available)}, "
            f"constraints {', '.join(self.constraints)} leave no level"
        )


class FoldProblem(_Model):
    """One fold decision: a hierarchy, its constraints, a budget and the previous frontier.

    Construction validates everything (ids, cycles, levels, contiguity, costs,
    zones, pins) and raises a subclass of
    :class:`~folding.exceptions.InvalidProblemError` naming the offending id
    (malformed JSON types raise pydantic's ``ValidationError`` naming the field).
    Every number is range-checked (see the module docstring): token counts in
    ``[0, MAX_TOKENS]``, their sum at most ``MAX_TOTAL_TOKENS``, levels at most
    ``MAX_LEVEL``, a finite grace, so no total the model or the solvers compute can
    overflow. Validation time and memory are linear in the size of the input.

    Examples
    --------
    >>> from folding import FoldProblem
    >>> p = FoldProblem.model_validate({
    ...     "leaves": [{"id": f"m{i}", "tokens": 100} for i in range(4)],
    ...     "summaries": [{"id": "S", "level": 1, "tokens": 30, "children": ["m0", "m1"]}],
    ...     "budget": {"total": 400}})
    >>> p.budget.target
    360
    >>> p.hierarchy.depth
    1
    """

    leaves: tuple[Leaf, ...]
    summaries: tuple[Summary, ...] = ()
    pins: tuple[Pin, ...] = ()
    locks: tuple[str, ...] = ()
    budget: Budget
    previous: dict[str, int] | None = Field(
        default=None, description=f"The carried frontier: leaf id -> level in [0, {MAX_LEVEL}]."
    )
    fixed_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS, description=_TOKENS_DOC)

    _hierarchy: Hierarchy = PrivateAttr()
    _index: ProblemIndex = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _fixed(cls, data: Any) -> Any:
        if (type(data) is dict or isinstance(data, Mapping)) and "fixed_tokens" in data:
            _check_tokens("problem", "fixed_tokens", data["fixed_tokens"], "fixed_tokens")
        return data

    @model_validator(mode="after")
    def _validate(self, info: ValidationInfo) -> FoldProblem:
        """Check everything and build the hierarchy and index.

        A problem whose summaries are the very objects of an earlier problem's, over
        the same leaves and newer ones, reuses that problem's checked hierarchy when
        validated with ``context={"extends": earlier}``: only the new leaves are
        checked then.
        """
        from ._index import ProblemIndex
        from .hierarchy import Hierarchy

        extends = (info.context or {}).get("extends")
        self._check_total_tokens()
        self._check_parts(extends)
        hierarchy = Hierarchy(
            self.leaves, self.summaries, extends=extends.hierarchy if extends else None
        )
        known = hierarchy.leaf_index
        for pin in self.pins:
            for leaf in pin.leaves:
                if leaf not in known:
                    raise UnknownIdError(
                        f"pin names {leaf!r}, which is not a leaf; pins apply to leaf ids",
                        field="pins",
                        node=leaf,
                    )
        for leaf in self.locks:
            if leaf not in known:
                raise UnknownIdError(
                    f"lock names {leaf!r}, which is not a leaf; locks apply to leaf ids",
                    field="locks",
                    node=leaf,
                )
        if self.previous is not None:
            for leaf, level in self.previous.items():
                if leaf not in known:
                    raise UnknownIdError(
                        f"previous frontier names {leaf!r}, which is not a leaf; "
                        "drop ids that are no longer stored",
                        field="previous",
                        node=leaf,
                    )
                if not _is_level(level, 0):
                    raise LevelError(
                        f"previous frontier gives {leaf!r} level {level!r}; levels are ints >= 0 "
                        f"and at most {MAX_LEVEL}",
                        field="previous",
                        node=leaf,
                    )
        self._hierarchy = hierarchy
        self._index = ProblemIndex.build(
            self, hierarchy, extends=extends.index if extends else None
        )
        return self

    def _check_parts(self, extends: FoldProblem | None) -> None:
        # a leaf object the extended problem holds was checked there (leaves are frozen)
        checked = {id(leaf) for leaf in extends.leaves} if extends is not None else set()
        for leaf in self.leaves:
            parts = leaf.parts
            if parts is None or id(leaf) in checked:
                continue
            if len(parts) != leaf.span:
                raise TokenCostError(
                    f"leaf {leaf.id!r} has {len(parts)} parts but span {leaf.span}; give one "
                    "part (raw tokens) per unit the leaf stands for",
                    field="leaves",
                    node=leaf.id,
                )
            if leaf.raw_tokens is not None and leaf.raw_tokens != sum(parts):
                raise TokenCostError(
                    f"leaf {leaf.id!r} has raw_tokens {leaf.raw_tokens} but its parts sum to "
                    f"{sum(parts)}; leave raw_tokens out (it defaults to the sum)",
                    field="leaves",
                    node=leaf.id,
                )

    def _check_total_tokens(self) -> None:
        leaf_total = sum(leaf.tokens for leaf in self.leaves)
        summary_total = sum(s.tokens for s in self.summaries)
        total = self.fixed_tokens + leaf_total + summary_total
        if total > MAX_TOTAL_TOKENS:
            field = "leaves" if self.fixed_tokens + leaf_total > MAX_TOTAL_TOKENS else "summaries"
            raise TokenCostError(
                f"the problem's token costs sum to {total} (fixed_tokens {self.fixed_tokens}, "
                f"leaves {leaf_total}, summaries {summary_total}), over the limit of "
                f"{MAX_TOTAL_TOKENS} (2**50); token counts this large are corrupted or mis-scaled",
                field=field,
            )

    def __eq__(self, other: object) -> bool:
        # Compare the fields only: the derived hierarchy and index are caches.
        if not isinstance(other, FoldProblem):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ views
    @property
    def hierarchy(self) -> Hierarchy:
        """The validated :class:`~folding.hierarchy.Hierarchy` of this problem."""
        # read the private slot directly: pydantic's attribute hook costs microseconds
        # and solvers ask for the views many times per solve
        return self.__pydantic_private__["_hierarchy"]  # type: ignore[index,no-any-return]

    @property
    def index(self) -> ProblemIndex:
        """Array views of the problem (costs, spans, level bounds) for fast algorithms."""
        return self.__pydantic_private__["_index"]  # type: ignore[index,no-any-return]

    @property
    def n_leaves(self) -> int:
        """Number of leaves."""
        return len(self.leaves)

    @property
    def raw_tokens(self) -> int:
        """Tokens of the all-raw frontier, fixed tokens included."""
        return self.fixed_tokens + int(self._index.leaf_tokens.sum())

    def previous_frontier(self) -> dict[str, int]:
        """The carried frontier (empty when there is none), zeros dropped."""
        return {k: v for k, v in (self.previous or {}).items() if v}

    def level_bounds(self, leaf: str) -> tuple[int, int]:
        """The (lowest, highest) level the constraints allow for ``leaf``.

        ``lowest > highest`` means the constraints conflict (see :meth:`conflicts`).

        .. deprecated::
            Warns with :class:`DeprecationWarning` and will be removed in the next
            release: read ``index.lo[i]`` and ``index.hi[i]`` at
            ``i = hierarchy.leaf_index[leaf]``.
        """
        warnings.warn(
            "FoldProblem.level_bounds is deprecated and will be removed in the next release; "
            "read problem.index.lo[i] and problem.index.hi[i] at "
            "i = problem.hierarchy.leaf_index[leaf]",
            DeprecationWarning,
            stacklevel=2,
        )
        i = self._hierarchy.leaf_index[leaf]
        return int(self._index.lo[i]), int(self._index.hi[i])

    def conflicts(self) -> list[Conflict]:
        """Leaves whose constraints intersect to nothing, in leaf order.

        A non-empty list means no frontier is valid; solvers report it as the
        ``infeasible`` status with these diagnostics.
        """
        idx = self._index
        bad = [int(i) for i in (idx.lo > idx.hi).nonzero()[0]]
        out: list[Conflict] = []
        for i in bad:
            leaf = self.leaves[i]
            out.append(
                Conflict(
                    leaf=leaf.id,
                    available=tuple(range(int(idx.avail[i]) + 1)),
                    constraints=tuple(self.constraints_on(leaf.id)),
                )
            )
        return out

    def constraints_on(self, leaf: str) -> list[str]:
        """Describe every constraint that applies to ``leaf``."""
        found: list[str] = []
        zone = self.leaves[self._hierarchy.leaf_index[leaf]].zone
        if zone != "middle":
            found.append(f"zone={zone}")
        found.extend(pin.describe() for pin in self.pins if leaf in pin.leaves)
        if leaf in self.locks:
            found.append(f"lock@{(self.previous or {}).get(leaf, 0)}")
        return found
