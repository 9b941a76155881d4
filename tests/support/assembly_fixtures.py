"""Builders of wire-format messages and fake summarisers for the assembly tests."""

from __future__ import annotations

import threading
from typing import Any

from context_manager.summarizer import Completion, CompletionRequest, StopReason


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def image(data: str = "AAAA") -> dict[str, Any]:
    return {"type": "image", "mime": "image/png", "data": data}


def call(call_id: str, function_id: str, arguments: Any = None) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": call_id,
        "function_id": function_id,
        "arguments": {} if arguments is None else arguments,
    }


def inline_result(call_id: str, *blocks: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_result", "function_call_id": call_id, "content": list(blocks)}


def user(*blocks: dict[str, Any] | str, ts: int = 0) -> dict[str, Any]:
    content = [text(b) if isinstance(b, str) else b for b in blocks]
    return {"role": "user", "content": content, "timestamp": ts}


def assistant(*blocks: dict[str, Any] | str, ts: int = 0) -> dict[str, Any]:
    content = [text(b) if isinstance(b, str) else b for b in blocks]
    return {
        "role": "assistant",
        "content": content,
        "stop_reason": "end_turn",
        "model": "m",
        "provider": "p",
        "timestamp": ts,
    }


def result(
    call_id: str,
    function_id: str,
    *blocks: dict[str, Any] | str,
    details: Any = None,
    is_error: bool = False,
    ts: int = 0,
) -> dict[str, Any]:
    content = [text(b) if isinstance(b, str) else b for b in blocks]
    return {
        "role": "function_result",
        "function_call_id": call_id,
        "function_id": function_id,
        "content": content,
        "details": details,
        "is_error": is_error,
        "timestamp": ts,
    }


def custom(t: str = "note", ts: int = 0) -> dict[str, Any]:
    return {"role": "custom", "custom_type": "memo", "content": [text(t)], "timestamp": ts}


def inline_model(
    context_window: int, max_output_tokens: int, input_limit: int | None = None
) -> dict[str, Any]:
    limits: dict[str, Any] = {
        "context_window": context_window,
        "max_output_tokens": max_output_tokens,
    }
    if input_limit is not None:
        limits["input_limit"] = input_limit
    return {"id": "test-model", "provider": "test", "limits": limits}


def tool_turn(n: int, body: str, function_id: str = "read_file") -> list[dict[str, Any]]:
    """A user ask, an assistant call, its result and the assistant's answer."""
    cid = f"c{n}"
    return [
        user(f"question {n}"),
        assistant(call(cid, function_id, {"n": n})),
        result(cid, function_id, body),
        assistant(f"answer {n}"),
    ]


class FakeSummarizer:
    """Answers ``summary #k`` (or a fixed text) and records every request."""

    def __init__(self, reply: str | None = None, stop_reason: StopReason = "end_turn") -> None:
        self.reply = reply
        self.stop_reason: StopReason = stop_reason
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        reply = self.reply if self.reply is not None else f"summary #{len(self.requests)}"
        return Completion(text=reply, stop_reason=self.stop_reason)


class RaisingSummarizer:
    """Fails every call."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        raise RuntimeError("provider down")


class BlockingSummarizer:
    """Blocks every call until ``release`` is set (the test sets it when done)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def complete(self, request: CompletionRequest) -> Completion:
        self.entered.set()
        self.release.wait()
        return Completion(text="late summary", stop_reason="end_turn")


class StepClock:
    """A clock (milliseconds) that the test moves by hand."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now
