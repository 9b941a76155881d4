"""``derive``: a new store holding one branch's history up to a sequence.

Messages are ``m00 xxx...`` (39 characters: 10 tokens by the chars/4 counter); the
autobiographical strategy closes a chunk at 4 messages and keeps the newest 4 raw,
so a short talk already has memories, and a derived store has to carry them, the
frontier and the window to compile what its parent compiled.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    ExtractiveSummarizer,
    ImageBlock,
    Store,
    StoreError,
    TextBlock,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from tests.support.store_places import Place, query

COUNTER = CharsCounter()
BUDGET = 2_000


def _strategy() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=40,
        min_chunk_messages=4,
        recent_window_tokens=40,
        merge_threshold=2,
        summary_target_tokens=10,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )


def _open(where: str | Path | Store, namespace: str | None = None) -> ContextManager:
    """A manager on the store file ``where``, or on an open store, isolated by name."""
    place: dict[str, object] = (
        {"store": where, "isolate": True} if isinstance(where, Store) else {"path": where}
    )
    return ContextManager.open(
        **place,  # type: ignore[arg-type]
        strategy=_strategy(),
        summarizer=ExtractiveSummarizer(target_tokens=10),
        counter=COUNTER,
        namespace=namespace,
    )


def _talk(cm: ContextManager, n: int, start: int = 0) -> list[str]:
    return [
        cm.add_message("User" if i % 2 == 0 else "Claude", f"m{i:02d} " + "x" * 35)
        for i in range(start, start + n)
    ]


def _request(cm: ContextManager) -> list[object]:
    return list(cm.compile(max_tokens=BUDGET, reserve_for_response=0).messages)


def test_a_derived_store_compiles_what_its_parent_compiled(place: Place) -> None:
    with _open(place("parent")) as cm:
        _talk(cm, 30)
        cm.drain()
        parent = _request(cm)
        memories = sorted(cm.strategy.summaries)  # type: ignore[attr-defined]
        ids = [m.id for m in cm.get_messages()]
        child = cm.derive(place("child"))
    assert memories, "the talk has memories to carry"
    with _open(child) as derived:
        assert [m.id for m in derived.get_messages()] == ids
        assert sorted(derived.strategy.summaries) == memories  # type: ignore[attr-defined]
        assert _request(derived) == parent
        assert derived.strategy.summaries  # type: ignore[attr-defined]


def test_a_derived_store_holds_the_history_up_to_the_sequence_only(place: Place) -> None:
    with _open(place("parent")) as cm:
        early = _talk(cm, 12)
        cm.drain()
        at = cm.current_sequence()
        expected = _request(cm)
        cm.compile(max_tokens=BUDGET, reserve_for_response=0)  # commits nothing new
        _talk(cm, 10, start=12)
        cm.drain()
        child = cm.derive(place("child"), at_sequence=at)
        after = [m.id for m in cm.get_messages()]
    with _open(child) as derived:
        assert [m.id for m in derived.get_messages()] == early
        assert derived.current_sequence() == at
        assert _request(derived) == expected
        # the child goes its own way; the parent does not see its writes
        derived.add_message("User", "only in the child")
    with _open(place("parent")) as cm:
        assert [m.id for m in cm.get_messages()] == after
        assert "only in the child" not in [m.message.text for m in cm.get_messages()]


def test_a_derived_store_carries_the_current_branch_and_its_lineage(place: Place) -> None:
    with _open(place("parent")) as cm:
        shared = _talk(cm, 6)
        cm.fork("side")
        side = _talk(cm, 4, start=100)
        cm.switch_branch("main")
        _talk(cm, 3, start=200)
        cm.switch_branch("side")
        child = cm.derive(place("child"))
    with _open(child) as derived:
        assert derived.current_branch == "main"
        assert [b.name for b in derived.list_branches()] == ["main"]
        assert [m.id for m in derived.get_messages()] == shared + side


def test_the_window_is_carried_and_cut_at_a_presentation_boundary(place: Place) -> None:
    with _open(place("parent"), namespace="agent") as cm:
        cm.present_rows([])
        first = _talk(cm, 4)
        cm.present_rows(first[:3])
        boundary = cm.current_sequence()
        cm.present_rows(first[3:])
        late = _talk(cm, 2, start=4)
        child = cm.derive(place("child"), at_sequence=boundary)
        whole = cm.derive(place("whole"))
    with _open(child, namespace="agent") as derived:
        assert [m.id for m in derived.get_window_messages()] == first[:3]
        assert [m.id for m in derived.get_unpresented_messages()] == first[3:]
        assert derived.window_status_of(first[3]) == "out"
    with _open(whole, namespace="agent") as derived:
        assert [m.id for m in derived.get_window_messages()] == first
        assert [m.id for m in derived.get_unpresented_messages()] == late


def test_images_and_every_namespace_are_carried(place: Place) -> None:
    data = base64.b64encode(bytes(range(256)) * 8).decode()
    store = Store.open(place("parent"))
    a = _open(store, "alpha")
    b = _open(store, "beta")
    picture = a.add_message(
        "User", [TextBlock(text="look"), ImageBlock(media_type="image/png", data=data)]
    )
    _talk(a, 8)
    _talk(b, 8, start=50)
    a.drain()
    b.drain()
    want = {name: _request(m) for name, m in (("alpha", a), ("beta", b))}
    child = a.derive(place("child"))
    a.close()
    b.close()
    store.close()
    derived_store = Store.open(child)
    try:
        for name in ("alpha", "beta"):
            derived = _open(derived_store, name)
            assert _request(derived) == want[name]
            if name == "alpha":
                (image,) = [x for x in derived.get_message(picture).content if x.type == "image"]
                assert image.data == data
            derived.close()
    finally:
        derived_store.close()


@pytest.mark.parametrize("at", [-1, 10_000, True, 2.5])
def test_a_sequence_outside_the_history_is_refused_and_writes_nothing(
    tmp_path: Path, at: object
) -> None:
    with _open(tmp_path / "parent.db") as cm:
        _talk(cm, 3)
        with pytest.raises(ConfigError, match="at_sequence"):
            cm.derive(tmp_path / "child.db", at_sequence=at)
    assert [p.name for p in tmp_path.iterdir() if "child" in p.name] == []


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"someone's file")
    with _open(tmp_path / "parent.db") as cm:
        _talk(cm, 3)
        with pytest.raises(ConfigError, match="path="):
            cm.derive(taken)
        with pytest.raises(ConfigError, match="path="):
            cm.derive(tmp_path / "parent.db")
    assert taken.read_bytes() == b"someone's file"


def test_a_failed_write_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    with _open(tmp_path / "parent.db") as cm:
        _talk(cm, 3)
        (tmp_path / "out").mkdir()
        with monkeypatch.context() as patch:
            patch.setattr("context_manager.store.opening.os.link", full)
            with pytest.raises(StoreError, match="No space left on device"):
                cm.derive(tmp_path / "out" / "child.db")
        assert list((tmp_path / "out").iterdir()) == []
        # the parent is unharmed and keeps working, and a second try succeeds
        cm.add_message("User", "still here")
        assert cm.get_messages()[-1].message.text == "still here"
        child = cm.derive(tmp_path / "out" / "child.db")
    with _open(child) as derived:
        assert derived.get_messages()[-1].message.text == "still here"


def test_a_derived_store_never_gives_a_carried_id_again(place: Place) -> None:
    """Ids on a branch skip the ones its parent gave after the cut: the child must
    not hand those out again over a message it carries."""
    with _open(place("parent")) as cm:
        _talk(cm, 2)
        cm.fork("side")
        cm.switch_branch("main")
        _talk(cm, 3, start=10)
        cm.switch_branch("side")
        _talk(cm, 3, start=20)
        carried = [(m.id, m.message.text) for m in cm.get_messages()]
        child = cm.derive(place("child"))
    with _open(child) as derived:
        new = derived.add_message("User", "new in the child")
        assert new not in [i for i, _ in carried]
        assert [(m.id, m.message.text) for m in derived.get_messages()] == [
            *carried,
            (new, "new in the child"),
        ]


def test_a_derive_inside_a_transaction_is_refused(place: Place) -> None:
    store = Store.open(place("parent"))
    try:
        cm = ContextManager.open(store=store, counter=COUNTER)
        cm.add_message("User", "committed")
        with pytest.raises(StoreError, match="inside a transaction"), store.transaction():
            cm.add_message("User", "not stored yet")
            cm.derive(place("child"))
        cm.derive(place("child"))  # nothing was left there: the derive after it succeeds
        cm.close()
    finally:
        store.close()


def test_only_the_media_the_cut_history_names_is_carried(place: Place) -> None:
    data = base64.b64encode(bytes(range(256)) * 8).decode()
    with _open(place("parent")) as cm:
        cm.add_message("User", "before the picture")
        at = cm.current_sequence()
        cm.add_message("User", [ImageBlock(media_type="image/png", data=data)])
        early = cm.derive(place("early"), at_sequence=at)
        late = cm.derive(place("late"))
    for child, blobs in ((early, 0), (late, 1)):
        assert query(child, "SELECT COUNT(*) FROM blobs") == [(blobs,)]


def test_a_folder_that_does_not_exist_is_named(tmp_path: Path) -> None:
    with (
        _open(tmp_path / "parent.db") as cm,
        pytest.raises(ConfigError, match="folder that does not exist"),
    ):
        cm.derive(tmp_path / "nowhere" / "child.db")
    assert not (tmp_path / "nowhere").exists()
