"""Store URLs, client settings and the translation of botocore errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from storage import (
    AccessDenied,
    InvalidStoreUrl,
    LocalStore,
    ObjectNotFound,
    S3Settings,
    S3Store,
    StorageError,
    StorageUnavailable,
    canonical_store_url,
    object_url,
    open_store,
)
from storage.s3errors import translate


def test_open_local_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """file://./dir is relative to the working directory, file:///dir absolute; both are created."""
    monkeypatch.chdir(tmp_path)
    relative = open_store("file://./derivatives")
    absolute = open_store(f"file://{tmp_path}/abs")
    assert isinstance(relative, LocalStore)
    assert relative.url == f"file://{tmp_path.resolve()}/derivatives"
    assert absolute.url == f"file://{tmp_path.resolve()}/abs"
    assert (tmp_path / "abs").is_dir()


def test_open_s3_with_prefix(moto_s3: S3Store) -> None:
    """s3://bucket/prefix builds an S3Store on that prefix with the given settings."""
    settings = S3Settings(region="us-east-1")
    store = open_store(f"s3://{moto_s3.bucket}/a/b/", s3=settings)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.url) == (
        moto_s3.bucket,
        "a/b",
        f"s3://{moto_s3.bucket}/a/b",
    )
    assert store.settings is settings


@pytest.mark.parametrize(
    "url", ["", "derivatives", "http://x/y", "s3://", "s3:///prefix", "file://", "s3://b/../x"]
)
def test_bad_urls_raise_a_value_error(url: str) -> None:
    """Anything but file://DIR or s3://bucket[/prefix] raises InvalidStoreUrl, a ValueError."""
    with pytest.raises(InvalidStoreUrl) as caught:
        open_store(url)
    assert isinstance(caught.value, ValueError)


def test_client_settings_are_explicit() -> None:
    """The client uses standard retries, path addressing off AWS, our timeouts and checksums."""
    settings = S3Settings(
        endpoint_url="http://127.0.0.1:9",
        region="us-east-1",
        request_checksum_calculation="when_required",
        connect_timeout_seconds=1.5,
        read_timeout_seconds=2.5,
        total_max_attempts=3,
        max_pool_connections=7,
    )
    config = settings.client().meta.config
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.s3 == {"addressing_style": "path"}
    assert (config.connect_timeout, config.read_timeout) == (1.5, 2.5)
    assert (config.max_pool_connections, config.request_checksum_calculation) == (
        7,
        "when_required",
    )


def _client_error(code: str, status: int) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "Op")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_client_error("NoSuchKey", 404), ObjectNotFound),
        (_client_error("404", 404), ObjectNotFound),
        (_client_error("NoSuchBucket", 404), ObjectNotFound),
        (_client_error("AccessDenied", 403), AccessDenied),
        (_client_error("SignatureDoesNotMatch", 403), AccessDenied),
        (_client_error("SlowDown", 503), StorageUnavailable),
        (_client_error("Whatever", 500), StorageUnavailable),
        (_client_error("TooManyRequests", 429), StorageUnavailable),
        (_client_error("ConditionalRequestConflict", 409), StorageUnavailable),
        (_client_error("InvalidRequest", 400), StorageError),
        (EndpointConnectionError(endpoint_url="http://x"), StorageUnavailable),
        (NoCredentialsError(), AccessDenied),
    ],
)
def test_translation(error: Exception, expected: type[StorageError]) -> None:
    """Each botocore failure maps to exactly one storage error class."""
    assert expected is type(translate(error, "op"))


def test_canonical_store_url_is_the_opened_stores_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every spelling of one store gives the URL the opened store reports, without creating it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert canonical_store_url("file://./out") == f"file://{tmp_path.resolve()}/out"
    assert not (tmp_path / "out").exists()
    for url in ("file://./out", "file://out", f"file://{tmp_path}/out", "file://link"):
        assert canonical_store_url(url) == open_store(url).url
    assert canonical_store_url("s3://bucket//pre/fix/") == "s3://bucket/pre/fix"
    assert canonical_store_url("s3://bucket") == "s3://bucket"
    with pytest.raises(InvalidStoreUrl):
        canonical_store_url("ftp://x")


def test_object_url_joins_store_and_key() -> None:
    assert object_url("s3://b/p", "derivatives/a.jpg") == "s3://b/p/derivatives/a.jpg"
    assert object_url("file:///", "k.jpg") == "file:///k.jpg"
    assert object_url("file:///srv/out", "k.jpg") == "file:///srv/out/k.jpg"
