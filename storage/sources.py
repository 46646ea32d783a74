"""Reading source files from local paths and `s3://bucket/key`, confined to configured roots.

A `SourceReader` is the one place that decides whether a source may be read: `normalize` refuses
anything outside the roots *after* resolving symlinks, and `expand`/`read` normalise first.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from storage.errors import (
    AccessDenied,
    InvalidKey,
    ObjectNotFound,
    ObjectTooLarge,
    SourceNotAllowed,
    StorageUnavailable,
)
from storage.port import validate_key
from storage.s3 import S3Settings, S3Store
from storage.urls import FILE_SCHEME, S3_SCHEME, split_s3_url


def _refuse_special_file(path: Path) -> None:
    """`SourceNotAllowed` for a FIFO, socket or device: reading one can block forever or never
    end. A missing path passes (it may appear later, and fails when read); stat never blocks."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise SourceNotAllowed(f"source is not a regular file (a FIFO, socket or device): {path}")


def _opened_path(fd: int) -> str | None:
    """The path of the file open as `fd`, as the kernel names it (Linux's /proc, macOS's
    F_GETPATH), or None where neither is available."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    getpath = getattr(fcntl, "F_GETPATH", None)
    if getpath is None:
        return None
    try:
        named = fcntl.fcntl(fd, getpath, bytes(_PATH_MAX))
    except OSError:
        return None
    return os.fsdecode(named.rstrip(b"\0"))


_PATH_MAX = 1024


def _within(path: str, root: str) -> bool:
    """`Path(path).is_relative_to(root)` for two resolved absolute paths, on their text."""
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def _hidden(relative_key: str) -> bool:
    """True if any segment of the path starts with "." (dot-files and dot-folders)."""
    return any(segment.startswith(".") for segment in relative_key.split("/"))


FOLDER_LISTING_AFTER = 64
"""Sources one request names in a folder before `SourceReader.normalizer` lists the folder
instead of looking each source up (a listing costs about as much as this many lookups in a
folder of a few thousand entries)."""
_NOT_LISTED = -1


class _Folder:
    """A source folder as one request's normaliser knows it: resolved once, then listed once
    it has been asked about `FOLDER_LISTING_AFTER` times."""

    def __init__(self, path: str) -> None:
        """`path`: the folder, resolved."""
        self.path = path
        self.prefix = path if path.endswith("/") else path + "/"
        self._asked = 0
        self._kinds: dict[str, int] | None = None
        self._missing = False

    @classmethod
    def resolved(cls, folder: str) -> _Folder | None:
        """The folder `folder` names, symlinks resolved; None when it cannot be (a symlink
        loop, which `normalize` reports)."""
        try:
            return cls(str(Path(folder).resolve()))
        except (RuntimeError, OSError):  # RuntimeError on Python 3.11, OSError later
            return None

    def mode(self, name: str, path: str) -> int | None:
        """The file type bits of `path` (this folder's entry `name`) as `lstat` gives them, or
        None when there is no such entry."""
        if self._missing:
            return None
        if self._kinds is not None:
            kind = self._kinds.get(name)
            if kind is not None:
                return kind
        elif self._asked != _NOT_LISTED:
            self._asked += 1
            if self._asked >= FOLDER_LISTING_AFTER:
                self._list()
                return self.mode(name, path)
        try:
            return os.lstat(path).st_mode
        except OSError:
            return None  # missing: it may appear later (as in `normalize`)

    def _list(self) -> None:
        try:
            with os.scandir(self.path) as entries:
                kinds = ((entry.name, _kind(entry)) for entry in entries)
                # Anything else (a FIFO, socket or device, or an entry gone meanwhile) is left
                # to `lstat`, which says exactly what it is.
                self._kinds = {name: kind for name, kind in kinds if kind is not None}
        except (FileNotFoundError, NotADirectoryError):
            self._missing = True
        except OSError:
            self._asked = _NOT_LISTED  # not listable (no read permission): look each up


def _kind(entry: os.DirEntry[str]) -> int | None:
    """An entry's file type bits from its listing (no system call unless the filesystem does
    not report types) if it is a symlink, a regular file or a folder; else None."""
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_file(follow_symlinks=False):
        return stat.S_IFREG
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    return None


class SourceReader:
    """Normalises, expands and reads sources; thread-safe; one S3 client shared lazily."""

    def __init__(
        self,
        roots: Sequence[str] | None = None,
        *,
        s3: S3Settings | None = None,
        suffixes: Collection[str] | None = None,
    ) -> None:
        """`roots=None` trusts every source (the CLI); `[]` allows nothing (the API default).

        Root entries are local folders (resolved now, symlinks included) and `s3://bucket[/prefix]`.
        `suffixes` (e.g. `{".jpg"}`, matched case-insensitively) limits what a folder or prefix
        expands to; None expands to every file.
        """
        self._suffixes = None if suffixes is None else frozenset(s.lower() for s in suffixes)
        self._s3_settings = s3 or S3Settings()
        self._client: object | None = None
        self._client_lock = threading.Lock()
        self._local_roots: list[Path] | None = None
        self._s3_roots: list[tuple[str, str]] | None = None
        if roots is not None:
            self._local_roots, self._s3_roots = [], []
            for root in roots:
                if not root.strip():
                    continue  # an empty entry (e.g. "a::b") must not silently allow the cwd
                if root.startswith(S3_SCHEME):
                    bucket, prefix = split_s3_url(root)
                    self._s3_roots.append((bucket, prefix.strip("/")))
                else:
                    self._local_roots.append(Path(root.removeprefix(FILE_SCHEME)).resolve())

    def normalizer(self) -> Callable[[str], str]:
        """`normalize` for the sources of ONE request, same answers and errors, faster on many:
        each folder is resolved once, then a source costs one `lstat` (a symlinked file, and
        anything unusual, takes `normalize` itself) — or nothing once the request has named
        `FOLDER_LISTING_AFTER` sources in its folder, which is then listed once (the listing
        gives every entry's type) or found missing. A name the listing lacks is looked up
        (created since, or matched by the filesystem in another spelling). What is learnt of
        the folders is kept only as long as the returned function, so a later request sees
        links and files changed since."""
        folders: dict[str, _Folder | None] = {}
        roots = None
        if self._local_roots is not None:
            roots = [str(root) for root in self._local_roots]
        cwd = os.getcwd()

        def normalize(source: str) -> str:
            if "://" in source or "\0" in source or not source:
                return self.normalize(source)  # a URL (s3:// included), or refused
            absolute = source if source[0] == "/" else f"{cwd}/{source}"
            parent, _, name = absolute.rpartition("/")
            if name in ("", ".", ".."):
                return self.normalize(source)
            try:
                folder = folders[parent]
            except KeyError:
                folder = folders[parent] = _Folder.resolved(parent or "/")
            if folder is None:
                return self.normalize(source)
            path = folder.prefix + name
            mode = folder.mode(name, path)
            if mode is not None and stat.S_ISLNK(mode):
                return self.normalize(source)
            if roots is not None and not any(_within(path, root) for root in roots):
                raise SourceNotAllowed(f"source outside the allowed roots: {path}")
            if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise SourceNotAllowed(
                    f"source is not a regular file (a FIFO, socket or device): {path}"
                )
            return path

        return normalize

    def normalize(self, source: str) -> str:
        """Local ⇒ absolute path with symlinks resolved; s3 ⇒ `s3://bucket/key`.

        Raises `SourceNotAllowed` outside the roots, for other URL schemes, and for s3 keys with
        empty or dot segments (clients and proxies may normalise those differently).
        """
        if source.startswith(S3_SCHEME):
            bucket, key = self._split_s3(source)
            return f"{S3_SCHEME}{bucket}/{key}" if key else f"{S3_SCHEME}{bucket}"
        if "://" in source:
            # file:// included: its percent-escapes and host part would be read as a path
            # (`file://etc/x` as `etc/x`); a source names a file by its plain path.
            raise SourceNotAllowed(
                f"unsupported source scheme: {source!r} (give a local path or s3://bucket/key)"
            )
        if not source or "\0" in source:
            raise SourceNotAllowed(f"invalid source path: {source!r}")
        try:
            path = Path(source).resolve()
        except (RuntimeError, OSError) as exc:
            # Python 3.11 raises RuntimeError on a symlink loop (3.13: OSError, ELOOP).
            raise SourceNotAllowed(
                f"source cannot be resolved (a symlink loop?): {source!r}"
            ) from exc
        if self._local_roots is not None and not any(
            path.is_relative_to(root) for root in self._local_roots
        ):
            raise SourceNotAllowed(f"source outside the allowed roots: {path}")
        _refuse_special_file(path)
        return str(path)

    def expand(self, source: str) -> list[str]:
        """A folder or s3 prefix ⇒ its files of the wanted suffixes (recursively, no dot
        entries), sorted.

        A file named explicitly is one item whatever its extension. `ObjectNotFound` when the
        source does not exist (an s3 prefix with no object at all counts as missing).
        """
        normalized = self.normalize(source)
        if normalized.startswith(S3_SCHEME):
            return self._expand_s3(normalized)
        path = Path(normalized)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"source not found: {normalized}") from exc
        except PermissionError as exc:
            raise AccessDenied(f"permission denied: {normalized}") from exc
        except OSError as exc:
            raise StorageUnavailable(f"{normalized}: {exc.strerror or exc}") from exc
        if not stat.S_ISDIR(mode):
            return [normalized]
        return sorted(set(self._expand_folder(path)))

    def read(self, source: str, *, max_bytes: int) -> bytes:
        """The source's bytes; `ObjectTooLarge` is decided from its size before reading it all."""
        normalized = self.normalize(source)
        if normalized.startswith(S3_SCHEME):
            bucket, key = split_s3_url(normalized)
            if not key:
                raise ObjectNotFound(f"s3 source names a bucket, not an object: {normalized}")
            return self._s3_store(bucket).get(key, max_bytes=max_bytes)
        try:
            # O_NONBLOCK: a FIFO swapped in after normalisation opens at once instead of waiting
            # for a writer forever; its type is then refused on the opened descriptor.
            # O_NOFOLLOW: the normalised path has no symlink, so one there now was swapped in.
            fd = os.open(normalized, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as stream:
                self._confine_opened(stream.fileno(), normalized)
                info = os.fstat(stream.fileno())
                if not stat.S_ISREG(info.st_mode):
                    raise ObjectNotFound(f"source is not a file: {normalized}")
                if info.st_size > max_bytes:
                    raise ObjectTooLarge(f"{normalized}: {info.st_size} bytes > limit {max_bytes}")
                return stream.read()
        except IsADirectoryError as exc:
            raise ObjectNotFound(f"source is a folder, not a file: {normalized}") from exc
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ObjectNotFound(f"source not found: {normalized}") from exc
        except PermissionError as exc:
            raise AccessDenied(f"permission denied: {normalized}") from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink made after normalisation: never read
                raise ObjectNotFound(f"source became a symlink: {normalized}") from exc
            raise StorageUnavailable(f"{normalized}: {exc.strerror or exc}") from exc

    def _confine_opened(self, fd: int, normalized: str) -> None:
        """`SourceNotAllowed` when the file opened as `normalized` lies outside the roots: a
        folder on its path swapped for a symlink between the check and the open (the kernel's
        own name for the descriptor says where it really is; where it says nothing, the final
        component's `O_NOFOLLOW` is the guard)."""
        if self._local_roots is None:
            return
        opened = _opened_path(fd)
        if opened is not None and not any(_within(opened, str(root)) for root in self._local_roots):
            raise SourceNotAllowed(
                f"source outside the allowed roots (its path changed as it was opened): "
                f"{normalized}"
            )

    def _split_s3(self, source: str) -> tuple[str, str]:
        try:
            bucket, key = split_s3_url(source)
        except ValueError as exc:
            raise SourceNotAllowed(str(exc)) from exc
        key = key.rstrip("/")
        if key:
            try:
                validate_key(key)
            except InvalidKey as exc:
                raise SourceNotAllowed(f"invalid s3 source {source!r}: {exc}") from exc
        if self._s3_roots is not None and not any(
            bucket == root_bucket
            and (not root_prefix or key == root_prefix or key.startswith(f"{root_prefix}/"))
            for root_bucket, root_prefix in self._s3_roots
        ):
            raise SourceNotAllowed(f"source outside the allowed roots: s3://{bucket}/{key}")
        return bucket, key

    def _wanted(self, name: str) -> bool:
        """True if a folder or prefix expands to the file `name` (its suffix, in any case)."""
        return self._suffixes is None or os.path.splitext(name)[1].lower() in self._suffixes

    def _expand_folder(self, folder: Path) -> Iterator[str]:
        for current, folders, files in os.walk(folder, onerror=None):
            # Pruning in place stops os.walk from descending into dot-folders.
            folders[:] = [name for name in folders if not name.startswith(".")]
            for name in files:
                if name.startswith(".") or not self._wanted(name):
                    continue
                try:
                    yield self.normalize(os.path.join(current, name))
                except SourceNotAllowed:
                    continue  # a symlink leading out of the roots is not part of the folder

    def _expand_s3(self, normalized: str) -> list[str]:
        bucket, key = split_s3_url(normalized)
        store = self._s3_store(bucket)
        if key:
            try:
                store.head(key)
            except ObjectNotFound:
                pass
            else:
                return [normalized]
        prefix = f"{key}/" if key else ""
        found_any = False
        items: list[str] = []
        for info in store.list(prefix):
            found_any = True
            relative = info.key[len(prefix) :]
            if not _hidden(relative) and self._wanted(relative):
                items.append(f"{S3_SCHEME}{bucket}/{info.key}")
        if not found_any:
            raise ObjectNotFound(f"source not found: {normalized}")
        return sorted(items)

    def _s3_store(self, bucket: str) -> S3Store:
        with self._client_lock:
            if self._client is None:
                self._client = self._s3_settings.client()
        return S3Store(bucket, settings=self._s3_settings, client=self._client)
