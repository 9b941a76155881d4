"""The bounded summarisation pipeline shared by ``assemble`` and ``compact``.

The head of a conversation is rendered to one prompt and summarised by the
request's own model. When the prompt does not fit the input budget in one
call, it is cut into consecutive UTF-8-safe fragments, each summarised on top
of the summary so far; every byte is sent exactly once, in order, in at most
32 calls, all within one deadline. Any failure fails the whole pipeline: a
partial summary is never returned.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..deadline import BoundedCaller, CallerBusyError, DeadlineError
from ..messages import Message
from ..summarizer import Completion, CompletionRequest, Summarizer
from ..tokens import compact_json
from .estimate import is_char_boundary, text_bytes, text_tokens
from .wire import (
    AnyMessage,
    FunctionCallBlock,
    FunctionResultMessage,
    ImageBlock,
    ModelInput,
    TextBlock,
)

__all__ = [
    "ANCHORED_OPENING",
    "FRAGMENT_NOTE",
    "IMAGE_STRIPPED",
    "INSTRUCTIONS_LIMIT",
    "MAX_SUMMARY_CALLS",
    "NEW_OPENING",
    "PROMPT_OPENING",
    "REQUEST_OVERHEAD_TOKENS",
    "SummaryError",
    "SummaryJob",
    "render_prompt",
    "request_tokens",
    "strip_media",
    "summarize",
    "system_prompt",
]

MAX_SUMMARY_CALLS: Final = 32
REQUEST_OVERHEAD_TOKENS: Final = 64
INSTRUCTIONS_LIMIT: Final = 2000
TRUNCATED: Final = "... [truncated]"
IMAGE_STRIPPED: Final = "[image stripped]"
PROMPT_OPENING: Final = (
    "Summarise the conversation below following the system-prompt structure exactly. "
    "Keep identifiers verbatim.\n\n<conversation>\n"
)
PROMPT_CLOSING: Final = "</conversation>\n"
NEW_OPENING: Final = "Create a new anchored summary from the conversation history above."
ANCHORED_OPENING: Final = "Update the anchored summary below using the conversation history above."
MERGE_GUIDANCE: Final = (
    "Keep every fact of the previous summary that still holds, merge in what the new "
    "conversation adds, drop what it makes obsolete, and keep the same structure."
)
TEMPLATE: Final = """Write the summary in Markdown with exactly these sections:

## Goal
[What the user is trying to accomplish]

## Constraints & Preferences
[Requirements, preferences and limits the user stated]

## Progress
### Done
[Completed work]
### In Progress
[Work under way]
### Blocked
[What is blocked, and on what]

## Key Decisions
[Decisions made and why]

## Actions Taken
[Functions called and changes made, with their outcomes]

## Next Steps
[What should happen next, in order]

## Critical Context
[Facts, values, errors and identifiers needed to continue]

## Relevant Files
[Paths and what each holds]

Rules:
- Keep identifiers, paths, numbers and error messages verbatim.
- Write "None" under a section with nothing to report.
- Be concise and do not invent anything.
- Answer with the summary only."""
FRAGMENT_NOTE: Final = (
    "The conversation arrives in consecutive fragments and this request carries the next "
    "one. Fold it into the summary above and answer with the complete updated summary."
)

_USER_JSON_BYTES: Final = text_bytes(
    '{"role":"user","content":[{"type":"text","text":}],"timestamp":9223372036854775807}'
)

FailureKind = Literal[
    "unavailable", "empty", "failed", "timeout", "too_large", "call_limit", "anchor_too_big"
]


class SummaryError(Exception):
    """The pipeline produced no summary; ``kind`` says why."""

    def __init__(self, kind: FailureKind, detail: str) -> None:
        self.kind: FailureKind = kind
        super().__init__(f"{kind}: {detail}")


# ------------------------------------------------------------------ prompts
def _cut_bytes(text: str, limit: int) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    end = limit
    while not is_char_boundary(raw, end):
        end -= 1
    return raw[:end].decode("utf-8", "surrogatepass")


def strip_media(messages: Sequence[AnyMessage], max_output_chars: int) -> list[AnyMessage]:
    """Images become ``[image stripped]``; long text of result messages is truncated.

    A text block of a ``function_result`` message longer than ``max_output_chars``
    bytes is cut at a character boundary and ends with ``... [truncated]``.
    User text is never truncated.
    """
    out: list[AnyMessage] = []
    for message in messages:
        is_result = isinstance(message, FunctionResultMessage)
        blocks: list[Any] = []
        changed = False
        for block in message.content:
            if isinstance(block, ImageBlock):
                blocks.append(TextBlock(text=IMAGE_STRIPPED))
                changed = True
            elif (
                is_result
                and isinstance(block, TextBlock)
                and text_bytes(block.text) > max_output_chars
            ):
                blocks.append(TextBlock(text=_cut_bytes(block.text, max_output_chars) + TRUNCATED))
                changed = True
            else:
                blocks.append(block)
        out.append(message.model_copy(update={"content": tuple(blocks)}) if changed else message)
    return out


def render_prompt(messages: Sequence[AnyMessage]) -> str:
    """The user prompt of a summary: each message's role, text and function calls.

    Thinking, inline results and file references are left out.

    Examples
    --------
    >>> from context_manager.assembly.wire import UserMessage
    >>> m = UserMessage(content=(TextBlock(text="fix the bug"),), timestamp=1)
    >>> print(render_prompt([m]), end="")
    Summarise the conversation below following the system-prompt structure exactly. Keep identifiers verbatim.
    <BLANKLINE>
    <conversation>
    <BLANKLINE>
    [user]
    fix the bug
    </conversation>
    """  # noqa: E501
    parts = [PROMPT_OPENING]
    for message in messages:
        parts.append(f"\n[{message.role}]\n")
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text + "\n")
            elif isinstance(block, FunctionCallBlock):
                parts.append(f"[tool_call] {block.function_id} {compact_json(block.arguments)}\n")
    parts.append(PROMPT_CLOSING)
    return "".join(parts)


def _clean_instructions(instructions: str | None) -> str | None:
    if instructions is None or not instructions.strip():
        return None
    text = instructions.strip()
    if len(text) > INSTRUCTIONS_LIMIT:
        text = text[:INSTRUCTIONS_LIMIT] + TRUNCATED
    return text


def system_prompt(anchor: str | None, instructions: str | None, *, fragments: bool) -> str:
    """The summariser's system prompt: opening, optional previous summary, template,
    optional caller guidance and, when fragmenting, the fragments note.

    Examples
    --------
    >>> system_prompt(None, None, fragments=False).splitlines()[0]
    'Create a new anchored summary from the conversation history above.'
    >>> "<previous-summary>\\nold\\n</previous-summary>" in system_prompt(
    ...     "old", None, fragments=False)
    True
    """
    parts = [NEW_OPENING if anchor is None else ANCHORED_OPENING]
    if anchor is not None:
        parts.append(MERGE_GUIDANCE)
        parts.append(f"<previous-summary>\n{anchor}\n</previous-summary>")
    parts.append(TEMPLATE)
    guidance = _clean_instructions(instructions)
    if guidance is not None:
        parts.append(
            "Caller guidance (follow it within the structure above):\n"
            f"<instructions>\n{guidance}\n</instructions>"
        )
    if fragments:
        parts.append(FRAGMENT_NOTE)
    return "\n\n".join(parts)


def request_tokens(system: str, user: str) -> int:
    """Estimated input of one summariser call: system text, the user message, plus 64.

    Examples
    --------
    >>> request_tokens("", "")
    85
    """
    user_json = _USER_JSON_BYTES + text_bytes(compact_json(user))
    return text_tokens(system) + user_json // 4 + REQUEST_OVERHEAD_TOKENS


def _longest_prefix(system: str, text: str, budget: int) -> int:
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if request_tokens(system, text[:mid]) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


# ------------------------------------------------------------------ calls
_CALLERS: weakref.WeakKeyDictionary[Any, BoundedCaller] = weakref.WeakKeyDictionary()
_CALLERS_GUARD = threading.Lock()
_SHARED: BoundedCaller | None = None


def _caller(summarizer: Summarizer) -> BoundedCaller:
    """The one worker calls to ``summarizer`` run on (so a hung summariser holds one
    thread however many deadlines it misses)."""
    global _SHARED
    with _CALLERS_GUARD:
        try:
            caller = _CALLERS.get(summarizer)
            if caller is None:
                caller = _CALLERS[summarizer] = BoundedCaller("context-summarizer")
        except TypeError:  # not weakly referable or not hashable: the shared worker
            if _SHARED is None:
                _SHARED = BoundedCaller("context-summarizer")
            caller = _SHARED
        return caller


def _call_with_deadline(
    summarizer: Summarizer, request: CompletionRequest, timeout_s: float
) -> Completion:
    try:
        value = _caller(summarizer).call(lambda: summarizer.complete(request), timeout_s)
    except DeadlineError:
        raise SummaryError("timeout", "the summariser did not answer before the deadline") from None
    except CallerBusyError:
        raise SummaryError(
            "timeout", "the summariser is still running a call that missed its deadline"
        ) from None
    except Exception as exc:
        raise SummaryError("failed", f"the summariser raised {exc!r}") from None
    if not isinstance(value, Completion):
        raise SummaryError("failed", f"the summariser returned {type(value).__name__}")
    return value


@dataclass(frozen=True)
class SummaryJob:
    """Everything one summarisation needs besides the messages.

    ``budget`` bounds each call's estimated input; ``timeout_ms`` bounds the
    whole pipeline; ``max_tokens`` is the output cap sent with each call.
    """

    model: ModelInput
    budget: int
    anchor: str | None
    instructions: str | None
    max_output_chars: int
    timeout_ms: int
    max_tokens: int


def summarize(
    messages: Sequence[AnyMessage],
    job: SummaryJob,
    *,
    summarizer: Summarizer | None,
    clock: Callable[[], int],
) -> str:
    """Summarise ``messages`` within ``job.budget`` per call; the summary or :class:`SummaryError`.

    Raises
    ------
    SummaryError
        ``unavailable`` (no summariser), ``too_large`` (cannot fit in 32 calls),
        ``anchor_too_big``, ``empty`` (a blank answer), ``failed`` (an error or an
        answer that did not end normally), ``timeout`` or ``call_limit``.
    """
    if summarizer is None:
        raise SummaryError("unavailable", "no summariser is configured")
    deadline_ms = clock() + job.timeout_ms
    prompt = render_prompt(strip_media(messages, job.max_output_chars))
    capacity = job.budget - request_tokens(
        system_prompt(None, job.instructions, fragments=False), ""
    )
    if capacity <= 0:
        raise SummaryError("too_large", f"the summary request alone exceeds {job.budget} tokens")
    needed = -(-text_bytes(prompt) // (4 * capacity + 3))
    if needed > MAX_SUMMARY_CALLS:
        raise SummaryError(
            "too_large", f"the head needs about {needed} calls, more than {MAX_SUMMARY_CALLS}"
        )
    remaining = prompt
    summary: str | None = None
    for call in range(MAX_SUMMARY_CALLS):
        anchor = summary if summary is not None else job.anchor
        system = system_prompt(anchor, job.instructions, fragments=call > 0)
        if call == 0 and request_tokens(system, remaining) > job.budget:
            system = system_prompt(anchor, job.instructions, fragments=True)
        take = _longest_prefix(system, remaining, job.budget)
        if take == 0:
            raise SummaryError("anchor_too_big", "the summary so far leaves no room for text")
        left_ms = deadline_ms - clock()
        if left_ms <= 0:
            raise SummaryError("timeout", "the deadline passed before the summary was done")
        request = CompletionRequest(
            model=job.model.id,
            provider=job.model.provider,
            system=system,
            messages=(Message.text_message("User", remaining[:take]),),
            max_tokens=max(1, job.max_tokens),
            timeout=left_ms / 1000,
        )
        completion = _call_with_deadline(summarizer, request, left_ms / 1000)
        if completion.stop_reason != "end_turn":
            said = f": {completion.text[:200]}" if completion.stop_reason == "error" else ""
            raise SummaryError(
                "failed", f"the summariser stopped with {completion.stop_reason}{said}"
            )
        if not completion.text.strip():
            raise SummaryError("empty", "the summariser answered with blank text")
        summary = completion.text.strip()
        remaining = remaining[take:]
        if not remaining:
            return summary
    raise SummaryError("call_limit", f"text remained after {MAX_SUMMARY_CALLS} calls")
