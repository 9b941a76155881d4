"""The channel queries of the manager: messages of one channel, counts per channel and
tokens per channel, over the index of each message's ``metadata.external.channelId``.

Expectations come from the messages as the test wrote them (their channels, texts and
timestamps, counted with the counter the manager was given), never from the call
under test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager import (
    ArgumentError,
    ArgumentTypeError,
    ChannelCount,
    CharsCounter,
    ContextManager,
    Message,
)
from context_manager.strategies.base import StoredMessage
from tests.support.store_places import Place, agent_places, file_places

COUNTER = CharsCounter()


def manager(where: str | Path = ":memory:") -> ContextManager:
    return ContextManager.open(path=where, counter=COUNTER)


def on(channel: str | None) -> dict[str, Any]:
    return {} if channel is None else {"external": {"source": "chat", "channelId": channel}}


def add(cm: ContextManager, text: str, channel: str | None, stamp: float | None = None) -> str:
    return cm.add_message("User", text, metadata=on(channel), timestamp=stamp)


def counts(cm: ContextManager) -> dict[str, int]:
    return {c.channel_id: c.messages for c in cm.get_channel_message_counts()}


def expected_counts(rows: list[tuple[str, str | None]]) -> list[tuple[str, int]]:
    """(channel, messages) in the order of each channel's first message."""
    out: dict[str, int] = {}
    for _, channel in rows:
        if channel is not None:
            out[channel] = out.get(channel, 0) + 1
    return list(out.items())


CHANNELS = st.sampled_from([None, "ops", "dev", "général", "c-42"])


@settings(max_examples=40)
@given(
    rows=st.lists(CHANNELS, max_size=25),
    wanted=CHANNELS.filter(lambda c: c is not None),
    limit=st.none() | st.integers(0, 6),
    offset=st.integers(0, 8),
    reverse=st.booleans(),
)
def test_a_channel_query_is_the_channel_filter_of_the_record_paged(
    rows: list[str | None], wanted: str, limit: int | None, offset: int, reverse: bool
) -> None:
    with manager() as cm:
        written = [(add(cm, f"message {i}", c), c) for i, c in enumerate(rows)]
        found = cm.query_messages_by_channel(wanted, limit=limit, offset=offset, reverse=reverse)
        matches = [i for i, c in written if c == wanted]
        if reverse:
            matches.reverse()
        page = matches[offset:] if limit is None else matches[offset : offset + limit]
        assert [m.id for m in found.messages] == page
        assert found.total_count == len(matches)
        assert [(c.channel_id, c.messages) for c in cm.get_channel_message_counts()] == (
            expected_counts(written)
        )


def test_counts_follow_edits_removals_and_a_new_channel_of_an_edited_message() -> None:
    with manager() as cm:
        a = add(cm, "one", "ops")
        b = add(cm, "two", "ops")
        add(cm, "three", "dev")
        add(cm, "four", None)
        cm.add_message(
            "User", "an int channel is no channel", metadata={"external": {"channelId": 7}}
        )
        assert cm.get_channel_message_counts() == [ChannelCount("ops", 2), ChannelCount("dev", 1)]
        cm.remove_message(a)
        assert counts(cm) == {"ops": 1, "dev": 1}
        # an edit replaces the content: the channel is the body's, read again
        cm.store.edit(
            "messages", b, {**cm.get_message(b).model_dump(mode="json"), "metadata": on("dev")}
        )
        assert counts(cm) == {"dev": 2}
        assert [m.message.text for m in cm.query_messages_by_channel("dev").messages] == [
            "two",
            "three",
        ]
        assert cm.query_messages_by_channel("ops").total_count == 0
        # the full-scan filter agrees with the index
        scan = cm.query_messages(metadata={"external.channelId": "dev"})
        assert [m.id for m in scan.messages] == [
            m.id for m in cm.query_messages_by_channel("dev").messages
        ]


def test_each_branch_counts_its_own_messages() -> None:
    with manager() as cm:
        first = add(cm, "one", "ops")
        add(cm, "two", "dev")
        side = cm.branch_at(first, "side")
        cm.switch_branch(side)
        assert counts(cm) == {"ops": 1}
        add(cm, "three", "qa")
        assert counts(cm) == {"ops": 1, "qa": 1}
        cm.switch_branch("main")
        assert counts(cm) == {"ops": 1, "dev": 1}
        assert cm.query_messages_by_channel("qa").total_count == 0


def test_token_stats_count_each_channel_and_the_whole_range_with_the_counter() -> None:
    rows = [
        ("hello there", "ops", 1.0),
        ("a much longer message on dev", "dev", 2.0),
        ("no channel at all", None, 3.0),
        ("ops again", "ops", 4.0),
        ("ops late", "ops", 5.0),
    ]
    with manager() as cm:
        for text, channel, stamp in rows:
            add(cm, text, channel, stamp)

        def size(text: str, channel: str | None) -> int:
            return COUNTER.count_message(Message.text_message("User", text, metadata=on(channel)))

        def expected(low: float | None, high: float | None) -> tuple[int, int, dict[str, Any]]:
            timed = low is not None or high is not None
            kept = [
                (t, c)
                for t, c, s in rows
                if not timed
                or (s is not None and (low is None or s >= low) and (high is None or s <= high))
            ]
            by: dict[str, tuple[int, int]] = {}
            for t, c in kept:
                if c is not None:
                    n, k = by.get(c, (0, 0))
                    by[c] = (n + 1, k + size(t, c))
            return len(kept), sum(size(t, c) for t, c in kept), by

        for low, high in [(None, None), (2.0, 4.0), (None, 1.5), (3.5, None), (10.0, 20.0)]:
            stats = cm.get_channel_token_stats(from_time=low, to_time=high)
            total_messages, total_tokens, by = expected(low, high)
            assert (stats.total_messages, stats.total_tokens) == (total_messages, total_tokens)
            assert {c.channel_id: (c.messages, c.tokens) for c in stats.by_channel} == by
        between = cm.query_messages_by_channel("ops", from_time=2.0, to_time=4.5)
        assert [m.message.text for m in between.messages] == ["ops again"]


@pytest.mark.parametrize(
    ("call", "param", "kind"),
    [
        (lambda cm: cm.query_messages_by_channel(7), "channel_id", ArgumentTypeError),
        (lambda cm: cm.query_messages_by_channel(""), "channel_id", ArgumentError),
        (lambda cm: cm.query_messages_by_channel("c", limit=-1), "limit", ArgumentError),
        (lambda cm: cm.query_messages_by_channel("c", offset=-2), "offset", ArgumentError),
        (lambda cm: cm.query_messages_by_channel("c", offset=1.5), "offset", ArgumentTypeError),
        (lambda cm: cm.query_messages_by_channel("c", reverse="yes"), "reverse", ArgumentTypeError),
        (lambda cm: cm.get_channel_token_stats(from_time=float("nan")), "from_time", ArgumentError),
        (
            lambda cm: cm.get_channel_token_stats(from_time=5.0, to_time=1.0),
            "from_time",
            ArgumentError,
        ),
    ],
)
def test_bad_arguments_are_refused_naming_them(call: Any, param: str, kind: type) -> None:
    with manager() as cm:
        add(cm, "hi", "c")
        with pytest.raises(kind) as info:
            call(cm)
        assert isinstance(info.value, ArgumentError) and info.value.param == param


@pytest.fixture(params=["sqlite", "postgresql"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "sqlite":
        return file_places(tmp_path)
    return agent_places(request.getfixturevalue("postgres_url"))


@pytest.fixture
def body_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ids of the stored messages whose body is read (validated), in order."""
    reads: list[str] = []
    original = StoredMessage.message

    def counted(self: StoredMessage) -> Message:
        if self._message is None:
            reads.append(self.id)
        return original.fget(self)  # type: ignore[attr-defined, no-any-return]

    monkeypatch.setattr(StoredMessage, "message", property(counted))
    yield reads


def test_a_reopened_manager_answers_from_the_index_without_reading_bodies(
    place: Place, body_reads: list[str]
) -> None:
    where = place("channels")
    rows = [("ops" if i % 3 else "dev") if i % 5 else None for i in range(30)]
    with manager(where) as cm:
        ids = [add(cm, f"message {i}", c) for i, c in enumerate(rows)]
        assert counts(cm) == dict(expected_counts(list(zip(ids, rows, strict=True))))
    with manager(where) as cm:
        body_reads.clear()
        assert counts(cm) == dict(expected_counts(list(zip(ids, rows, strict=True))))
        page = cm.query_messages_by_channel("dev")
        assert [m.id for m in page.messages] == [
            i for i, c in zip(ids, rows, strict=True) if c == "dev"
        ]
        assert body_reads == []
        # an edit makes that message's entry stale: no other message is read again
        cm.edit_message(ids[1], "edited")
        body_reads.clear()
        assert counts(cm) == dict(expected_counts(list(zip(ids, rows, strict=True))))
        assert set(body_reads) <= {ids[1]}
