"""Transcript loaders for the policy benchmark.

Core formats (no optional package):

* :func:`load_openai`: an OpenAI chat-completions conversation (JSON list,
  ``{"messages": [...]}`` object, or JSONL with one message a line);
* :func:`load_openai_conversations`: JSONL with one ``{"messages": [...]}``
  conversation a line (the fine-tuning layout);
* :func:`load_anthropic`: an Anthropic Messages API conversation (JSON list,
  or an object with ``messages`` and an optional ``system``);
* :func:`load_swe_agent`: a SWE-agent ``.traj`` trajectory;
* :func:`detect_format` tells these apart by content, :func:`load_transcript_file`
  reads a file in the format given or detected.

Data packages (optional, imported lazily):

* :func:`load_bfcl_multi_turn`: the multi-turn sets of ``bfcl-eval``; the
  ground-truth calls are replayed against the package's tool simulations,
  giving real ``tool_use`` / ``tool_result`` transcripts;
* :func:`load_bfcl_memory`: the memory sets of ``bfcl-eval``: the
  prerequisite conversations of each scenario, with the questions asked
  afterwards and their ground-truth answers as :attr:`Transcript.facts`;
* :func:`load_chitchat`: long human open-domain chats of ``chitchat-dataset``.

Every loader raises :class:`TranscriptError` naming the path (or package)
and what is wrong.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

from context_manager.messages import (
    Message,
    MessageFormatError,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    from_anthropic,
    from_openai,
)

__all__ = [
    "BFCL_MULTI_TURN_CATEGORIES",
    "TRANSCRIPT_FORMATS",
    "Probe",
    "Transcript",
    "TranscriptError",
    "call_points",
    "detect_format",
    "load_anthropic",
    "load_bfcl_memory",
    "load_bfcl_multi_turn",
    "load_chitchat",
    "load_openai",
    "load_openai_conversations",
    "load_swe_agent",
    "load_tau_bench",
    "load_transcript_file",
]


class TranscriptError(MessageFormatError):
    """A transcript could not be loaded: names the path (or package) and what is wrong."""


@dataclass(frozen=True)
class Probe:
    """A question asked after a conversation, with its accepted answers.

    Attributes
    ----------
    id : str
        The question's id in its data set.
    question : str
        The question.
    answers : tuple of str
        Accepted answer strings (any one is right).
    source : str
        The passage of the conversation the answer comes from.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    source: str = ""


@dataclass(frozen=True)
class Transcript:
    """A conversation to replay, with what must be remembered of it.

    Attributes
    ----------
    name : str
        Stable identifier (data set id or file name).
    messages : list of Message
        The conversation.
    facts : list of str
        Strings whose presence in a request shows a fact was retained (the
        first accepted answer of each probe); empty when the data set has none.
    probes : list of Probe
        The questions behind :attr:`facts`, with every accepted answer.
    call_points : list of int
        Lengths ``n`` at which the model is called on ``messages[:n]``.
    metadata : dict
        Source details (data set, category, ids...).
    """

    name: str
    messages: list[Message]
    facts: list[str] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    call_points: list[int] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_messages(
        cls, name: str, messages: list[Message], metadata: dict[str, Any] | None = None
    ) -> Transcript:
        """A transcript of ``messages`` without facts, its model called before each of
        Claude's messages (:func:`call_points`).

        Parameters
        ----------
        name : str
            The transcript's name.
        messages : list of Message
            The conversation (kept, not copied).
        metadata : dict, optional
            Source details (kept, not copied; default: empty).

        Returns
        -------
        Transcript

        Examples
        --------
        >>> chat = [Message.text_message("User", "q"), Message.text_message("Claude", "a")]
        >>> Transcript.from_messages("chat", chat, {"source": "here"}).call_points
        [1]
        """
        return cls(
            name,
            messages,
            call_points=call_points(messages),
            metadata=metadata if metadata is not None else {},
        )


def call_points(history: Sequence[Message], agent: str = "Claude") -> list[int]:
    """Lengths ``n`` at which the agent's model is called on ``history[:n]``.

    The model is called right before each of the agent's messages: the
    prefix then ends with a user-side message (a user turn or tool results),
    never with a pending tool call.

    Examples
    --------
    >>> h = [Message.text_message("System", "s"), Message.text_message("User", "q"),
    ...      Message.text_message("Claude", "a"), Message.text_message("User", "q2")]
    >>> call_points(h)
    [2]
    """
    return [
        n
        for n in range(1, len(history))
        if history[n].participant == agent and history[n - 1].participant != agent
    ]


# ------------------------------------------------------------------ files
def _read_text(path: str | Path) -> str:
    p = Path(path)
    if not p.exists():
        raise TranscriptError(f"{p}: no such file")
    if not p.is_file():
        raise TranscriptError(f"{p}: not a regular file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise TranscriptError(f"{p}: cannot read: {exc.strerror or exc}") from None


def _read_json(path: str | Path) -> Any:
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _read_jsonl(path: str | Path) -> list[Any]:
    rows: list[Any] = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"{path}: line {number} is not valid JSON ({exc.msg})") from None
    return rows


def _convert(path: str | Path, convert: Callable[[], list[Message]], what: str) -> list[Message]:
    try:
        return convert()
    except (TypeError, AttributeError, ValueError) as exc:  # MessageFormatError included
        raise TranscriptError(f"{path}: not {what}: {exc}") from None


def _message_list(data: Any, path: str | Path, what: str) -> list[Mapping[str, Any]]:
    messages = data.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise TranscriptError(
            f"{path}: expected {what}: a JSON list of message objects or an object "
            "with a 'messages' list"
        )
    return messages


_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
"""Content block types of the Anthropic Messages API that OpenAI chat messages never hold."""
_OPENAI_ROLES = frozenset({"system", "developer", "tool", "function"})
"""Message roles of OpenAI chat that the Anthropic Messages API has no place for."""


def _anthropic_block(message: Mapping[str, Any]) -> str | None:
    """The type of the first Anthropic-only content block of ``message``, if any."""
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") in _ANTHROPIC_BLOCKS:
                return str(block["type"])
    return None


def _openai_mark(message: Mapping[str, Any]) -> str | None:
    """What marks ``message`` as OpenAI chat (a role or a tool-call field), if anything."""
    if message.get("role") in _OPENAI_ROLES:
        return f"role {message['role']!r}"
    for key in ("tool_calls", "tool_call_id"):
        if key in message:
            return f"a {key!r} field"
    return None


def load_openai(path: str | Path, *, agent: str = "Claude", user: str = "User") -> list[Message]:
    """Read an OpenAI chat-completions conversation.

    Parameters
    ----------
    path : str or Path
        ``.jsonl``: one message object a line. Anything else: JSON, either a
        list of messages or an object with a ``messages`` list.
    agent, user : str
        Participants of assistant and user messages (``Claude`` is the agent's name
        throughout the library and its benchmark policies).

    Returns
    -------
    list of Message
        The conversation (system messages become a ``System`` participant).

    Raises
    ------
    TranscriptError
        Missing or unreadable file, invalid JSON, or messages that do not
        follow the format (the message index and field are named). A message
        holding an Anthropic content block (``tool_use``, ``tool_result``,
        ``thinking``) is refused rather than read without it.
    """
    data: Any = _read_jsonl(path) if Path(path).suffix == ".jsonl" else _read_json(path)
    if (
        isinstance(data, list)
        and data
        and all(isinstance(r, dict) and "messages" in r for r in data)
    ):
        raise TranscriptError(
            f"{path}: holds {len(data)} conversations, one a line; use load_openai_conversations"
        )
    messages = _message_list(data, path, "OpenAI chat messages")
    for i, message in enumerate(messages):
        kind = _anthropic_block(message)
        if kind is not None:
            raise TranscriptError(
                f"{path}: message {i} holds a {kind!r} block, which OpenAI chat messages "
                "do not have; this looks like Anthropic JSON (load_anthropic, or "
                "ctxfold replay --format anthropic)"
            )
    return _convert(path, lambda: from_openai(messages, agent=agent, user=user), "OpenAI chat")


def load_openai_conversations(
    path: str | Path, *, agent: str = "Claude", user: str = "User"
) -> list[Transcript]:
    """Read JSONL with one ``{"messages": [...]}`` conversation a line.

    Returns
    -------
    list of Transcript
        One per line, named ``<file stem>:<line>``.

    Raises
    ------
    TranscriptError
        Missing or unreadable file, or a line that is not a conversation.
    """
    out: list[Transcript] = []
    for number, row in enumerate(_read_jsonl(path), start=1):
        where = f"{path}: line {number}"
        messages = _message_list(row, where, "a conversation")
        converted = _convert(
            where, partial(from_openai, messages, agent=agent, user=user), "OpenAI chat"
        )
        out.append(
            Transcript(
                name=f"{Path(path).stem}:{number}",
                messages=converted,
                call_points=call_points(converted, agent),
                metadata={"source": str(path), "line": number},
            )
        )
    return out


def load_anthropic(path: str | Path, *, agent: str = "Claude", user: str = "User") -> list[Message]:
    """Read an Anthropic Messages API conversation.

    Parameters
    ----------
    path : str or Path
        JSON: a list of messages, or a request-like object with ``messages``
        and an optional ``system`` (a string or a list of text blocks), which
        becomes a leading ``System`` message. ``.jsonl``: one message a line.
    agent, user : str
        Participants of assistant and user messages.

    Returns
    -------
    list of Message
        The conversation.

    Raises
    ------
    TranscriptError
        Missing or unreadable file, invalid JSON, or messages that do not
        follow the format.
    """
    data: Any = _read_jsonl(path) if Path(path).suffix == ".jsonl" else _read_json(path)
    messages = _message_list(data, path, "Anthropic messages")
    out = _convert(path, lambda: from_anthropic(messages, agent=agent, user=user), "Anthropic")
    system = data.get("system") if isinstance(data, dict) else None
    if isinstance(system, list):
        system = "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    if system is not None and not isinstance(system, str):
        raise TranscriptError(f"{path}: 'system' must be a string or a list of text blocks")
    if system:
        out.insert(0, Message.text_message("System", system))
    return out


def load_tau_bench(
    path: str | Path, *, limit: int | None = None, agent: str = "Claude"
) -> list[Transcript]:
    """Read tau-bench trajectories: a JSON list of ``{"task_id", "reward", "traj", ...}``
    whose ``traj`` is an OpenAI chat (the policy as its system message, the customer,
    the agent's tool calls and their JSON results).

    Each becomes one :class:`Transcript` named ``tau-<task_id>-<trial>``, called before
    each of the agent's turns, with the task, trial and reward in its metadata.

    Parameters
    ----------
    path : str or Path
    limit : int, optional
        Read at most this many trajectories, in file order.
    agent : str
        The participant given to the agent's turns.

    Raises
    ------
    TranscriptError
        When the file cannot be read, is not such a list, or a trajectory is malformed
        (naming its index).
    """
    data = _read_json(path)
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise TranscriptError(f"{path}: expected a JSON list of tau-bench trajectory objects")
    out: list[Transcript] = []
    for k, run in enumerate(data[:limit] if limit is not None else data):
        traj = run.get("traj")
        if not isinstance(traj, list) or not all(isinstance(m, dict) for m in traj):
            raise TranscriptError(f"{path}: trajectory {k} has no 'traj' list of messages")
        where = f"{path} (trajectory {k})"
        messages = _convert(where, partial(from_openai, traj, agent=agent), "OpenAI chat")
        name = f"tau-{run.get('task_id', k)}-{run.get('trial', 0)}"
        metadata = {
            "dataset": "tau-bench",
            "task_id": run.get("task_id"),
            "trial": run.get("trial"),
            "reward": run.get("reward"),
        }
        out.append(
            Transcript(name, messages, call_points=call_points(messages, agent), metadata=metadata)
        )
    return out


def load_swe_agent(path: str | Path, *, agent: str = "Claude") -> list[Message]:
    """Read a SWE-agent ``.traj`` file: its ``history`` in OpenAI chat form.

    SWE-agent writes a tool message's call ids as ``tool_call_ids`` (a list,
    sometimes serialised as a string); each becomes one tool result, the first
    carrying the output and the others a note that they share it.

    Parameters
    ----------
    path : str or Path
    agent : str
        The participant given to the assistant's turns.

    Raises
    ------
    TranscriptError
        When the file cannot be read, is not JSON, has no ``history`` list, or a
        message in it is malformed.
    """
    data = _read_json(path)
    history = data.get("history") if isinstance(data, dict) else None
    if not isinstance(history, list):
        raise TranscriptError(f"{path}: no 'history' list in the trajectory")
    chat: list[dict[str, Any]] = []
    for n, raw in enumerate(history):
        if not isinstance(raw, dict):
            raise TranscriptError(f"{path}: history[{n}] is not a message object")
        message = {k: raw[k] for k in ("role", "content", "tool_calls", "name") if k in raw}
        if raw.get("role") != "tool":
            chat.append(message)
            continue
        ids = raw.get("tool_call_id") or raw.get("tool_call_ids")
        if isinstance(ids, str) and ids.startswith("["):
            try:
                ids = ast.literal_eval(ids)
            except (ValueError, SyntaxError):
                raise TranscriptError(
                    f"{path}: history[{n}].tool_call_ids is not a list of ids: {ids[:80]!r}"
                ) from None
        ids = ids if isinstance(ids, list) else [ids]
        chat.append({**message, "tool_call_id": ids[0]})
        for other in ids[1:]:
            note = f"[the output above, for call {ids[0]}, answers this call too]"
            chat.append({"role": "tool", "content": note, "tool_call_id": other})
    return _convert(path, partial(from_openai, chat, agent=agent), "a SWE-agent trajectory")


TRANSCRIPT_FORMATS = ("swe-agent", "anthropic", "openai", "tau-bench")
"""The file formats :func:`load_transcript_file` reads (and :func:`detect_format` names)."""


def _detect(data: Any, path: str | Path) -> tuple[str, str] | None:
    """The format of parsed ``data`` and what shows it; None when nothing does."""
    if isinstance(data, dict) and isinstance(data.get("history"), list) and "messages" not in data:
        return "swe-agent", "a top-level 'history' list"
    if (
        isinstance(data, list)
        and data
        and all(isinstance(x, dict) and isinstance(x.get("traj"), list) for x in data)
    ):
        return "tau-bench", "a list of sessions, each with a 'traj'"
    messages = data.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list):
        return None
    anthropic: str | None = None
    if isinstance(data, dict) and "system" in data:
        anthropic = "a top-level 'system' key"
    openai: str | None = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        kind = _anthropic_block(message)
        if anthropic is None and kind is not None:
            anthropic = f"a {kind!r} content block in message {i}"
        mark = _openai_mark(message)
        if openai is None and mark is not None:
            openai = f"{mark} in message {i}"
    if anthropic is not None and openai is not None:
        raise TranscriptError(
            f"{path}: mixes Anthropic JSON ({anthropic}) and OpenAI chat ({openai}); "
            "name the format"
        )
    if anthropic is not None:
        return "anthropic", anthropic
    return "openai", openai or "messages with plain text content"


def detect_format(path: str | Path) -> tuple[str, str]:
    """Tell a transcript's format by its content, the file extension only as a fallback.

    A top-level ``history`` list is a SWE-agent trajectory; a list of sessions each
    with a ``traj`` is a tau-bench file (:func:`load_tau_bench`); a top-level
    ``system`` key, or a message whose content holds ``tool_use``,
    ``tool_result`` or ``thinking`` blocks, is Anthropic JSON; anything else
    (``tool_calls``, ``tool`` or ``system`` roles, plain text) is OpenAI chat.

    Parameters
    ----------
    path : str or Path
        A JSON file, or JSONL with one message a line.

    Returns
    -------
    tuple of (str, str)
        The format (one of :data:`TRANSCRIPT_FORMATS`) and what in the file
        shows it.

    Raises
    ------
    TranscriptError
        When the file cannot be read or parsed, or mixes the marks of two formats.

    Examples
    --------
    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder, "chat.json")
    ...     _ = path.write_text(json.dumps({"system": "Be brief.", "messages": []}))
    ...     detect_format(path)
    ('anthropic', "a top-level 'system' key")
    """
    p = Path(path)
    rows: Any = _read_jsonl(p) if p.suffix == ".jsonl" else _read_json(p)
    found = _detect(rows, p)
    if found is not None:
        return found
    if p.suffix == ".traj":
        return "swe-agent", "the .traj extension"
    raise TranscriptError(
        f"{p}: not a transcript: expected a JSON list of messages, an object with a "
        "'messages' list, or a SWE-agent trajectory with a 'history' list"
    )


def load_transcript_file(
    path: str | Path, fmt: str = "auto", *, agent: str = "Claude"
) -> tuple[str, list[Message]]:
    """Read one conversation from a file in the format given, or detected by content.

    Parameters
    ----------
    path : str or Path
        The transcript.
    fmt : {"auto", "swe-agent", "anthropic", "openai", "tau-bench"}
        ``auto`` asks :func:`detect_format`. A tau-bench file gives its sessions one
        after another (each with its system prompt); :func:`load_tau_bench` gives them
        apart.
    agent : str
        The participant given to the assistant's turns.

    Returns
    -------
    tuple of (str, list of Message)
        The format read and the conversation.

    Raises
    ------
    TranscriptError
        For an unknown format, or a file that cannot be read in it.
    """
    if fmt == "auto":
        fmt, _ = detect_format(path)
    readers: dict[str, Callable[..., list[Message]]] = {
        "swe-agent": load_swe_agent,
        "anthropic": load_anthropic,
        "openai": load_openai,
    }
    if fmt == "tau-bench":
        sessions = load_tau_bench(path, agent=agent)
        return fmt, [m for session in sessions for m in session.messages]
    if fmt not in readers:
        raise TranscriptError(
            f"unknown transcript format {fmt!r}; choose auto, {', '.join(TRANSCRIPT_FORMATS)}"
        )
    return fmt, readers[fmt](path, agent=agent)


# ------------------------------------------------------------------ bfcl-eval
BFCL_MULTI_TURN_CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
"""The multi-turn sets of ``bfcl-eval``."""

_BFCL_SOURCE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
_BFCL_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
_BFCL_MEMORY_SCENARIOS = ("customer", "finance", "healthcare", "notetaker", "student")


def _bfcl_data() -> Path:
    try:
        import bfcl_eval
    except ImportError:
        raise TranscriptError(
            "bfcl-eval is not installed: pip install --no-deps bfcl-eval mpmath "
            "(its data and tool simulations need no other dependency)"
        ) from None
    data = Path(bfcl_eval.__file__).parent / "data"
    if not data.is_dir():
        raise TranscriptError(f"{data}: the bfcl-eval data folder is missing")
    return data


def _literal_list(value: Any, where: str) -> Any:
    """BFCL stores some fields as Python-literal strings."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise TranscriptError(f"{where}: cannot read {value[:60]!r}") from None
    return value


def _parse_call(text: str, where: str) -> tuple[str, list[Any], dict[str, Any]]:
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a plain function call")
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except (ValueError, SyntaxError) as exc:
        raise TranscriptError(f"{where}: cannot parse the call {text!r}: {exc}") from None
    return node.func.id, args, kwargs


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except TypeError:
            return str(value)
    return str(value)


def _bfcl_tools(
    classes: Sequence[str], config: Mapping[str, Any], long_context: bool, where: str
) -> dict[str, tuple[str, Any]]:
    """Fresh tool simulations of one entry: method name -> (class name, bound method)."""
    methods: dict[str, tuple[str, Any]] = {}
    for name in classes:
        if name not in _BFCL_MODULES:
            raise TranscriptError(f"{where}: no tool simulation for {name!r}")
        module = importlib.import_module(f"{_BFCL_SOURCE}.{_BFCL_MODULES[name]}")
        instance = getattr(module, name)()
        if hasattr(instance, "_load_scenario"):  # MathAPI is stateless
            instance._load_scenario(copy.deepcopy(config.get(name, {})), long_context=long_context)
        for method_name, method in inspect.getmembers(instance, inspect.ismethod):
            if not method_name.startswith("_"):
                methods[method_name] = (name, method)
    return methods


def load_bfcl_multi_turn(
    category: Literal["base", "long_context", "miss_func", "miss_param"] = "base",
    *,
    limit: int | None = None,
    agent: str = "Claude",
) -> list[Transcript]:
    """Replay a ``bfcl-eval`` multi-turn set into tool-use transcripts.

    Each entry's user turns are followed by its ground-truth calls, one
    ``tool_use`` message each, answered by a ``tool_result`` message holding
    what the package's tool simulation returns (a failing call gives an
    error result, as in BFCL's own executor). Call ids are
    ``<entry id>-<turn>-<call>``.

    Parameters
    ----------
    category : {"base", "long_context", "miss_func", "miss_param"}
        The set. ``long_context`` loads the simulations' large scenarios.
    limit : int, optional
        Only the first ``limit`` entries.
    agent : str
        Participant of the calls.

    Returns
    -------
    list of Transcript
        One per entry, ``facts`` empty.

    Raises
    ------
    TranscriptError
        When bfcl-eval is missing, the category unknown, or an entry cannot
        be replayed.
    """
    if category not in BFCL_MULTI_TURN_CATEGORIES:
        raise TranscriptError(
            f"unknown BFCL multi-turn category {category!r}; "
            f"choose one of {', '.join(BFCL_MULTI_TURN_CATEGORIES)}"
        )
    data = _bfcl_data()
    questions = _read_jsonl(data / f"BFCL_v4_multi_turn_{category}.json")
    answers = {
        row["id"]: row["ground_truth"]
        for row in _read_jsonl(data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json")
    }
    out: list[Transcript] = []
    for entry in questions[:limit]:
        where = f"bfcl-eval {entry.get('id')}"
        turns = _literal_list(entry["question"], where)
        truth = _literal_list(answers.get(entry["id"], []), where)
        classes = _literal_list(entry["involved_classes"], where)
        config = _literal_list(entry.get("initial_config", {}), where)
        tools = _bfcl_tools(classes, config, category == "long_context", where)
        messages: list[Message] = []
        for t, turn in enumerate(turns):
            for raw in turn:
                messages.append(Message.text_message("User", str(raw.get("content", ""))))
            for c, call in enumerate(truth[t] if t < len(truth) else []):
                name, args, kwargs = _parse_call(call, where)
                call_id = f"{entry['id']}-{t}-{c}"
                owner, method = tools.get(name, ("Tool", None))
                try:
                    if method is None:
                        raise KeyError(f"no tool named {name!r}")
                    bound = inspect.signature(method).bind(*args, **kwargs)
                    arguments = dict(bound.arguments)
                except (TypeError, KeyError) as exc:
                    arguments = dict(kwargs)
                    result, is_error = f"Error during execution: {exc}", True
                else:
                    try:
                        result, is_error = _result_text(method(**arguments)), False
                    except Exception as exc:  # the simulation's own failure, kept as data
                        result, is_error = f"Error during execution: {exc}", True
                use = ToolUseBlock(id=call_id, name=name, input=arguments)
                messages.append(Message(participant=agent, content=(use,)))
                done = ToolResultBlock(tool_use_id=call_id, content=result, is_error=is_error)
                messages.append(Message(participant=owner, content=(done,)))
        out.append(
            Transcript(
                name=str(entry["id"]),
                messages=messages,
                call_points=call_points(messages, agent),
                metadata={"data_set": "bfcl-eval", "category": category, "classes": classes},
            )
        )
    return out


def load_bfcl_memory(scenario: str | None = None) -> list[Transcript]:
    """The ``bfcl-eval`` memory scenarios: conversations plus questions about them.

    Each scenario's prerequisite conversations are concatenated in order
    (user messages only: the data set holds no assistant answers). The model
    is called after every user message. ``facts`` holds the first accepted
    answer of each of the scenario's questions; ``probes`` holds the
    questions, every accepted answer and the source passage.

    Parameters
    ----------
    scenario : str, optional
        One of ``customer``, ``finance``, ``healthcare``, ``notetaker``,
        ``student``; all when None.

    Returns
    -------
    list of Transcript
        One per scenario.

    Raises
    ------
    TranscriptError
        When bfcl-eval is missing or the scenario unknown.
    """
    if scenario is not None and scenario not in _BFCL_MEMORY_SCENARIOS:
        raise TranscriptError(
            f"unknown BFCL memory scenario {scenario!r}; "
            f"choose one of {', '.join(_BFCL_MEMORY_SCENARIOS)}"
        )
    data = _bfcl_data()
    questions = _read_jsonl(data / "BFCL_v4_memory.json")
    answers = {r["id"]: r for r in _read_jsonl(data / "possible_answer" / "BFCL_v4_memory.json")}
    out: list[Transcript] = []
    for name in [scenario] if scenario else _BFCL_MEMORY_SCENARIOS:
        where = f"bfcl-eval memory {name}"
        messages: list[Message] = []
        for conversation in _read_jsonl(
            data / "memory_prereq_conversation" / f"memory_{name}.json"
        ):
            for turn in _literal_list(conversation["question"], where):
                for raw in turn:
                    messages.append(Message.text_message("User", str(raw.get("content", ""))))
        probes: list[Probe] = []
        for q in questions:
            if q.get("scenario") != name:
                continue
            answer = answers.get(q["id"])
            if answer is None:
                raise TranscriptError(f"{where}: question {q['id']} has no ground truth")
            turns = _literal_list(q["question"], where)
            text = " ".join(str(m.get("content", "")) for t in turns for m in t)
            probes.append(
                Probe(
                    id=str(q["id"]),
                    question=text,
                    answers=tuple(str(a) for a in answer["ground_truth"]),
                    source=str(answer.get("source", "")).strip(".\"' "),
                )
            )
        out.append(
            Transcript(
                name=f"bfcl-memory-{name}",
                messages=messages,
                facts=[p.answers[0] for p in probes if p.answers],
                probes=probes,
                call_points=list(range(1, len(messages) + 1)),
                metadata={"data_set": "bfcl-eval", "scenario": name},
            )
        )
    return out


# ------------------------------------------------------------------ chitchat-dataset
def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def load_chitchat(
    *, limit: int | None = None, longest: bool = False, agent: str = "Claude"
) -> list[Transcript]:
    """Human open-domain chats of ``chitchat-dataset``.

    The first sender of a chat is ``User``, the other is ``agent``, so the
    model is called before each of the second sender's messages. A message
    joins one sender's consecutive utterances by newlines; its timestamp is
    the first utterance's and its metadata names the sender.

    Parameters
    ----------
    limit : int, optional
        At most this many chats.
    longest : bool
        Order by length in words, longest first (data set order otherwise).
    agent : str
        Participant of the second sender.

    Returns
    -------
    list of Transcript
        One per chat, ``facts`` empty; ``metadata`` carries the id, the
        prompt, the ratings and the word count.

    Raises
    ------
    TranscriptError
        When chitchat-dataset is missing or its data file unreadable.
    """
    try:
        import chitchat_dataset
    except ImportError:
        raise TranscriptError(
            "chitchat-dataset is not installed: pip install chitchat-dataset"
        ) from None
    data = _read_json(Path(chitchat_dataset.__file__).parent / "dataset.json")
    words = {
        key: sum(len(str(u.get("text", "")).split()) for g in chat.get("messages", []) for u in g)
        for key, chat in data.items()
    }
    keys = sorted(words, key=lambda k: -words[k]) if longest else list(data)
    return [_chitchat_transcript(k, data[k], words[k], agent) for k in keys[:limit]]


def _chitchat_transcript(key: str, chat: Mapping[str, Any], words: int, agent: str) -> Transcript:
    senders: list[str] = []
    messages: list[Message] = []
    for group in chat.get("messages", []):
        if not group:
            continue
        sender = str(group[0].get("sender"))
        if sender not in senders:
            senders.append(sender)
        messages.append(
            Message(
                participant="User" if sender == senders[0] else agent,
                content=(TextBlock(text="\n".join(str(u.get("text", "")) for u in group)),),
                metadata={"sender": sender},
                timestamp=_timestamp(group[0].get("timestamp")),
            )
        )
    return Transcript(
        name=f"chitchat-{key}",
        messages=messages,
        call_points=call_points(messages, agent),
        metadata={
            "data_set": "chitchat-dataset",
            "id": key,
            "prompt": chat.get("prompt"),
            "ratings": chat.get("ratings"),
            "words": words,
        },
    )
