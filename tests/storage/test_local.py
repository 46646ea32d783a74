"""Local folder specifics: symlinks, staging hygiene, durability-shaped behaviour, processes."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from pathlib import Path

import pytest

from storage import InvalidKey, LocalStore, ObjectNotFound, StorageUnavailable
from storage.local import STAGING_STALE_SECONDS
from storage.port import STAGING_DIR_NAME

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
