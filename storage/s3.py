"""S3-compatible adapter (AWS S3, Ceph RGW, MinIO, R2 ...) on boto3.

Put-if-absent is ONE `PutObject` with `If-None-Match: *` carrying the content's sha256 and the
caller's metadata in user metadata (`x-amz-meta-*`), so an object and its metadata appear together.
A 412 means the key is taken — possibly by our *own* first attempt whose response was lost and
which botocore retried — so a 412 is resolved by reading the stored object and comparing the
sha256 of its bytes (never the sha256 its metadata claims): equal ⇒ success (`created=False`),
different ⇒ `ObjectConflict` carrying the stored object's size, sha256 and user metadata (only
when the metadata's recorded sha256 is the bytes'), for the caller to judge. We never
overwrite. AWS may answer 409 ConditionalRequestConflict to concurrent conditional writes; that
is retried a bounded number of times. Multipart uploads, `upload_file` and CopyObject are
avoided on purpose: s3transfer rejects `IfNoneMatch`, and Ceph RGW ignores conditions on
multipart completion and copies.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from storage.errors import (
    ConditionalWritesUnsupported,
    ObjectConflict,
    ObjectNotFound,
    ObjectTooLarge,
    StorageError,
    StorageUnavailable,
)
from storage.port import (
    DEFAULT_CONTENT_TYPE,
    PROBE_DIR_NAME,
    SHA256_METADATA_KEY,
    ObjectInfo,
    PutResult,
    is_reserved,
    sha256_hex,
    validate_key,
    validate_metadata,
    validate_prefix,
)

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

# boto3, botocore's config and tenacity are imported where used: a process that never talks to
# S3 (most commands on a local store) does not pay for loading them.
from storage.s3errors import (
    error_code,
    is_conditional_conflict,
    is_precondition_failed,
    translated,
)

CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
"""Longest wait for any one socket read (botocore's `read_timeout`)."""
BODY_DEADLINE_SECONDS = 300.0
"""Longest a whole object body may take to arrive: a server trickling bytes, each read within
the read timeout, would otherwise hold the reader forever (100 MiB at 350 KB/s still fits)."""
BODY_READ_CHUNK_BYTES = 1 << 20
TOTAL_MAX_ATTEMPTS = 4
"""botocore attempts per request, the first included (`max_attempts` would count retries)."""
MAX_POOL_CONNECTIONS = 32
REQUEST_CHECKSUM_CALCULATION = "when_supported"
"""botocore's default; "when_required" is the escape hatch for servers rejecting CRC32 headers."""
CONFLICT_RETRY_ATTEMPTS = 5
CONFLICT_READ_BYTES_MAX = 64 * 1024 * 1024
"""A taken key's object is read whole, up to this size, to hash its bytes; a larger one is a
conflict with an unknown sha256 (a derivative is a few MiB at most)."""
"""PutObject attempts in all when AWS keeps answering 409 ConditionalRequestConflict."""
CONFLICT_RETRY_BASE_SECONDS = 0.05
CONFLICT_RETRY_MAX_WAIT_SECONDS = 1.0
PROBE_NAME_PREFIX = "if-none-match-"
_NOT_IMPLEMENTED_CODES = frozenset({"NotImplemented", "InvalidArgument", "501"})


@dataclass(frozen=True)
class S3Settings:
    """How to reach an S3-compatible endpoint; credentials come from boto3's usual chain."""

    endpoint_url: str | None = None
    region: str | None = None
    request_checksum_calculation: str = REQUEST_CHECKSUM_CALCULATION
    connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS
    read_timeout_seconds: float = READ_TIMEOUT_SECONDS
    body_deadline_seconds: float = BODY_DEADLINE_SECONDS
    total_max_attempts: int = TOTAL_MAX_ATTEMPTS
    max_pool_connections: int = MAX_POOL_CONNECTIONS

    def config(self) -> Config:
        """The botocore `Config`: standard retries set explicitly, path addressing off AWS."""
        from botocore.config import Config  # noqa: PLC0415  (see the imports)

        return Config(
            region_name=self.region,
            connect_timeout=self.connect_timeout_seconds,
            read_timeout=self.read_timeout_seconds,
            retries={"mode": "standard", "total_max_attempts": self.total_max_attempts},
            max_pool_connections=self.max_pool_connections,
            # A str setting (from env/flags); botocore validates the value itself.
            request_checksum_calculation=self.request_checksum_calculation,  # type: ignore[arg-type]
            # Virtual-host addressing turns `bucket.localhost` into a name that does not resolve.
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )

    def client(self, session: boto3.session.Session | None = None) -> Any:
        """A new thread-safe boto3 S3 client; credentials from `session` or the default chain."""
        import boto3  # noqa: PLC0415  (see the imports)

        # A fresh Session per client: boto3's module-level default session is not thread-safe.
        session = session or boto3.session.Session()
        return session.client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=self.config()
        )


class S3Store:
    """An `ObjectStore` under `s3://bucket/prefix`; safe to share between threads."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        settings: S3Settings | None = None,
        client: Any | None = None,
    ) -> None:
        """Use `client` if given (tests, shared clients), else build one from `settings`."""
        if not bucket or "/" in bucket:
            raise ValueError(f"invalid bucket name: {bucket!r}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            validate_key(self.prefix)
        self.settings = settings or S3Settings()
        self.client: Any = client if client is not None else self.settings.client()
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    def get(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """Return the object's bytes; its Content-Length is checked against `max_bytes` first."""
        full_key = self._full_key(key)
        deadline = time.monotonic() + self.settings.body_deadline_seconds
        with translated(f"get {self.url}/{key}"):
            response = self.client.get_object(Bucket=self.bucket, Key=full_key)
            body = response["Body"]
            try:
                size = int(response["ContentLength"])
                if max_bytes is not None and size > max_bytes:
                    raise ObjectTooLarge(f"{self.url}/{key}: {size} bytes > limit {max_bytes}")
                return _read_body(body, size, deadline, f"get {self.url}/{key}")
            finally:
                body.close()

    def head(self, key: str) -> ObjectInfo:
        """Return size, the sha256 from our user metadata (None if written by someone else) and
        the rest of the user metadata."""
        full_key = self._full_key(key)
        with translated(f"head {self.url}/{key}"):
            response = self.client.head_object(Bucket=self.bucket, Key=full_key)
        metadata = {str(k): str(v) for k, v in response.get("Metadata", {}).items()}
        sha256 = metadata.pop(SHA256_METADATA_KEY, None)
        return ObjectInfo(
            key=key, size=int(response["ContentLength"]), sha256=sha256, metadata=metadata
        )

    def put_if_absent(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = DEFAULT_CONTENT_TYPE,
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        """One conditional PutObject; a 412 is resolved by comparing sha256 (module docstring)."""
        full_key = self._full_key(key)
        user_metadata = validate_metadata(metadata)
        digest = sha256_hex(data)
        user_metadata[SHA256_METADATA_KEY] = digest
        with translated(f"put {self.url}/{key}"):
            try:
                self._conditional_put(full_key, data, content_type, user_metadata)
            except ClientError as exc:
                if not is_precondition_failed(exc):
                    raise
                return self._resolve_taken(key, digest)
        return PutResult(key=key, created=True, sha256=digest)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Yield objects under `prefix`, in the server's (UTF-8 binary, i.e. sorted) key order.

        Zero-byte "folder marker" keys ending in "/" are skipped: they are not objects to us;
        so are keys under the reserved probe folder.
        sha256 is None in listings (ListObjectsV2 returns no user metadata).
        """
        validate_prefix(prefix)
        root = f"{self.prefix}/" if self.prefix else ""
        paginator = self.client.get_paginator("list_objects_v2")
        with translated(f"list {self.url}/{prefix}"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=root + prefix):
                for item in page.get("Contents", []):
                    key = str(item["Key"])[len(root) :]
                    if key and not key.endswith("/") and not is_reserved(key):
                        yield ObjectInfo(key=key, size=int(item["Size"]), sha256=None)

    def check(self) -> None:
        """Reach the bucket, then prove `If-None-Match: *` is honoured with a probe key.

        The probe is written twice; the second write must answer 412, else the store would
        silently overwrite and `ConditionalWritesUnsupported` is raised. The probe is deleted
        afterwards (best effort). A missing bucket is a permanent `StorageError`.
        """
        try:
            with translated(f"reach {self.url}"):
                self.client.head_bucket(Bucket=self.bucket)
        except ObjectNotFound as exc:
            # A configuration mistake, not an outage: waiting would not make the bucket appear.
            raise StorageError(
                f"bucket {self.bucket!r} does not exist at {self.client.meta.endpoint_url}"
            ) from exc
        # Built without validate_key: the probe folder is reserved precisely so no caller can
        # write (or list) there.
        probe_key = self._root_key(f"{PROBE_DIR_NAME}/{PROBE_NAME_PREFIX}{uuid.uuid4().hex}")
        try:
            self._probe_write(probe_key, first=True)
            self._probe_write(probe_key, first=False)
        finally:
            self._delete_quietly(probe_key)

    def _full_key(self, key: str) -> str:
        return self._root_key(validate_key(key))

    def _root_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _conditional_put(
        self, full_key: str, data: bytes, content_type: str, metadata: Mapping[str, str]
    ) -> None:
        """PutObject with If-None-Match: *, retrying only AWS's 409 ConditionalRequestConflict.

        botocore has already retried transient failures inside each call; tenacity is entered
        only after a 409, so the common path is a single plain call.
        """

        def put() -> None:
            self.client.put_object(
                Bucket=self.bucket,
                Key=full_key,
                Body=data,
                IfNoneMatch="*",
                ContentType=content_type,
                Metadata=dict(metadata),
            )

        try:
            put()
        except ClientError as exc:
            if not is_conditional_conflict(exc):
                raise
            from tenacity import (  # noqa: PLC0415  (see the imports)
                Retrying,
                retry_if_exception,
                stop_after_attempt,
                wait_random_exponential,
            )

            Retrying(
                retry=retry_if_exception(is_conditional_conflict),
                stop=stop_after_attempt(CONFLICT_RETRY_ATTEMPTS - 1),
                wait=wait_random_exponential(
                    multiplier=CONFLICT_RETRY_BASE_SECONDS, max=CONFLICT_RETRY_MAX_WAIT_SECONDS
                ),
                reraise=True,
            )(put)

    def _resolve_taken(self, key: str, digest: str) -> PutResult:
        """The key answered 412: our own earlier attempt (equal sha256) or a conflict."""
        try:
            existing = self._read_verified(key)
        except ObjectNotFound as exc:
            # Deleted between our 412 and the head: nothing to compare; the caller may retry.
            raise StorageUnavailable(f"{self.url}/{key} changed while being written") from exc
        if existing.sha256 == digest:
            return PutResult(key=key, created=False, sha256=digest)
        raise ObjectConflict(
            f"{self.url}/{key} holds different content "
            f"(sha256 {existing.sha256 or 'unknown'}, ours {digest})",
            existing=existing,
        )

    def _read_verified(self, key: str) -> ObjectInfo:
        """A taken key's object: its size, the sha256 of its bytes (read whole, None past
        `CONFLICT_READ_BYTES_MAX`) and its user metadata, kept only when the sha256 recorded in
        it is the bytes' own: metadata that describes other bytes (edited, or copied onto this
        object) is nobody's facts, and is dropped."""
        full_key = self._full_key(key)
        deadline = time.monotonic() + self.settings.body_deadline_seconds
        with translated(f"get {self.url}/{key}"):
            response = self.client.get_object(Bucket=self.bucket, Key=full_key)
            body = response["Body"]
            try:
                size = int(response["ContentLength"])
                metadata = {str(k): str(v) for k, v in response.get("Metadata", {}).items()}
                recorded = metadata.pop(SHA256_METADATA_KEY, None)
                if size > CONFLICT_READ_BYTES_MAX:
                    return ObjectInfo(key=key, size=size, sha256=None)
                data = _read_body(body, size, deadline, f"get {self.url}/{key}")
            finally:
                body.close()
        actual = sha256_hex(data)
        return ObjectInfo(
            key=key, size=size, sha256=actual, metadata=metadata if recorded == actual else {}
        )

    def _probe_write(self, full_key: str, *, first: bool) -> None:
        what = f"probe conditional write on {self.url}"
        with translated(what):
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=full_key, Body=b"probe", IfNoneMatch="*"
                )
            except ClientError as exc:
                if is_precondition_failed(exc):
                    # On the first write, a 412 is our own write answered twice (a lost response
                    # retried by botocore): the store honours the condition either way.
                    return
                if error_code(exc) in _NOT_IMPLEMENTED_CODES:
                    raise ConditionalWritesUnsupported(f"{what}: {exc}") from exc
                raise
        if not first:
            raise ConditionalWritesUnsupported(
                f"{self.url} accepted a second If-None-Match: * write to an existing key; "
                "it would silently overwrite objects"
            )

    def _delete_quietly(self, full_key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=full_key)
        except (BotoCoreError, ClientError):
            # A leftover 5-byte probe is harmless; credentials may rightly forbid deletes.
            return


def _read_body(body: Any, size: int, deadline: float, what: str) -> bytes:
    """The whole body of a response, or `StorageUnavailable` once `deadline` (monotonic) passes.

    Reads what has arrived, one socket read at a time (urllib3's `read1`; each read is bounded by
    the read timeout), so the deadline is checked however slowly the bytes come, and checks the
    length botocore would have checked.
    """
    read = getattr(getattr(body, "_raw_stream", None), "read1", None)
    if read is None:
        data: bytes = body.read()
        return data
    chunks: list[bytes] = []
    received = 0
    while chunk := read(BODY_READ_CHUNK_BYTES):
        received += len(chunk)
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise StorageUnavailable(f"{what}: the body took too long to arrive")
    if received != size:
        raise StorageUnavailable(f"{what}: the body was cut short ({received} of {size} bytes)")
    return b"".join(chunks)
