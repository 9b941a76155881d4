"""Keys, scopes, the configuration model, hot reload and the operations routes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from context_manager.client import ContextClient, ServiceCallError
from context_manager.service import (
    LiveSettings,
    ServiceSettings,
    SettingsError,
    create_app,
    hash_key,
    load_settings,
)

ADMIN, CI, OTHER = "admin-key-0001", "ci-key-0002", "other-key-0003"


def _config(root: Path, *keys: tuple[str, str, list[str], bool], tail_turns: int = 2) -> str:
    lines = [f"store_root: {root}", f"assembly: {{tail_turns: {tail_turns}}}", "keys:"]
    for name, key, agents, admin in keys:
        lines.append(
            f"  - {{name: {name}, sha256: {hash_key(key)}, agents: {agents}, "
            f"admin: {str(admin).lower()}}}"
        )
    return "\n".join(lines) + "\n"


@pytest.fixture
def configured(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "service.yaml"
    root = tmp_path / "stores"
    path.write_text(_config(root, ("admin", ADMIN, ["*"], True), ("ci", CI, ["ci-*"], False)))
    return path, root


def test_no_key_a_wrong_key_and_a_key_out_of_scope_touch_nothing(
    configured: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    path, root = configured
    caplog.set_level(logging.DEBUG)
    with TestClient(create_app(LiveSettings(path), environ={})) as client:
        body = {"participant": "User", "content": "hi"}
        none = client.post("/v1/agents/ci-1/messages", json=body)
        assert none.status_code == 401 and none.headers["www-authenticate"] == "Bearer"
        wrong = client.post(
            "/v1/agents/ci-1/messages", json=body, headers={"Authorization": f"Bearer {OTHER}"}
        )
        assert (wrong.status_code, wrong.json()["code"]) == (401, "service/unauthorized")
        outside = client.post(
            "/v1/agents/prod-1/messages", json=body, headers={"Authorization": f"Bearer {CI}"}
        )
        assert (outside.status_code, outside.json()["code"]) == (403, "service/forbidden")
        assert not root.exists() or not list(root.iterdir())  # no store was opened
        ok = ContextClient(client=client, agent="ci-1", api_key=CI)
        ok.add_message("User", "hi")
        assert {p.name for p in root.iterdir() if p.suffix == ".db"} == {"ci-1.db"}
        with pytest.raises(ServiceCallError) as refused:
            ContextClient(client=client, agent="prod-1", api_key=CI).get_messages()
        assert refused.value.status == 403
        assert client.get("/healthz").status_code == 200  # no key needed
        assert client.get("/metrics").status_code == 401
        config = client.get("/v1/config", headers={"Authorization": f"Bearer {CI}"})
        assert config.status_code == 403  # not an admin key
    logged = caplog.text
    for key in (ADMIN, CI, OTHER, hash_key(ADMIN), hash_key(CI)):
        assert key not in logged


def test_the_configuration_shown_has_its_keys_redacted(configured: tuple[Path, Path]) -> None:
    path, _ = configured
    with TestClient(create_app(LiveSettings(path), environ={})) as client:
        shown = client.get("/v1/config", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert shown["generation"] == 0 and shown["last_error"] is None
    assert shown["settings"]["assembly"]["tail_turns"] == 2
    assert [k["name"] for k in shown["settings"]["keys"]] == ["admin", "ci"]
    text = str(shown)
    assert hash_key(ADMIN) not in text and hash_key(CI) not in text


def test_a_changed_file_takes_effect_on_the_next_request(configured: tuple[Path, Path]) -> None:
    path, root = configured
    live = LiveSettings(path)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with TestClient(create_app(live, environ={})) as client:
        assert ContextClient(client=client, agent="ci-1", api_key=CI).get_messages() == []
        # the ci key is replaced by another, and a limit changes
        path.write_text(
            _config(
                root, ("admin", ADMIN, ["*"], True), ("other", OTHER, ["*"], False), tail_turns=5
            )
        )
        assert live.reload()
        gone = client.get("/v1/agents/ci-1/messages", headers={"Authorization": f"Bearer {CI}"})
        assert gone.status_code == 401
        new = client.get("/v1/agents/ci-1/messages", headers={"Authorization": f"Bearer {OTHER}"})
        assert new.status_code == 200
        shown = client.get("/v1/config", headers=admin).json()
        assert (shown["generation"], shown["settings"]["assembly"]["tail_turns"]) == (1, 5)
        # an invalid file is refused: the old configuration stays in force
        path.write_text("keys: []\nassembly: {tail_turns: -1}\nbogus: 1\n")
        assert not live.reload()
        shown = client.get("/v1/config", headers=admin).json()
        assert shown["generation"] == 1 and shown["settings"]["assembly"]["tail_turns"] == 5
        assert "bogus: unknown key" in shown["last_error"]
        assert "assembly.tail_turns" in shown["last_error"]
        metrics = client.get("/metrics", headers=admin).text
        assert "ctxfold_config_reloads_total 1" in metrics


def test_a_store_root_change_reopens_agents_there(tmp_path: Path) -> None:
    live = LiveSettings(initial=ServiceSettings(allow_anonymous=True, store_root=tmp_path / "a"))
    with TestClient(create_app(live, environ={})) as client:
        cm = ContextClient(client=client, agent="x")
        cm.add_message("User", "in a")
        live.replace(ServiceSettings(allow_anonymous=True, store_root=tmp_path / "b"))
        assert cm.get_messages() == []  # the agent was reopened on the new root
        cm.add_message("User", "in b")
    assert (tmp_path / "a" / "x.db").exists() and (tmp_path / "b" / "x.db").exists()


def test_unknown_keys_are_refused_by_name_at_every_level(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"prot: unknown key"):
        load_settings(text="prot: 1")
    with pytest.raises(SettingsError, match=r"assembly\.tail_turn: unknown key.*tail_turns"):
        load_settings(text="assembly: {tail_turn: 1}")
    with pytest.raises(SettingsError, match=r"limits\.max_body_byte: unknown key"):
        load_settings(text="", environ={"CTXFOLD_LIMITS__MAX_BODY_BYTE": "5"})
    with pytest.raises(SettingsError, match="not valid YAML"):
        load_settings(text="a: [")
    with pytest.raises(SettingsError, match="must be a mapping"):
        load_settings(text="- 1")
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")
    with pytest.raises(SettingsError, match="key names must be distinct"):
        load_settings(
            text=f"keys: [{{name: a, sha256: {'a' * 64}}}, {{name: a, sha256: {'b' * 64}}}]"
        )


def test_the_environment_overrides_single_fields() -> None:
    settings = load_settings(
        text="port: 9000\nassembly: {tail_turns: 3, reserved_pct: 20}",
        environ={"CTXFOLD_PORT": "9100", "CTXFOLD_ASSEMBLY__TAIL_TURNS": "4", "HOME": "/x"},
    )
    assert (settings.port, settings.assembly.tail_turns, settings.assembly.reserved_pct) == (
        9100,
        4,
        20,
    )


def test_metrics_and_readiness(tmp_path: Path) -> None:
    settings = ServiceSettings(allow_anonymous=True, store_root=tmp_path / "s")
    with TestClient(create_app(settings, environ={})) as client:
        cm = ContextClient(client=client, agent="m1")
        cm.add_message("User", "hello")
        cm.compile(max_tokens=1000)
        assert client.get("/readyz").json() == {"status": "ready"}
        text = client.get("/metrics").text
    assert (
        'ctxfold_requests_total{method="POST",route="/v1/agents/{agent}/context",status="200"} 1'
        in text
    )
    assert "ctxfold_compiles_total 1" in text and "ctxfold_open_agents 1" in text
    assert 'ctxfold_request_seconds_count{route="/v1/agents/{agent}/messages"} 1' in text
    broken = ServiceSettings.model_validate(
        {"allow_anonymous": True, "store_root": str(tmp_path), "summarizer": {"provider": "openai"}}
    )
    with TestClient(create_app(broken, environ={})) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503 and "summarizer.model is unset" in ready.json()["message"]
