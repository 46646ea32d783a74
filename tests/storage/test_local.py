"""Local folder specifics: symlinks, staging hygiene, durability-shaped behaviour, processes."""

from __future__ import annotations

import errno
import multiprocessing
import os
import shutil
import time
from pathlib import Path

import pytest

from storage import (
    InvalidKey,
    LocalStore,
    ObjectConflict,
    ObjectNotFound,
    StorageUnavailable,
)
from storage.local import STAGING_STALE_SECONDS
from storage.port import FACTS_DIR_NAME, STAGING_DIR_NAME, sha256_hex

PROCESS_WRITERS = 4


def test_symlinked_folder_in_key_is_refused(tmp_path: Path) -> None:
    """A symlink below the root is never followed: no write lands outside, no read leaks out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    store = LocalStore(tmp_path / "root")
    (store.root / "escape").symlink_to(outside)
    with pytest.raises(InvalidKey):
        store.get("escape/secret.txt")
    with pytest.raises(InvalidKey):
        store.put_if_absent("escape/new.txt", b"x")
    assert sorted(path.name for path in outside.iterdir()) == ["secret.txt"]
    assert list(store.list()) == []


def test_symlinked_file_is_refused(tmp_path: Path) -> None:
    """A symlink standing at a key's final name is neither read nor hashed nor listed."""
    target = tmp_path / "target.bin"
    target.write_bytes(b"outside")
    store = LocalStore(tmp_path / "root")
    (store.root / "link.bin").symlink_to(target)
    for call in (lambda: store.get("link.bin"), lambda: store.put_if_absent("link.bin", b"x")):
        with pytest.raises(InvalidKey):
            call()
    assert target.read_bytes() == b"outside"
    assert list(store.list()) == []


def test_staging_is_reserved_and_hidden(tmp_path: Path) -> None:
    """Keys under .staging are refused and the staging folder never shows in listings."""
    store = LocalStore(tmp_path / "root")
    (store.root / STAGING_DIR_NAME / "partial.tmp").write_bytes(b"half")
    with pytest.raises(InvalidKey):
        store.put_if_absent(f"{STAGING_DIR_NAME}/x", b"x")
    store.put_if_absent("whole.bin", b"whole")
    assert [info.key for info in store.list()] == ["whole.bin"]


def test_stale_staged_files_are_swept_at_startup(tmp_path: Path) -> None:
    """Staged leftovers older than the stale age are deleted on construction; fresh ones stay."""
    store = LocalStore(tmp_path / "root")
    staging = store.root / STAGING_DIR_NAME
    stale, fresh = staging / "stale.tmp", staging / "fresh.tmp"
    stale.write_bytes(b"crashed writer")
    fresh.write_bytes(b"writer in progress")
    old = time.time() - STAGING_STALE_SECONDS - 60
    os.utime(stale, (old, old))
    LocalStore(tmp_path / "root")
    assert sorted(path.name for path in staging.iterdir()) == ["fresh.tmp"]


def test_successful_put_leaves_no_staged_file(tmp_path: Path) -> None:
    """Every put, created or not, removes its temp file from staging."""
    store = LocalStore(tmp_path / "root")
    store.put_if_absent("a/b.bin", b"x")
    store.put_if_absent("a/b.bin", b"x")
    assert list((store.root / STAGING_DIR_NAME).iterdir()) == []


def test_object_where_a_folder_is_needed_is_refused(tmp_path: Path) -> None:
    """A key needing a folder where an object stands raises InvalidKey; reads say not found."""
    store = LocalStore(tmp_path / "root")
    store.put_if_absent("a", b"file")
    with pytest.raises(InvalidKey):
        store.put_if_absent("a/b", b"x")
    with pytest.raises(ObjectNotFound):
        store.get("a/b")


def test_relative_root_and_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative root is resolved once; the url names the absolute folder."""
    monkeypatch.chdir(tmp_path)
    store = LocalStore(Path("out"))
    assert store.url == f"file://{tmp_path.resolve() / 'out'}"


def _process_writer(root: str, queue: multiprocessing.Queue[bool]) -> None:
    queue.put(LocalStore(Path(root)).put_if_absent("proc/one.bin", b"p" * 100_000).created)


def test_processes_racing_have_exactly_one_creator(tmp_path: Path) -> None:
    """Separate processes writing one key: exactly one reports created=True."""
    context = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[bool] = context.Queue()
    root = str(tmp_path / "root")
    LocalStore(Path(root))
    workers = [
        context.Process(target=_process_writer, args=(root, queue)) for _ in range(PROCESS_WRITERS)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert sorted(results) == [False] * (PROCESS_WRITERS - 1) + [True]


def test_check_reports_a_vanished_root_as_unavailable(tmp_path: Path) -> None:
    """check() on a store whose folder disappeared (an unmounted volume) is StorageUnavailable."""
    store = LocalStore(tmp_path / "root")
    store.check()
    shutil.rmtree(store.root)
    with pytest.raises(StorageUnavailable):
        store.check()
    with pytest.raises(StorageUnavailable):
        store.put_if_absent("k", b"x")


FACTS = {"source-sha256": "cd" * 32, "ratio": "1:1", "variant": "0123456789ab"}


def _facts_file(store: LocalStore, key: str, data: bytes) -> Path:
    return store.root / FACTS_DIR_NAME / key / f"{sha256_hex(data)}.json"


def test_facts_live_in_a_reserved_folder_never_listed(tmp_path: Path) -> None:
    """An object's metadata is a file under `.facts/<key>/<sha256>.json`; the folder is never
    listed and refused as a key, and nothing is left staged."""
    store = LocalStore(tmp_path / "root")
    store.put_if_absent("d/s/1x1-v.jpg", b"jpeg", metadata=FACTS)
    assert _facts_file(store, "d/s/1x1-v.jpg", b"jpeg").is_file()
    assert [info.key for info in store.list()] == ["d/s/1x1-v.jpg"]
    with pytest.raises(InvalidKey):
        store.get(f"{FACTS_DIR_NAME}/d/s/1x1-v.jpg/{sha256_hex(b'jpeg')}.json")
    assert list((store.root / STAGING_DIR_NAME).iterdir()) == []


def test_a_crash_between_facts_and_object_leaves_no_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer dying after its facts were linked and before its object was: no object is seen,
    and the next write of any bytes creates the object with ITS facts."""
    store = LocalStore(tmp_path / "root")
    real_link = os.link
    links: list[str] = []

    def die_at_the_object(src: str, dst: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        links.append(dst)
        if len(links) == 2:
            raise OSError(errno.EIO, "simulated crash")
        real_link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "link", die_at_the_object)
    with pytest.raises(StorageUnavailable):
        store.put_if_absent("k.jpg", b"first", metadata=FACTS)
    monkeypatch.undo()
    assert _facts_file(store, "k.jpg", b"first").is_file()
    # A crashed writer's staged sidecar too (its temp files are swept after an hour).
    (store.root / STAGING_DIR_NAME / "facts.tmp").write_bytes(b'{"metadata": {}}')
    assert list(store.list()) == []
    with pytest.raises(ObjectNotFound):
        store.head("k.jpg")
    second = {**FACTS, "ratio": "4:3"}
    assert store.put_if_absent("k.jpg", b"second", metadata=second).created
    assert (b"second", second) == (store.get("k.jpg"), store.head("k.jpg").metadata)
    assert [info.key for info in store.list()] == ["k.jpg"]


def test_facts_of_other_bytes_are_never_read(tmp_path: Path) -> None:
    """An object put in the folder by hand has no metadata, even beside facts left for other
    bytes under its key, or a facts file for its bytes naming another key or broken."""
    store = LocalStore(tmp_path / "root")
    store.put_if_absent("k.jpg", b"left behind", metadata=FACTS)
    (store.root / "k.jpg").unlink()  # leaves the facts of b"left behind"
    (store.root / "k.jpg").write_bytes(b"by hand")
    assert dict(store.head("k.jpg").metadata) == {}
    with pytest.raises(ObjectConflict) as raised:
        store.put_if_absent("k.jpg", b"ours", metadata=FACTS)
    assert raised.value.existing is not None
    assert dict(raised.value.existing.metadata) == {}
    forged = _facts_file(store, "k.jpg", b"by hand")
    for body in (b'{"key": "other.jpg", "sha256": "x", "metadata": {"a": "b"}}', b"{not json"):
        forged.write_bytes(body)
        assert dict(store.head("k.jpg").metadata) == {}


def test_writers_of_the_same_bytes_share_the_first_facts(tmp_path: Path) -> None:
    """Facts left by a crashed writer of the very same bytes are kept: they describe them."""
    store = LocalStore(tmp_path / "root")
    store.put_if_absent("k.jpg", b"same", metadata=FACTS)
    (store.root / "k.jpg").unlink()  # as if the first writer died before linking the object
    assert store.put_if_absent("k.jpg", b"same", metadata={**FACTS, "ratio": "9:9"}).created
    assert store.head("k.jpg").metadata == FACTS
