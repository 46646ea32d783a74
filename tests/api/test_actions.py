"""Operator actions through a live server: cancel and requeue."""

from __future__ import annotations

import uuid
from typing import Any

from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer


def _submit(api: LiveServer, sources: list[str], **fields: Any) -> dict[str, Any]:
    response = api.client.post("/v1/batches", json=batch_body(sources, **fields))
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def test_cancel_is_202_and_abandons_unclaimed_items(api: LiveServer, sources: list[str]) -> None:
    """Cancel answers 202 with the status: the flag set and queued items abandoned (cancelled)."""
    batch = _submit(api, sources)
    response = api.client.post(f"/v1/batches/{batch['id']}/cancel")
    assert response.status_code == 202
    document = response.json()
    assert (document["cancel_requested"], document["state"]) == (True, "abandoned")
    assert document["failures"] == {"cancelled": len(sources)}
    assert document["terminal_reason"]
    again = api.client.post(f"/v1/batches/{batch['id']}/cancel")
    assert again.status_code == 202


def test_requeue_after_cancel_needs_a_deadline(api: LiveServer, sources: list[str]) -> None:
    """Requeuing a cancelled batch without deadline_seconds is a 409 naming it; with one, 202."""
    batch = _submit(api, sources)
    api.client.post(f"/v1/batches/{batch['id']}/cancel")
    refused = api.client.post(f"/v1/batches/{batch['id']}/requeue")
    assert_problem(refused, 409, field="deadline_seconds")
    response = api.client.post(f"/v1/batches/{batch['id']}/requeue", json={"deadline_seconds": 600})
    assert response.status_code == 202, response.text
    document = response.json()
    assert (document["state"], document["cancel_requested"]) == ("queued", False)
    assert document["counts"]["queued"] == len(sources)
    assert document["deadline_at"] < batch["deadline_at"]


def test_cancel_of_a_batch_that_has_ended_is_refused_and_leaves_it_requeueable(
    api: LiveServer, sources: list[str]
) -> None:
    """A cancel once every item has ended is a 409 `batch-ended` naming the state, and sets no
    cancel flag: a plain requeue still gives the failed items another try (with the flag set,
    the requeue would have needed a new deadline)."""
    batch = _submit(api, sources)
    for claim in api.app.leases.claim("test-worker", len(sources), group_ids=[batch["id"]]):
        api.app.leases.fail(claim, "invalid_image")
    refused = api.client.post(f"/v1/batches/{batch['id']}/cancel")
    problem = assert_problem(refused, 409)
    assert problem["type"].endswith("batch-ended"), problem
    assert "already ended (failed)" in problem["detail"], problem
    status = api.client.get(f"/v1/batches/{batch['id']}").json()
    assert (status["state"], status["cancel_requested"]) == ("failed", False)
    requeued = api.client.post(f"/v1/batches/{batch['id']}/requeue")
    assert requeued.status_code == 202, requeued.text
    assert requeued.json()["counts"]["queued"] == len(sources)


def test_requeue_chosen_failed_items(api: LiveServer, sources: list[str]) -> None:
    """`item_ids` + `states` requeue only those items; the attempt number keeps growing."""
    batch = _submit(api, sources)
    claims = api.app.leases.claim("test-worker", 2, group_ids=[batch["id"]])
    for claim in claims:
        api.app.leases.fail(claim, "invalid_image")
    chosen = claims[0].item_id
    response = api.client.post(
        f"/v1/batches/{batch['id']}/requeue",
        json={"states": ["failed"], "item_ids": [chosen]},
    )
    assert response.status_code == 202, response.text
    assert response.json()["counts"]["failed"] == 1
    item = api.client.get(f"/v1/batches/{batch['id']}/items/{chosen}").json()
    assert (item["state"], item["attempt"]) == ("queued", 1)
    again = api.app.leases.claim("test-worker", 5, group_ids=[batch["id"]])
    assert {c.attempt for c in again if c.item_id == chosen} == {2}


def test_bad_requeue_bodies_are_422(api: LiveServer, sources: list[str]) -> None:
    """Only failed/abandoned can be requeued; item ids are UUIDs; deadlines positive."""
    batch = _submit(api, sources)
    path = f"/v1/batches/{batch['id']}/requeue"
    for body, field in (
        ({"states": ["succeeded"]}, "states[0]"),
        ({"states": []}, "states"),
        ({"item_ids": ["nope"]}, "item_ids[0]"),
        ({"deadline_seconds": 0}, "deadline_seconds"),
        ({"deadline": 60}, "deadline"),
    ):
        assert_problem(api.client.post(path, json=body), 422, field=field)


def test_requeue_of_unknown_items_moves_nothing(api: LiveServer, sources: list[str]) -> None:
    """Item ids that are not failed/abandoned items of the batch are simply not moved."""
    batch = _submit(api, sources)
    response = api.client.post(
        f"/v1/batches/{batch['id']}/requeue", json={"item_ids": [str(uuid.uuid4())]}
    )
    assert response.status_code == 202
    assert response.json()["counts"]["queued"] == len(sources)
