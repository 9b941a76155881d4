"""Loaders for real agent transcripts."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from .messages import Message, MessageFormatError, from_openai

__all__ = ["load_swe_agent"]


def load_swe_agent(path: str | Path, *, agent: str = "Claude") -> list[Message]:
    """Read a SWE-agent ``.traj`` file: its ``history`` in OpenAI chat form.

    SWE-agent writes a tool message's call ids as ``tool_call_ids`` (a list,
    sometimes serialised as a string); each becomes one tool result, the first
    carrying the output and the others a note that they share it.

    Raises
    ------
    MessageFormatError
        When the file is not JSON or has no ``history`` list.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MessageFormatError(f"{path}: cannot read a SWE-agent trajectory: {exc}") from None
    history = data.get("history") if isinstance(data, dict) else None
    if not isinstance(history, list):
        raise MessageFormatError(f"{path}: no 'history' list in the trajectory")
    chat: list[dict[str, Any]] = []
    for n, raw in enumerate(history):
        message = {k: raw[k] for k in ("role", "content", "tool_calls", "name") if k in raw}
        if raw.get("role") != "tool":
            chat.append(message)
            continue
        ids = raw.get("tool_call_id") or raw.get("tool_call_ids")
        if isinstance(ids, str) and ids.startswith("["):
            try:
                ids = ast.literal_eval(ids)
            except (ValueError, SyntaxError):
                raise MessageFormatError(
                    f"{path}: history[{n}].tool_call_ids is not a list of ids: {ids[:80]!r}"
                ) from None
        ids = ids if isinstance(ids, list) else [ids]
        chat.append({**message, "tool_call_id": ids[0]})
        for other in ids[1:]:
            note = f"[the output above, for call {ids[0]}, answers this call too]"
            chat.append({"role": "tool", "content": note, "tool_call_id": other})
    return from_openai(chat, agent=agent)
