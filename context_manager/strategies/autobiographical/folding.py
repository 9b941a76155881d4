"""Deprecated: this module is now :mod:`.solve` (it selects a compile's entries by
solving the fold problem, and no longer shares its name with the :mod:`folding`
package). Reading a name from here warns with :class:`DeprecationWarning`; the module
goes in the next release."""

from __future__ import annotations

import warnings
from typing import Any

from . import solve as _moved

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name in _moved.__all__:
        warnings.warn(
            "context_manager.strategies.autobiographical.folding is deprecated and will be "
            f"removed in the next release; import {name} from "
            "context_manager.strategies.autobiographical.solve",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_moved, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
