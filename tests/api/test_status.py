"""GET /v1/batches/{id}: strong ETag, 304 Not Modified, Cache-Control and Retry-After."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from batchcrop.api.hosts import is_loopback
from batchcrop.api.polling import (
    RETRY_AFTER_MAX_SECONDS,
    if_none_match_matches,
    retry_after_seconds,
)
from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer


def _submit(api: LiveServer, sources: list[str]) -> dict[str, Any]:
    response = api.client.post("/v1/batches", json=batch_body(sources))
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def _not_modified_count(api: LiveServer) -> float:
    for line in api.client.get("/metrics").text.splitlines():
        if line.startswith("batchcrop_poll_not_modified_total "):
            return float(line.split()[1])
    raise AssertionError("batchcrop_poll_not_modified_total missing from /metrics")


def test_etag_and_304(api: LiveServer, sources: list[str]) -> None:
    """The ETag is strong; If-None-Match with it ⇒ an empty 304 carrying the same headers."""
    batch = _submit(api, sources)
    first = api.client.get(f"/v1/batches/{batch['id']}")
    etag = first.headers["etag"]
    assert etag.startswith('"')
    assert not etag.startswith("W/")
    assert first.headers["cache-control"] == "no-cache"
    assert first.headers["retry-after"] == "1"
    second = api.client.get(f"/v1/batches/{batch['id']}", headers={"If-None-Match": etag})
    assert second.status_code == 304
    assert second.content == b""
    assert etag == second.headers["etag"]
    assert second.headers["cache-control"] == "no-cache"
    assert second.headers["retry-after"] == "1"


@pytest.mark.parametrize("header", ['"other", {etag}', "W/{etag}", "*", '{etag}, "other"'])
def test_if_none_match_lists_weak_tags_and_star(
    api: LiveServer, sources: list[str], header: str
) -> None:
    """A list containing the tag, its weak form (weak comparison) or `*` all give 304."""
    batch = _submit(api, sources)
    etag = api.client.get(f"/v1/batches/{batch['id']}").headers["etag"]
    response = api.client.get(
        f"/v1/batches/{batch['id']}", headers={"If-None-Match": header.format(etag=etag)}
    )
    assert response.status_code == 304


def test_stale_etag_gets_the_document(api: LiveServer, sources: list[str]) -> None:
    """An If-None-Match that does not match is answered 200 with the body."""
    batch = _submit(api, sources)
    response = api.client.get(f"/v1/batches/{batch['id']}", headers={"If-None-Match": '"old"'})
    assert response.status_code == 200
    assert batch["id"] == response.json()["id"]


def test_etag_changes_exactly_when_something_happens(api: LiveServer, sources: list[str]) -> None:
    """Unchanged batch ⇒ same ETag; a claim or a commit ⇒ a new ETag and a new document."""
    batch = _submit(api, sources)
    url = f"/v1/batches/{batch['id']}"
    etag = api.client.get(url).headers["etag"]
    assert etag == api.client.get(url).headers["etag"]
    claims = api.app.leases.claim("test-worker", 1, group_ids=[batch["id"]])
    assert len(claims) == 1
    moved = api.client.get(url, headers={"If-None-Match": etag})
    assert moved.status_code == 200
    assert moved.json()["counts"]["in_progress"] == 1
    assert etag != moved.headers["etag"]
    api.app.leases.fail(claims[0], "invalid_image")
    failed = api.client.get(url, headers={"If-None-Match": moved.headers["etag"]})
    assert failed.status_code == 200
    assert failed.json()["failures"] == {"invalid_image": 1}


def test_304s_are_counted_in_metrics(api: LiveServer, sources: list[str]) -> None:
    """Every 304 increments batchcrop_poll_not_modified; 200s do not."""
    batch = _submit(api, sources)
    url = f"/v1/batches/{batch['id']}"
    before = _not_modified_count(api)
    etag = api.client.get(url).headers["etag"]
    for _ in range(3):
        assert api.client.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert before + 3 == _not_modified_count(api)


def test_terminal_batch_has_no_retry_after(api: LiveServer, sources: list[str]) -> None:
    """Once terminal (here: cancelled ⇒ abandoned) neither 200 nor 304 carries Retry-After."""
    batch = _submit(api, sources)
    cancelled = api.client.post(f"/v1/batches/{batch['id']}/cancel")
    assert cancelled.json()["state"] == "abandoned"
    full = api.client.get(f"/v1/batches/{batch['id']}")
    assert "retry-after" not in full.headers
    assert full.headers["cache-control"] == "no-cache"
    again = api.client.get(
        f"/v1/batches/{batch['id']}", headers={"If-None-Match": full.headers["etag"]}
    )
    assert again.status_code == 304
    assert "retry-after" not in again.headers


@pytest.mark.parametrize(
    "batch_id", ["6f1f0bd4-6c0e-4a55-9b8e-2f1d0c3a7e11", "not-a-uuid", "1' OR '1'='1", "%00"]
)
def test_unknown_and_malformed_ids_are_404(api: LiveServer, batch_id: str) -> None:
    """Unknown UUIDs and strings that are not UUIDs are both a 404 problem, on every route."""
    for path in ("", "/items", "/events", f"/items/{uuid.uuid4()}"):
        assert_problem(api.client.get(f"/v1/batches/{batch_id}{path}"), 404)
    for action in ("cancel", "requeue"):
        assert_problem(api.client.post(f"/v1/batches/{batch_id}/{action}"), 404)


def test_uppercase_uuid_finds_the_batch(api: LiveServer, sources: list[str]) -> None:
    """Ids are compared as UUIDs: the upper-case spelling names the same batch."""
    batch = _submit(api, sources)
    response = api.client.get(f"/v1/batches/{batch['id'].upper()}")
    assert batch["id"] == response.json()["id"]


def _status(state: str, updated: datetime) -> dict[str, Any]:
    return {"state": state, "updated_at": updated.isoformat().replace("+00:00", "Z")}


@pytest.mark.parametrize(
    ("quiet_seconds", "expected"),
    [(0, 1), (9.9, 1), (10, 2), (45, 5), (89, 9), (90, 10), (3600, 10), (-3, 1)],
)
def test_retry_after_grows_from_1_to_10_seconds(quiet_seconds: float, expected: int) -> None:
    """Retry-After is 1 s for a batch that just moved, one more second per 10 s quiet, max 10."""
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    status = _status("in_progress", now - timedelta(seconds=quiet_seconds))
    assert expected == retry_after_seconds(status, now)
    assert expected <= RETRY_AFTER_MAX_SECONDS


@pytest.mark.parametrize("state", ["succeeded", "failed", "abandoned"])
def test_terminal_states_get_no_retry_after(state: str) -> None:
    """A terminal status never asks to be polled again."""
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert retry_after_seconds(_status(state, now), now) is None


def test_if_none_match_parsing() -> None:
    """Absent, empty and non-matching headers do not match; lists and weak forms do."""
    assert not if_none_match_matches(None, '"a"')
    assert not if_none_match_matches("", '"a"')
    assert not if_none_match_matches('"b", "c"', '"a"')
    assert if_none_match_matches(' "b" , W/"a"', '"a"')


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("example.com", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    """Only loopback addresses and localhost count as loopback; 0.0.0.0 and :: do not."""
    assert is_loopback(host) is loopback
