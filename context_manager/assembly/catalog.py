"""The model catalog: context window, output cap, input limit, thinking budgets and vision.

A catalog answers, for a provider and model id, the model's declared limits
and the output cap in effect for it. ``assemble`` and ``compact`` ask it when
a request carries no inline limits. :meth:`ModelCatalog.bundled` holds current
Anthropic and OpenAI models; pass your own catalog to describe others.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .wire import ThinkingLevel

__all__ = ["ModelBudget", "ModelCatalog", "ModelSpec"]


class ModelSpec(BaseModel):
    """One model of a catalog.

    Attributes
    ----------
    provider, id : str
        Where the model is served and its id there.
    aliases : tuple of str
        Other ids that name the same model (dated snapshots, ``-latest`` names).
    context_window, max_output_tokens : int
        The model's window and its largest output.
    input_limit : int or None
        A separate cap on input tokens, when the provider declares one.
    thinking_budgets : dict
        Tokens set aside for reasoning at each thinking level the model supports.
    supports_vision : bool or None
        Whether the model reads images; only an explicit ``True`` counts.
    effective_max_output_tokens : int or None
        A lower output cap in effect for this deployment, if any.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(min_length=1)
    id: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    context_window: int = Field(gt=0)
    max_output_tokens: int = Field(ge=0)
    input_limit: int | None = Field(default=None, ge=0)
    thinking_budgets: dict[ThinkingLevel, int] = Field(default_factory=dict)
    supports_vision: bool | None = None
    effective_max_output_tokens: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _budgets_not_negative(self) -> ModelSpec:
        for level, tokens in self.thinking_budgets.items():
            if tokens < 0:
                raise ValueError(f"thinking_budgets.{level} must not be negative, got {tokens}")
        return self


class ModelBudget(NamedTuple):
    """A catalog answer: the model and the output cap in effect for it."""

    model: ModelSpec
    effective_max_output_tokens: int


class ModelCatalog:
    """Models by provider and id.

    Parameters
    ----------
    models : iterable of ModelSpec or mapping
        The models; an id (or alias) may appear once per provider.

    Examples
    --------
    >>> catalog = ModelCatalog(
    ...     [{"provider": "acme", "id": "m1", "context_window": 32000, "max_output_tokens": 16000}]
    ... )
    >>> catalog.budget("acme", "m1").effective_max_output_tokens
    16000
    >>> catalog.budget(None, "m1").model.provider, catalog.budget("other", "m1")
    ('acme', None)
    """

    def __init__(self, models: Iterable[ModelSpec | Mapping[str, Any]]) -> None:
        self._models: list[ModelSpec] = []
        self._by_key: dict[tuple[str, str], ModelSpec] = {}
        self._by_id: dict[str, list[ModelSpec]] = {}
        for raw in models:
            spec = raw if isinstance(raw, ModelSpec) else ModelSpec.model_validate(raw)
            self._models.append(spec)
            for name in (spec.id, *spec.aliases):
                key = (spec.provider, name)
                if key in self._by_key:
                    raise ValueError(
                        f"model {spec.provider}/{name} appears twice in the catalog; "
                        "keep one entry per provider and id"
                    )
                self._by_key[key] = spec
                self._by_id.setdefault(name, []).append(spec)

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._models)

    def __len__(self) -> int:
        return len(self._models)

    def budget(self, provider: str | None, model_id: str) -> ModelBudget | None:
        """The model and its effective output cap, or ``None`` when the catalog lacks it.

        Without a provider the id must name exactly one model across providers.
        """
        if provider is not None:
            spec = self._by_key.get((provider, model_id))
        else:
            found = self._by_id.get(model_id, [])
            spec = found[0] if len(found) == 1 else None
        if spec is None:
            return None
        effective = spec.max_output_tokens
        if spec.effective_max_output_tokens is not None:
            effective = min(effective, spec.effective_max_output_tokens)
        return ModelBudget(spec, effective)

    @classmethod
    def bundled(cls) -> ModelCatalog:
        """Current Anthropic and OpenAI models.

        Examples
        --------
        >>> spec = ModelCatalog.bundled().budget("openai", "gpt-5").model
        >>> spec.context_window, spec.max_output_tokens, spec.input_limit
        (400000, 128000, 272000)
        """
        return cls(_BUNDLED)


# What a request asks for at each thinking level. The usable input holds the budget
# back too (usable = input - reserved - thinking), which is conservative for
# Anthropic models: their thinking also counts inside the output allowance. OpenAI
# reasoning models declare no separate budget.
_ANTHROPIC_THINKING: dict[ThinkingLevel, int] = {
    "minimal": 1024,
    "low": 4096,
    "medium": 10_000,
    "high": 16_000,
    "xhigh": 24_000,
}


def _anthropic(model_id: str, aliases: tuple[str, ...], max_output: int) -> ModelSpec:
    return ModelSpec(
        provider="anthropic",
        id=model_id,
        aliases=aliases,
        context_window=200_000,
        max_output_tokens=max_output,
        thinking_budgets=_ANTHROPIC_THINKING,
        supports_vision=True,
    )


def _openai(
    model_id: str, context_window: int, max_output: int, input_limit: int | None = None
) -> ModelSpec:
    return ModelSpec(
        provider="openai",
        id=model_id,
        context_window=context_window,
        max_output_tokens=max_output,
        input_limit=input_limit,
        supports_vision=True,
    )


_BUNDLED: tuple[ModelSpec, ...] = (
    _anthropic("claude-opus-4-5", ("claude-opus-4-5-20251101",), 64_000),
    _anthropic("claude-opus-4-1", ("claude-opus-4-1-20250805",), 32_000),
    _anthropic("claude-opus-4-0", ("claude-opus-4-20250514", "claude-opus-4"), 32_000),
    _anthropic("claude-sonnet-4-5", ("claude-sonnet-4-5-20250929",), 64_000),
    _anthropic("claude-sonnet-4-0", ("claude-sonnet-4-20250514", "claude-sonnet-4"), 64_000),
    _anthropic("claude-haiku-4-5", ("claude-haiku-4-5-20251001",), 64_000),
    _anthropic("claude-3-7-sonnet-latest", ("claude-3-7-sonnet-20250219",), 64_000),
    _openai("gpt-5", 400_000, 128_000, 272_000),
    _openai("gpt-5-mini", 400_000, 128_000, 272_000),
    _openai("gpt-5-nano", 400_000, 128_000, 272_000),
    _openai("gpt-4.1", 1_047_576, 32_768),
    _openai("gpt-4.1-mini", 1_047_576, 32_768),
    _openai("gpt-4.1-nano", 1_047_576, 32_768),
    _openai("gpt-4o", 128_000, 16_384),
    _openai("gpt-4o-mini", 128_000, 16_384),
    _openai("o3", 200_000, 100_000),
    _openai("o4-mini", 200_000, 100_000),
)
