"""Completion callbacks through a live server (docs/api.md, completion callbacks): the polled
status document carries the deliveries, and redelivery is refused while it cannot apply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer
from tests.receiver import SECRET, Receiver, receiving


@pytest.fixture
def receiver() -> Any:
    with receiving() as receiver:
        yield receiver


@pytest.fixture
def hooked(serve: Callable[..., LiveServer]) -> LiveServer:
    """A live server that may call loopback receivers and holds the signing secret."""
    return serve(
        callback_secret=SECRET, callback_hosts=("127.0.0.1:*",), callback_retry_seconds=0.05
    )


def _deliver(api: LiveServer, receiver: Receiver, processed: int) -> None:
    deliverer = api.app.deliverer("test-deliverer")
    assert deliverer is not None
    while len(receiver.processed) < processed:
        assert deliverer.deliver_due() > 0, receiver.requests


def test_the_polled_status_carries_the_deliveries_and_their_changes_change_the_etag(
    hooked: LiveServer, receiver: Receiver, sources: list[str]
) -> None:
    """GET /v1/batches/{id} lists the callback's deliveries as the service does; when the
    delivery succeeds, the old ETag no longer answers 304."""
    body = batch_body(sources[:1], callback_url=receiver.url)
    batch = hooked.client.post("/v1/batches", json=body).json()
    hooked.client.post(f"/v1/batches/{batch['id']}/cancel")
    queued = hooked.client.get(f"/v1/batches/{batch['id']}")
    assert queued.json()["deliveries"] == hooked.app.batches.status(batch["id"])["deliveries"]
    assert [d["state"] for d in queued.json()["deliveries"]] == ["queued"]
    etag = queued.headers["etag"]
    assert (
        hooked.client.get(f"/v1/batches/{batch['id']}", headers={"If-None-Match": etag}).status_code
        == 304
    )
    _deliver(hooked, receiver, 1)
    delivered = hooked.client.get(f"/v1/batches/{batch['id']}", headers={"If-None-Match": etag})
    assert delivered.status_code == 200
    assert delivered.headers["etag"] != etag
    assert [d["state"] for d in delivered.json()["deliveries"]] == ["succeeded"]


def test_redeliver_of_a_batch_running_again_is_409(
    hooked: LiveServer, receiver: Receiver, sources: list[str]
) -> None:
    """Requeued after its callback was delivered, the batch runs again: redeliver is a 409
    problem document and no delivery is written."""
    batch = hooked.client.post(
        "/v1/batches", json=batch_body(sources[:1], callback_url=receiver.url)
    ).json()
    hooked.client.post(f"/v1/batches/{batch['id']}/cancel")
    _deliver(hooked, receiver, 1)
    requeued = hooked.client.post(
        f"/v1/batches/{batch['id']}/requeue", json={"deadline_seconds": 600}
    )
    assert requeued.json()["state"] == "queued"
    problem = assert_problem(hooked.client.post(f"/v1/batches/{batch['id']}/redeliver"), 409)
    assert problem["type"].endswith("nothing-to-redeliver")
    assert "has not ended" in problem["detail"]
    assert len(hooked.client.get(f"/v1/batches/{batch['id']}").json()["deliveries"]) == 1


def test_the_former_notify_url_field_is_still_accepted(
    hooked: LiveServer, receiver: Receiver, sources: list[str]
) -> None:
    """A body with `notify_url` (ADR 0030) gets its callback; the status document carries the
    URL as `callback_url` and, deprecated, as `notify_url`."""
    response = hooked.client.post(
        "/v1/batches", json=batch_body(sources[:1], notify_url=receiver.url)
    )
    assert response.status_code == 201, response.text
    document = response.json()
    assert (receiver.url, receiver.url) == (document["callback_url"], document["notify_url"])
    hooked.client.post(f"/v1/batches/{document['id']}/cancel")
    _deliver(hooked, receiver, 1)
    assert [
        d["state"] for d in hooked.client.get(f"/v1/batches/{document['id']}").json()["deliveries"]
    ] == ["succeeded"]


@pytest.mark.parametrize("field", ["callback_url", "notify_url"])
def test_a_refused_callback_url_is_a_422_naming_the_field_given(
    hooked: LiveServer, sources: list[str], field: str
) -> None:
    """A URL outside the allowlist is refused naming the field the client used."""
    body = batch_body(sources[:1], **{field: "https://elsewhere.example.com/hook"})
    problem = assert_problem(hooked.client.post("/v1/batches", json=body), 422, field=field)
    assert "names a host that is not allowed" in problem["detail"]


def test_both_names_of_the_callback_url_are_a_422(
    hooked: LiveServer, receiver: Receiver, sources: list[str]
) -> None:
    """`callback_url` and its former name `notify_url` together are refused, naming the latter."""
    body = batch_body(sources[:1], callback_url=receiver.url, notify_url=receiver.url)
    problem = assert_problem(hooked.client.post("/v1/batches", json=body), 422, field="notify_url")
    assert "give callback_url only" in problem["detail"]
