"""The ObjectStore contract, run unchanged on a local folder, moto in process and Ceph RGW."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from storage import (
    InvalidKey,
    ObjectConflict,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectTooLarge,
    PutResult,
)
from storage.port import MAX_METADATA_BYTES

RACE_THREADS = 8
RACE_BODY_BYTES = 512 * 1024
BAD_KEYS = [
    "",
    "../x",
    "a/../../x",
    "/abs",
    "a\\b",
    "a\x00b",
    "a//b",
    "./a",
    "a/",
    "a/.",
    "é\x7f",
    ".staging/x",
    ".probe/x",
    ".facts/x",
]
FACTS = {"source-sha256": "ab" * 32, "ratio": "16:9", "variant": "0123456789ab", "width": "1200"}
BAD_METADATA = [
    {"Ratio": "16:9"},
    {"crop_box": "0,0,1,1"},
    {"sha256": "0" * 64},
    {"": "x"},
    {"ratio": "16∶9"},
    {"ratio": "16:9\r\nx-amz-acl: public-read"},
]
UNICODE_KEYS = ["photos/été 2024/naïve café.jpg", "日本/画像 1.png", "emoji/😀 smile.jpg", "a b"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_first_write_creates(store: ObjectStore) -> None:
    """A first put creates the object and reports its sha256."""
    result = store.put_if_absent(
        "derivatives/abc/1x1-v1.jpg", b"jpeg bytes", content_type="image/jpeg"
    )
    assert PutResult("derivatives/abc/1x1-v1.jpg", True, _sha(b"jpeg bytes")) == result
    assert store.get("derivatives/abc/1x1-v1.jpg") == b"jpeg bytes"


def test_identical_retry_is_not_created(store: ObjectStore) -> None:
    """Writing the same bytes again succeeds with created=False."""
    store.put_if_absent("k.jpg", b"same")
    assert PutResult("k.jpg", False, _sha(b"same")) == store.put_if_absent("k.jpg", b"same")


def test_conflicting_retry_raises_and_keeps_object(store: ObjectStore) -> None:
    """Different bytes under a taken key raise ObjectConflict and never overwrite."""
    store.put_if_absent("k.jpg", b"first")
    with pytest.raises(ObjectConflict):
        store.put_if_absent("k.jpg", b"second")
    assert store.get("k.jpg") == b"first"


def test_head_reports_size_and_sha256(store: ObjectStore) -> None:
    """head returns the size and the sha256 stored with the object."""
    store.put_if_absent("dir/k.bin", b"12345", metadata={"source": "s1"})
    info = store.head("dir/k.bin")
    assert ("dir/k.bin", 5, _sha(b"12345")) == (info.key, info.size, info.sha256)


def test_missing_key(store: ObjectStore) -> None:
    """get and head of an absent key raise ObjectNotFound; listing an absent prefix is empty."""
    with pytest.raises(ObjectNotFound):
        store.get("nope/missing.jpg")
    with pytest.raises(ObjectNotFound):
        store.head("missing.jpg")
    assert list(store.list("nope/")) == []


def test_folder_like_key_is_not_an_object(store: ObjectStore) -> None:
    """A key that only exists as a prefix of other keys is not found."""
    store.put_if_absent("folder/inner.jpg", b"x")
    with pytest.raises(ObjectNotFound):
        store.get("folder")


@pytest.mark.parametrize("key", UNICODE_KEYS)
def test_unicode_and_spaces_in_keys(store: ObjectStore, key: str) -> None:
    """Keys with unicode and spaces round-trip through put, get, head and list."""
    store.put_if_absent(key, key.encode())
    assert key.encode() == store.get(key)
    assert len(key.encode()) == store.head(key).size
    assert [key] == [info.key for info in store.list()]


def test_list_is_sorted_relative_and_filtered(store: ObjectStore) -> None:
    """list yields keys relative to the store root, sorted by code point, filtered by prefix."""
    keys = ["a/b", "a-b", "a.b", "ab", "é/x", "z", "a/c/d", "日"]
    for key in keys:
        store.put_if_absent(key, key.encode())
    assert sorted(keys) == [info.key for info in store.list()]
    assert [info.key for info in store.list("a/")] == ["a/b", "a/c/d"]
    assert [info.key for info in store.list("a")] == ["a-b", "a.b", "a/b", "a/c/d", "ab"]
    assert [(info.key, info.size) for info in store.list("z")] == [("z", 1)]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_escaping_and_malformed_keys_are_refused(store: ObjectStore, key: str) -> None:
    """Keys that could escape the root or be normalised differently raise InvalidKey everywhere."""
    with pytest.raises(InvalidKey):
        store.put_if_absent(key, b"x")
    with pytest.raises(InvalidKey):
        store.get(key)
    with pytest.raises(InvalidKey):
        store.head(key)
    assert list(store.list()) == []


def test_too_long_key_is_refused(store: ObjectStore) -> None:
    """A key over S3's 1024-byte limit is refused on every backend alike."""
    with pytest.raises(InvalidKey):
        store.put_if_absent("k/" + "é" * 600, b"x")


def test_get_refuses_objects_over_max_bytes(store: ObjectStore) -> None:
    """get(max_bytes) refuses a larger object and returns one of exactly max_bytes."""
    store.put_if_absent("big.bin", b"x" * 1000)
    with pytest.raises(ObjectTooLarge):
        store.get("big.bin", max_bytes=999)
    assert len(store.get("big.bin", max_bytes=1000)) == 1000


def test_list_shows_only_whole_objects_while_writing(store: ObjectStore) -> None:
    """A listing taken while objects are being written shows each one complete or not at all."""
    body = b"w" * (1024 * 1024)
    done = threading.Event()
    seen: list[tuple[str, int]] = []

    def writer() -> None:
        try:
            for index in range(12):
                store.put_if_absent(f"whole/{index:02d}.bin", body)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    while not done.is_set():
        seen.extend((info.key, info.size) for info in store.list("whole/"))
    thread.join()
    assert all(size == len(body) for _, size in seen)
    assert len(list(store.list("whole/"))) == 12


def test_check_passes_and_leaves_nothing_behind(store: ObjectStore) -> None:
    """check() succeeds on a healthy store and its probe leaves no object in listings."""
    store.check()
    store.check()
    assert list(store.list()) == []


def test_concurrent_writers_have_exactly_one_creator(race_store: ObjectStore) -> None:
    """8 threads writing the same bytes to one key: exactly one created=True, all equal content."""
    body = bytes(range(256)) * (RACE_BODY_BYTES // 256)
    barrier = threading.Barrier(RACE_THREADS)

    def write(_: int) -> PutResult:
        barrier.wait()
        return race_store.put_if_absent("race/one.bin", body)

    with ThreadPoolExecutor(RACE_THREADS) as pool:
        results = list(pool.map(write, range(RACE_THREADS)))
    assert sum(result.created for result in results) == 1
    assert {_sha(body)} == {result.sha256 for result in results}
    assert body == race_store.get("race/one.bin")


def test_concurrent_different_writers_never_overwrite(race_store: ObjectStore) -> None:
    """8 threads writing different bytes to one key: one wins, the rest conflict, nothing mixed."""
    bodies = [bytes([index]) * RACE_BODY_BYTES for index in range(RACE_THREADS)]
    barrier = threading.Barrier(RACE_THREADS)

    def write(index: int) -> bytes | None:
        barrier.wait()
        try:
            race_store.put_if_absent("race/contested.bin", bodies[index])
        except ObjectConflict:
            return None
        return bodies[index]

    with ThreadPoolExecutor(RACE_THREADS) as pool:
        winners = [body for body in pool.map(write, range(RACE_THREADS)) if body is not None]
    assert len(winners) == 1
    assert winners[0] == race_store.get("race/contested.bin")


def test_metadata_is_stored_with_the_object_and_read_back(store: ObjectStore) -> None:
    """head returns the user metadata the object was written with, without the store's sha256."""
    store.put_if_absent("derivatives/s/16x9-v.jpg", b"jpeg", metadata=FACTS)
    assert ObjectInfo("derivatives/s/16x9-v.jpg", 4, _sha(b"jpeg"), FACTS) == store.head(
        "derivatives/s/16x9-v.jpg"
    )
    assert [info.key for info in store.list()] == ["derivatives/s/16x9-v.jpg"]


def test_an_object_written_without_metadata_has_none(store: ObjectStore) -> None:
    """An object put without metadata reports an empty mapping (not the store's sha256 entry)."""
    store.put_if_absent("plain.bin", b"plain")
    assert dict(store.head("plain.bin").metadata) == {}


def test_identical_retry_keeps_the_first_metadata(store: ObjectStore) -> None:
    """Identical bytes under a taken key are success; the stored object keeps its own metadata."""
    store.put_if_absent("k.jpg", b"same", metadata=FACTS)
    again = store.put_if_absent("k.jpg", b"same", metadata={**FACTS, "width": "1"})
    assert (again.created, store.head("k.jpg").metadata) == (False, FACTS)


def test_a_conflict_carries_the_stored_objects_facts(store: ObjectStore) -> None:
    """Different bytes under a taken key raise ObjectConflict naming the STORED object: its size,
    sha256 and the metadata it was written with; the stored object is untouched."""
    store.put_if_absent("k.jpg", b"theirs!", metadata=FACTS)
    with pytest.raises(ObjectConflict) as raised:
        store.put_if_absent("k.jpg", b"ours", metadata={**FACTS, "width": "1199"})
    assert ObjectInfo("k.jpg", 7, _sha(b"theirs!"), FACTS) == raised.value.existing
    assert (store.get("k.jpg"), store.head("k.jpg").metadata) == (b"theirs!", FACTS)


def test_a_conflict_with_an_object_without_metadata_says_so(store: ObjectStore) -> None:
    """A taken key whose object was written without metadata reports empty metadata."""
    store.put_if_absent("k.jpg", b"foreign")
    with pytest.raises(ObjectConflict) as raised:
        store.put_if_absent("k.jpg", b"ours", metadata=FACTS)
    assert raised.value.existing is not None
    assert ({}, _sha(b"foreign")) == (
        dict(raised.value.existing.metadata),
        raised.value.existing.sha256,
    )


@pytest.mark.parametrize("metadata", BAD_METADATA, ids=range(len(BAD_METADATA)))
def test_metadata_every_store_cannot_keep_is_refused(
    store: ObjectStore, metadata: dict[str, str]
) -> None:
    """Names other than lowercase ASCII/digits/hyphens, the store's own `sha256`, non-ASCII or
    control characters in values are refused on every store before anything is written."""
    with pytest.raises(ValueError, match="metadata"):
        store.put_if_absent("k.jpg", b"x", metadata=metadata)
    assert list(store.list()) == []


def test_metadata_is_limited_to_s3s_2_kib(store: ObjectStore) -> None:
    """Names and values, the store's sha256 entry included, may take up 2 KiB and no more."""
    room = MAX_METADATA_BYTES - len("sha256") - 64 - len("pad")
    store.put_if_absent("fits.bin", b"x", metadata={"pad": "p" * room})
    assert len(store.head("fits.bin").metadata["pad"]) == room
    with pytest.raises(ValueError, match="exceeds"):
        store.put_if_absent("too-much.bin", b"x", metadata={"pad": "p" * (room + 1)})
    assert [info.key for info in store.list()] == ["fits.bin"]


def test_an_object_is_never_seen_without_its_metadata(store: ObjectStore) -> None:
    """Objects listed or read while others are being written always have their metadata."""
    done = threading.Event()
    seen: list[dict[str, str]] = []

    def writer() -> None:
        try:
            for index in range(20):
                store.put_if_absent(
                    f"facts/{index:02d}.bin", b"f" * 50_000, metadata={"index": str(index)}
                )
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    while not done.is_set():
        for info in store.list("facts/"):
            seen.append({**store.head(info.key).metadata, "key": info.key})
    thread.join()
    assert all(f"facts/{int(m['index']):02d}.bin" == m["key"] for m in seen)
    assert len(list(store.list("facts/"))) == 20


def test_concurrent_different_writers_all_see_the_winners_facts(race_store: ObjectStore) -> None:
    """8 threads writing different bytes and facts to one key: every loser's conflict names the
    winner's bytes and facts, which are what the store holds."""
    bodies = [bytes([index]) * RACE_BODY_BYTES for index in range(RACE_THREADS)]
    barrier = threading.Barrier(RACE_THREADS)

    def write(index: int) -> ObjectInfo | None:
        barrier.wait()
        try:
            race_store.put_if_absent(
                "race/facts.bin", bodies[index], metadata={"writer": str(index)}
            )
        except ObjectConflict as exc:
            return exc.existing
        return None

    with ThreadPoolExecutor(RACE_THREADS) as pool:
        stored = [info for info in pool.map(write, range(RACE_THREADS)) if info is not None]
    head = race_store.head("race/facts.bin")
    winner = int(head.metadata["writer"])
    assert race_store.get("race/facts.bin") == bodies[winner]
    assert head.sha256 == _sha(bodies[winner])
    assert len(stored) == RACE_THREADS - 1
    assert all(info == head for info in stored)
