"""S3 adapter under failure: lost responses, 5xx, throttling, timeouts, 409, unsafe stores."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.stub import Stubber

from storage import (
    AccessDenied,
    ConditionalWritesUnsupported,
    ObjectConflict,
    ObjectNotFound,
    ObjectTooLarge,
    S3Settings,
    S3Store,
    StorageError,
    StorageUnavailable,
)
from storage.s3 import CONFLICT_RETRY_ATTEMPTS
from tests.s3_fixtures import rgw_session, rgw_settings
from tests.services import rgw as rgw_service
from tests.services.proxy import FaultProxy
from tests.storage.conftest import StoreFactory
from tests.storage.faults import (
    FAULT_KINDS,
    Fault,
    closed_port_url,
    drop_first_response,
    inject,
    silent_server,
)


def _fast_failing(endpoint_url: str) -> S3Settings:
    """Settings that give up quickly: two attempts, half-second timeouts."""
    return S3Settings(
        endpoint_url=endpoint_url,
        region="us-east-1",
        total_max_attempts=2,
        connect_timeout_seconds=0.5,
        read_timeout_seconds=0.5,
    )


def test_lost_response_412_is_our_own_write(s3_factory: StoreFactory) -> None:
    """A retried PUT answered 412 by our own first write resolves to success, not a conflict."""
    store = s3_factory()
    hook = drop_first_response(store.client, "PutObject")
    result = store.put_if_absent("lost/response.jpg", b"derivative")
    assert hook.dropped == 1
    assert result.sha256 == hashlib.sha256(b"derivative").hexdigest()
    assert result.created is False  # the second attempt met our first write: not a new object
    assert store.get("lost/response.jpg") == b"derivative"


def test_lost_response_after_foreign_write_is_a_conflict(s3_factory: StoreFactory) -> None:
    """A 412 from someone else's different object stays a ObjectConflict after a retry."""
    store = s3_factory()
    store.put_if_absent("taken.jpg", b"theirs")
    drop_first_response(store.client, "PutObject")
    with pytest.raises(ObjectConflict):
        store.put_if_absent("taken.jpg", b"ours")
    assert store.get("taken.jpg") == b"theirs"


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_transient_faults_are_retried_then_unavailable(s3_factory: StoreFactory, kind: str) -> None:
    """5xx, throttling, timeouts and resets are retried by botocore, then StorageUnavailable."""
    store = s3_factory(total_max_attempts=2)
    fault = Fault(kind)
    inject(store.client, "PutObject", fault)
    with pytest.raises(StorageUnavailable):
        store.put_if_absent("fault.jpg", b"x")
    assert fault.attempts == 2
    inject(store.client, "GetObject", Fault(kind))
    with pytest.raises(StorageUnavailable):
        store.get("fault.jpg")


def test_unreachable_endpoint_is_unavailable() -> None:
    """Connection refused on every operation, check() included, is StorageUnavailable."""
    settings = _fast_failing(closed_port_url())
    store = S3Store("bucket", settings=settings, client=settings.client(_dummy_session()))
    for call in (store.check, lambda: store.get("k"), lambda: store.put_if_absent("k", b"x")):
        with pytest.raises(StorageUnavailable):
            call()


def test_silent_endpoint_times_out_as_unavailable() -> None:
    """A server that accepts but never answers hits the read timeout: StorageUnavailable."""
    with silent_server() as url:
        settings = _fast_failing(url)
        store = S3Store("bucket", settings=settings, client=settings.client(_dummy_session()))
        with pytest.raises(StorageUnavailable):
            store.head("k")


@pytest.mark.rgw
def test_wrong_credentials_are_access_denied(rgw_bucket: S3Store) -> None:
    """A client whose signature the gateway rejects raises AccessDenied."""
    client = rgw_bucket.settings.client(_dummy_session("wrong"))
    with pytest.raises(AccessDenied):
        S3Store(rgw_bucket.bucket, client=client).put_if_absent("k", b"x")


def test_missing_bucket_check_is_a_permanent_error(s3_factory: StoreFactory) -> None:
    """check() on a bucket that does not exist raises a permanent error naming the bucket (a
    configuration mistake, which waiting would not fix), not StorageUnavailable."""
    store = s3_factory()
    missing = S3Store("no-such-bucket-bc", client=store.client)
    with pytest.raises(StorageError, match="no-such-bucket-bc") as raised:
        missing.check()
    assert not isinstance(raised.value, StorageUnavailable)
    with pytest.raises(ObjectNotFound):
        missing.get("k")


def test_409_conditional_conflict_is_retried(stub_client: Any) -> None:
    """AWS's 409 ConditionalRequestConflict is retried and the write then succeeds."""
    store = S3Store("bucket", "p", client=stub_client)
    with Stubber(stub_client) as stubber:
        for _ in range(2):
            stubber.add_client_error(
                "put_object", service_error_code="ConditionalRequestConflict", http_status_code=409
            )
        stubber.add_response("put_object", {"ETag": '"e"'})
        result = store.put_if_absent("k.jpg", b"data")
        stubber.assert_no_pending_responses()
    assert result.created is True


def test_409_retries_are_bounded(stub_client: Any) -> None:
    """Endless 409s end in StorageUnavailable after a bounded number of attempts."""
    store = S3Store("bucket", client=stub_client)
    with Stubber(stub_client) as stubber:
        for _ in range(CONFLICT_RETRY_ATTEMPTS):
            stubber.add_client_error(
                "put_object", service_error_code="ConditionalRequestConflict", http_status_code=409
            )
        with pytest.raises(StorageUnavailable):
            store.put_if_absent("k.jpg", b"data")
        stubber.assert_no_pending_responses()


def test_put_sends_if_none_match_and_sha256_metadata(stub_client: Any) -> None:
    """The write is one PutObject with If-None-Match: * and our sha256 in user metadata."""
    store = S3Store("bucket", "pre", client=stub_client)
    with Stubber(stub_client) as stubber:
        stubber.add_response(
            "put_object",
            {"ETag": '"e"'},
            {
                "Bucket": "bucket",
                "Key": "pre/k.jpg",
                "Body": b"data",
                "IfNoneMatch": "*",
                "ContentType": "image/jpeg",
                "Metadata": {"source": "s", "sha256": hashlib.sha256(b"data").hexdigest()},
            },
        )
        store.put_if_absent("k.jpg", b"data", content_type="image/jpeg", metadata={"source": "s"})
        stubber.assert_no_pending_responses()


def test_metadata_is_plain_s3_user_metadata(s3_factory: StoreFactory) -> None:
    """The metadata is what any S3 client sees as `x-amz-meta-*`, beside our sha256, and the
    conflict of a later write reports it back."""
    store = s3_factory()
    facts = {"source-sha256": "ab" * 32, "ratio": "4:3", "crop-box": "0,10,400,310"}
    store.put_if_absent("meta/k.jpg", b"jpeg", content_type="image/jpeg", metadata=facts)
    head = store.client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/meta/k.jpg")
    assert {**facts, "sha256": hashlib.sha256(b"jpeg").hexdigest()} == head["Metadata"]
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-meta-crop-box"] == "0,10,400,310"
    with pytest.raises(ObjectConflict) as raised:
        store.put_if_absent("meta/k.jpg", b"other", metadata={**facts, "ratio": "1:1"})
    assert raised.value.existing is not None
    assert facts == raised.value.existing.metadata


def test_check_refuses_a_store_that_silently_overwrites(stub_client: Any) -> None:
    """A store accepting the second conditional probe write raises ConditionalWritesUnsupported."""
    store = S3Store("bucket", client=stub_client)
    with Stubber(stub_client) as stubber:
        stubber.add_response("head_bucket", {})
        stubber.add_response("put_object", {"ETag": '"1"'})
        stubber.add_response("put_object", {"ETag": '"2"'})
        stubber.add_response("delete_object", {})
        with pytest.raises(ConditionalWritesUnsupported):
            store.check()
        stubber.assert_no_pending_responses()


def test_check_refuses_a_store_without_conditional_support(stub_client: Any) -> None:
    """A store answering 501 NotImplemented to If-None-Match is refused."""
    store = S3Store("bucket", client=stub_client)
    with Stubber(stub_client) as stubber:
        stubber.add_response("head_bucket", {})
        stubber.add_client_error(
            "put_object", service_error_code="NotImplemented", http_status_code=501
        )
        stubber.add_response("delete_object", {})
        with pytest.raises(ConditionalWritesUnsupported):
            store.check()


def test_412_with_vanished_object_is_transient(stub_client: Any) -> None:
    """A 412 whose object is gone by the time we read it is reported as transient."""
    store = S3Store("bucket", client=stub_client)
    with Stubber(stub_client) as stubber:
        stubber.add_client_error(
            "put_object", service_error_code="PreconditionFailed", http_status_code=412
        )
        stubber.add_client_error("get_object", service_error_code="NoSuchKey", http_status_code=404)
        with pytest.raises(StorageUnavailable):
            store.put_if_absent("k", b"x")


def test_unknown_client_error_stays_in_the_family(stub_client: Any) -> None:
    """An unexpected S3 error is a StorageError, never a botocore exception."""
    store = S3Store("bucket", client=stub_client)
    with Stubber(stub_client) as stubber:
        stubber.add_client_error("get_object", service_error_code="Weird", http_status_code=400)
        with pytest.raises(StorageError) as caught:
            store.get("k")
    assert type(caught.value) is StorageError


def _dummy_session(secret: str = "dummy") -> Any:
    return boto3.session.Session(
        aws_access_key_id="dummy", aws_secret_access_key=secret, region_name="us-east-1"
    )


class _CountingBody:
    """Wraps a response body and records how many bytes were read from it."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self.bytes_read = 0
        self.closed = False

    def read(self, amount: int | None = None) -> bytes:
        data: bytes = self._body.read(amount)
        self.bytes_read += len(data)
        return data

    def close(self) -> None:
        self.closed = True
        self._body.close()


def test_too_large_object_is_refused_before_reading(s3_factory: StoreFactory) -> None:
    """get(max_bytes) decides from Content-Length: no byte of a too-large body is read."""
    store = s3_factory()
    store.put_if_absent("large.bin", b"L" * 100_000)
    bodies: list[_CountingBody] = []

    def wrap_body(parsed: dict[str, Any], **_: Any) -> None:
        bodies.append(_CountingBody(parsed["Body"]))
        parsed["Body"] = bodies[-1]

    store.client.meta.events.register("after-call.s3.GetObject", wrap_body)
    with pytest.raises(ObjectTooLarge):
        store.get("large.bin", max_bytes=99_999)
    assert (bodies[0].bytes_read, bodies[0].closed) == (0, True)


def test_check_deletes_its_probe_and_listings_hide_the_probe_folder(
    s3_factory: StoreFactory,
) -> None:
    """check() removes its probe object; a probe left behind is never listed."""
    store = s3_factory()
    store.check()
    raw = store.client.list_objects_v2(Bucket=store.bucket)
    assert raw.get("Contents", []) == []
    store.client.put_object(Bucket=store.bucket, Key=f"{store.prefix}/.probe/left", Body=b"p")
    assert list(store.list()) == []


@pytest.mark.rgw
def test_a_body_that_trickles_in_is_cut_off_at_the_deadline(
    rgw: rgw_service.RGWEndpoint, rgw_bucket: S3Store
) -> None:
    """A live gateway behind a proxy that passes its answers on 64 bytes every 50 ms: every
    socket read is quick, so only the body deadline stops the read, which then fails as
    transient; the same read without the trickle returns the object whole."""
    data = bytes(range(256)) * 400  # 100 KiB: about 80 s at the trickle's pace
    rgw_bucket.put_if_absent("slow/source.png", data)
    upstream = urlsplit(rgw.url)
    proxy = FaultProxy(upstream.hostname or "127.0.0.1", upstream.port or 80).start()
    try:
        settings = dataclasses.replace(
            rgw_settings(rgw, body_deadline_seconds=1.0, read_timeout_seconds=5.0),
            endpoint_url=proxy.url,
        )
        store = S3Store(
            rgw_bucket.bucket, settings=settings, client=settings.client(rgw_session(rgw))
        )
        assert store.get("slow/source.png") == data
        proxy.configure(trickle_bytes=64, trickle_seconds=0.05)
        started = time.monotonic()
        with pytest.raises(StorageUnavailable, match="took too long"):
            store.get("slow/source.png")
        assert time.monotonic() - started < 5
    finally:
        proxy.stop()
