"""Generic object store port with put-if-absent: S3-compatible (boto3) and local folder.

`open_store("file://DIR" | "s3://bucket/prefix")` builds a store; every store offers `get`,
`head`, `put_if_absent` (atomic, never overwriting), `list` and `check`. `SourceReader` reads
source files from local paths and S3, confined to configured roots. Errors form one family
rooted at `StorageError`; only `StorageUnavailable` is transient.
"""

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
