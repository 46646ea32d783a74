"""Listing batches, items and events through a live server: filters, pages and cursors."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer


def _submit(api: LiveServer, sources: list[str]) -> dict[str, Any]:
    response = api.client.post("/v1/batches", json=batch_body(sources))
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def _all_pages(api: LiveServer, path: str, key: str, **params: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        page = api.client.get(path, params=query).json()
        found.extend(page[key])
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def test_batches_newest_first_with_pages(api: LiveServer, sources: list[str]) -> None:
    """Every batch appears once, newest first, across pages of two."""
    ids = [_submit(api, sources[:1])["id"] for _ in range(5)]
    listed = _all_pages(api, "/v1/batches", "batches", limit=2)
    assert [b["id"] for b in listed] == ids[::-1]


def test_batches_filtered_by_state(api: LiveServer, sources: list[str]) -> None:
    """`state=` keeps only batches whose computed state matches."""
    queued = _submit(api, sources[:1])["id"]
    cancelled = _submit(api, sources[:1])["id"]
    api.client.post(f"/v1/batches/{cancelled}/cancel")
    by_state = {
        s: [b["id"] for b in _all_pages(api, "/v1/batches", "batches", state=s)]
        for s in ("queued", "abandoned", "succeeded")
    }
    assert by_state == {"queued": [queued], "abandoned": [cancelled], "succeeded": []}


def test_items_pages_and_state_filter(api: LiveServer, sources: list[str]) -> None:
    """Items come in submission order across pages; repeated `state` filters combine."""
    batch = _submit(api, sources)
    path = f"/v1/batches/{batch['id']}/items"
    items = _all_pages(api, path, "items", limit=4)
    assert [i["ref"] for i in items] == [f"sku-{n}" for n in range(len(sources))]
    claim = api.app.leases.claim("test-worker", 1, group_ids=[batch["id"]])[0]
    api.app.leases.fail(claim, "invalid_image")
    failed = api.client.get(path, params={"state": ["failed"]}).json()["items"]
    assert [(i["id"], i["error_category"]) for i in failed] == [(claim.item_id, "invalid_image")]
    several = api.client.get(path, params={"state": ["failed", "queued"]}).json()["items"]
    assert len(several) == len(sources)


def test_one_item(api: LiveServer, sources: list[str]) -> None:
    """An item document has the contract's fields; an item of another batch is a 404."""
    batch = _submit(api, sources)
    other = _submit(api, sources[:1])
    first = api.client.get(f"/v1/batches/{batch['id']}/items", params={"limit": 1}).json()
    item_id = first["items"][0]["id"]
    item = api.client.get(f"/v1/batches/{batch['id']}/items/{item_id}").json()
    assert set(item) == {
        "id",
        "batch_id",
        "ref",
        "source",
        "focus_box",
        "state",
        "attempt",
        "error_category",
        "updated_at",
        "derivatives",
        "preview",
        "error_message",
    }
    assert (item["batch_id"], item["state"], item["attempt"]) == (batch["id"], "queued", 0)
    assert (item["focus_box"], item["preview"]) == (None, None)
    assert_problem(api.client.get(f"/v1/batches/{other['id']}/items/{item_id}"), 404)
    assert_problem(api.client.get(f"/v1/batches/{batch['id']}/items/{uuid.uuid4()}"), 404)


def test_events_timeline_and_item_filter(api: LiveServer, sources: list[str]) -> None:
    """Events are oldest first, page with cursors, and `item=` keeps one item's timeline (which
    starts at its first claim: a creation logs no event)."""
    batch = _submit(api, sources)
    path = f"/v1/batches/{batch['id']}/events"
    claim, other = api.app.leases.claim("test-worker", 2, group_ids=[batch["id"]])
    api.app.leases.fail(claim, "invalid_image")
    api.app.leases.complete(other)
    events = _all_pages(api, path, "events", limit=3)
    assert len(events) == 4
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    mine = api.client.get(path, params={"item": claim.item_id.upper()}).json()["events"]
    assert [(e["from_state"], e["to_state"]) for e in mine] == [
        ("queued", "in_progress"),
        ("in_progress", "failed"),
    ]
    assert mine[0]["worker_id"] == "test-worker"
    assert mine[1]["reason"] == "invalid_image"


@pytest.mark.parametrize("cursor", ["abc", "-1", "1" * 40, "1.5", "∞"])
def test_bad_cursors_are_422(api: LiveServer, sources: list[str], cursor: str) -> None:
    """A cursor this server did not hand out is a 422 naming `cursor`, on every list."""
    batch = _submit(api, sources[:1])
    for path in (
        "/v1/batches",
        f"/v1/batches/{batch['id']}/items",
        f"/v1/batches/{batch['id']}/events",
    ):
        assert_problem(api.client.get(path, params={"cursor": cursor}), 422, field="cursor")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"state": "done"}, "state"),
    ],
)
def test_bad_list_parameters_are_422(api: LiveServer, params: dict[str, Any], field: str) -> None:
    """Limits outside 1..1000 and unknown states are 422 problems naming the parameter."""
    assert_problem(api.client.get("/v1/batches", params=params), 422, field=field)


def test_bad_event_item_filter_is_422(api: LiveServer, sources: list[str]) -> None:
    """`item=` must be a UUID."""
    batch = _submit(api, sources[:1])
    response = api.client.get(f"/v1/batches/{batch['id']}/events", params={"item": "x"})
    assert_problem(response, 422, field="item")


def test_meta_names_the_state_vocabulary(api: LiveServer) -> None:
    """`/v1/meta` lists the states in lifecycle order and the terminal, unfinished,
    requeueable and re-croppable subsets the engine uses (the operator page reads them from
    here)."""
    meta = api.client.get("/v1/meta").json()
    assert meta == {
        "states": ["queued", "in_progress", "retryable", "succeeded", "failed", "abandoned"],
        "terminal_states": ["succeeded", "failed", "abandoned"],
        "unfinished_states": ["queued", "in_progress", "retryable"],
        "requeueable_states": ["failed", "abandoned"],
        "recroppable_states": ["succeeded", "failed"],
    }
