"""Item ids of a submission, drawn many at a time from the OS's random source."""

from __future__ import annotations

import itertools
import uuid

from batchcrop.batches import UUIDS_PER_DRAW, random_uuids


def test_item_ids_are_distinct_canonical_version_4_uuids() -> None:
    """Across several draws: each id is the canonical text of a random (version 4, RFC 9562
    variant) UUID, as `str(uuid.uuid4())` would be, and none repeats."""
    ids = list(itertools.islice(random_uuids(), 3 * UUIDS_PER_DRAW + 5))
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
