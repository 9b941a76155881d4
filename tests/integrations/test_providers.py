"""AnthropicSummarizer and OpenAISummarizer end to end: the real SDKs against a loopback server
that speaks each provider's wire format."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from context_manager import (
    CharsCounter,
    CompletionRequest,
    ConfigError,
    ContextManager,
    Message,
    MissingAPIKeyError,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.providers import AnthropicSummarizer, OpenAISummarizer, RetryPolicy
from context_manager.providers._base import ProviderSummarizer
from context_manager.providers.anthropic import anthropic_tools
from context_manager.providers.openai import openai_tools
from context_manager.providers.retry import retry_after_seconds
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import MEMORY_MARKER, StopReason
from tests.support.loopback import LoopbackServer, Reply
from tests.support.provider_replies import MODEL, anthropic_ok, openai_ok

KEY = "test-key-not-real"


class FakeTime:
    """``sleep`` records the wait and moves ``clock`` forward instead of sleeping."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self._offset = 0.0

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._offset += seconds

    def clock(self) -> float:
        return time.monotonic() + self._offset


# ------------------------------------------------------------------ wire formats
def anthropic_error(status: int, kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_error(status: int, kind: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None, "param": None}}


@dataclass(frozen=True)
class Provider:
    """What a test needs to know about one provider."""

    name: str
    path: str
    env_var: str
    cls: type[ProviderSummarizer[Any]]
    ok: Callable[..., dict[str, Any]]
    error: Callable[[int, str, str], dict[str, Any]]
    refusal: dict[str, Any]
    truncated: dict[str, Any]

    def base_url(self, server: LoopbackServer) -> str:
        return server.url if self.name == "anthropic" else server.url + "/v1"

    def key_sent(self, headers: dict[str, str]) -> str:
        if "x-api-key" in headers:  # older anthropic SDKs
            return headers["x-api-key"]
        return headers["authorization"].removeprefix("Bearer ")


PROVIDERS = {
    "anthropic": Provider(
        name="anthropic",
        path="/v1/messages",
        env_var="ANTHROPIC_API_KEY",
        cls=AnthropicSummarizer,
        ok=anthropic_ok,
        error=anthropic_error,
        refusal=anthropic_ok(text="", stop="refusal"),
        truncated=anthropic_ok(text="I remember the fi", stop="max_tokens"),
    ),
    "openai": Provider(
        name="openai",
        path="/v1/chat/completions",
        env_var="OPENAI_API_KEY",
        cls=OpenAISummarizer,
        ok=openai_ok,
        error=openai_error,
        refusal=openai_ok(text=None, refusal="I can't help with that."),
        truncated=openai_ok(text="I remember the fi", stop="length"),
    ),
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_PROFILE",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    s = LoopbackServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> Provider:
    return PROVIDERS[request.param]


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def make(
    provider: Provider, server: LoopbackServer, fake_time: FakeTime
) -> Iterator[Callable[..., ProviderSummarizer[Any]]]:
    """Builds summarisers on the loopback server (fake sleep, key passed in) and closes them."""
    made: list[ProviderSummarizer[Any]] = []

    def build(**options: Any) -> ProviderSummarizer[Any]:
        settings: dict[str, Any] = {
            "api_key": KEY,
            "base_url": provider.base_url(server),
            "deadline": 5.0,
            "sleep": fake_time.sleep,
            "clock": fake_time.clock,
            **options,
        }
        summarizer = provider.cls(**settings)
        made.append(summarizer)
        return summarizer

    yield build
    for summarizer in made:
        summarizer.close()


def request(**fields: Any) -> CompletionRequest:
    settings: dict[str, Any] = {
        "model": MODEL,
        "messages": (
            Message.text_message("User", "Please fix parse_config in src/app.py."),
            Message.text_message("Claude", "Fixed: the loop was off by one."),
            Message.text_message("User", "Summarise what happened."),
        ),
        "system": "You are the agent.",
        "max_tokens": 300,
        **fields,
    }
    return CompletionRequest(**settings)


# ------------------------------------------------------------------ answers
def test_success_gives_text_usage_and_end_turn(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any]
) -> None:
    server.script(provider.path, Reply(provider.ok(text="I fixed parse_config.", usage=(120, 9))))
    completion = make().complete(request())
    assert completion.stop_reason == "end_turn" and completion.acceptable
    assert completion.text == "I fixed parse_config."
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (120, 9)
    assert completion.model == MODEL
    assert len(server.requests_to(provider.path)) == 1


def test_refusal_is_reported_as_refusal(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any]
) -> None:
    server.script(provider.path, Reply(provider.refusal))
    completion = make().complete(request())
    assert completion.stop_reason == "refusal" and not completion.acceptable


def test_truncated_answer_is_max_tokens(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any]
) -> None:
    server.script(provider.path, Reply(provider.truncated))
    completion = make().complete(request())
    assert completion.stop_reason == "max_tokens"
    assert completion.text == "I remember the fi" and not completion.acceptable


@pytest.mark.parametrize(
    ("raw", "ours"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "max_tokens"),
        ("pause_turn", "max_tokens"),
        ("refusal", "refusal"),
        ("tool_use", "tool_use"),
        ("something_new", "error"),
    ],
)
def test_anthropic_stop_reasons_map_into_one_vocabulary(
    server: LoopbackServer, raw: str, ours: StopReason
) -> None:
    server.script("/v1/messages", Reply(anthropic_ok(stop=raw)))
    with AnthropicSummarizer(api_key=KEY, base_url=server.url, deadline=5) as s:
        completion = s.complete(request())
    assert completion.stop_reason == ours
    if ours == "error":
        assert "something_new" in completion.text


@pytest.mark.parametrize(
    ("raw", "ours"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("something_new", "error"),
    ],
)
def test_openai_finish_reasons_map_into_one_vocabulary(
    server: LoopbackServer, raw: str, ours: StopReason
) -> None:
    server.script("/v1/chat/completions", Reply(openai_ok(stop=raw)))
    with OpenAISummarizer(api_key=KEY, base_url=server.url + "/v1", deadline=5) as s:
        completion = s.complete(request())
    assert completion.stop_reason == ours


def test_openai_refusal_field_and_tool_calls_win_over_finish_reason(
    server: LoopbackServer,
) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    server.script(
        "/v1/chat/completions",
        Reply(openai_ok(text=None, stop="stop", refusal="No.")),
        Reply(openai_ok(text=None, stop="stop", tool_calls=[call])),
    )
    with OpenAISummarizer(api_key=KEY, base_url=server.url + "/v1", deadline=5) as s:
        refused, tooled = s.complete(request()), s.complete(request())
    assert (refused.stop_reason, refused.text) == ("refusal", "No.")
    assert (tooled.stop_reason, tooled.text) == ("tool_use", "")


# ------------------------------------------------------------------ what the server receives
def test_system_prompt_messages_and_limits_reach_the_server(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any]
) -> None:
    server.script(provider.path, Reply(provider.ok()))
    make().complete(request())
    [received] = server.requests_to(provider.path)
    body = received.body
    assert body["model"] == MODEL
    conversation = [
        {"role": "user", "content": "Please fix parse_config in src/app.py."},
        {"role": "assistant", "content": "Fixed: the loop was off by one."},
        {"role": "user", "content": "Summarise what happened."},
    ]
    if provider.name == "anthropic":
        assert body["system"] == "You are the agent."
        assert body["max_tokens"] == 300
        assert body["messages"] == [
            {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
            for m in conversation
        ]
    else:
        assert body["max_completion_tokens"] == 300 and "max_tokens" not in body
        assert body["messages"] == [
            {"role": "system", "content": "You are the agent."},
            *conversation,
        ]
    assert "stream" not in body or body["stream"] is False


def test_no_system_prompt_sends_none(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any]
) -> None:
    server.script(provider.path, Reply(provider.ok()))
    make().complete(request(system=None))
    [received] = server.requests_to(provider.path)
    assert "system" not in received.body
    assert all(m["role"] != "system" for m in received.body["messages"])


TOOL = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": TOOL["input_schema"],
    },
}


@pytest.mark.parametrize("given", [TOOL, CHAT_TOOL], ids=["messages-shape", "chat-shape"])
def test_tools_and_tool_turns_are_passed_through(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], given: dict[str, Any]
) -> None:
    messages = (
        Message.text_message("User", "List the files."),
        Message(participant="Claude", content=(ToolUseBlock(id="t1", name="bash", input={}),)),
        Message(participant="User", content=(ToolResultBlock(tool_use_id="t1", content="a.py"),)),
        Message.text_message("User", "Summarise."),
    )
    server.script(provider.path, Reply(provider.ok()))
    make().complete(request(tools=(given,), messages=messages))
    [received] = server.requests_to(provider.path)
    body = received.body
    if provider.name == "anthropic":
        assert body["tools"] == [TOOL]  # each provider gets its own shape, whichever was given
        assert body["messages"][1]["content"][0] == {
            "type": "tool_use",
            "id": "t1",
            "name": "bash",
            "input": {},
        }
        assert body["messages"][2]["content"][0]["tool_use_id"] == "t1"
    else:
        assert body["tools"] == [CHAT_TOOL]
        assert body["messages"][2]["tool_calls"][0]["id"] == "t1"
        assert body["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "a.py"}


def test_cache_breakpoints_become_cache_control_marks_where_the_api_has_them(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any]
) -> None:
    thought = Message(
        participant="Claude",
        content=(
            TextBlock(text="Fixed it."),
            ThinkingBlock(thinking="was it the loop?", signature="sig"),
        ),
    )
    messages = (
        Message.text_message("User", "Please fix parse_config."),
        thought,
        Message.text_message("Claude", "It was off by one."),  # merged into the turn above
        Message.text_message("User", "Summarise what happened."),
    )
    server.script(provider.path, Reply(provider.ok()))
    make().complete(request(messages=messages, cache_breakpoints=(0, 1), cache_ttl="1h"))
    [received] = server.requests_to(provider.path)
    body = received.body
    mark = {"type": "ephemeral", "ttl": "1h"}
    if provider.name == "anthropic":
        user, agent, last = body["messages"]
        assert user["content"][-1]["cache_control"] == mark
        # a thinking block cannot carry the mark: the text before it does
        assert [b.get("cache_control") for b in agent["content"]] == [mark, None, None]
        assert all("cache_control" not in b for b in last["content"])
    else:
        assert "cache_control" not in json.dumps(body)  # OpenAI caches long prefixes itself


def test_a_request_names_bad_cache_breakpoints() -> None:
    with pytest.raises(ValueError, match=r"cache_breakpoints \[3\] are not indices of the 3"):
        request(cache_breakpoints=(0, 3))
    with pytest.raises(ValueError, match=r"cache_breakpoints holds 5 messages; .* at most 4"):
        request(
            messages=(Message.text_message("User", "x"),) * 5, cache_breakpoints=tuple(range(5))
        )


def test_anthropic_tools_keep_typed_tools_and_name_bad_ones() -> None:
    typed = {"type": "bash_20250124", "name": "bash"}  # one of Anthropic's own tools
    assert anthropic_tools([typed, CHAT_TOOL]) == [typed, TOOL]
    assert openai_tools(anthropic_tools([CHAT_TOOL])) == [CHAT_TOOL]
    with pytest.raises(ConfigError, match=r"tools\[1\] has neither a 'name'"):
        anthropic_tools([TOOL, {"description": "nameless"}])
    with pytest.raises(ConfigError, match=r"tools\[0\]\.function has no 'name'"):
        anthropic_tools([{"type": "function", "function": {"parameters": {}}}])


def test_openai_tools_in_chat_shape_pass_unchanged_and_bad_ones_are_named() -> None:
    chat = {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}
    assert openai_tools([chat]) == [chat]
    with pytest.raises(ConfigError, match=r"tools\[1\].*'name'"):
        openai_tools([chat, {"description": "nameless"}])


def test_openai_max_tokens_field_can_be_the_older_one(server: LoopbackServer) -> None:
    server.script("/v1/chat/completions", Reply(openai_ok()))
    with OpenAISummarizer(
        api_key=KEY, base_url=server.url + "/v1", max_tokens_field="max_tokens"
    ) as s:
        s.complete(request())
    [received] = server.requests
    assert received.body["max_tokens"] == 300 and "max_completion_tokens" not in received.body
    with pytest.raises(ConfigError, match="max_tokens_field"):
        OpenAISummarizer(api_key=KEY, max_tokens_field="tokens")  # type: ignore[arg-type]


# ------------------------------------------------------------------ keys
def test_api_key_from_the_environment_or_passed_in(
    provider: Provider,
    server: LoopbackServer,
    make: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.script(provider.path, Reply(provider.ok()))
    monkeypatch.setenv(provider.env_var, "key-from-env")
    make(api_key=None).complete(request())
    make(api_key="key-passed-in").complete(request())
    sent = [provider.key_sent(r.headers) for r in server.requests_to(provider.path)]
    assert sent == ["key-from-env", "key-passed-in"]


def test_missing_key_is_a_typed_error_naming_the_variable(provider: Provider) -> None:
    with pytest.raises(MissingAPIKeyError, match=f"set the {provider.env_var} environment"):
        provider.cls()
    with pytest.raises(ConfigError, match=provider.env_var):
        provider.cls(api_key="  ")


def test_bad_settings_are_typed_errors(provider: Provider) -> None:
    with pytest.raises(ConfigError, match="deadline must be a positive"):
        provider.cls(api_key=KEY, deadline=0)
    with pytest.raises(ConfigError, match="jitter"):
        RetryPolicy(jitter=1.5)
    sdk_client: Any
    if provider.name == "anthropic":
        sdk_client = anthropic.Anthropic(api_key=KEY)
    else:
        sdk_client = openai.OpenAI(api_key=KEY)
    with sdk_client, pytest.raises(ConfigError, match="either client"):
        provider.cls(client=sdk_client, api_key=KEY)


def test_a_ready_client_is_used_without_its_retries_and_left_open(
    provider: Provider, server: LoopbackServer
) -> None:
    server.script(provider.path, Reply(provider.ok()))
    sdk_client: Any
    if provider.name == "anthropic":
        sdk_client = anthropic.Anthropic(api_key="client-key", base_url=provider.base_url(server))
    else:
        sdk_client = openai.OpenAI(api_key="client-key", base_url=provider.base_url(server))
    with sdk_client:
        summarizer = provider.cls(client=sdk_client)
        assert summarizer.client.max_retries == 0 and sdk_client.max_retries > 0
        assert summarizer.complete(request()).acceptable
        summarizer.close()
        assert not sdk_client.is_closed()
    [received] = server.requests_to(provider.path)
    assert provider.key_sent(received.headers) == "client-key"


# ------------------------------------------------------------------ retries and failures
def test_429_is_retried_after_the_retry_after_header(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    server.script(
        provider.path,
        Reply(provider.error(429, "rate_limit_error", "slow down"), 429, {"retry-after": "2"}),
        Reply(provider.ok(text="Second time lucky.")),
    )
    completion = make().complete(request())
    assert completion.stop_reason == "end_turn" and completion.text == "Second time lucky."
    assert fake_time.slept == [2.0]
    assert len(server.requests_to(provider.path)) == 2


def test_429_without_retry_after_waits_a_seeded_backoff(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    busy = Reply(provider.error(429, "rate_limit_error", "slow down"), 429)
    policy = RetryPolicy(initial_delay=0.5, multiplier=2.0, jitter=0.25)
    waits = []
    for _ in range(2):
        server.script(provider.path, busy, busy, Reply(provider.ok()))
        fake_time.slept.clear()
        assert make(retry=policy, seed=7).complete(request()).acceptable
        waits.append(list(fake_time.slept))
    assert waits[0] == waits[1]  # the same seed, the same waits
    first, second = waits[0]
    assert 0.375 <= first <= 0.625 and 0.75 <= second <= 1.25


def test_persistent_500_ends_as_error_within_the_deadline(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    server.script(provider.path, Reply(provider.error(500, "api_error", "boom"), 500))
    started = time.monotonic()
    completion = make(deadline=5.0).complete(request())
    assert completion.stop_reason == "error" and not completion.acceptable
    assert "500" in completion.text and "deadline" in completion.text
    assert sum(fake_time.slept) < 5.0
    assert fake_time.slept[:3] == pytest.approx([0.5, 1.0, 2.0], rel=0.25)
    assert len(server.requests_to(provider.path)) == len(fake_time.slept) + 1
    assert time.monotonic() - started < 5.0


def test_the_requests_timeout_bounds_the_retries_too(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    server.script(provider.path, Reply(provider.error(500, "api_error", "boom"), 500))
    completion = make(deadline=600.0).complete(request().model_copy(update={"timeout": 1.5}))
    assert completion.stop_reason == "error" and "deadline" in completion.text
    assert 0 < sum(fake_time.slept) < 1.5  # a caller that stops waiting stops the retries


def test_max_attempts_bounds_the_retries(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    server.script(provider.path, Reply(provider.error(503, "overloaded_error", "busy"), 503))
    completion = make(retry=RetryPolicy(max_attempts=3)).complete(request())
    assert completion.stop_reason == "error" and "after 3 attempt(s)" in completion.text
    assert len(server.requests_to(provider.path)) == 3 and len(fake_time.slept) == 2


def test_retry_after_past_the_deadline_gives_up_at_once(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    server.script(
        provider.path,
        Reply(provider.error(429, "rate_limit_error", "later"), 429, {"retry-after": "60"}),
        Reply(provider.ok()),
    )
    completion = make(deadline=5.0).complete(request())
    assert completion.stop_reason == "error" and "429" in completion.text
    assert fake_time.slept == [] and len(server.requests_to(provider.path)) == 1


def test_client_errors_are_not_retried(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    server.script(provider.path, Reply(provider.error(400, "invalid_request_error", "bad"), 400))
    completion = make().complete(request())
    assert completion.stop_reason == "error" and "400" in completion.text
    assert fake_time.slept == [] and len(server.requests_to(provider.path)) == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply("{not json"),
        Reply({"unexpected": True}),
        Reply("<html>gateway</html>", content_type="text/html"),
    ],
    ids=["invalid-json", "wrong-shape", "not-json"],
)
def test_malformed_body_ends_as_error(
    provider: Provider,
    server: LoopbackServer,
    make: Callable[..., Any],
    fake_time: FakeTime,
    reply: Reply,
) -> None:
    server.script(provider.path, reply)
    completion = make().complete(request())
    assert completion.stop_reason == "error" and "malformed" in completion.text
    assert completion.usage.input_tokens == 0
    assert fake_time.slept == [] and len(server.requests_to(provider.path)) == 1


def test_connection_errors_are_retried_until_the_deadline(
    provider: Provider, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = f"http://127.0.0.1:{port}" + ("" if provider.name == "anthropic" else "/v1")
    completion = make(base_url=root, deadline=3.0).complete(request())
    assert completion.stop_reason == "error" and "Connection" in completion.text
    assert len(fake_time.slept) >= 2 and sum(fake_time.slept) < 3.0


def test_an_answer_past_the_deadline_is_abandoned_in_time(
    provider: Provider, server: LoopbackServer, make: Callable[..., Any], fake_time: FakeTime
) -> None:
    server.script(provider.path, Reply(provider.ok(), block=True))
    started = time.monotonic()
    completion = make(deadline=0.3).complete(request())
    elapsed = time.monotonic() - started
    assert completion.stop_reason == "error" and "Timeout" in completion.text
    assert 0.25 <= elapsed < 2.0
    assert fake_time.slept == []  # no wait fits in what is left of the deadline
    assert len(server.requests_to(provider.path)) == 1


# ------------------------------------------------------------------ helpers and packaging
def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "40", "retry-after": "9"}) == 0.04
    assert retry_after_seconds({"retry-after": "-3"}) == 0.0
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert retry_after_seconds({"retry-after": date}, now=lambda: 1445412480.0) == 10.0
    assert retry_after_seconds({}) is None


def test_importing_the_package_loads_no_sdk() -> None:
    code = (
        "import sys, context_manager, context_manager.providers; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('anthropic', 'openai')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
    import context_manager

    assert context_manager.AnthropicSummarizer is AnthropicSummarizer
    assert context_manager.OpenAISummarizer is OpenAISummarizer


# ------------------------------------------------------------------ with the strategy
def test_autobiographical_memory_is_written_through_anthropic(
    server: LoopbackServer, tmp_path: Path
) -> None:
    server.script(
        "/v1/messages",
        Reply(anthropic_ok(text="I helped fix the parser in src/app.py.", usage=(500, 12))),
    )
    strategy = AutobiographicalStrategy(
        compression_model=MODEL,
        target_chunk_tokens=100,
        recent_window_tokens=0,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )
    with (
        AnthropicSummarizer(api_key=KEY, base_url=server.url, deadline=5) as summarizer,
        ContextManager.open(
            path=tmp_path / "cm.db",
            strategy=strategy,
            summarizer=summarizer,
            counter=CharsCounter(),
        ) as cm,
    ):
        cm.set_system_prompt("You are the agent.")
        for i in range(8):
            who = "User" if i % 2 == 0 else "Claude"
            cm.add_message(who, " ".join(f"m{i}w{j}" for j in range(20)))
        cm.drain()
        summaries = list(strategy.summaries.values())
    assert summaries and all(s.level == 1 for s in summaries)
    assert summaries[0].content == "I helped fix the parser in src/app.py."
    first = server.requests_to("/v1/messages")[0].body
    assert first["model"] == MODEL and first["system"] == "You are the agent."
    texts = [b.get("text", "") for m in first["messages"] for b in m["content"]]
    assert any(t.startswith(MEMORY_MARKER) for t in texts)
    assert any("m0w0" in t for t in texts)
