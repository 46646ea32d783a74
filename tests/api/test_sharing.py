"""Sharing the fleet through the API: a batch's priority at submit and later, pause, resume."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer


def _submit(api: LiveServer, sources: list[str], **fields: Any) -> dict[str, Any]:
    response = api.client.post("/v1/batches", json=batch_body(sources, **fields))
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def test_priority_is_set_at_submit_and_changed_later(api: LiveServer, sources: list[str]) -> None:
    """`priority` in the body is the batch's; POST .../priority changes it and the ETag."""
    batch = _submit(api, sources, priority=3)
    assert (batch["priority"], batch["paused"]) == (3, False)
    etag = api.client.get(f"/v1/batches/{batch['id']}").headers["ETag"]
    response = api.client.post(f"/v1/batches/{batch['id']}/priority", json={"priority": -2})
    assert response.status_code == 202, response.text
    assert response.json()["priority"] == -2
    polled = api.client.get(f"/v1/batches/{batch['id']}", headers={"If-None-Match": etag})
    assert (polled.status_code, polled.json()["priority"]) == (200, -2)


def test_a_priority_out_of_bounds_is_a_422_naming_the_field(
    api: LiveServer, sources: list[str]
) -> None:
    """Priorities outside -10..10, or not integers, are refused with the field named."""
    assert_problem(api.client.post("/v1/batches", json=batch_body(sources, priority=11)), 422)
    batch = _submit(api, sources)
    for bad in (-11, "high", 1.5, True):
        response = api.client.post(f"/v1/batches/{batch['id']}/priority", json={"priority": bad})
        problem = assert_problem(response, 422)
        assert "priority" in str(problem), problem


def test_pause_and_resume(api: LiveServer, sources: list[str]) -> None:
    """A paused batch says so (new ETag) and gives no claim; resumed, its items are claimed."""
    batch = _submit(api, sources)
    etag = api.client.get(f"/v1/batches/{batch['id']}").headers["ETag"]
    paused = api.client.post(f"/v1/batches/{batch['id']}/pause")
    assert (paused.status_code, paused.json()["paused"]) == (202, True)
    polled = api.client.get(f"/v1/batches/{batch['id']}", headers={"If-None-Match": etag})
    assert (polled.status_code, polled.json()["paused"]) == (200, True)
    assert api.app.leases.claim("test-worker", 5, group_ids=[batch["id"]]) == []
    resumed = api.client.post(f"/v1/batches/{batch['id']}/resume")
    assert (resumed.status_code, resumed.json()["paused"]) == (202, False)
    claims = api.app.leases.claim("test-worker", 100, group_ids=[batch["id"]])
    assert len(sources) == len(claims)


def test_pause_of_an_unknown_batch_is_a_404(api: LiveServer) -> None:
    """Pause, resume and priority of a batch that does not exist answer 404."""
    missing = "7b1e4c1e-0000-4000-8000-000000000000"
    for path, body in (("pause", None), ("resume", None), ("priority", {"priority": 1})):
        response = api.client.post(f"/v1/batches/{missing}/{path}", json=body)
        assert_problem(response, 404)
