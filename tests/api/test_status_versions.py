"""Polls answered from the batch's version (ADR 0021): a 304 without building the document, and
an ETag that still changes with every transition the document shows, deliveries included."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from tests.api.conftest import batch_body
from tests.api.live import LiveServer

DOCUMENT_BUILDERS = [
    sys.modules["batchcrop.batches.reads"],
    sys.modules["batchcrop.batches.outbox"],
]
"""The modules that build status documents (reads for polls, the outbox for callbacks)."""


class Poller:
    """GETs a batch's status with the ETag of the last 200 it saw."""

    def __init__(self, api: LiveServer, batch_id: str) -> None:
        self.api = api
        self.url = f"/v1/batches/{batch_id}"
        first = api.client.get(self.url)
        assert first.status_code == 200
        self.etag = first.headers["etag"]
        self.document: dict[str, Any] = first.json()

    def poll(self) -> int:
        response = self.api.client.get(self.url, headers={"If-None-Match": self.etag})
        if response.status_code == 200:
            assert response.headers["etag"] != self.etag
            self.etag = response.headers["etag"]
            self.document = response.json()
        else:
            assert response.headers["etag"] == self.etag
        return response.status_code


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the status documents the server builds (the real builder, counted)."""
    calls: list[str] = []
    real = DOCUMENT_BUILDERS[0].status_document

    def counted(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(batch.id)
        document: dict[str, Any] = real(batch, *args, **kwargs)
        return document

    for module in DOCUMENT_BUILDERS:
        monkeypatch.setattr(module, "status_document", counted)
    return calls


def _submit(api: LiveServer, sources: list[str], **fields: Any) -> str:
    response = api.client.post("/v1/batches", json=batch_body(sources, **fields))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_304_builds_no_document(api: LiveServer, sources: list[str], built: list[str]) -> None:
    """While nothing happens, 304s are answered from the version alone: the document builder
    is not called; after a transition the next poll builds it once and is a 200."""
    batch_id = _submit(api, sources)
    poller = Poller(api, batch_id)
    built.clear()
    assert [poller.poll() for _ in range(5)] == [304] * 5
    assert built == []
    claims = api.app.leases.claim("test-worker", 1, group_ids=[batch_id])
    assert poller.poll() == 200
    assert built == [batch_id]
    assert poller.document["counts"]["in_progress"] == 1
    api.app.leases.heartbeat(claims[0])
    assert poller.poll() == 304
    assert built == [batch_id]


def test_a_client_without_the_current_tag_gets_the_document(
    api: LiveServer, sources: list[str]
) -> None:
    """The remembered version serves only the tag it was read with: an old tag, or none, gets
    the full document even while nothing moves."""
    batch_id = _submit(api, sources)
    poller = Poller(api, batch_id)
    assert api.client.get(poller.url).status_code == 200
    stale = api.client.get(poller.url, headers={"If-None-Match": '"0123"'})
    assert stale.status_code == 200
    assert stale.headers["etag"] == poller.etag


def test_every_transition_changes_the_etag(api: LiveServer, sources: list[str]) -> None:
    """Claim, success, fail, retry, give-back, abandon, reap, cancel and requeue each give a new
    document (a 200 and a new ETag) to a client holding the last one; a heartbeat does not.
    Every 200 is the document `BatchService.status` returns."""
    leases = api.app.leases
    batch_id = _submit(api, sources, max_attempts=5)
    poller = Poller(api, batch_id)
    held = leases.claim("test-worker", 5, group_ids=[batch_id])
    steps: list[tuple[str, Callable[[], object], int]] = [
        ("claim", lambda: None, 200),
        ("heartbeat", lambda: leases.heartbeat(held[0]), 304),
        ("success", lambda: leases.complete(held[0]), 200),
        ("fail", lambda: leases.fail(held[1], "invalid_image"), 200),
        ("retry", lambda: leases.retry_later(held[2], "dependency_timeout"), 200),
        ("give back", lambda: leases.give_back(held[3]), 200),
        ("abandon", lambda: leases.abandon(held[4]), 200),
        ("claim again", lambda: leases.claim("test-worker", 1, group_ids=[batch_id]), 200),
        ("reap", lambda: _expire_and_reap(api), 200),
        ("cancel", lambda: _accepted(api, f"{poller.url}/cancel", {}), 200),
        (
            "requeue",
            lambda: _accepted(api, f"{poller.url}/requeue", {"deadline_seconds": 600}),
            200,
        ),
        ("nothing", lambda: None, 304),
    ]
    for name, step, expected in steps:
        step()
        assert (name, poller.poll()) == (name, expected)
        assert poller.document == api.app.batches.status(batch_id), name


def _accepted(api: LiveServer, path: str, body: dict[str, Any]) -> None:
    response = api.client.post(path, json=body)
    assert response.status_code == 202, response.text


def _expire_and_reap(api: LiveServer) -> None:
    """Expire the one lease held (as if its worker died long ago) and run a reaper pass."""
    expired = "UPDATE lease_items SET lease_expires_at = 1 WHERE state = 'in_progress'"
    with api.app.engine.begin() as conn:
        conn.execute(sa.text(expired))
    assert api.app.leases.reap().retried == 1


def test_deliveries_move_the_etag(
    serve: Callable[..., LiveServer], sources: list[str], built: list[str]
) -> None:
    """A batch with a callback: the polled document shows its deliveries, and each transition
    of a delivery (its own lease group) gives a new document."""
    api = serve(callback_hosts=("127.0.0.1:*",))
    batch_id = _submit(api, sources, callback_url="http://127.0.0.1:9/hook")
    poller = Poller(api, batch_id)
    assert poller.document["deliveries"] == []
    assert api.client.post(f"{poller.url}/cancel").status_code == 202  # terminal: a delivery
    assert poller.poll() == 200
    [delivery] = poller.document["deliveries"]
    assert delivery["state"] == "queued"
    [claim] = api.app.leases.claim("deliverer", 1, group_ids=[delivery["id"]])
    assert poller.poll() == 200
    assert poller.document["deliveries"][0]["state"] == "in_progress"
    api.app.leases.retry_later(claim, "http_503")
    assert poller.poll() == 200
    assert poller.document["deliveries"][0]["reason"] == "http_503"
    assert poller.document == api.app.batches.status(batch_id)
    built.clear()
    assert poller.poll() == 304
    assert built == []
