"""Typed errors of the folding model.

Every error names the offending id and says what would fix it. Invalid input
raises a subclass of :class:`InvalidProblemError`; a frontier that breaks a
rule raises :class:`PlanViolation`. Infeasible constraints are *not* an
exception of the model: they are reported by :meth:`FoldProblem.conflicts`
and by the solvers' ``infeasible`` status.

None of these subclass :class:`ValueError` on purpose: pydantic turns a
``ValueError`` raised during validation into its own ``ValidationError`` and
the type would be lost. Malformed JSON types (a string where a number is
expected) still raise pydantic's ``ValidationError``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BudgetError",
    "ContiguityError",
    "CycleError",
    "DuplicateIdError",
    "FoldingError",
    "InvalidProblemError",
    "LevelError",
    "PinConflictError",
    "PlanViolation",
    "TokenCostError",
    "UnknownIdError",
    "Violation",
    "ZoneError",
]


class FoldingError(Exception):
    """Base class of every error raised by :mod:`folding`."""


class InvalidProblemError(FoldingError):
    """A fold problem, hierarchy or constraint is malformed.

    Attributes
    ----------
    field : str
        The JSON field at fault (``"leaves"``, ``"summaries"``, ``"pins"``, ...).
    node : str or None
        The id of the offending leaf or summary, when there is one.
    """

    def __init__(self, message: str, *, field: str, node: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.node = node


class UnknownIdError(InvalidProblemError):
    """An id is referenced (as a child, in a pin, a lock or a frontier) but never defined."""


class DuplicateIdError(InvalidProblemError):
    """Two leaves or summaries share one id."""


class CycleError(InvalidProblemError):
    """The summary graph has a cycle."""


class LevelError(InvalidProblemError):
    """A summary's level is not one above the level of its children."""


class ContiguityError(InvalidProblemError):
    """A summary's covered leaves do not form one contiguous run of the leaf order."""


class TokenCostError(InvalidProblemError):
    """A token cost is negative or not an integer."""


class PinConflictError(InvalidProblemError):
    """One pin's own level bounds contradict each other."""


class BudgetError(InvalidProblemError):
    """The budget is malformed (for example ``target > total``)."""


class ZoneError(InvalidProblemError):
    """``head`` leaves are not a prefix of the leaf order or ``tail`` leaves not a suffix."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule of a frontier.

    Attributes
    ----------
    rule : str
        A short rule name: ``unknown-leaf``, ``bad-level``, ``no-summary``,
        ``not-tileable``, ``zone``, ``pin``, ``lock`` or ``budget``.
    node : str or None
        The leaf (or summary) the rule is broken at.
    message : str
        A sentence saying what is wrong and what would fix it.
    """

    rule: str
    node: str | None
    message: str


class PlanViolation(FoldingError):
    """A frontier breaks one or more rules of its problem.

    Attributes
    ----------
    violations : tuple of Violation
        Every rule broken, in leaf order; the message shows the first few.
    """

    def __init__(self, violations: list[Violation] | tuple[Violation, ...]) -> None:
        self.violations = tuple(violations)
        shown = "; ".join(f"[{v.rule}] {v.message}" for v in self.violations[:5])
        more = len(self.violations) - 5
        if more > 0:
            shown += f"; ... and {more} more"
        super().__init__(shown)

    @property
    def rules(self) -> frozenset[str]:
        """The set of rule names broken."""
        return frozenset(v.rule for v in self.violations)
