"""Cheap polling of the status document: a strong ETag, 304s and a growing `Retry-After`.

The ETag is a hash of the exact bytes of the status document, which holds only state-bearing
fields, so it changes exactly when something happened to the batch; a poll whose tag is still
current is answered from the batch's version, without building the document (ADR 0021).
`Retry-After` grows from `RETRY_AFTER_MIN_SECONDS` to `RETRY_AFTER_MAX_SECONDS` with the time
since the batch last moved: a busy batch is polled every second, a quiet one every ten. A
terminal batch gets none — it never changes again unless an operator requeues it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.responses import Response

from batchcrop.batches.documents import Batch, parse_iso
from batchcrop.batches.service import BatchService
from leases import TERMINAL

RETRY_AFTER_MIN_SECONDS = 1
RETRY_AFTER_MAX_SECONDS = 10
RETRY_AFTER_STEP_SECONDS = 10.0
"""One more second of `Retry-After` per this many seconds since the batch last moved."""
ETAG_HEX_CHARS = 32
BATCHES_CACHED_MAX = 10_000
"""Batches whose row, and whose last ETag with its version, one API process keeps in memory (a
few hundred bytes each)."""
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
    updated = parse_iso(str(status["updated_at"]))
    quiet_seconds = max(0.0, (now - updated).total_seconds())
    grown = RETRY_AFTER_MIN_SECONDS + int(quiet_seconds // RETRY_AFTER_STEP_SECONDS)
    return min(RETRY_AFTER_MAX_SECONDS, grown)


def _hints(etag: str, status: Mapping[str, Any], now: datetime | None) -> dict[str, str]:
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    retry_after = retry_after_seconds(status, now or datetime.now(UTC))
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return headers


def status_response(
    status: Mapping[str, Any], *, if_none_match: str | None, now: datetime | None = None
) -> Response:
    """200 with the document, or an empty 304 when `If-None-Match` holds its ETag.

    Both carry the ETag and the polling hints (`Cache-Control: no-cache`, `Retry-After`).
    """
    body = encode(status)
    headers = _hints(etag_of(body), status, now)
    if if_none_match_matches(if_none_match, headers["ETag"]):
        return Response(status_code=304, headers=headers)
    return Response(content=body, status_code=200, headers=headers, media_type=JSON_MEDIA_TYPE)


@dataclass(frozen=True)
class Tagged:
    """What a 304 needs of the last document served for a batch: the batch's version when it
    was read, its ETag, and the fields `Retry-After` is computed from."""

    version: str
    etag: str
    hints: Mapping[str, Any]


class StatusReader:
    """Answers to polls of the status document; thread-safe.

    A batch's row (its render request, store, label, callback URL) never changes after
    submission, so it is read once and cached. Each poll first reads the batch's version
    (`BatchService.version`: one row per lease group, whatever the batch's size). When it equals
    the version the last served document was read under and `If-None-Match` holds that
    document's ETag, the answer is a 304 without reading or building the document; otherwise
    the document is read (`BatchService.status_of`, the same one `BatchService.status` returns)
    and its ETag remembered with the version. The version is read before the document, so a
    remembered version is never newer than its document: a transition committed in between
    only costs one more 200.
    """

    def __init__(self, batches: BatchService, *, cached_max: int = BATCHES_CACHED_MAX) -> None:
        self._batches = batches
        # lru_cache never stores an exception, so an unknown id is looked up again next time.
        self._batch: Callable[[str], Batch] = functools.lru_cache(maxsize=cached_max)(batches.batch)
        self._tagged: OrderedDict[str, Tagged] = OrderedDict()
        self._tagged_max = cached_max
        self._lock = threading.Lock()

    def respond(
        self, batch_id: str, *, if_none_match: str | None, now: datetime | None = None
    ) -> Response:
        """`status_response` for the batch's current document, a 304 answered from its version
        when nothing happened since the tag the client holds. `NoSuchBatch` for an unknown id."""
        batch = self._batch(batch_id)
        version = self._batches.version(batch)
        tagged = self._remembered(batch_id)
        if (
            version is not None
            and tagged is not None
            and tagged.version == version
            and if_none_match_matches(if_none_match, tagged.etag)
        ):
            return Response(status_code=304, headers=_hints(tagged.etag, tagged.hints, now))
        document = self._batches.status_of(batch)
        response = status_response(document, if_none_match=if_none_match, now=now)
        if version is not None:
            hints = {"state": document["state"], "updated_at": document["updated_at"]}
            self._remember(batch_id, Tagged(version, response.headers["ETag"], hints))
        return response

    def _remembered(self, batch_id: str) -> Tagged | None:
        with self._lock:
            return self._tagged.get(batch_id)

    def _remember(self, batch_id: str, tagged: Tagged) -> None:
        with self._lock:
            self._tagged[batch_id] = tagged
            self._tagged.move_to_end(batch_id)
            while len(self._tagged) > self._tagged_max:
                self._tagged.popitem(last=False)
