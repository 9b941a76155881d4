"""What a solver decided, before the shared finishing step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from folding import ProduceRequest, Status

__all__ = ["IntArray", "Plan"]

IntArray = npt.NDArray[np.int64]


@dataclass
class Plan:
    """What a solver decided, before the shared finishing step."""

    levels: IntArray | None
    status: Status
    produce: list[ProduceRequest] = field(default_factory=list)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
