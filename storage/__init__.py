"""Generic object store port with put-if-absent: S3-compatible (boto3) and local folder.

`open_store("file://DIR" | "s3://bucket/prefix")` builds a store; every store offers `get`,
`head`, `put_if_absent` (atomic, never overwriting), `list` and `check`. `SourceReader` reads
source files from local paths and S3, confined to configured roots. Errors form one family
rooted at `StorageError`; only `StorageUnavailable` is transient.

Names are imported from their submodules on first use, so that boto3 is loaded only by a
process that talks to S3.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage.errors import (
        AccessDenied,
        ConditionalWritesUnsupported,
        InvalidKey,
        InvalidStoreUrl,
        ObjectConflict,
        ObjectNotFound,
        ObjectTooLarge,
        SourceNotAllowed,
        StorageError,
        StorageUnavailable,
    )
    from storage.local import LocalStore
    from storage.port import ObjectInfo, ObjectStore, PutResult
    from storage.s3 import S3Settings, S3Store
    from storage.sources import SourceReader
    from storage.urls import canonical_store_url, object_url, open_store

_HOMES = {
    "AccessDenied": "storage.errors",
    "ConditionalWritesUnsupported": "storage.errors",
    "InvalidKey": "storage.errors",
    "InvalidStoreUrl": "storage.errors",
    "ObjectConflict": "storage.errors",
    "ObjectNotFound": "storage.errors",
    "ObjectTooLarge": "storage.errors",
    "SourceNotAllowed": "storage.errors",
    "StorageError": "storage.errors",
    "StorageUnavailable": "storage.errors",
    "LocalStore": "storage.local",
    "ObjectInfo": "storage.port",
    "ObjectStore": "storage.port",
    "PutResult": "storage.port",
    "S3Settings": "storage.s3",
    "S3Store": "storage.s3",
    "SourceReader": "storage.sources",
    "canonical_store_url": "storage.urls",
    "object_url": "storage.urls",
    "open_store": "storage.urls",
}

__all__ = [
    "AccessDenied",
    "ConditionalWritesUnsupported",
    "InvalidKey",
    "InvalidStoreUrl",
    "LocalStore",
    "ObjectConflict",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectTooLarge",
    "PutResult",
    "S3Settings",
    "S3Store",
    "SourceNotAllowed",
    "SourceReader",
    "StorageError",
    "StorageUnavailable",
    "canonical_store_url",
    "object_url",
    "open_store",
]


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
