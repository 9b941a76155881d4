"""Successful provider replies as each API sends them, for the loopback server: an
Anthropic message (:func:`anthropic_ok`) and an OpenAI chat completion (:func:`openai_ok`)."""

from __future__ import annotations

from typing import Any

MODEL = "summary-model-test"
"""The model the replies name."""


def anthropic_ok(
    text: str = "I remember the fix.", stop: str = "end_turn", usage: tuple[int, int] = (42, 7)
) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def openai_ok(
    text: str | None = "I remember the fix.",
    stop: str = "stop",
    usage: tuple[int, int] = (42, 7),
    refusal: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-01",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": stop, "logprobs": None}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }
