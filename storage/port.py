"""The object store port: the value types, the `ObjectStore` protocol and the key rules.

Every adapter validates keys with `validate_key` so a key accepted by one store is accepted by all,
and computes the content's sha256 itself so `put_if_absent` can tell "my own earlier write" from
"somebody else's different object".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from storage.errors import InvalidKey

SHA256_METADATA_KEY = "sha256"
"""User-metadata name under which adapters store the hex sha256 of an object's bytes."""

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_KEY_BYTES = 1024
"""S3's limit on a key's UTF-8 length; applied to every store so keys stay portable."""
STAGING_DIR_NAME = ".staging"
"""Top-level folder of a local store holding in-flight writes."""
PROBE_DIR_NAME = ".probe"
"""Top-level folder of an S3 store holding `check()`'s probe objects."""
RESERVED_TOP_LEVEL_NAMES = frozenset({STAGING_DIR_NAME, PROBE_DIR_NAME})
"""First key segments reserved to the adapters on every store, and never listed."""


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: key relative to the store root, size in bytes, sha256 hex if known."""

    key: str
    size: int
    sha256: str | None


@dataclass(frozen=True)
class PutResult:
    """Outcome of `put_if_absent`; `created=False` means an identical object was already there."""

    key: str
    created: bool
    sha256: str


class ObjectStore(Protocol):
    """A flat key → bytes store whose only write is an atomic, never-overwriting put.

    Implementations are safe to share between threads. `url` names the store without secrets.
    """

    url: str

    def get(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """Return the bytes; `ObjectNotFound`, or `ObjectTooLarge` before reading them all."""
        ...

    def head(self, key: str) -> ObjectInfo:
        """Return the object's size and stored sha256; `ObjectNotFound` when absent."""
        ...

    def put_if_absent(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        """Store `data` unless the key exists; equal content ⇒ `created=False`, else conflict.

        Raises `ObjectConflict` when different content is already stored: never overwrites.
        """
        ...

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Yield whole objects whose key starts with `prefix`, sorted by key."""
        ...

    def check(self) -> None:
        """Raise `StorageUnavailable` if unreachable, `ConditionalWritesUnsupported` if unsafe."""
        ...


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def validate_key(key: str) -> str:
    """Return `key` unchanged if it is a safe relative key, else raise `InvalidKey`.

    Refused: empty keys, absolute keys, empty, `.` and `..` segments, backslashes, NUL and other
    control characters, keys longer than `MAX_KEY_BYTES` in UTF-8, and keys under the adapters'
    reserved folders (`RESERVED_TOP_LEVEL_NAMES`). The same rules apply to
    every adapter, so a local folder can never be escaped and an S3 key never depends on how a
    client or proxy normalises dot segments.
    """
    if not key:
        raise InvalidKey("empty key")
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidKey(f"key is not valid unicode: {key!r}") from exc
    if len(encoded) > MAX_KEY_BYTES:
        raise InvalidKey(f"key longer than {MAX_KEY_BYTES} bytes")
    if key.startswith("/"):
        raise InvalidKey(f"absolute key refused: {key!r}")
    if "\\" in key:
        raise InvalidKey(f"backslash in key refused: {key!r}")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in key):
        raise InvalidKey(f"control character in key refused: {key!r}")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKey(f"empty or dot segment in key refused: {key!r}")
    if is_reserved(key):
        raise InvalidKey(f"key under a folder reserved to the store refused: {key!r}")
    return key


def is_reserved(key: str) -> bool:
    """True if `key` lies under one of `RESERVED_TOP_LEVEL_NAMES` (hidden from listings)."""
    return key.split("/", 1)[0] in RESERVED_TOP_LEVEL_NAMES


def validate_prefix(prefix: str) -> str:
    """Return a listing prefix unchanged if it is empty or a safe (possibly partial) key."""
    if prefix == "":
        return prefix
    # A prefix may end with "/" (a folder) or mid-segment ("photos/ca"); check it as a key.
    validate_key(prefix.removesuffix("/"))
    return prefix
