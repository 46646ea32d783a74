"""Local folder adapter: atomic, never-overwriting puts by linking a staged file into place.

Layout: objects live at `root/<key>`; in-flight writes live in `root/.staging/` (same file system,
so `os.link` works) and are swept when older than `STAGING_STALE_SECONDS` at construction; an
object's user metadata (its "facts") lives in `root/.facts/<key>/<sha256>.json`.

Put-if-absent: the data is written and fsynced to a fresh temp file in `.staging/`, then hard-linked
to its final name. `link(2)` fails with EEXIST instead of replacing, so exactly one of several
concurrent writers (threads or processes) creates the object, and the final name only ever points
at a complete, fsynced file: a reader or a listing never sees a partial object.

The sha256 of an existing object is computed from its bytes, the truth: it costs one read of the
object on `head` and on a put that finds the key taken. Local objects keep no content type.

User metadata is kept beside the object, in a file named by the key AND the sha256 of the bytes it
describes: `.facts/<key>/<sha256>.json` holding `{"key", "sha256", "metadata"}`. It is staged,
fsynced and linked (never replacing) BEFORE the object is linked, so an object never exists
without its facts, and facts can never describe other bytes: a crashed or losing writer's facts
carry another sha256 and are never read for the object that stands (they stay, tiny and harmless,
like an orphan object). Two writers of the same bytes share one facts file (the first one's).
`.facts/` is reserved on every store, so a sidecar is never a key nor listed. An object without a
facts file (written without metadata, or put in the folder by hand) has empty metadata; so has one
whose facts file is unreadable JSON or names another key or sha256.

Keys are resolved one folder at a time with `O_NOFOLLOW` relative to the parent's descriptor, so a
symlink anywhere below the root is refused (`InvalidKey`) rather than followed out of the root.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from storage.errors import (
    AccessDenied,
    ConditionalWritesUnsupported,
    InvalidKey,
    ObjectConflict,
    ObjectNotFound,
    ObjectTooLarge,
    StorageError,
    StorageUnavailable,
)
from storage.port import (
    DEFAULT_CONTENT_TYPE,
    FACTS_DIR_NAME,
    STAGING_DIR_NAME,
    ObjectInfo,
    PutResult,
    is_reserved,
    sha256_hex,
    validate_key,
    validate_metadata,
    validate_prefix,
)

STAGING_STALE_SECONDS = 3600.0
"""A staged temp file older than this belongs to a crashed writer and is deleted on startup."""
READ_CHUNK_BYTES = 1024 * 1024
FILE_MODE = 0o644
DIR_MODE = 0o755
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SYMLINK_ERRNOS = (errno.ELOOP, errno.EMLINK)
_LINK_UNSUPPORTED_ERRNOS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV)


@contextmanager
def _os_errors(what: str) -> Iterator[None]:
    """Translate `OSError` into the storage family; `StorageError` passes through unchanged."""
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError as exc:
        raise ObjectNotFound(f"not found: {what}") from exc
    except PermissionError as exc:
        raise AccessDenied(f"permission denied: {what}") from exc
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidKey(f"name too long for this file system: {what}") from exc
        raise StorageUnavailable(f"{what}: {exc.strerror or exc}") from exc


def _opener(dir_fd: int, flags_extra: int = 0) -> Callable[[str, int], int]:
    """An `open()` opener resolving names inside `dir_fd` without following a final symlink."""

    def opener(name: str, flags: int) -> int:
        return os.open(
            name, flags | flags_extra | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=dir_fd
        )

    return opener


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _hash_stream(stream: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := stream.read(READ_CHUNK_BYTES):
        digest.update(chunk)
    return digest.hexdigest()


class LocalStore:
    """An `ObjectStore` in a folder of the local file system; safe across threads and processes."""

    def __init__(self, root: Path) -> None:
        """Create `root` and `root/.staging` if needed and sweep stale staged files.

        Side effects: creates folders; deletes staged files older than `STAGING_STALE_SECONDS`.
        """
        # Resolved once: the root itself may be reached through a symlink, keys below it may not.
        self.root = Path(root).resolve()
        self.url = f"file://{self.root}"
        self._staging = self.root / STAGING_DIR_NAME
        with _os_errors(str(self.root)):
            self._staging.mkdir(parents=True, exist_ok=True)
            if self._staging.is_symlink():
                raise StorageError(f"{self._staging} is a symlink; refusing to stage through it")
            self._sweep_staging(older_than=time.time() - STAGING_STALE_SECONDS)

    def __repr__(self) -> str:
        return f"LocalStore({self.url!r})"

    def get(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """Return the object's bytes; `ObjectTooLarge` is decided from its size before reading."""
        validate_key(key)
        with _os_errors(key), self._open_object(key) as stream:
            size = os.fstat(stream.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise ObjectTooLarge(f"{key}: {size} bytes > limit {max_bytes}")
            return stream.read()

    def head(self, key: str) -> ObjectInfo:
        """Return size, sha256 (computed by reading the object) and metadata (its facts file)."""
        validate_key(key)
        with _os_errors(key):
            with self._open_object(key) as stream:
                size = os.fstat(stream.fileno()).st_size
                digest = _hash_stream(stream)
            return ObjectInfo(key, size, digest, metadata=self._read_facts(key, digest))

    def put_if_absent(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        """Create `key` with `data` unless it exists (see the module docstring for the protocol).

        `metadata` is linked into `.facts/` before the object; `content_type` is not stored.
        """
        validate_key(key)
        facts = validate_metadata(metadata)
        digest = sha256_hex(data)
        with _os_errors(key):
            try:
                parent_fd, name = self._open_parent(key, create=True)
            except FileNotFoundError as exc:
                # Only the root can be missing here (folders below it are created).
                raise StorageUnavailable(f"store folder is missing: {self.root}") from exc
            try:
                existing = self._existing(parent_fd, name, key)
                if existing is None:
                    if facts:
                        self._link_facts(key, digest, facts)
                    if self._link_new(parent_fd, name, data):
                        return PutResult(key=key, created=True, sha256=digest)
                    existing = self._existing(parent_fd, name, key)
            finally:
                os.close(parent_fd)
            if existing is None:
                # Linking met a name that is gone again: nothing deletes objects but a person.
                raise StorageUnavailable(f"{self.url}/{key} changed while being written")
            existing_sha256, size = existing
            if existing_sha256 == digest:
                return PutResult(key=key, created=False, sha256=digest)
            stored = ObjectInfo(
                key, size, existing_sha256, metadata=self._read_facts(key, existing_sha256)
            )
        raise ObjectConflict(
            f"{self.url}/{key} holds different content (sha256 {existing_sha256}, ours {digest})",
            existing=stored,
        )

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Yield whole objects under `prefix`, sorted by key; never `.staging` nor symlinks.

        sha256 is None in listings (computing it would read every object).
        """
        validate_prefix(prefix)
        with _os_errors(prefix or "/"):
            found = sorted(self._walk(prefix))
        for key, size in found:
            yield ObjectInfo(key=key, size=size, sha256=None)

    def check(self) -> None:
        """Prove the root is writable and supports hard links (the no-replace primitive).

        A root (or staging folder) that vanished, e.g. an unmounted volume, is `StorageUnavailable`.
        """
        try:
            with _os_errors(str(self.root)):
                staging_fd = os.open(self._staging, _DIR_FLAGS)
        except ObjectNotFound as exc:
            raise StorageUnavailable(f"store folder is missing: {self._staging}") from exc
        with _os_errors(str(self.root)):
            first, second = f"probe-{uuid.uuid4().hex}", f"probe-{uuid.uuid4().hex}"
            try:
                os.close(
                    os.open(
                        first, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=staging_fd
                    )
                )
                try:
                    os.link(first, second, src_dir_fd=staging_fd, dst_dir_fd=staging_fd)
                except OSError as exc:
                    if exc.errno in _LINK_UNSUPPORTED_ERRNOS:
                        raise ConditionalWritesUnsupported(
                            f"{self.root}: the file system does not support hard links"
                        ) from exc
                    raise
            finally:
                for name in (first, second):
                    with suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=staging_fd)
                os.close(staging_fd)

    def _open_parent(self, key: str, *, create: bool) -> tuple[int, str]:
        """Open the folder holding `key` without following symlinks; return (its fd, file name).

        The caller owns the returned descriptor. With `create`, missing folders are made (and
        their parents fsynced, so the object linked below them survives a crash).
        """
        *folders, name = key.split("/")
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for folder in folders:
                if create:
                    try:
                        os.mkdir(folder, DIR_MODE, dir_fd=fd)
                        os.fsync(fd)
                    except FileExistsError:
                        pass
                try:
                    next_fd = os.open(folder, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    self._refuse_odd_path(exc, folder, fd, key, create=create)
                    raise
                os.close(fd)
                fd = next_fd
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    @staticmethod
    def _refuse_odd_path(exc: OSError, name: str, dir_fd: int, key: str, *, create: bool) -> None:
        """Turn a symlink (always) or a file standing where a folder should be into clear errors."""
        if exc.errno in _SYMLINK_ERRNOS or _is_symlink(name, dir_fd):
            raise InvalidKey(f"symlink in key path refused: {key!r}") from exc
        if exc.errno in (errno.ENOTDIR, errno.EISDIR):
            if create:
                raise InvalidKey(f"an object or folder stands in the way of {key!r}") from exc
            raise ObjectNotFound(f"not found: {key}") from exc

    @contextmanager
    def _open_object(self, key: str) -> Iterator[BinaryIO]:
        """Open the regular file for `key` for reading; symlinks and folders are refused."""
        parent_fd, name = self._open_parent(key, create=False)
        try:
            try:
                stream = open(name, "rb", opener=_opener(parent_fd))  # noqa: SIM115 - closed below
            except OSError as exc:
                self._refuse_odd_path(exc, name, parent_fd, key, create=False)
                raise
        finally:
            os.close(parent_fd)
        with stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise ObjectNotFound(f"not found (a folder): {key}")
            yield stream

    def _existing(self, parent_fd: int, name: str, key: str) -> tuple[str, int] | None:
        """(sha256, size) of the object `name` in `parent_fd`, or None if there is none."""
        try:
            stream = open(name, "rb", opener=_opener(parent_fd))  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._refuse_odd_path(exc, name, parent_fd, key, create=True)
            raise
        with stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise InvalidKey(f"a folder stands at {key!r}")
            return _hash_stream(stream), info.st_size

    @staticmethod
    def _facts_path(key: str, digest: str) -> str:
        """Where the facts of `key` holding bytes of sha256 `digest` live, relative to the root."""
        return f"{FACTS_DIR_NAME}/{key}/{digest}.json"

    def _link_facts(self, key: str, digest: str, facts: Mapping[str, str]) -> None:
        """Stage and link the facts of (key, digest); facts already there are of the same bytes."""
        body = json.dumps(
            {"key": key, "sha256": digest, "metadata": dict(facts)}, sort_keys=True
        ).encode()
        parent_fd, name = self._open_parent(self._facts_path(key, digest), create=True)
        try:
            # Durable (its folder fsynced) before the object is linked; an existing file is another
            # writer's facts for the very same bytes under this key, which may not have synced yet.
            if not self._link_new(parent_fd, name, body):
                os.fsync(parent_fd)
        finally:
            os.close(parent_fd)

    def _read_facts(self, key: str, digest: str) -> dict[str, str]:
        """The metadata stored with `key` holding bytes of sha256 `digest`; {} if it has none."""
        try:
            with self._open_object(self._facts_path(key, digest)) as stream:
                record = json.loads(stream.read())
        except (ObjectNotFound, FileNotFoundError, NotADirectoryError, InvalidKey, ValueError):
            return {}
        if not isinstance(record, dict) or (record.get("key"), record.get("sha256")) != (
            key,
            digest,
        ):
            return {}
        metadata = record.get("metadata")
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            return {}
        return metadata

    def _link_new(self, parent_fd: int, name: str, data: bytes) -> bool:
        """Stage `data`, link it to `name` unless taken; True if this call created the object."""
        try:
            staging_fd = os.open(self._staging, _DIR_FLAGS)
        except FileNotFoundError as exc:
            raise StorageUnavailable(f"staging folder is missing: {self._staging}") from exc
        temp_name = f"{uuid.uuid4().hex}.tmp"
        try:
            with open(temp_name, "wb", opener=_opener(staging_fd, os.O_EXCL)) as temp:
                temp.write(data)
                temp.flush()
                os.fsync(temp.fileno())
            try:
                os.link(temp_name, name, src_dir_fd=staging_fd, dst_dir_fd=parent_fd)
            except FileExistsError:
                return False
            os.fsync(parent_fd)
            return True
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temp_name, dir_fd=staging_fd)
            os.close(staging_fd)

    def _sweep_staging(self, *, older_than: float) -> None:
        for entry in os.scandir(self._staging):
            try:
                if entry.stat(follow_symlinks=False).st_mtime < older_than:
                    os.unlink(entry.path)
            except (FileNotFoundError, IsADirectoryError):
                continue  # another process swept it first, or an odd folder we leave alone

    def _walk(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every regular file whose key starts with `prefix`, unsorted.

        Walks from the root without following symlinks, pruning folders the prefix excludes.
        """
        yield from self._walk_folder(self.root, "", prefix)

    def _walk_folder(self, folder: Path, folder_key: str, prefix: str) -> Iterator[tuple[str, int]]:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            key = f"{folder_key}/{entry.name}" if folder_key else entry.name
            if not folder_key and is_reserved(entry.name):
                continue
            if entry.is_dir(follow_symlinks=False):
                if key.startswith(prefix) or prefix.startswith(f"{key}/"):
                    yield from self._walk_folder(Path(entry.path), key, prefix)
            elif entry.is_file(follow_symlinks=False) and key.startswith(prefix):
                yield key, entry.stat(follow_symlinks=False).st_size
