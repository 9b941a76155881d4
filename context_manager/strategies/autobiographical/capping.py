"""Deprecated: this module is now :mod:`.unfoldable` (it says which messages may be
capped; the capping itself is :mod:`context_manager.strategies.capping`). Reading
``unfoldable`` from here warns with :class:`DeprecationWarning`; the module goes in
the next release."""

from __future__ import annotations

import warnings
from typing import Any

from . import unfoldable as _moved

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name == "unfoldable":
        warnings.warn(
            "context_manager.strategies.autobiographical.capping is deprecated and will be "
            "removed in the next release; import unfoldable from "
            "context_manager.strategies.autobiographical.unfoldable",
            DeprecationWarning,
            stacklevel=2,
        )
        return _moved.unfoldable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
