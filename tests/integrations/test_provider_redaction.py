"""The API key never leaves a provider summariser in its diagnostics.

A server on 127.0.0.1 answers with error bodies that echo the request's headers and
its key, as a misconfigured gateway might; through the real ``anthropic`` and
``openai`` SDKs, the key must appear in no log record and no returned text, while the
rest of the diagnostic (status, the server's words) stays.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from context_manager import CharsCounter, ContextManager, Message
from context_manager.providers import AnthropicSummarizer, OpenAISummarizer, RetryPolicy
from context_manager.providers._base import ProviderSummarizer
from context_manager.providers.redaction import REDACTED, client_secrets, redact
from context_manager.providers.retry import Retry, run_with_retries
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import Completion, CompletionRequest

MODEL = "summary-model-test"
SHAPED_KEY = "sk-ant-api03-Zq7Xw2Lm9Pd4Rt8Vb1Nc6Hy3Jk5Gf0Ae"
"""A key shaped like a real one."""
PLAIN_KEY = "loopback-credential-7d1e9c42"
"""A key of no known shape: only knowing it exactly can remove it."""
KEYS = {"shaped": SHAPED_KEY, "plain": PLAIN_KEY}


# ------------------------------------------------------------------ the echoing server
@dataclass
class Echo:
    """What the server answers: ``status`` with a body in the provider's error shape
    (or, for 200, a message whose stop reason is the echo), naming the key it got."""

    status: int = 400
    provider: str = "anthropic"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        sent = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        echo = f"request refused, you sent key {sent}; your headers: {headers}"
        reply = self.server.echo
        body: dict[str, Any]
        if reply.status == 200 and reply.provider == "anthropic":
            body = {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": echo,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        elif reply.status == 200:
            body = {
                "id": "chatcmpl-01",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": echo,
                    }
                ],
            }
        elif reply.provider == "anthropic":
            body = {"type": "error", "error": {"type": "invalid_request_error", "message": echo}}
        else:
            body = {"error": {"message": echo, "type": "invalid_request_error", "code": None}}
        payload = json.dumps(body).encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    echo: Echo


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server(("127.0.0.1", 0), _Handler)
    s.echo = Echo()
    thread = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield s
    finally:
        s.shutdown()
        s.server_close()
        thread.join(timeout=5)


def _url(server: _Server, provider: str) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}" + ("/v1" if provider == "openai" else "")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


class _NoSleep:
    def __init__(self) -> None:
        self.offset = 0.0

    def sleep(self, seconds: float) -> None:
        self.offset += seconds

    def clock(self) -> float:
        return self.offset


CLASSES: dict[str, type[ProviderSummarizer[Any]]] = {
    "anthropic": AnthropicSummarizer,
    "openai": OpenAISummarizer,
}


def _summarizer(
    provider: str, server: _Server, key: str, *, given_client: bool, **options: Any
) -> ProviderSummarizer[Any]:
    time = _NoSleep()
    settings: dict[str, Any] = {"deadline": 60.0, "sleep": time.sleep, "clock": time.clock}
    url = _url(server, provider)
    if not given_client:
        return CLASSES[provider](api_key=key, base_url=url, **settings, **options)
    client: Any = (
        anthropic.Anthropic(api_key=key, base_url=url)
        if provider == "anthropic"
        else openai.OpenAI(api_key=key, base_url=url)
    )
    return CLASSES[provider](client=client, **settings, **options)


def _request() -> CompletionRequest:
    return CompletionRequest(
        model=MODEL, messages=(Message.text_message("User", "Summarise this."),), max_tokens=50
    )


def _assert_clean(key: str, *texts: str) -> None:
    for text in texts:
        assert key not in text, text
        assert key[-12:] not in text, text  # no tail of it either


# ------------------------------------------------------------------ through the SDKs
@pytest.mark.parametrize("given_client", [False, True], ids=["api_key", "client"])
@pytest.mark.parametrize("key_name", sorted(KEYS))
@pytest.mark.parametrize("provider", sorted(CLASSES))
def test_an_echoed_key_is_not_in_the_error_completion(
    server: _Server,
    caplog: pytest.LogCaptureFixture,
    provider: str,
    key_name: str,
    given_client: bool,
) -> None:
    key = KEYS[key_name]
    server.echo = Echo(400, provider)
    caplog.set_level(logging.DEBUG)
    with _summarizer(provider, server, key, given_client=given_client) as summarizer:
        completion = summarizer.complete(_request())
    assert completion.stop_reason == "error"
    _assert_clean(key, completion.text, repr(completion), caplog.text)
    # what went wrong is still said: provider, status, the server's words, other headers
    assert completion.text.startswith(f"{provider}: HTTP 400: ")
    assert f"request refused, you sent key {REDACTED}" in completion.text
    assert "'host': '127.0.0.1:" in completion.text
    assert "content-type" in completion.text


@pytest.mark.parametrize("key_name", sorted(KEYS))
@pytest.mark.parametrize("provider", sorted(CLASSES))
def test_a_retried_failure_logs_and_returns_no_key(
    server: _Server, caplog: pytest.LogCaptureFixture, provider: str, key_name: str
) -> None:
    key = KEYS[key_name]
    server.echo = Echo(503, provider)
    caplog.set_level(logging.DEBUG)
    policy = RetryPolicy(jitter=0.0, max_attempts=3)
    with _summarizer(provider, server, key, given_client=False, retry=policy) as summarizer:
        completion = summarizer.complete(_request())
    assert completion.stop_reason == "error"
    assert completion.text.startswith(f"{provider}: gave up after 3 attempt(s); last failure: ")
    assert "HTTP 503" in completion.text and f"you sent key {REDACTED}" in completion.text
    retried = [r for r in caplog.records if r.name == "context_manager.providers.retry"]
    assert len(retried) == 2  # two retries logged before the third attempt gave up
    for record in retried:
        message = record.getMessage()
        assert "HTTP 503" in message and f"you sent key {REDACTED}" in message
    _assert_clean(key, completion.text, caplog.text)


@pytest.mark.parametrize("key_name", sorted(KEYS))
@pytest.mark.parametrize("provider", sorted(CLASSES))
def test_a_malformed_answer_echoing_the_key_is_redacted(
    server: _Server, caplog: pytest.LogCaptureFixture, provider: str, key_name: str
) -> None:
    key = KEYS[key_name]
    server.echo = Echo(200, provider)
    caplog.set_level(logging.DEBUG)
    with _summarizer(provider, server, key, given_client=False) as summarizer:
        completion = summarizer.complete(_request())
    assert completion.stop_reason == "error"
    assert completion.text.startswith(f"{provider}: malformed response: unknown ")
    assert f"you sent key {REDACTED}" in completion.text
    _assert_clean(key, completion.text, caplog.text)


def test_a_strategy_whose_summariser_fails_logs_no_key(
    server: _Server, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    server.echo = Echo(401, "anthropic")
    caplog.set_level(logging.DEBUG)
    strategy = AutobiographicalStrategy(
        compression_model=MODEL,
        target_chunk_tokens=100,
        recent_window_tokens=0,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )
    with (
        AnthropicSummarizer(
            api_key=PLAIN_KEY, base_url=_url(server, "anthropic"), deadline=5
        ) as summarizer,
        ContextManager.open(
            path=tmp_path / "cm.db",
            strategy=strategy,
            summarizer=summarizer,
            counter=CharsCounter(),
        ) as cm,
    ):
        for i in range(8):
            cm.add_message("User" if i % 2 == 0 else "Claude", f"turn {i} " * 20)
        cm.drain()
        assert not strategy.summaries  # every answer was an error
    _assert_clean(PLAIN_KEY, caplog.text)


# ------------------------------------------------------------------ the pieces
def test_run_with_retries_redacts_the_details_it_logs_and_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "per-call-secret-0042"
    details = iter([f"HTTP 500: echo {secret}", f"HTTP 502: Authorization: Bearer {secret}"])

    def attempt(timeout: float) -> Completion | Retry:
        return Retry(next(details), retry_after=1.0)

    caplog.set_level(logging.DEBUG)
    now = [0.0]
    completion = run_with_retries(
        attempt,
        deadline=100.0,
        policy=RetryPolicy(max_attempts=2),
        rng=random.Random(0),
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        clock=lambda: now[0],
        label="p",
        model="m",
        secrets=[secret],
    )
    assert completion.text == (
        "p: gave up after 2 attempt(s); last failure: HTTP 502: Authorization: Bearer [redacted]"
    )
    assert "attempt 1 failed (HTTP 500: echo [redacted])" in caplog.text
    assert secret not in caplog.text


def test_an_error_completion_from_an_attempt_is_redacted_too() -> None:
    completion = run_with_retries(
        lambda timeout: Completion(
            text="p: HTTP 401: key sk-proj-ABCDEFGHIJKLMNOPQRSTU", stop_reason="error"
        ),
        deadline=10.0,
        policy=RetryPolicy(),
        rng=random.Random(0),
        sleep=lambda s: None,
        clock=lambda: 0.0,
        label="p",
        model="m",
    )
    assert completion.text == "p: HTTP 401: key [redacted]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x-api-key: abc123XYZ", "x-api-key: [redacted]"),
        ("'X-Api-Key': 'abc123XYZ', 'host': 'h'", "'X-Api-Key': '[redacted]', 'host': 'h'"),
        ('{"authorization": "Bearer t0k.en"}', '{"authorization": "Bearer [redacted]"}'),
        ("auth failed for bearer t0k.en today", "auth failed for bearer [redacted] today"),
        ("GET /v1?api_key=abc123&x=1", "GET /v1?api_key=[redacted]&x=1"),
        ("sk-ant-api03-abcdefghij0123456789 revoked", "[redacted] revoked"),
        ("old key sk-abcdefghijklmnopqrstu", "old key [redacted]"),
        # what is not a secret stays
        ("authentication_error: invalid x-api-key", "authentication_error: invalid x-api-key"),
        ("task-0123456789abcdefghijk sk-short", "task-0123456789abcdefghijk sk-short"),
        ("HTTP 429: rate limited, retry later", "HTTP 429: rate limited, retry later"),
    ],
)
def test_redact_removes_credential_shapes_and_keeps_the_rest(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected  # redacting twice changes nothing


def test_redact_removes_a_known_secret_but_not_a_short_one() -> None:
    assert redact("echo: hunter2-long-secret.", ["hunter2-long-secret"]) == "echo: [redacted]."
    assert redact("a key: abc", ["abc", None, ""]) == "a key: abc"  # too short to search


def test_client_secrets_reads_the_sdk_clients() -> None:
    with anthropic.Anthropic(api_key=PLAIN_KEY, base_url="http://127.0.0.1:9") as client:
        assert client_secrets(client) == (PLAIN_KEY,)
    with openai.OpenAI(api_key=SHAPED_KEY, base_url="http://127.0.0.1:9") as other:
        assert client_secrets(other) == (SHAPED_KEY,)
