"""Cheap polling of the status document: a strong ETag, 304s and a growing `Retry-After`.

The ETag is a hash of the exact bytes of the status document, which holds only state-bearing
fields, so it changes exactly when something happened to the batch. `Retry-After` grows from
`RETRY_AFTER_MIN_SECONDS` to `RETRY_AFTER_MAX_SECONDS` with the time since the batch last moved:
a busy batch is polled every second, a quiet one every ten. A terminal batch gets none — it
never changes again unless an operator requeues it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.responses import Response

from batchcrop.batches import BatchService
from batchcrop.documents import Batch, status_document
from leases import TERMINAL

RETRY_AFTER_MIN_SECONDS = 1
RETRY_AFTER_MAX_SECONDS = 10
RETRY_AFTER_STEP_SECONDS = 10.0
"""One more second of `Retry-After` per this many seconds since the batch last moved."""
ETAG_HEX_CHARS = 32
BATCHES_CACHED_MAX = 10_000
"""Batches whose render request one API process keeps in memory (a few hundred bytes each)."""
JSON_MEDIA_TYPE = "application/json"


def encode(document: Mapping[str, Any]) -> bytes:
    """The compact UTF-8 JSON of a document, in the document's own field order."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def etag_of(body: bytes) -> str:
    """A strong entity tag over the exact response bytes."""
    return '"' + hashlib.sha256(body).hexdigest()[:ETAG_HEX_CHARS] + '"'


def if_none_match_matches(header: str | None, etag: str) -> bool:
    """RFC 9110 §13.1.2: `*` or any listed tag equal under weak comparison (W/ ignored)."""
    if not header:
        return False
    for candidate in header.split(","):
        tag = candidate.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


def retry_after_seconds(status: Mapping[str, Any], now: datetime) -> int | None:
    """Seconds a poller should wait, or None for a terminal batch; `now` is aware UTC."""
    if status["state"] in TERMINAL:
        return None
    updated = datetime.fromisoformat(str(status["updated_at"]).replace("Z", "+00:00"))
    quiet_seconds = max(0.0, (now - updated).total_seconds())
    grown = RETRY_AFTER_MIN_SECONDS + int(quiet_seconds // RETRY_AFTER_STEP_SECONDS)
    return min(RETRY_AFTER_MAX_SECONDS, grown)


def status_response(
    status: Mapping[str, Any], *, if_none_match: str | None, now: datetime | None = None
) -> Response:
    """200 with the document, or an empty 304 when `If-None-Match` holds its ETag.

    Both carry the ETag and the polling hints (`Cache-Control: no-cache`, `Retry-After`).
    """
    body = encode(status)
    etag = etag_of(body)
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    retry_after = retry_after_seconds(status, now or datetime.now(UTC))
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if if_none_match_matches(if_none_match, etag):
        return Response(status_code=304, headers=headers)
    return Response(content=body, status_code=200, headers=headers, media_type=JSON_MEDIA_TYPE)


class StatusReader:
    """Status documents for polling, one database read transaction each.

    A batch's render request (`RenderSpec`) never changes after submission, so it is
    read once and cached; each poll then only reads the batch's counters (cost independent of
    its size) and, with a callback, its deliveries. The document is the one
    `BatchService.status` returns. Thread-safe.
    """

    def __init__(self, batches: BatchService, *, cached_max: int = BATCHES_CACHED_MAX) -> None:
        self._batches = batches
        self._margin_seconds = batches.poll_margin_seconds
        # lru_cache never stores an exception, so an unknown id is looked up again next time.
        self._batch: Callable[[str], Batch] = functools.lru_cache(maxsize=cached_max)(batches.batch)

    def status(self, batch_id: str) -> dict[str, Any]:
        """The status document; `NoSuchBatch` for an unknown id. A batch with a callback also
        reads its deliveries (a few rows), so a delivery's progress changes the ETag."""
        batch = self._batch(batch_id)
        summary = self._batches.summary(batch_id)
        deliveries = self._batches.deliveries(batch_id) if batch.notify_url is not None else []
        return status_document(
            batch, summary, poll_margin_seconds=self._margin_seconds, deliveries=deliveries
        )
