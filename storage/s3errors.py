"""Translation of botocore errors into the storage family, in one place.

Nothing from botocore crosses the adapter boundary: every call into a client runs inside
`translated(...)`, which re-raises with `raise ... from exc` so the cause stays in tracebacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from storage.errors import (
    AccessDenied,
    ObjectNotFound,
    StorageError,
    StorageUnavailable,
)

NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})
ACCESS_DENIED_CODES = frozenset(
    {
        "403",
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "ServiceUnavailable",
        "InternalError",
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)
PRECONDITION_FAILED_STATUS = 412
CONFLICT_STATUS = 409
TOO_MANY_REQUESTS_STATUS = 429
SERVER_ERROR_MIN_STATUS = 500


CREDENTIALS_HINT = (
    "boto3 reads them from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
    "~/.aws/credentials; a store other than AWS also needs its endpoint URL"
)


def error_code(exc: ClientError) -> str:
    """The S3 error code of `exc` ("" when the response had none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int:
    """The HTTP status of `exc` (0 when unknown, e.g. from a stub)."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_precondition_failed(exc: ClientError) -> bool:
    """True for the 412 an `If-None-Match: *` write gets when the key exists."""
    return http_status(exc) == PRECONDITION_FAILED_STATUS or error_code(exc) == "PreconditionFailed"


def is_conditional_conflict(exc: BaseException) -> bool:
    """True for AWS's 409 ConditionalRequestConflict (concurrent conditional writes): retry."""
    return isinstance(exc, ClientError) and error_code(exc) == "ConditionalRequestConflict"


def translate(exc: Exception, what: str) -> StorageError:
    """The storage error for a botocore exception raised while doing `what`."""
    if isinstance(exc, ClientError):
        return _from_client_error(exc, what)
    if isinstance(exc, HTTPClientError | BotoConnectionError | IncompleteReadError):
        # Connection refused/reset/closed, connect and read timeouts, endpoint unreachable,
        # a body cut short.
        return StorageUnavailable(f"{what}: {exc}")
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AccessDenied(f"{what}: {exc} ({CREDENTIALS_HINT})")
    if isinstance(exc, OSError):
        # Socket errors surfacing while a response body is streamed.
        return StorageUnavailable(f"{what}: {exc}")
    return StorageError(f"{what}: {exc}")


def _from_client_error(exc: ClientError, what: str) -> StorageError:
    code, status = error_code(exc), http_status(exc)
    message = f"{what}: {code or status} {exc.response.get('Error', {}).get('Message', '')}".strip()
    if code in NOT_FOUND_CODES or status == 404:
        return ObjectNotFound(message)
    if code in ACCESS_DENIED_CODES or status == 403:
        return AccessDenied(message)
    if (
        code in TRANSIENT_CODES
        or status == TOO_MANY_REQUESTS_STATUS
        or status >= SERVER_ERROR_MIN_STATUS
    ):
        return StorageUnavailable(message)
    return StorageError(message)


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Re-raise botocore (and socket) errors from the block as storage errors."""
    try:
        yield
    except StorageError:
        raise
    except (BotoCoreError, ClientError, OSError) as exc:
        raise translate(exc, what) from exc
