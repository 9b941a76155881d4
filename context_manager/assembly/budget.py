"""Model limits resolution and the usable input budget."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from .catalog import ModelCatalog
from .config import AssemblyConfig
from .errors import MODEL_UNRESOLVED, AssemblyError
from .wire import ModelInput

__all__ = [
    "FALLBACK_CONTEXT_WINDOW",
    "FALLBACK_MAX_OUTPUT_TOKENS",
    "TAIL_BUDGET_MAX",
    "TAIL_BUDGET_MIN",
    "ResolvedLimits",
    "resolve_limits",
    "tail_budget",
    "usable_budget",
]

FALLBACK_CONTEXT_WINDOW: Final = 8192
FALLBACK_MAX_OUTPUT_TOKENS: Final = 1024
TAIL_BUDGET_MIN: Final = 2000
TAIL_BUDGET_MAX: Final = 8000

Resolution = Literal["inline", "router", "fallback"]


@dataclass(frozen=True)
class ResolvedLimits:
    """The limits a request runs under and where they came from.

    ``supports_vision`` is ``None`` when unknown (inline or fallback limits).
    """

    context_window: int
    max_output_tokens: int
    input_limit: int | None
    resolved: Resolution
    supports_vision: bool | None = None
    thinking_budgets: Mapping[str, int] = field(default_factory=dict)


def resolve_limits(
    model: ModelInput, *, catalog: ModelCatalog | None, config: AssemblyConfig
) -> ResolvedLimits:
    """Inline limits first, then the catalog, then the 8192 / 1024 fallback.

    Raises
    ------
    AssemblyError
        ``context/model_unresolved`` when neither inline limits nor the catalog
        give limits and fallback limits are disallowed.

    Examples
    --------
    >>> cfg = AssemblyConfig()
    >>> resolve_limits(ModelInput(id="unknown-model"), catalog=None, config=cfg).resolved
    'fallback'
    """
    if model.limits is not None:
        return ResolvedLimits(
            context_window=model.limits.context_window,
            max_output_tokens=model.limits.max_output_tokens,
            input_limit=model.limits.input_limit,
            resolved="inline",
        )
    reason: str
    if catalog is None:
        reason = "model catalog unavailable"
    else:
        try:
            answer = catalog.budget(model.provider, model.id)
        except Exception as exc:  # a failing catalog reads as an unavailable one
            answer = None
            reason = f"model catalog failed: {exc}"
        else:
            reason = f"model {model.provider or '(any provider)'}/{model.id} is not in the catalog"
        if answer is not None:
            spec = answer.model
            return ResolvedLimits(
                context_window=spec.context_window,
                max_output_tokens=answer.effective_max_output_tokens,  # clamped by the catalog
                input_limit=spec.input_limit,
                resolved="router",
                supports_vision=spec.supports_vision is True,
                thinking_budgets={str(k): v for k, v in spec.thinking_budgets.items()},
            )
    if not config.allow_fallback_limits:
        raise AssemblyError(MODEL_UNRESOLVED, f"could not resolve model limits ({reason})")
    return ResolvedLimits(
        context_window=FALLBACK_CONTEXT_WINDOW,
        max_output_tokens=FALLBACK_MAX_OUTPUT_TOKENS,
        input_limit=None,
        resolved="fallback",
    )


def _sub(a: int, b: int) -> int:
    return max(0, a - b)


def usable_budget(
    limits: ResolvedLimits,
    *,
    config: AssemblyConfig,
    reserved_tokens: int | None = None,
    thinking_level: str | None = None,
) -> int:
    """Input tokens a request may use.

    ``(input_limit or context_window - max_output_tokens) - reserved - thinking``,
    every subtraction clamped at 0. The reserve defaults to
    ``min(reserved_tokens_cap, context_window * reserved_pct // 100)``.

    Examples
    --------
    >>> cfg = AssemblyConfig()
    >>> usable_budget(ResolvedLimits(200_000, 8_000, None, "inline"), config=cfg)
    172000
    >>> usable_budget(ResolvedLimits(8192, 1024, None, "fallback"), config=cfg)
    6349
    """
    if reserved_tokens is None:
        reserved = min(
            config.reserved_tokens_cap, limits.context_window * config.reserved_pct // 100
        )
    else:
        reserved = reserved_tokens
    thinking = limits.thinking_budgets.get(thinking_level, 0) if thinking_level else 0
    base = (
        limits.input_limit
        if limits.input_limit is not None
        else _sub(limits.context_window, limits.max_output_tokens)
    )
    return _sub(_sub(base, reserved), thinking)


def tail_budget(usable: int) -> int:
    """Tokens compaction keeps verbatim: ``usable // 4`` clamped to [2000, 8000].

    Examples
    --------
    >>> tail_budget(6349), tail_budget(12_800), tail_budget(172_000)
    (2000, 3200, 8000)
    """
    return min(TAIL_BUDGET_MAX, max(TAIL_BUDGET_MIN, usable // 4))
