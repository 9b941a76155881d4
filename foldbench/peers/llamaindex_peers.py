"""LlamaIndex peer: the ``Memory`` class of ``llama-index-core``.

Needs the ``bench`` extra; every ``llama_index`` import happens inside the
functions and classes here.

How the peer is driven
----------------------
:class:`MemoryPolicy` keeps one ``Memory`` per transcript, as an agent keeps
its memory across turns: new transcript messages are ``put`` into it, and the
request is ``memory.get()`` behind the system prompt, which is how
LlamaIndex's workflow agents build their model input. The memory's
``tokenizer_fn`` is the exact counter and its ``token_limit`` the budget left
after the system prompt. By default a ``FactExtractionMemoryBlock`` receives
the flushed messages; its LLM is :class:`ExtractiveLLM`, which answers with
the extractive summariser's sentences in the ``<fact>`` format the block
parses. Without memory blocks (``facts=False``) the policy is the plain
FIFO queue with amortised flushing.

Tool calls travel as ``ToolCallBlock`` blocks and tool results as ``tool``
messages carrying ``tool_call_id``, as the workflow agents store them.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from context_manager.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    MessageFormatError,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.summarizer import CompletionRequest, ExtractiveSummarizer, Summarizer
from context_manager.tokens import TokenCounter

from .base import (
    SYSTEM,
    HistoryFeed,
    MeteredSummarizer,
    PartJoiner,
    PolicyRequest,
    audit,
    default_counter,
    part_markers,
    request_tokens,
    run_guarded,
    split_system,
    user_side_parts,
)
from .settings import PeerSettings, Setting

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

__all__ = ["MemoryPolicy", "extractive_llm", "from_llamaindex", "to_llamaindex"]

_NAME = "name"


def _li_blocks(blocks: Sequence[ContentBlock]) -> list[Any]:
    from llama_index.core.base.llms.types import ImageBlock as LiImage
    from llama_index.core.base.llms.types import TextBlock as LiText
    from llama_index.core.base.llms.types import ThinkingBlock as LiThinking
    from llama_index.core.base.llms.types import ToolCallBlock

    out: list[Any] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            out.append(LiText(text=b.text))
        elif isinstance(b, ThinkingBlock):
            extra = {"signature": b.signature} if b.signature else {}
            out.append(LiThinking(content=b.thinking, additional_information=extra))
        elif isinstance(b, ImageBlock):
            data = b.data.encode("ascii") if b.data else None
            out.append(LiImage(url=b.url, image=data, image_mimetype=b.media_type))
        elif isinstance(b, ToolUseBlock):
            out.append(
                ToolCallBlock(tool_call_id=b.id, tool_name=b.name, tool_kwargs=dict(b.input))
            )
    return out


def to_llamaindex(messages: Sequence[Message], *, agent: str = "Claude") -> list[ChatMessage]:
    """Convert messages to LlamaIndex ``ChatMessage`` objects, keeping tool call ids.

    ``System`` becomes a ``system`` message, the agent's messages
    ``assistant`` messages (tool calls as ``ToolCallBlock``), each tool result
    a ``tool`` message with ``additional_kwargs["tool_call_id"]``, anything
    else a ``user`` message. A participant other than the default (``Tool``
    for results, ``User`` otherwise) is kept in ``additional_kwargs["name"]``.

    Parameters
    ----------
    messages : sequence of Message
        Our messages.
    agent : str
        The participant whose turns are the assistant side.

    Returns
    -------
    list of ChatMessage
        LlamaIndex messages.
    """
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.base.llms.types import TextBlock as LiText

    out: list[ChatMessage] = []
    for i, m in enumerate(messages):
        if m.participant == SYSTEM:
            out.append(ChatMessage(role="system", blocks=_li_blocks(m.content)))
            continue
        if m.participant == agent:
            out.append(ChatMessage(role="assistant", blocks=_li_blocks(m.content)))
            continue
        for part, piece in enumerate(user_side_parts(m)):
            extra = part_markers(i, part)
            if isinstance(piece, ToolResultBlock):
                if m.participant != "Tool":
                    extra[_NAME] = m.participant
                extra["tool_call_id"] = piece.tool_use_id
                if piece.is_error:
                    extra["is_error"] = True
                body = (
                    [LiText(text=piece.content)]
                    if isinstance(piece.content, str)
                    else _li_blocks(piece.content)
                )
                out.append(ChatMessage(role="tool", blocks=body, additional_kwargs=extra))
            else:
                if m.participant != "User":
                    extra[_NAME] = m.participant
                out.append(
                    ChatMessage(role="user", blocks=_li_blocks(piece), additional_kwargs=extra)
                )
    return out


def _our_blocks(blocks: Sequence[Any], where: str) -> list[ContentBlock]:
    from llama_index.core.base.llms.types import ImageBlock as LiImage
    from llama_index.core.base.llms.types import TextBlock as LiText
    from llama_index.core.base.llms.types import ThinkingBlock as LiThinking
    from llama_index.core.base.llms.types import ToolCallBlock

    out: list[ContentBlock] = []
    for b in blocks:
        if isinstance(b, LiText):
            out.append(TextBlock(text=b.text))
        elif isinstance(b, LiThinking):
            signature = b.additional_information.get("signature")
            out.append(ThinkingBlock(thinking=b.content or "", signature=signature))
        elif isinstance(b, LiImage):
            data = b.image.decode("ascii") if isinstance(b.image, bytes) else None
            url = str(b.url) if b.url else None
            out.append(ImageBlock(url=url, data=data, media_type=b.image_mimetype))
        elif isinstance(b, ToolCallBlock):
            if not b.tool_call_id:
                raise MessageFormatError(f"{where}: tool call {b.tool_name!r} has no id")
            args = b.tool_kwargs if isinstance(b.tool_kwargs, dict) else {"input": b.tool_kwargs}
            out.append(ToolUseBlock(id=b.tool_call_id, name=b.tool_name, input=dict(args)))
        else:
            raise MessageFormatError(f"{where}: unsupported LlamaIndex block {type(b).__name__}")
    return out


def from_llamaindex(
    messages: Sequence[ChatMessage], *, agent: str = "Claude", user: str = "User"
) -> list[Message]:
    """Convert LlamaIndex ``ChatMessage`` objects back to ours, keeping tool call ids.

    Consecutive ``tool`` messages become one message holding all the results;
    parts marked as continuing the previous message are joined to it.

    Parameters
    ----------
    messages : sequence of ChatMessage
        LlamaIndex messages.
    agent : str
        Participant of ``assistant`` messages.
    user : str
        Participant of ``user`` messages without a name.

    Returns
    -------
    list of Message
        Our messages.

    Raises
    ------
    MessageFormatError
        For an unknown role, a tool message without ``tool_call_id`` or an
        unsupported block.
    """
    out = PartJoiner()
    for i, raw in enumerate(messages):
        where = f"LlamaIndex message {i}"
        role = str(getattr(raw.role, "value", raw.role))
        extra = raw.additional_kwargs
        blocks = _our_blocks(raw.blocks, where)
        if role == "tool":
            call_id = extra.get("tool_call_id")
            if not call_id:
                raise MessageFormatError(f"{where}: tool message lacks 'tool_call_id'")
            body: str | list[TextBlock | ImageBlock]
            if all(isinstance(b, TextBlock) for b in blocks):
                body = "".join(b.text for b in blocks if isinstance(b, TextBlock))
            else:
                body = [b for b in blocks if isinstance(b, TextBlock | ImageBlock)]
            result = ToolResultBlock(
                tool_use_id=str(call_id), content=body, is_error=bool(extra.get("is_error"))
            )
            out.tool_result(result, str(extra.get(_NAME, "Tool")), extra)
        elif role == "system":
            out.add(Message(participant=SYSTEM, content=tuple(blocks or [TextBlock(text="")])))
        elif role == "assistant":
            out.add(Message(participant=agent, content=tuple(blocks or [TextBlock(text="")])))
        elif role == "user":
            name = str(extra.get(_NAME, user))
            out.user_part(blocks, name, extra, empty=[TextBlock(text="")])
        else:
            raise MessageFormatError(f"{where}: unsupported role {role!r}")
    return out.messages


_FACT = re.compile(r"<fact>(.*?)</fact>", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def extractive_llm(
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
    *,
    agent: str = "Claude",
    target_tokens: int = 200,
) -> tuple[Any, MeteredSummarizer]:
    """A LlamaIndex LLM whose answers come from a (metered) summariser.

    When the last message asks for ``<fact>`` tags (the fact-extraction and
    fact-condensing prompts of ``FactExtractionMemoryBlock``), the answer is
    the summary's sentences, one per ``<fact>``; a condensing prompt is
    answered from the facts it lists, anything else from the conversation
    before the prompt.

    Parameters
    ----------
    summarizer : Summarizer, optional
        Writes the answers; an :class:`ExtractiveSummarizer` by default.
    counter : TokenCounter, optional
        Exact counter of the meter.
    agent : str
        Participant of assistant messages.
    target_tokens : int
        Length asked of the summariser.

    Returns
    -------
    llm : llama_index.core.llms.CustomLLM
        The LLM.
    meter : MeteredSummarizer
        Counts its calls and tokens.
    """
    from llama_index.core.base.llms.types import ChatMessage as LiChatMessage
    from llama_index.core.base.llms.types import (
        ChatResponse,
        CompletionResponse,
        LLMMetadata,
    )
    from llama_index.core.llms import CustomLLM

    exact = default_counter(counter)
    meter = MeteredSummarizer(summarizer or ExtractiveSummarizer(), exact)

    def answer(messages: list[Message]) -> str:
        prompt = messages[-1].text if messages else ""
        wants_facts = "<fact>" in prompt
        if wants_facts and "condens" in prompt.lower():
            listed = prompt.split("<existing_facts>")[-1].split("</existing_facts>")[0]
            source = [Message.text_message("User", f) for f in _FACT.findall(listed)]
        else:
            source = messages[:-1] if wants_facts else messages
        request = CompletionRequest(
            model="extractive",
            messages=tuple(source or messages),
            target_tokens=target_tokens,
            agent=agent,
        )
        text = meter.summarizer.complete(request).text
        if wants_facts:
            facts = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
            text = "<facts>\n" + "".join(f"  <fact>{f}</fact>\n" for f in facts) + "</facts>"
        meter.record(messages, text)  # the whole prompt read, the tagged answer written
        return text

    class ExtractiveLLM(CustomLLM):
        """Answers with deterministic extractive summaries (no model)."""

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="extractive", is_chat_model=True)

        def complete(
            self, prompt: str, formatted: bool = False, **kwargs: Any
        ) -> CompletionResponse:
            return CompletionResponse(text=answer([Message.text_message("User", prompt)]))

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError("ExtractiveLLM does not stream")

        def chat(self, messages: Sequence[Any], **kwargs: Any) -> ChatResponse:
            text = answer(from_llamaindex(messages, agent=agent))
            return ChatResponse(message=LiChatMessage(role="assistant", content=text))

        async def achat(self, messages: Sequence[Any], **kwargs: Any) -> ChatResponse:
            return self.chat(messages, **kwargs)

    return ExtractiveLLM(), meter


class MemoryPolicy:
    """LlamaIndex ``Memory`` (FIFO queue, flushing, optional fact extraction).

    Parameters
    ----------
    agent : str
        The participant whose turns are the assistant side.
    counter : TokenCounter, optional
        Exact counter, used as the memory's ``tokenizer_fn``.
    summarizer : Summarizer, optional
        Behind the fake LLM of the fact block; :class:`ExtractiveSummarizer`
        by default.
    facts : bool
        Attach a ``FactExtractionMemoryBlock`` driven by the fake LLM.
    chat_history_token_ratio : float
        Passed through (LlamaIndex's default is 0.7).
    flush_fraction : float
        ``token_flush_size`` as a fraction of the token limit (LlamaIndex
        uses 10% when unset).
    """

    name = "llamaindex-memory"

    def __init__(
        self,
        *,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        facts: bool = True,
        chat_history_token_ratio: float = 0.7,
        flush_fraction: float = 0.1,
    ) -> None:
        self.agent = agent
        self.counter = default_counter(counter)
        self.fact_tokens = 200
        self.llm, self.meter = extractive_llm(
            summarizer, self.counter, agent=agent, target_tokens=self.fact_tokens
        )
        self.facts = facts
        self.chat_history_token_ratio = chat_history_token_ratio
        self.flush_fraction = flush_fraction
        self._feed = HistoryFeed()
        self._memory: Any = None
        self._engines: list[Any] = [None]  # shared with the finalizer
        self._loop = asyncio.new_event_loop()
        self._finalizer = weakref.finalize(self, _shut, self._loop, self._engines)
        if facts:
            self.name = "llamaindex-memory-facts"

    def close(self) -> None:
        """Close the memory's database connection and the event loop it runs on."""
        self._finalizer()

    def __enter__(self) -> MemoryPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tokenize(self, text: str) -> list[int]:
        return [0] * self.counter.count_text(text)

    def options(self, budget: int, system_tokens: int = 0) -> dict[str, Any]:
        """The sizes given to ``Memory.from_defaults`` at ``budget``: a token limit of the
        window less the system prompt, which the agent sends outside the memory.

        Examples
        --------
        >>> with MemoryPolicy(facts=False) as policy:
        ...     policy.options(4000, system_tokens=1000)
        {'token_limit': 3000, 'token_flush_size': 300, 'chat_history_token_ratio': 0.7}
        """
        limit = max(1, budget - system_tokens)
        return {
            "token_limit": limit,
            "token_flush_size": max(1, int(limit * self.flush_fraction)),
            "chat_history_token_ratio": self.chat_history_token_ratio,
        }

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this policy passes to LlamaIndex ``Memory`` at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens, which the token limit leaves out.

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> with MemoryPolicy() as policy:
        ...     policy.settings(8000).values["token_limit"]
        8000
        """
        sizes = self.options(budget, system_tokens)
        items = {
            "token_limit": Setting(
                sizes["token_limit"],
                "the window less the system prompt (shown for "
                f"{system_tokens} system tokens; the default is 30,000). The memory "
                "estimates text only, not tool calls or per-message overhead, so a "
                "request can exceed it by a little (library behaviour)",
            ),
            "token_flush_size": Setting(
                sizes["token_flush_size"],
                "a tenth of the token limit, LlamaIndex's own choice when it is unset",
            ),
            "chat_history_token_ratio": Setting(
                sizes["chat_history_token_ratio"], "the default: 70% for the chat history"
            ),
            "memory_blocks": Setting(
                f"FactExtractionMemoryBlock(priority=1), extractive LLM of {self.fact_tokens} "
                "tokens"
                if self.facts
                else "none",
                "facts extracted from flushed messages, priority 1 as in LlamaIndex's "
                "memory examples (max_facts at its default, 50)"
                if self.facts
                else "the plain FIFO queue: flushed messages are dropped",
            ),
            "insert_method": Setting("system", "the default: memory in the system message"),
            "tokenizer_fn": Setting("exact (cl100k_base)", "the audit's own counter"),
        }
        return PeerSettings.of(self.name, "llama-index-core", "llama-index-core", items)

    def _new_memory(self, limit: int) -> Any:
        from llama_index.core.memory import FactExtractionMemoryBlock, Memory
        from sqlalchemy.ext.asyncio import create_async_engine

        engines = self._engines
        if engines[0] is not None:
            self._loop.run_until_complete(engines[0].dispose())
        engines[0] = create_async_engine("sqlite+aiosqlite:///:memory:")
        blocks: list[Any] = (
            [FactExtractionMemoryBlock(llm=self.llm, priority=1)] if self.facts else []
        )
        return Memory.from_defaults(
            session_id="benchmark",
            tokenizer_fn=self._tokenize,
            memory_blocks=blocks,
            async_engine=engines[0],
            **self.options(limit),
        )

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """Put the new messages into the memory and send what ``get()`` returns."""
        system, _ = split_system(history)
        new, restart = self._feed.new_messages(history)
        offset = len(history) - len(new)
        new = [m for k, m in enumerate(new) if offset + k >= len(system)]
        limit = max(1, budget - request_tokens(system, self.counter))

        def call() -> list[Message]:
            if self._memory is None or restart:
                self._memory = self._new_memory(limit)
            self._memory.token_limit = limit
            if new:
                put = self._memory.aput_messages(to_llamaindex(new, agent=self.agent))
                self._loop.run_until_complete(put)
            got = self._loop.run_until_complete(self._memory.aget())
            return from_llamaindex(got, agent=self.agent)

        out, error = run_guarded(call)
        if error:
            return audit([], budget, self.counter, self.meter, error=error)
        return audit(system + (out or []), budget, self.counter, self.meter)


def _shut(loop: asyncio.AbstractEventLoop, engines: list[Any]) -> None:
    """Dispose of the memory's engine, then close its loop."""
    if not loop.is_closed():
        if engines[0] is not None:
            loop.run_until_complete(engines[0].dispose())
        loop.close()
