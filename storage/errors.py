"""The storage exception family: one base, transient and permanent errors beneath it.

Callers decide whether to retry by class, never by message: `StorageUnavailable` is the only
transient error; every other subclass is permanent for the given key or source. Library errors
(botocore, OSError) are wrapped at the adapter boundary with `raise ... from exc` and never leak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.port import ObjectInfo


class StorageError(Exception):
    """Base of every error raised by the `storage` package."""


class StorageUnavailable(StorageError):
    """Transient: timeout, 5xx, throttling, connection reset/refused, endpoint unreachable."""


class ObjectNotFound(StorageError):
    """Permanent: no object (or source file/prefix) under that key."""


class AccessDenied(StorageError):
    """Permanent: the credentials or file permissions do not allow the operation."""


class ObjectConflict(StorageError):
    """Permanent: *different* content already exists under the key; it is never replaced.

    `existing` is the stored object as the store reports it (size, sha256, the user metadata it
    was written with) when it could be read, so the caller can judge what stands there.
    """

    def __init__(self, message: str, *, existing: ObjectInfo | None = None) -> None:
        super().__init__(message)
        self.existing = existing


class InvalidKey(StorageError):
    """Permanent: the key is malformed or would escape the store root."""


class ObjectTooLarge(StorageError):
    """Permanent: the object is larger than the caller's `max_bytes` (checked before reading it)."""


class SourceNotAllowed(StorageError):
    """Permanent: the source lies outside the configured roots or uses an unsupported scheme."""


class ConditionalWritesUnsupported(StorageError):
    """Permanent: the store silently overwrites instead of honouring `If-None-Match: *`."""


class InvalidStoreUrl(StorageError, ValueError):
    """Permanent: a store URL is neither `file://DIR` nor `s3://bucket[/prefix]`."""
