"""Limits resolution (inline, catalog, fallback) and the usable budget arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from context_manager.assembly import AssemblyConfig, AssemblyError, ModelCatalog, assemble
from context_manager.assembly.budget import tail_budget
from tests.support.assembly_fixtures import inline_model, user

HELLO = user("hello", ts=1)


def catalog(**spec: Any) -> ModelCatalog:
    return ModelCatalog([{"provider": "acme", "id": "m", **spec}])


def run(model: dict[str, Any], **kwargs: Any) -> Any:
    options = kwargs.pop("options", {})
    return assemble({"messages": [HELLO], "model": model, "options": options}, **kwargs)


@pytest.mark.parametrize(
    ("window", "output", "usable"),
    [
        (200_000, 8_000, 172_000),
        (32_000, 16_000, 12_800),
        (10_000, 1_000, 8_000),
        (5_000, 500, 4_000),
        (272_000, 128_000, 124_000),
    ],
)
def test_worked_usable_values_inline(window: int, output: int, usable: int) -> None:
    out = run(inline_model(window, output))
    assert (out.usable, out.model_resolved) == (usable, "inline")
    assert out.effective_max_output_tokens == output


@pytest.mark.parametrize(
    ("window", "output", "usable"), [(200_000, 8_000, 172_000), (32_000, 16_000, 12_800)]
)
def test_worked_usable_values_from_the_catalog(window: int, output: int, usable: int) -> None:
    out = run(
        {"id": "m", "provider": "acme"},
        catalog=catalog(context_window=window, max_output_tokens=output),
    )
    assert (out.usable, out.model_resolved) == (usable, "router")


def test_fallback_is_8192_1024_and_6349_usable() -> None:
    out = run({"id": "nobody-knows"}, catalog=None)
    assert (out.usable, out.model_resolved, out.effective_max_output_tokens) == (
        6_349,
        "fallback",
        1024,
    )
    out = run(
        {"id": "nobody-knows", "provider": "acme"},
        catalog=catalog(context_window=1000, max_output_tokens=10),
    )
    assert out.model_resolved == "fallback"


def test_unresolved_without_fallback_raises() -> None:
    cfg = AssemblyConfig(allow_fallback_limits=False)
    with pytest.raises(AssemblyError) as err:
        run({"id": "ghost", "provider": "acme"}, config=cfg, catalog=None)
    assert err.value.code == "context/model_unresolved"
    assert err.value.message.startswith("could not resolve model limits (")
    with pytest.raises(AssemblyError) as err:
        run(
            {"id": "ghost", "provider": "acme"},
            config=cfg,
            catalog=catalog(context_window=1000, max_output_tokens=10),
        )
    assert err.value.code == "context/model_unresolved"


def test_inline_limits_never_ask_the_catalog() -> None:
    class Exploding(ModelCatalog):
        def budget(self, provider: str | None, model_id: str) -> Any:
            raise AssertionError("asked")

    out = run(inline_model(10_000, 1_000), catalog=Exploding([]))
    assert out.model_resolved == "inline"


def test_a_failing_catalog_reads_as_unavailable() -> None:
    class Down(ModelCatalog):
        def budget(self, provider: str | None, model_id: str) -> Any:
            raise ConnectionError("router down")

    assert run({"id": "m"}, catalog=Down([])).model_resolved == "fallback"


def test_input_limit_replaces_window_minus_output() -> None:
    # 400k window, input limit 272k: 272000 - min(20000, 40000) = 252000
    out = run({"id": "gpt-5", "provider": "openai"})
    assert (out.usable, out.model_resolved, out.effective_max_output_tokens) == (
        252_000,
        "router",
        128_000,
    )
    assert run(inline_model(400_000, 128_000, input_limit=272_000)).usable == 252_000


def test_effective_output_cap_is_the_smaller_one() -> None:
    cat = catalog(
        context_window=100_000, max_output_tokens=20_000, effective_max_output_tokens=4_000
    )
    out = run({"id": "m", "provider": "acme"}, catalog=cat)
    assert out.effective_max_output_tokens == 4_000
    assert out.usable == 100_000 - 4_000 - 10_000


def test_explicit_reserve_and_thinking_budget() -> None:
    cat = catalog(
        context_window=200_000, max_output_tokens=8_000, thinking_budgets={"high": 30_000}
    )
    model = {"id": "m", "provider": "acme"}
    assert run(model, catalog=cat, options={"thinking_level": "high"}).usable == 142_000
    assert run(model, catalog=cat, options={"thinking_level": "low"}).usable == 172_000
    assert run(model, catalog=cat, options={"reserved_tokens": 0}).usable == 192_000
    # inline limits declare no thinking budgets
    assert run(inline_model(200_000, 8_000), options={"thinking_level": "high"}).usable == 172_000


def test_subtractions_clamp_at_zero() -> None:
    out = run(inline_model(1_000, 5_000), options={"preview_only": True})
    assert out.usable == 0


def test_reserve_pct_and_cap_come_from_config() -> None:
    cfg = AssemblyConfig(reserved_pct=50, reserved_tokens_cap=1_000_000)
    assert run(inline_model(10_000, 1_000), config=cfg).usable == 4_000


def test_tail_budget_clamp() -> None:
    assert [tail_budget(u) for u in (0, 6_349, 12_800, 32_000, 172_000)] == [
        2_000,
        2_000,
        3_200,
        8_000,
        8_000,
    ]


def test_vision_flag_only_when_declared() -> None:
    pic = user({"type": "image", "mime": "image/png", "data": "AAAA"}, ts=1)
    request: dict[str, Any] = {"messages": [pic], "model": {"id": "m", "provider": "acme"}}
    unknown = assemble(request, catalog=catalog(context_window=200_000, max_output_tokens=8_000))
    assert unknown.messages[0].content[0].text == "[image omitted: model does not support vision]"
    seeing = assemble(
        request,
        catalog=catalog(context_window=200_000, max_output_tokens=8_000, supports_vision=True),
    )
    assert seeing.messages[0].content[0].type == "image"
    inline = assemble({"messages": [pic], "model": inline_model(200_000, 8_000)})
    assert inline.messages[0].content[0].type == "image"


def test_bundled_catalog_resolves_without_provider() -> None:
    out = run({"id": "claude-sonnet-4-5"})
    assert out.model_resolved == "router"
    assert out.usable == 200_000 - 64_000 - 20_000


@pytest.mark.parametrize(
    ("model_id", "window", "output"),
    [
        ("claude-sonnet-4", 200_000, 64_000),
        ("claude-sonnet-4-20250514", 200_000, 64_000),
        ("claude-opus-4", 200_000, 32_000),
        ("claude-sonnet-4-5", 200_000, 64_000),
    ],
)
def test_the_bundled_catalog_knows_the_claude_4_ids_and_their_short_names(
    model_id: str, window: int, output: int
) -> None:
    found = ModelCatalog.bundled().budget(None, model_id)
    assert found is not None
    assert (found.model.context_window, found.model.max_output_tokens) == (window, output)
    assert run({"id": model_id}).model_resolved != "fallback"
