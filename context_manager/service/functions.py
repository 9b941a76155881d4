"""The four assembly functions as the service answers them, whatever the transport:
the HTTP routes (:mod:`.app`) and an engine worker call :func:`call_function` alike.

Examples
--------
>>> from context_manager.service import ServiceSettings
>>> answered = call_function(
...     "count-tokens",
...     {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}],
...                    "timestamp": 1}], "model": {"id": "any"}},
...     settings=ServiceSettings(),
...     summarizers=Summarizers(environ={}),
... )
>>> answered.json
'{"tokens":17,"by_role":{"user":17,"assistant":0,"function_result":0,"custom":0},"estimator":"heuristic"}'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel

from .. import assembly
from ..assembly import models as wire
from ..summarizer import Summarizer
from .agents import CountingSummarizer, build_summarizer
from .errors import ServiceError
from .metrics import Metrics
from .settings import ServiceSettings, SummarizerSettings

__all__ = ["FUNCTIONS", "REFERENCE_IDS", "Answered", "Summarizers", "call_function"]

FUNCTIONS: Final[dict[str, tuple[Callable[..., BaseModel], type[BaseModel], Any]]] = {
    "assemble": (assembly.assemble, wire.AssembleRequest, wire.AssembleResponse),
    "count-tokens": (assembly.count_tokens, wire.CountTokensRequest, wire.CountTokensResponse),
    "prune": (assembly.prune, wire.PruneRequest, wire.PruneResponse),
    "compact": (assembly.compact, wire.CompactRequest, wire.CompactResponse),
}
"""Name -> (the function, its request model, its response model)."""

REFERENCE_IDS: Final = {name: f"context::{name}" for name in FUNCTIONS}
"""The ids the functions are registered under on an engine (the reference's)."""

_SUMMARISING: Final = frozenset({"assemble", "compact"})


@dataclass(frozen=True)
class Answered:
    """A function's result, its JSON (``model_dump_json(exclude_none=True)``, the bytes
    the function's own result dumps to) and whether it is a busy compaction."""

    result: BaseModel
    json: str

    @property
    def busy(self) -> bool:
        """A compaction another caller holds the lease for (HTTP answers it 409)."""
        return isinstance(self.result, wire.CompactBusy)


class Summarizers:
    """The summariser the functions are given: ``override`` when set, else the one the
    settings in force name (built once per configuration, counted in ``metrics``)."""

    def __init__(
        self,
        *,
        environ: Mapping[str, str],
        override: Summarizer | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.environ = dict(environ)
        self.override = override
        self.metrics = metrics or Metrics()
        self._built: dict[SummarizerSettings, Summarizer | None] = {}
        self._lock = threading.Lock()

    def for_settings(self, settings: ServiceSettings) -> Summarizer | None:
        """The summariser for ``settings`` (None when it cannot be built: the functions
        then compact nothing, as in process without one)."""
        if self.override is not None:
            return CountingSummarizer(self.override, self.metrics)
        key = settings.summarizer
        with self._lock:
            if key not in self._built:
                try:
                    inner = build_summarizer(key, self.environ)
                except Exception:
                    self._built[key] = None
                else:
                    self._built[key] = CountingSummarizer(inner, self.metrics)
            return self._built[key]


def call_function(
    name: str, body: Any, *, settings: ServiceSettings, summarizers: Summarizers
) -> Answered:
    """Run the function ``name`` on the decoded JSON ``body`` under ``settings``.

    Raises
    ------
    ServiceError
        ``service/not_found`` for a name that is no function, ``context/invalid_request``
        for a body that is not a JSON object.
    AssemblyError
        The function's own refusals, as in process.
    """
    if name not in FUNCTIONS:
        known = ", ".join(FUNCTIONS)
        raise ServiceError("service/not_found", f"no function {name!r}; the functions: {known}")
    if not isinstance(body, dict):
        raise ServiceError("context/invalid_request", "the request must be a JSON object")
    function = FUNCTIONS[name][0]
    summarizer = summarizers.for_settings(settings) if name in _SUMMARISING else None
    result = function(body, config=settings.assembly, summarizer=summarizer)
    return Answered(result, result.model_dump_json(exclude_none=True))
