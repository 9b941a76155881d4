"""The record schema is stated once, by the record dataclasses: the audit reports a
stored body as malformed exactly when the strategy's records say it cannot be read."""

from __future__ import annotations

from typing import Any

import pytest

from context_manager.strategies.autobiographical.records import ChunkRecord, SummaryEntry
from context_manager.topology import Kind, Raw, StoredRecords, audit

MEMORY: dict[str, Any] = {
    "id": "L1-0",
    "level": 1,
    "content": "Booked the flight.",
    "tokens": 4,
    "source_ids": ["a", "b"],
    "first": "a",
    "last": "b",
}
CHUNK: dict[str, Any] = {"id": "c-0", "source_ids": ["a", "b"]}


def _malformed(records: StoredRecords) -> list[str]:
    return [f.detail for f in audit(records) if f.kind is Kind.MALFORMED]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"level": 0}, "its level 0 is not a whole number from 1"),
        ({"level": True}, "its level True is not a whole number from 1"),
        ({"id": ""}, "its id is not a string"),
        ({"tokens": 1.5}, "its tokens are not a whole number"),
        ({"source_ids": []}, "its source_ids are not a list of ids"),
        ({"last": 3}, "its first and last are not message ids"),
        ({"parent_id": 7}, "its parent_id is not an id"),
        ({"colour": "red"}, "it has unknown fields colour"),
    ],
)
def test_a_memory_breaking_a_field_rule_is_malformed_with_the_rule_said(
    change: dict[str, Any], said: str
) -> None:
    body = {**MEMORY, **change}
    assert SummaryEntry.problem_of(body) == said
    records = StoredRecords(messages=("a", "b"), summaries=(Raw("1", body),))
    assert _malformed(records) == [f"the record cannot be read as a memory: {said}"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"source_ids": "a"}, "its source_ids are not a list of message ids"),
        ({"compressed": 1}, "its compressed flag is not true or false"),
        ({"summary_id": 0}, "its summary_id is not an id"),
        ({"made": 1}, "it has unknown fields made"),
    ],
)
def test_a_chunk_breaking_a_field_rule_is_malformed_with_the_rule_said(
    change: dict[str, Any], said: str
) -> None:
    body = {**CHUNK, **change}
    assert ChunkRecord.problem_of(body) == said
    records = StoredRecords(messages=("a", "b"), chunks=(Raw("1", body),))
    assert _malformed(records) == [f"the record cannot be read as a chunk record: {said}"]


def test_required_fields_are_those_without_a_default_and_every_stored_field_is_known() -> None:
    missing = {k: v for k, v in MEMORY.items() if k not in ("tokens", "first")}
    assert SummaryEntry.problem_of(missing) == "it lacks tokens, first"
    # every field a memory stores is one the schema knows: a written body reads back
    written = SummaryEntry("9", **MEMORY, parent_id="L2-1", stitched=True, values=("X",)).body()
    assert SummaryEntry.problem_of(written) is None
    assert ChunkRecord.problem_of(ChunkRecord("9", **CHUNK, compressed=True).body()) is None
    records = StoredRecords(messages=("a", "b"), summaries=(Raw("1", written),))
    assert _malformed(records) == []
