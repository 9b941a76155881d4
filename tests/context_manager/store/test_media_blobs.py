"""Large images are kept once in the store's blob table and read back whole.

The property: whatever bodies are appended and edited, every read (items, one item,
the body of a past record, after reopening) gives back exactly what was written, and
no record holds image data of :data:`~context_manager.store.MEDIA_BLOB_MIN_CHARS` or
more characters.
"""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_manager import CharsCounter, ContextManager, ImageBlock, Store, TextBlock
from context_manager.messages import ToolResultBlock, ToolUseBlock
from context_manager.store import MEDIA_BLOB_MIN_CHARS
from tests.support.store_places import Place, query

EXAMPLES = itertools.count()


def png(seed: int, size: int = 3000) -> str:
    return base64.b64encode(bytes((seed + i) % 251 for i in range(size))).decode()


def raw_records(path: str) -> tuple[list[str], int]:
    """The bodies of every record, as stored text, and the number of blobs."""
    bodies = [b for (b,) in query(path, "SELECT body FROM records") if b is not None]
    [(blobs,)] = query(path, "SELECT COUNT(*) FROM blobs")
    return bodies, blobs


def test_an_image_sent_twice_is_stored_once_and_read_back_whole(place: Place) -> None:
    path = place("cm")
    big, small = png(1), png(2, size=60)
    assert len(small) < MEDIA_BLOB_MIN_CHARS <= len(big)
    with ContextManager.open(path=path, counter=CharsCounter()) as cm:
        first = cm.add_message(
            "User", [TextBlock(text="look"), ImageBlock(media_type="image/png", data=big)]
        )
        cm.add_message("Claude", [ToolUseBlock(id="t1", name="shot", input={})])
        result = ToolResultBlock(
            tool_use_id="t1", content=[ImageBlock(media_type="image/png", data=big)]
        )
        second = cm.add_message("User", [result])
        tiny = cm.add_message("User", [ImageBlock(media_type="image/png", data=small)])
        sent = cm.compile(max_tokens=100_000, reserve_for_response=0).messages
        images = [b for m in sent for b in m.content if isinstance(b, ImageBlock)]
        results = [b for m in sent for b in m.content if isinstance(b, ToolResultBlock)]
        assert [i.data for i in images] == [big, small]
        assert results[0].content[0].data == big  # type: ignore[union-attr]
    bodies, blobs = raw_records(path)
    assert blobs == 1  # the same bytes, twice: one blob
    assert not any(big in b for b in bodies)
    assert sum(small in b for b in bodies) == 1  # short data stays inline
    with ContextManager.open(path=path, counter=CharsCounter()) as cm:
        assert cm.get_message(first).content[1].data == big  # type: ignore[union-attr]
        kept = cm.get_message(second).content[0]
        assert isinstance(kept, ToolResultBlock) and kept.content[0].data == big  # type: ignore[union-attr]
        assert cm.get_message(tiny).content[0].data == small  # type: ignore[union-attr]
        before = cm.store.sequence
        other = png(3)
        cm.edit_message(first, [ImageBlock(media_type="image/png", data=other)])
        assert cm.get_message(first).content[0].data == other  # type: ignore[union-attr]
        then = cm.get_message_at(first, sequence=before)  # time travel reads the blob too
        assert then is not None and then.content[1].data == big  # type: ignore[union-attr]
    assert raw_records(path)[1] == 2


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8))
image = st.builds(
    lambda n, seed, kind: {"type": kind, "media_type": "image/png", "data": png(seed, n)},
    n=st.integers(0, 1200),
    seed=st.integers(0, 3),
    kind=st.sampled_from(["image", "image", "text"]),
)
body = st.recursive(
    st.one_of(json_leaf, image),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from("abcd"), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # a new store each example
)
@given(bodies=st.lists(body, min_size=1, max_size=6), edits=st.lists(body, max_size=3))
def test_every_read_gives_back_what_was_written(
    place: Place, bodies: list[Any], edits: list[Any]
) -> None:
    path = place(f"s-{next(EXAMPLES)}")
    with Store.open(path) as store:
        items = [store.append("slot", b) for b in bodies]
        for k, new in enumerate(edits):
            items[k % len(items)] = store.edit("slot", items[k % len(items)].id, new)
            bodies[k % len(bodies)] = new
        assert [i.body for i in items] == bodies  # the items the writes returned
        assert [i.body for i in store.items("slot")] == bodies
        assert [store.body_at(i.rev) for i in items] == bodies
    with Store.open(path) as store:
        assert [i.body for i in store.items("slot")] == bodies
    records, _ = raw_records(path)
    assert not any(inline_image_data(json.loads(r)) for r in records)


def inline_image_data(value: Any) -> list[str]:
    """The image data of at least MEDIA_BLOB_MIN_CHARS characters held in ``value``."""
    if isinstance(value, dict):
        data = value.get("data")
        own = (
            [data]
            if value.get("type") == "image"
            and isinstance(data, str)
            and len(data) >= MEDIA_BLOB_MIN_CHARS
            else []
        )
        return own + [d for v in value.values() for d in inline_image_data(v)]
    if isinstance(value, list):
        return [d for v in value for d in inline_image_data(v)]
    return []
