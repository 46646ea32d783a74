"""Item ids of a submission: time-ordered UUIDs, drawn many at a time (ADR 0023)."""

from __future__ import annotations

import itertools
import time
import uuid

from batchcrop.batches.items import IDS_PER_DRAW, time_ordered_uuids


def test_item_ids_are_distinct_canonical_version_7_uuids_in_increasing_order() -> None:
    """Across several draws: each id is the canonical text of a version 7 (RFC 9562 variant)
    UUID stamped with the time of the first draw, none repeats, and each sorts after the one
    before (as text, which is how the database indexes them)."""
    before_ms = time.time_ns() // 1_000_000
    ids = list(itertools.islice(time_ordered_uuids(), 3 * IDS_PER_DRAW + 5))
    after_ms = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert before_ms <= parsed.int >> 80 <= after_ms


def test_two_submissions_draw_different_ids() -> None:
    """Two generators started in the same millisecond still differ in every id: 48 random bits
    follow the counter."""
    first, second = time_ordered_uuids(), time_ordered_uuids()
    pairs = list(itertools.islice(zip(first, second, strict=True), 1000))
    assert all(a != b for a, b in pairs)
