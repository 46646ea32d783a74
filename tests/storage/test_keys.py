"""Key rules as properties: an accepted key never escapes a local store's root."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import InvalidKey, LocalStore
from storage.port import MAX_KEY_BYTES, validate_key

KEY_ALPHABET = st.sampled_from(["a", "é", " ", "/", ".", "..", "\\", "\x00", "\n", "日", "-"])
keys = st.lists(KEY_ALPHABET, min_size=0, max_size=12).map("".join)


@settings(max_examples=150, deadline=None)
@given(key=keys)
def test_accepted_keys_stay_inside_the_root(key: str) -> None:
    """Any key either raises InvalidKey or writes exactly one file, under the root."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "root"
        store = LocalStore(root)
        try:
            store.put_if_absent(key, b"x")
        except InvalidKey:
            written: list[str] = []
        else:
            written = [key]
        files = sorted(
            os.path.relpath(os.path.join(folder, name), root)
            for folder, _, names in os.walk(scratch)
            for name in names
        )
        assert files == written
        assert [info.key for info in store.list()] == written


def test_a_key_may_be_exactly_as_long_as_the_limit() -> None:
    """A key of `MAX_KEY_BYTES` UTF-8 bytes (multi-byte characters counted in bytes) is valid;
    one byte more is `InvalidKey`."""
    longest = "é" * (MAX_KEY_BYTES // 2)  # two bytes each: exactly the limit
    assert len(longest.encode()) == MAX_KEY_BYTES
    validate_key(longest)
    with pytest.raises(InvalidKey, match="longer than"):
        validate_key(longest + "a")
