"""What a solver decided, before the shared finishing step."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from folding import ProduceRequest, Status

__all__ = ["Deadline", "IntArray", "Plan"]

IntArray = npt.NDArray[np.int64]


@dataclass
class Plan:
    """What a solver decided, before the shared finishing step."""

    levels: IntArray | None
    status: Status
    produce: list[ProduceRequest] = field(default_factory=list)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Deadline:
    """When a solve must stop; :meth:`expired` is cheap enough for inner loops.

    Attributes
    ----------
    end : float or None
        The :func:`time.perf_counter` value the solve must stop by (None: no limit).
    """

    end: float | None

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """The deadline ``seconds`` from now (None: never)."""
        return cls(None if seconds is None else time.perf_counter() + seconds)

    def expired(self) -> bool:
        """True once the limit has passed."""
        return self.end is not None and time.perf_counter() >= self.end

    def remaining(self, default: float) -> float:
        """Seconds left (at least a microsecond), or ``default`` when there is no limit."""
        if self.end is None:
            return default
        return max(1e-6, self.end - time.perf_counter())
