"""Thinking binding: a compiled request carries a reply's signed thinking back to its model
only along the request chain the host said it sent (``note_request_sent``).

Expectations are computed here from the messages themselves: what the compile would
send without a binding, the replies as stored, and an oracle that keeps the whole last
sent request (not the record's hashes) and compares prefixes message by message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    ExtractiveSummarizer,
    Injection,
    Message,
    NotedRow,
    RequestIdentity,
    TextBlock,
    ThinkingBinding,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy

COUNTER = CharsCounter()
BINDING = ThinkingBinding()
TALLY: Counter[str] = Counter()


def manager(path: Path | str = ":memory:", **kw: Any) -> ContextManager:
    return ContextManager.open(path=path, counter=COUNTER, **kw)


def reply(text: str, *, tool: str | None = None) -> list[Any]:
    """A reply with signed thinking, then text (or a tool call)."""
    blocks: list[Any] = [ThinkingBlock(thinking=f"thinking about {text}", signature=f"sig-{text}")]
    if tool is not None:
        blocks.append(ToolUseBlock(id=tool, name="bash", input={"cmd": text}))
    else:
        blocks.append(TextBlock(text=text))
    return blocks


def bare(message: Message) -> Message:
    """The message without its thinking, built here (not by the library)."""
    return Message(
        participant=message.participant,
        content=tuple(b for b in message.content if not isinstance(b, ThinkingBlock)),
        metadata=message.metadata,
        timestamp=message.timestamp,
    )


def has_thinking(message: Message) -> bool:
    return any(isinstance(b, ThinkingBlock) for b in message.content)


def compile_bound(
    cm: ContextManager, identity: str | RequestIdentity = "model-a", **kw: Any
) -> Any:
    return cm.compile(
        max_tokens=kw.pop("max_tokens", 10_000),
        reserve_for_response=kw.pop("reserve_for_response", 0),
        thinking_binding=kw.pop("thinking_binding", BINDING),
        identity=identity,
        **kw,
    )


def recount(messages: Sequence[Message]) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


# ------------------------------------------------------------------ (a) noted replies
def test_a_stored_reply_keeps_its_thinking_only_when_the_host_noted_it() -> None:
    for noted in (True, False):
        with manager() as cm:
            cm.add_message("User", "list the files")
            first = compile_bound(cm)
            answer = cm.add_message("Claude", reply("two files"))
            if noted:
                assert cm.note_request_sent([answer], first.identity, first.compile_id)
            cm.add_message("User", "and their sizes?")
            second = compile_bound(cm)
            stored = cm.get_message(answer)
            sent = second.messages[1]
            if noted:
                assert sent == stored and has_thinking(sent)
                assert second.thinking_strip.kept == (answer,)
                assert second.thinking_strip.stripped == ()
            else:
                assert sent == bare(stored)
                assert second.thinking_strip.kept == ()
                [gone] = second.thinking_strip.stripped
                assert (gone.message_id, gone.reason, gone.blocks) == (answer, "unnoted", 1)
                assert gone.tokens == COUNTER.count_message(stored) - COUNTER.count_message(
                    bare(stored)
                )
            # what is sent is what is priced
            assert second.render_stats["tokens"] == recount(second.messages)
            assert has_thinking(cm.get_message(answer))  # never stripped from the store


def test_the_rounds_of_a_stream_are_noted_cumulatively() -> None:
    with manager() as cm:
        cm.add_message("User", "fix the bug")
        first = compile_bound(cm)
        call = cm.add_message("Claude", reply("look", tool="t1"))
        result = cm.add_message("User", [ToolResultBlock(tool_use_id="t1", content="found it")])
        # before the second round: what it carries after the compiled messages
        assert cm.note_request_sent([call, result], first.identity, first.compile_id)
        final = cm.add_message("Claude", reply("fixed"))
        # the stream ended: every round's rows, then its last reply
        assert cm.note_request_sent([call, result, final], first.identity, first.compile_id)
        cm.add_message("User", "thanks")
        second = compile_bound(cm)
        expected = [m.message for m in cm.get_messages()]  # everything, as stored
        assert second.messages == expected
        assert second.thinking_strip.kept == (call, final)
        # the next compile continues the chain: what the last one carried stays
        late = cm.add_message("Claude", reply("anything else?"))
        third = compile_bound(cm)
        assert third.thinking_strip.kept == (call, final)
        assert [s.message_id for s in third.thinking_strip.stripped] == [late]
        assert third.messages[-1] == bare(cm.get_message(late))


def test_a_note_vouches_only_up_to_a_row_it_cannot_vouch_for() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm)
        one = cm.add_message("Claude", reply("one"))
        two = cm.add_message("Claude", reply("two"))
        rows = [one, NotedRow(unstored=True), two]
        assert cm.note_request_sent(rows, first.identity, first.compile_id)
        second = compile_bound(cm)
        assert second.thinking_strip.kept == (one,)
        assert [s.message_id for s in second.thinking_strip.stripped] == [two]
        # a mapping says the same
        assert cm.note_request_sent([one, {"unstored": True}], second.identity, second.compile_id)


def test_a_committing_compile_mid_stream_makes_its_notes_vouch_for_nothing() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm)
        answer = cm.add_message("Claude", reply("halfway"))
        compile_bound(cm)  # committing, while the stream of `first` goes on
        assert not cm.note_request_sent([answer], first.identity, first.compile_id)
        third = compile_bound(cm)
        assert third.messages[1] == bare(cm.get_message(answer))


def test_a_dry_run_records_nothing() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm)
        answer = cm.add_message("Claude", reply("sure"))
        assert cm.note_request_sent([answer], first.identity, first.compile_id)
        before = cm.store.sequence
        dry = compile_bound(cm, dry_run=True)
        assert cm.store.sequence == before  # nothing written
        assert dry.thinking_strip.kept == (answer,)
        assert not cm.note_request_sent([], dry.identity, dry.compile_id)  # never recorded
        assert compile_bound(cm).thinking_strip.kept == (answer,)


def test_a_changed_history_breaks_the_chain_and_says_what_it_newly_left_out() -> None:
    with manager() as cm:
        question = cm.add_message("User", "the question")
        first = compile_bound(cm)
        answer = cm.add_message("Claude", reply("the answer"))
        assert cm.note_request_sent([answer], first.identity, first.compile_id)
        assert compile_bound(cm).thinking_strip.kept == (answer,)
        cm.edit_message(question, "another question")  # the prefix the thinking was minted on
        after = compile_bound(cm)
        [gone] = after.thinking_strip.stripped
        assert (gone.message_id, gone.reason, gone.was_sent) == (answer, "chain", True)
        assert after.thinking_strip.newly == (answer,)
        # once stripped, it stays stripped: the chain now carries it without thinking
        again = compile_bound(cm)
        assert again.thinking_strip.newly == ()
        assert again.messages == after.messages


def test_a_moved_injection_breaks_the_chain_after_it_only() -> None:
    with manager() as cm:
        cm.add_message("User", "first")
        early = compile_bound(cm)
        kept = cm.add_message("Claude", reply("early"))
        assert cm.note_request_sent([kept], early.identity, early.compile_id)
        cm.add_message("User", "second")
        note = Injection.text("rag", "before_user", "retrieved notes")
        first = compile_bound(cm, injections=[note])
        # [first, early, rag, second]: the injection sits before the last user turn
        assert [m.participant for m in first.messages][2] == "system_context:rag"
        answer = cm.add_message("Claude", reply("late"))
        assert cm.note_request_sent([answer], first.identity, first.compile_id)
        cm.add_message("User", "third")
        second = compile_bound(cm, injections=[note])
        # the injection moved before "third": the reply minted after it cannot go back
        assert second.thinking_strip.kept == (kept,)
        assert [(s.message_id, s.reason) for s in second.thinking_strip.stripped] == [
            (answer, "chain")
        ]


def test_a_reply_of_thinking_only_is_left_out_whole() -> None:
    with manager() as cm:
        cm.add_message("User", "think")
        compile_bound(cm)
        silent = cm.add_message(
            "Claude", [ThinkingBlock(thinking="nothing to say", signature="sig")]
        )
        cm.add_message("User", "well?")
        result = compile_bound(cm)
        assert [m.text for m in result.messages] == ["think", "well?"]
        assert result.provenance == [(None, ("1",)), (None, (cm.get_messages()[-1].id,))]
        assert result.cache_breakpoints == [1]
        [gone] = result.thinking_strip.stripped
        assert (gone.message_id, gone.tokens) == (
            silent,
            COUNTER.count_message(cm.get_message(silent)),
        )
        assert result.render_stats["tokens"] == recount(result.messages)


def test_kept_thinking_reaches_the_anthropic_request_signed() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm, identity="claude-sonnet-4-5")
        answer = cm.add_message("Claude", reply("done"))
        cm.note_request_sent([answer], first.identity, first.compile_id)
        cm.add_message("Claude", reply("unnoted"))
        request = compile_bound(cm, identity="claude-sonnet-4-5").to_anthropic(
            model="claude-sonnet-4-5", max_tokens=100
        )
        blocks = request["messages"][1]["content"]  # the two replies merge into one turn
        thinking = [b for b in blocks if b["type"] == "thinking"]
        assert thinking == [
            {"type": "thinking", "thinking": "thinking about done", "signature": "sig-done"}
        ]


def test_drop_block_chooses_which_blocks_are_bound() -> None:
    signed_only = ThinkingBinding(
        drop_block=lambda b: isinstance(b, ThinkingBlock) and b.signature is not None
    )
    with manager() as cm:
        cm.add_message("User", "go")
        content = [
            ThinkingBlock(thinking="signed", signature="s"),
            ThinkingBlock(thinking="unsigned"),
            TextBlock(text="ok"),
        ]
        cm.add_message("Claude", content)
        result = compile_bound(cm, thinking_binding=signed_only)
        assert result.messages[1].content == (
            ThinkingBlock(thinking="unsigned"),
            TextBlock(text="ok"),
        )


def test_another_participants_thinking_is_left_to_the_converters() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        other = [ThinkingBlock(thinking="not the model's", signature="s"), TextBlock(text="hi")]
        cm.add_message("Helper", other)
        result = compile_bound(cm)
        assert result.messages[1].content == tuple(other)
        assert result.thinking_strip.stripped == ()


# ------------------------------------------------------------- (b) a host never notes
@pytest.mark.parametrize("budget", [60, 120, 400, 5000])
def test_b_a_host_that_never_notes_loses_thinking_and_is_never_refused(budget: int) -> None:
    with manager() as cm:
        for turn in range(8):
            cm.add_message("User", f"question {turn} " + "word " * (turn % 3))
            plain = cm.compile(max_tokens=budget, reserve_for_response=0, dry_run=True)
            result = compile_bound(cm, max_tokens=budget)  # never raises
            # the same selection, every reply of the model without its thinking
            assert result.messages == [
                bare(m) if m.participant == "Claude" else m for m in plain.messages
            ]
            assert result.thinking_strip.kept == ()
            assert recount(result.messages) == result.render_stats["tokens"] <= budget
            cm.add_message("Claude", reply(f"answer {turn}"))
        # the store keeps every reply's thinking
        replies = [m.message for m in cm.get_messages() if m.message.participant == "Claude"]
        assert len(replies) == 8 and all(has_thinking(m) for m in replies)


def test_b_a_folding_strategy_never_refuses_for_thinking() -> None:
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=60,
        recent_window_tokens=120,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )
    with manager(strategy=strategy, summarizer=ExtractiveSummarizer(target_tokens=20)) as cm:
        for turn in range(30):
            cm.add_message("User", f"step {turn}: " + "detail " * 6)
            cm.add_message("Claude", reply(f"did step {turn} " + "and more " * 3))
            cm.drain()
            for budget in (300, 600):
                plain = cm.compile(max_tokens=budget, reserve_for_response=0, dry_run=True)
                bound = compile_bound(cm, max_tokens=budget, dry_run=True)
                assert plain.render_stats.get("fits") == bound.render_stats.get("fits")
                if plain.render_stats.get("fits") is False:
                    continue
                assert bound.messages == [
                    bare(m) if m.participant == "Claude" and has_thinking(m) else m
                    for m in plain.messages
                ]


# ------------------------------------------------------------------ (c) identity
def test_c_a_changed_identity_strips() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm, identity="model-a")
        answer = cm.add_message("Claude", reply("done"))
        assert cm.note_request_sent([answer], first.identity, first.compile_id)
        same = compile_bound(cm, identity="model-a", dry_run=True)
        assert same.thinking_strip.kept == (answer,)
        other = compile_bound(cm, identity="model-b", dry_run=True)
        assert [(s.message_id, s.reason) for s in other.thinking_strip.stripped] == [
            (answer, "identity")
        ]
        # a new system prompt changes the identity built from the model's name
        cm.set_system_prompt("You are careful.")
        prompted = compile_bound(cm, identity="model-a", dry_run=True)
        assert prompted.identity != first.identity
        assert prompted.thinking_strip.stripped[0].reason == "identity"
        assert prompted.identity == prompted.request_identity("model-a")
        assert prompted.identity == RequestIdentity.of("model-a", system="You are careful.")


def test_c_an_explicit_identity_and_its_head() -> None:
    low = RequestIdentity.of("model-a", budget_tokens=1024)
    high = RequestIdentity.of("model-a", budget_tokens=4096)
    assert low != high and low == RequestIdentity.of("model-a", budget_tokens=1024)
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm, identity=low)
        assert first.identity == low
        answer = cm.add_message("Claude", reply("done"))
        assert cm.note_request_sent([answer], low, first.compile_id)
        assert compile_bound(cm, identity=low, dry_run=True).thinking_strip.kept == (answer,)
        assert compile_bound(cm, identity=high, dry_run=True).thinking_strip.kept == ()


def test_c_a_note_records_the_identity_it_was_sent_under() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm, identity="model-a")
        answer = cm.add_message("Claude", reply("done"))
        sent_under = RequestIdentity.of("model-b")
        assert cm.note_request_sent([answer], sent_under, first.compile_id)
        assert compile_bound(cm, identity="model-a", dry_run=True).thinking_strip.kept == ()
        assert compile_bound(cm, identity=sent_under, dry_run=True).thinking_strip.kept == (answer,)


# ------------------------------------------------------------------ (d) persistence
def test_d_the_record_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "cm.db"
    with manager(path) as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm)
        answer = cm.add_message("Claude", reply("done"))
    with manager(path) as cm:  # the note comes after a restart of the host
        assert cm.note_request_sent([answer], first.identity, first.compile_id)
    with manager(path) as cm:
        result = compile_bound(cm)
        assert result.thinking_strip.kept == (answer,)
        assert result.messages[1] == cm.get_message(answer)


# ------------------------------------------------------------------ (e) branches
def test_e_each_branch_keeps_its_own_record() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        first = compile_bound(cm)
        shared = cm.add_message("Claude", reply("shared"))
        assert cm.note_request_sent([shared], first.identity, first.compile_id)
        cm.fork("side")
        on_side = compile_bound(cm)  # the side branch's own record from here
        assert on_side.thinking_strip.kept == (shared,)  # the fork started with main's
        side_reply = cm.add_message("Claude", reply("side"))
        assert cm.note_request_sent([side_reply], on_side.identity, on_side.compile_id)
        cm.switch_branch("main")
        # main's record is still its own: the side compile's notes mean nothing here
        assert not cm.note_request_sent([shared], on_side.identity, on_side.compile_id)
        on_main = compile_bound(cm)
        assert on_main.thinking_strip.kept == (shared,)
        main_reply = cm.add_message("Claude", reply("main"))
        assert [s.message_id for s in compile_bound(cm).thinking_strip.stripped] == [main_reply]
        cm.switch_branch("side")
        assert compile_bound(cm).thinking_strip.kept == (shared, side_reply)


# ------------------------------------------------------------------ arguments
def test_binds_false_leaves_thinking_in_and_records_nothing() -> None:
    with manager() as cm:
        cm.add_message("User", "go")
        cm.add_message("Claude", reply("done"))
        before = cm.store.sequence
        result = compile_bound(cm, thinking_binding=ThinkingBinding(binds=False), identity="m")
        assert has_thinking(result.messages[1]) and result.thinking_strip is None
        assert cm.store.sequence == before
        unnamed = cm.compile(thinking_binding=ThinkingBinding(binds=False))
        assert unnamed.identity is None and has_thinking(unnamed.messages[1])


def test_bad_arguments_name_the_field_and_the_fix() -> None:
    with manager() as cm:
        known = cm.add_message("User", "go")
        with pytest.raises(ConfigError, match="needs identity="):
            cm.compile(thinking_binding=BINDING)
        with pytest.raises(ConfigError, match="only with thinking_binding="):
            cm.compile(identity="model-a")
        with pytest.raises(ConfigError, match="identity must be"):
            cm.compile(thinking_binding=BINDING, identity=3)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="thinking_binding must be a ThinkingBinding"):
            cm.compile(thinking_binding=object(), identity="m")  # type: ignore[arg-type]
        first = compile_bound(cm)
        with pytest.raises(ConfigError, match=r"CompileResult\.identity"):
            cm.note_request_sent([known], "model-a", first.compile_id)  # type: ignore[arg-type]
        with pytest.raises(KeyError, match=r"rows\[1\]='999'.*unstored=True"):
            cm.note_request_sent([known, "999"], first.identity, first.compile_id)
        with pytest.raises(ConfigError, match="wrap one id in a list"):
            cm.note_request_sent(known, first.identity, first.compile_id)
        with pytest.raises(ConfigError, match=r"rows\[0\] names no message"):
            cm.note_request_sent([NotedRow()], first.identity, first.compile_id)
        with pytest.raises(ConfigError, match=r"rows\[0\] must be"):
            cm.note_request_sent([3], first.identity, first.compile_id)  # type: ignore[list-item]


# -------------------------------------------------- the oracle, over random histories
def _oracle(
    compiled: Sequence[Message], identity: RequestIdentity, sent: tuple[Any, list[Message]] | None
) -> list[Message]:
    """What a binding compile sends, from what it would send without one and the whole
    last sent request: a reply keeps its thinking exactly when the output so far and the
    reply repeat the last sent request's first messages, under the same identity."""

    def key(messages: Sequence[Message]) -> list[tuple[str, tuple[Any, ...]]]:
        return [(m.participant, m.content) for m in messages]  # what is sent of each

    out: list[Message] = []
    for m in compiled:
        if m.participant != "Claude" or not has_thinking(m):
            out.append(m)
            continue
        j = len(out)
        if (
            sent is not None
            and sent[0] == identity
            and j < len(sent[1])
            and key(sent[1][: j + 1]) == key([*out, m])
        ):
            out.append(m)
            continue
        kept = bare(m)
        if kept.content:
            out.append(kept)
    return out


class BindingMachine(RuleBasedStateMachine):
    """Random replies, edits, removals, notes, injections, identities and budgets under
    the passthrough strategy; every binding compile is compared with the oracle."""

    @initialize()
    def open(self) -> None:
        self.cm = manager()
        self.n = 0
        self.sent: tuple[RequestIdentity, list[Message]] | None = None
        self.last: tuple[str, list[Message], list[str]] | None = None  # id, sent, live ids

    def teardown(self) -> None:
        self.cm.close()

    def ids(self) -> list[str]:
        return [m.id for m in self.cm.get_messages()]

    def _add(self, who: str, thinking: bool, only: bool = False) -> None:
        self.n += 1
        content: list[Any] = []
        if thinking:
            content.append(ThinkingBlock(thinking=f"t{self.n}", signature=f"s{self.n}"))
        if not (thinking and only):
            content.append(TextBlock(text=f"m{self.n} " + "w " * (self.n % 5)))
        self.cm.add_message(who, content)

    @rule(only=st.sampled_from([False, False, False, True]))
    def add_reply(self, only: bool) -> None:
        """A reply of the model with its thinking (sometimes nothing else)."""
        self._add("Claude", True, only)

    @rule()
    def add_turn(self) -> None:
        """A user turn and the model's reply, with its thinking."""
        self._add("User", False)
        self._add("Claude", True)

    @rule(who=st.sampled_from(["User", "Claude", "Helper"]), thinking=st.booleans())
    def add_other(self, who: str, thinking: bool) -> None:
        """A user turn, a reply without thinking, another participant's thinking."""
        self._add(who, thinking and who == "Helper")

    @precondition(lambda self: bool(self.cm.get_messages()))
    @rule(data=st.data())
    def edit(self, data: st.DataObject) -> None:
        self.n += 1
        self.cm.edit_message(data.draw(st.sampled_from(self.ids())), f"e{self.n}")

    @precondition(lambda self: bool(self.cm.get_messages()))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        self.cm.remove_message(data.draw(st.sampled_from(self.ids())))

    @rule(
        # mostly a roomy window, whose prefix stays put, sometimes one that slides
        budget=st.sampled_from([10_000, 10_000, 10_000, 60, 150]),
        model=st.sampled_from(["a", "a", "a", "b"]),
        inject=st.booleans(),
        dry_run=st.booleans(),
    )
    def compile(self, budget: int, model: str, inject: bool, dry_run: bool) -> None:
        notes = [Injection.text("n", "before_user", "injected")] if inject else []
        args: dict[str, Any] = {
            "max_tokens": budget,
            "reserve_for_response": 0,
            "injections": notes,
        }
        plain = self.cm.compile(**args, dry_run=True)
        result = self.cm.compile(**args, dry_run=dry_run, thinking_binding=BINDING, identity=model)
        assert result.identity == RequestIdentity.of(model)
        assert result.messages == _oracle(plain.messages, result.identity, self.sent)
        assert result.render_stats["tokens"] == recount(result.messages) <= budget
        TALLY["kept"] += len(result.thinking_strip.kept)
        TALLY["stripped"] += len(result.thinking_strip.stripped)
        TALLY["newly"] += len(result.thinking_strip.newly)
        if not dry_run:
            self.sent = (result.identity, list(result.messages))
            self.last = (result.compile_id, list(result.messages), self.ids())

    @rule(inject=st.booleans(), tool=st.booleans())
    def host_turn(self, inject: bool, tool: bool) -> None:
        """A host's round trip: compile and send, store the model's reply (a call and its
        result, then an answer, or an answer), note what the stream carried."""
        self.compile(10_000, "a", inject, False)
        assert self.last is not None and self.sent is not None
        rows = []
        if tool:
            self.n += 1
            call = f"c{self.n}"
            thought = ThinkingBlock(thinking=f"t{self.n}", signature=f"s{self.n}")
            rows.append(
                self.cm.add_message("Claude", [thought, ToolUseBlock(id=call, name="bash")])
            )
            result = [ToolResultBlock(tool_use_id=call, content=f"r{self.n}")]
            rows.append(self.cm.add_message("User", result))
        self._add("Claude", True)
        rows.append(self.ids()[-1])
        assert self.cm.note_request_sent(rows, self.sent[0], self.last[0])
        self.sent = (self.sent[0], self.last[1] + [self.cm.get_message(i) for i in rows])
        TALLY["noted"] += 1
        self._add("User", False)

    @precondition(lambda self: self.last is not None)
    @rule(
        data=st.data(),
        share=st.sampled_from(["all", "all", "some"]),
        stale=st.sampled_from([False, False, False, True]),
        unstored=st.sampled_from([False, False, True]),
        other=st.sampled_from([False, False, False, True]),
    )
    def note(
        self, data: st.DataObject, share: str, stale: bool, unstored: bool, other: bool
    ) -> None:
        """What the host says the request built from the last compile carried after it:
        usually every row stored since, sometimes fewer, a row it cannot vouch for, a
        compile that is not the last, or another identity."""
        assert self.last is not None and self.sent is not None
        compile_id, compiled, live = self.last
        after = [i for i in self.ids() if i not in live]  # stored since that compile
        rows: list[Any] = after
        if share == "some":
            rows = after[: data.draw(st.integers(0, len(after)))]
        if unstored and rows:
            rows.insert(data.draw(st.integers(0, len(rows) - 1)), NotedRow(unstored=True))
        identity = RequestIdentity.of("b") if other else self.sent[0]
        named = "0" * 16 if stale else compile_id
        noted = self.cm.note_request_sent(rows, identity, named)
        assert noted is not stale
        TALLY["noted"] += noted
        if noted:
            vouched = []
            for row in rows:
                if isinstance(row, NotedRow):
                    break
                vouched.append(self.cm.get_message(row))
            self.sent = (identity, compiled + vouched)


MACHINE_SETTINGS = settings(
    max_examples=40, stateful_step_count=30, derandomize=True, database=None, deadline=None
)


def test_the_binding_machine_holds_and_meets_every_case_the_oracle_decides() -> None:
    """Every binding compile agrees with the oracle, and the runs kept, stripped and
    newly stripped thinking (so the agreement was tested on each)."""
    TALLY.clear()
    run_state_machine_as_test(BindingMachine, settings=MACHINE_SETTINGS)
    assert TALLY["noted"] and TALLY["kept"] and TALLY["stripped"] and TALLY["newly"]
