"""The object store port: the value types, the `ObjectStore` protocol and the key rules.

Every adapter validates keys with `validate_key` so a key accepted by one store is accepted by all,
and computes the content's sha256 itself so `put_if_absent` can tell "my own earlier write" from
"somebody else's different object".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from storage.errors import InvalidKey

SHA256_METADATA_KEY = "sha256"
"""User-metadata name under which adapters store the hex sha256 of an object's bytes (reserved:
callers may not set it)."""
MAX_METADATA_BYTES = 2048
"""S3's limit on user metadata: the UTF-8 bytes of every name and value, the adapter's sha256
entry included; applied to every store so metadata stays portable."""
_METADATA_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_KEY_BYTES = 1024
"""S3's limit on a key's UTF-8 length; applied to every store so keys stay portable."""
STAGING_DIR_NAME = ".staging"
"""Top-level folder of a local store holding in-flight writes."""
PROBE_DIR_NAME = ".probe"
"""Top-level folder of an S3 store holding `check()`'s probe objects."""
FACTS_DIR_NAME = ".facts"
"""Top-level folder of a local store holding each object's user metadata (its "facts")."""
RESERVED_TOP_LEVEL_NAMES = frozenset({STAGING_DIR_NAME, PROBE_DIR_NAME, FACTS_DIR_NAME})
"""First key segments reserved to the adapters on every store, and never listed."""


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: key relative to the store root, size in bytes, sha256 hex if known.

    `metadata` is the user metadata given to `put_if_absent` when the object was written (without
    the adapter's own sha256 entry); `head` and a conflict report it, listings leave it empty, and
    an object written by someone else has whatever they gave it, often nothing.
    """

    key: str
    size: int
    sha256: str | None
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)


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

        `metadata` (see `validate_metadata`) is stored with the object, atomically: no reader sees
        the object without it. Raises `ObjectConflict` when different content is already stored,
        carrying the stored object's size, sha256 and metadata (`existing`): never overwrites.
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


def validate_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Return user metadata as a dict if every store can keep it, else raise `ValueError`.

    Names are lowercase ASCII letters, digits and hyphens (S3 lowercases names, and proxies drop
    headers with underscores); values are printable ASCII; `sha256` is the adapters' own; names
    and values together, with the adapter's sha256 entry, fit `MAX_METADATA_BYTES`.
    """
    checked = dict(metadata or {})
    total = len(SHA256_METADATA_KEY) + hashlib.sha256().digest_size * 2
    for name, value in checked.items():
        if not isinstance(name, str) or not _METADATA_NAME.fullmatch(name):
            raise ValueError(f"metadata name must be lowercase ASCII, digits, hyphens: {name!r}")
        if name == SHA256_METADATA_KEY:
            raise ValueError(f"metadata name {name!r} is reserved to the store")
        if not isinstance(value, str) or not all(0x20 <= ord(char) < 0x7F for char in value):
            raise ValueError(f"metadata value of {name!r} must be printable ASCII: {value!r}")
        total += len(name) + len(value)
    if total > MAX_METADATA_BYTES:
        raise ValueError(f"metadata of {total} bytes exceeds {MAX_METADATA_BYTES}")
    return checked


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
