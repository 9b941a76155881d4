"""Images in the manager: the copy sent keeps the newest images within the strategy's
limits (count, depth, bytes) and replaces the others by a note; the store keeps them,
chunk sizes leave them out, and memory requests carry them within a byte budget."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.images import (
    IMAGE_DROPPED,
    IMAGE_OVER_BYTES,
    ImagePolicy,
    image_bytes,
    live_images,
)
from context_manager.strategies import PassthroughStrategy
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from tests.support.scripted_summarizer import ScriptedSummarizer

PNG = "iVBORw0KGgo=" * 100  # 1,199 decoded bytes
COUNTER = CharsCounter()


def picture() -> ImageBlock:
    return ImageBlock(media_type="image/png", data=PNG)


def images_in(messages: list[Message]) -> list[ImageBlock]:
    out: list[ImageBlock] = []
    for m in messages:
        for b in m.content:
            if isinstance(b, ImageBlock):
                out.append(b)
            elif isinstance(b, ToolResultBlock) and not isinstance(b.content, str):
                out += [c for c in b.content if isinstance(c, ImageBlock)]
    return out


def notes_in(messages: list[Message], note: str = IMAGE_DROPPED) -> int:
    count = 0
    for m in messages:
        for b in m.content:
            if isinstance(b, TextBlock) and b.text == note:
                count += 1
            elif isinstance(b, ToolResultBlock) and not isinstance(b.content, str):
                count += sum(isinstance(c, TextBlock) and c.text == note for c in b.content)
    return count


def chat(cm: ContextManager, pictures: int = 10) -> list[str]:
    ids = []
    for i in range(pictures):
        ids.append(
            cm.add_message(
                "User",
                [
                    TextBlock(text=f"look at picture {i}"),
                    ImageBlock(media_type="image/png", data=PNG),
                ],
            )
        )
        cm.add_message("Claude", f"I see picture {i}. " + "detail " * 20)
    return ids


def sent_total(request: Any) -> int:
    return sum(COUNTER.count_message(m) for m in request.messages)


def test_the_default_strategy_sends_six_images_and_notes_for_the_rest() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ids = chat(cm)
        request = cm.compile(max_tokens=100_000, reserve_for_response=0)
        assert len(images_in(request.messages)) == 6
        assert notes_in(request.messages) == 4
        # the four oldest pictures are the ones left out
        firsts = [m for m in request.messages if "look at picture" in m.text]
        assert [len(images_in([m])) for m in firsts] == [0] * 4 + [1] * 6
        assert request.render_stats["images"] == {"live": 6, "dropped": 4, "messages": 4}
        # what is priced is what is sent, and the store keeps every image
        assert request.render_stats["request"]["messages"] == sent_total(request)
        assert all(len(images_in([cm.get_message(i)])) == 1 for i in ids)


def test_limits_at_zero_send_every_image() -> None:
    strategy = PassthroughStrategy(
        max_live_images=0, image_strip_depth_tokens=0, max_live_image_bytes=0
    )
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        chat(cm)
        request = cm.compile(max_tokens=100_000, reserve_for_response=0)
        assert len(images_in(request.messages)) == 10
        assert notes_in(request.messages) == 0


def test_an_image_deeper_than_the_strip_depth_is_not_sent() -> None:
    strategy = PassthroughStrategy(max_live_images=0, image_strip_depth_tokens=200)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        cm.add_message(
            "User", [TextBlock(text="old"), ImageBlock(media_type="image/png", data=PNG)]
        )
        cm.add_message("Claude", "x" * 400)  # 100 tokens after it: still live
        assert len(images_in(cm.compile(max_tokens=50_000).messages)) == 1
        cm.add_message("User", "y" * 440)  # 210 tokens after it: too deep
        request = cm.compile(max_tokens=50_000)
        assert images_in(request.messages) == []
        assert notes_in(request.messages) == 1


def test_the_byte_budget_keeps_the_newest_and_drops_every_older_image() -> None:
    small = ImageBlock(media_type="image/png", data="AAAA" * 10)  # 30 bytes
    large = ImageBlock(media_type="image/png", data="AAAA" * 100)  # 300 bytes
    strategy = PassthroughStrategy(max_live_images=0, max_live_image_bytes=350)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        for i, picture in enumerate([small, small, large, small]):
            cm.add_message("User", [TextBlock(text=f"p{i}"), picture])
            cm.add_message("Claude", f"ok {i}")
        request = cm.compile(max_tokens=50_000)
        kept = images_in(request.messages)
        # newest first: 30 + 300 fit; the next 30 would too, but the walk stopped
        assert [image_bytes(b) for b in kept] == [300, 30]
        assert notes_in(request.messages) == 2


def test_images_in_tool_results_are_limited_too() -> None:
    strategy = PassthroughStrategy(max_live_images=1)
    with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=strategy) as cm:
        for i in range(3):
            cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="screenshot")])
            cm.add_message(
                "User",
                [
                    ToolResultBlock(
                        tool_use_id=f"t{i}", content=[TextBlock(text=f"s{i}"), picture()]
                    )
                ],
            )
        request = cm.compile(max_tokens=50_000)
        assert len(images_in(request.messages)) == 1
        assert notes_in(request.messages) == 2
        assert request.render_stats["request"]["messages"] == sent_total(request)


def test_a_dropped_image_stays_dropped_as_the_chat_grows() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        chat(cm, 7)
        first = cm.compile(max_tokens=100_000).messages
        chat(cm, 3)
        second = cm.compile(max_tokens=100_000).messages
        # the prefix before the first newly dropped image is sent as it was
        assert second[:2] == first[:2]
        assert notes_in(second) == 4


def test_the_autobiographical_strategy_sends_the_newest_images() -> None:
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        recent_window_tokens=20_000,
        max_live_images=3,
    )
    with ContextManager.open(
        path=":memory:",
        counter=CharsCounter(),
        strategy=strategy,
        summarizer=ExtractiveSummarizer(),
    ) as cm:
        chat(cm, 5)
        request = cm.compile(max_tokens=100_000, reserve_for_response=0)
        assert len(images_in(request.messages)) == 3
        assert request.render_stats["images"] == {"live": 3, "dropped": 2, "messages": 2}
        assert request.render_stats["request"]["messages"] == sent_total(request)


def autobiographical(**options: Any) -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        recent_window_tokens=200,
        l1_holdback_chunks=0,
        target_chunk_tokens=3000,
        **options,
    )


def test_images_do_not_count_toward_a_chunk_unless_asked() -> None:
    for ignore, closed in ((True, 0), (False, 4)):
        strategy = autobiographical(attachments_ignore_size=ignore)
        with ContextManager.open(
            path=":memory:",
            counter=CharsCounter(),
            strategy=strategy,
            summarizer=ExtractiveSummarizer(),
        ) as cm:
            chat(cm)
            cm.drain()
            cm.compile(max_tokens=100_000, reserve_for_response=0)
            assert len(strategy.chunks) == closed, ignore


def test_a_memory_request_carries_the_newest_images_within_its_byte_budget() -> None:
    summarizer = ScriptedSummarizer()
    strategy = AutobiographicalStrategy(
        compression_model="m",
        recent_window_tokens=100,
        l1_holdback_chunks=0,
        target_chunk_tokens=300,
        attachments_ignore_size=False,
        max_compression_image_bytes=2 * 1199,
    )
    with ContextManager.open(
        path=":memory:", counter=CharsCounter(), strategy=strategy, summarizer=summarizer
    ) as cm:
        chat(cm, 6)
        cm.drain()
        assert summarizer.requests
        for request in summarizer.requests:
            messages = list(request.messages)
            assert sum(image_bytes(b) for b in images_in(messages)) <= 2 * 1199
        assert any(notes_in(list(r.messages), IMAGE_OVER_BYTES) for r in summarizer.requests)


# ------------------------------------------------------------- the rule itself
def message(k: int, pictures: list[int], words: int) -> Message:
    blocks: list[Any] = [TextBlock(text=f"m{k} " + "w " * words)]
    blocks += [ImageBlock(media_type="image/png", data="AAAA" * size) for size in pictures]
    return Message(participant="User" if k % 2 == 0 else "Claude", content=blocks)


HISTORIES = st.lists(
    st.tuples(st.lists(st.integers(1, 40), max_size=3), st.integers(0, 60)), max_size=14
).map(lambda rows: [message(k, p, w) for k, (p, w) in enumerate(rows)])
POLICIES = st.builds(
    ImagePolicy,
    max_live_images=st.integers(0, 5),
    image_strip_depth_tokens=st.sampled_from([0, 20, 60, 200]),
    max_live_image_bytes=st.sampled_from([0, 60, 150, 400]),
)


def expected_live(history: list[Message], policy: ImagePolicy) -> set[tuple[int, int]]:
    """An independent reading of the rule: the (message, image) places sent. Images
    are looked at newest first; the first that breaks a limit ends the walk."""
    live: set[tuple[int, int]] = set()

    def as_sent(j: int) -> Message:  # the histories put images at the top level only
        k = -1
        blocks: list[Any] = []
        for b in history[j].content:
            if isinstance(b, ImageBlock):
                k += 1
                blocks.append(b if (j, k) in live else TextBlock(text=IMAGE_DROPPED))
            else:
                blocks.append(b)
        return Message(participant=history[j].participant, content=blocks)

    spent = 0
    for i in range(len(history) - 1, -1, -1):
        pictures = images_in([history[i]])
        depth = sum(COUNTER.count_message(as_sent(j)) for j in range(i + 1, len(history)))
        for k in range(len(pictures) - 1, -1, -1):
            size = image_bytes(pictures[k])
            if (
                (policy.max_live_images and len(live) >= policy.max_live_images)
                or (policy.image_strip_depth_tokens and depth > policy.image_strip_depth_tokens)
                or (policy.max_live_image_bytes and spent + size > policy.max_live_image_bytes)
            ):
                return live
            live.add((i, k))
            spent += size
    return live


@given(HISTORIES, POLICIES, st.integers(0, 4))
def test_the_images_sent_are_the_newest_within_every_limit(
    history: list[Message], policy: ImagePolicy, grown: int
) -> None:
    sent = live_images(history, policy, COUNTER.count_message)
    live = expected_live(history, policy)
    assert sent.live == len(live)
    assert sent.live + sent.dropped == len(images_in(history))
    for i, m in enumerate(sent.messages):
        kept = images_in([m])
        assert len(kept) == sum(1 for j, _ in live if j == i)
        assert len(kept) + notes_in([m]) == len(images_in([history[i]]))
        assert (m is history[i]) == (i not in sent.changed)
    if policy.max_live_images:
        assert sent.live <= policy.max_live_images
    if policy.max_live_image_bytes:
        assert sum(image_bytes(b) for b in images_in(sent.messages)) <= policy.max_live_image_bytes
    # an image dropped stays dropped when the history grows
    longer = history + [message(100 + j, [5], 10) for j in range(grown)]
    again = live_images(longer, policy, COUNTER.count_message).messages
    for i in range(len(history)):
        assert len(images_in([again[i]])) <= len(images_in([sent.messages[i]]))
