"""Store URLs: `file://DIR` (relative allowed) and `s3://bucket[/prefix]`, parsed in one place."""

from __future__ import annotations

from pathlib import Path

from storage.errors import InvalidKey, InvalidStoreUrl
from storage.local import LocalStore
from storage.port import ObjectStore
from storage.s3 import S3Settings, S3Store

FILE_SCHEME = "file://"
S3_SCHEME = "s3://"


def split_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/rest` ⇒ ("bucket", "rest"); `InvalidStoreUrl` without a bucket."""
    if not url.startswith(S3_SCHEME):
        raise InvalidStoreUrl(f"not an s3:// URL: {url!r}")
    bucket, _, rest = url.removeprefix(S3_SCHEME).partition("/")
    if not bucket:
        raise InvalidStoreUrl(f"s3 URL without a bucket: {url!r}")
    return bucket, rest


def canonical_store_url(url: str) -> str:
    """The URL `open_store(url).url` will have, without opening anything (no folder is created).

    `file://` folders are made absolute with symlinks resolved; `s3://bucket/prefix` loses
    surrounding slashes of its prefix. Two spellings of one store give one canonical URL, so a
    batch's recorded store can be compared with a worker's. `InvalidStoreUrl` otherwise.
    """
    if url.startswith(FILE_SCHEME):
        folder = url.removeprefix(FILE_SCHEME)
        if not folder:
            raise InvalidStoreUrl(f"file URL without a folder: {url!r}")
        return f"{FILE_SCHEME}{Path(folder).resolve()}"
    if url.startswith(S3_SCHEME):
        bucket, prefix = split_s3_url(url)
        prefix = prefix.strip("/")
        if "/" in bucket or not bucket:
            raise InvalidStoreUrl(f"invalid s3 store URL {url!r}")
        return f"{S3_SCHEME}{bucket}/{prefix}" if prefix else f"{S3_SCHEME}{bucket}"
    raise InvalidStoreUrl(f"store URL must be file://DIR or s3://bucket[/prefix]: {url!r}")


def object_url(store_url: str, key: str) -> str:
    """Where the object `key` of the store at `store_url` lives: `s3://bucket/prefix/key`, or
    `file:///folder/key` (the store URL, a slash and the key, as `--store` spells URLs)."""
    return store_url + key if store_url.endswith("/") else f"{store_url}/{key}"


def open_store(url: str, *, s3: S3Settings | None = None) -> ObjectStore:
    """Build the store named by `url`; `InvalidStoreUrl` (a `ValueError`) on anything else.

    `file://./out` and `file://out` are relative to the working directory, `file:///abs` is
    absolute. Side effect: a local store's folder is created. No network call is made.
    """
    if url.startswith(FILE_SCHEME):
        folder = url.removeprefix(FILE_SCHEME)
        if not folder:
            raise InvalidStoreUrl(f"file URL without a folder: {url!r}")
        return LocalStore(Path(folder))
    if url.startswith(S3_SCHEME):
        bucket, prefix = split_s3_url(url)
        try:
            return S3Store(bucket, prefix, settings=s3)
        except (ValueError, InvalidKey) as exc:
            raise InvalidStoreUrl(f"invalid s3 store URL {url!r}: {exc}") from exc
    raise InvalidStoreUrl(f"store URL must be file://DIR or s3://bucket[/prefix]: {url!r}")
