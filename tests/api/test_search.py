"""Finding batches and items through a live server: `q=` on the batch list (id prefix, label,
an item's ref or source), its bounded window, and `from_ref=` on the item list."""

from __future__ import annotations

from typing import Any

import pytest

from batchcrop.batches import reads as reads_module
from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer


def _submit(api: LiveServer, sources: list[str], **fields: Any) -> dict[str, Any]:
    response = api.client.post("/v1/batches", json=batch_body(sources, **fields))
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


def _found(api: LiveServer, **params: Any) -> list[str]:
    """Every batch id the list gives for `params`, following the cursor to the end."""
    ids: list[str] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = api.client.get("/v1/batches", params=query)
        assert response.status_code == 200, response.text
        ids += [b["id"] for b in response.json()["batches"]]
        cursor = response.json()["next_cursor"]
        if cursor is None:
            return ids


def test_search_finds_batches_by_id_label_ref_and_source(
    api: LiveServer, sources: list[str]
) -> None:
    """`q` matches an id prefix (any case), part of a label (any case, `%` and `_` literal),
    and an item's exact ref or exact source; nothing else."""
    autumn = _submit(api, sources[:2], label="Autumn 50%_off import")["id"]
    spring = _submit(api, sources[2:4], label="spring import")["id"]
    unlabelled = _submit(api, sources[4:5])["id"]
    assert [autumn] == _found(api, q=autumn[:8].upper())
    assert [spring, autumn] == _found(api, q="IMPORT")
    assert [autumn] == _found(api, q="50%_off")
    assert _found(api, q="50%off") == []
    # batch_body names the items sku-0, sku-1, ... within each batch.
    assert [unlabelled, spring, autumn] == _found(api, q="sku-0")
    assert _found(api, q="sku-") == []
    assert [spring] == _found(api, q=sources[3])
    assert _found(api, q=sources[3][:-1]) == []


def test_search_combines_with_state_and_label(api: LiveServer, sources: list[str]) -> None:
    """`q` narrows what `state` and `label` keep."""
    kept = _submit(api, sources[:1], label="weekly")["id"]
    cancelled = _submit(api, sources[:1], label="weekly")["id"]
    api.client.post(f"/v1/batches/{cancelled}/cancel")
    assert [kept] == _found(api, q="sku-0", state="queued")
    assert [cancelled] == _found(api, q="week", state="abandoned")
    assert [cancelled, kept] == _found(api, q=sources[0], label="weekly")
    assert _found(api, q="sku-0", label="monthly") == []


def test_filtered_listing_reads_a_bounded_window_per_request(
    api: LiveServer, sources: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a state or a search, one request reads at most the window of batches: pages may be
    short, even empty, with a cursor that goes on below them, and every match comes once."""
    monkeypatch.setattr(reads_module, "SEARCH_WINDOW_BATCHES", 3)
    oldest = _submit(api, sources[:1], label="needle")["id"]
    for _ in range(6):
        _submit(api, sources[:1])
    pages: list[list[str]] = []
    cursor = None
    while len(pages) < 5:
        query = {"q": "needle", **({"cursor": cursor} if cursor else {})}
        page = api.client.get("/v1/batches", params=query).json()
        pages.append([b["id"] for b in page["batches"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # Seven batches, three a window: two empty pages, then the oldest one, then the end.
    assert [[], [], [oldest]] == pages
    unfiltered = api.client.get("/v1/batches", params={"limit": 7}).json()
    assert len(unfiltered["batches"]) == 7


@pytest.mark.parametrize(
    "q",
    ["", "x" * 4097, "bad\0nul", "line\nbreak"],
    ids=["empty", "too-long", "nul", "control"],
)
def test_bad_searches_are_422(api: LiveServer, q: str) -> None:
    """An empty search, one longer than any source, and NUL or control characters are 422
    problems naming `q`."""
    assert_problem(api.client.get("/v1/batches", params={"q": q}), 422, field="q")


@pytest.mark.parametrize(
    "label",
    ["x" * 201, "bad\0nul", "line\nbreak"],
    ids=["too-long", "nul", "control"],
)
def test_bad_label_filters_are_422(api: LiveServer, label: str) -> None:
    """A label filter a database cannot compare (NUL: a 500 on PostgreSQL), a control
    character or one longer than any label is a 422 problem naming `label` on both databases."""
    assert_problem(api.client.get("/v1/batches", params={"label": label}), 422, field="label")


def test_from_ref_starts_the_page_at_that_item(api: LiveServer, sources: list[str]) -> None:
    """`from_ref` starts the page at the first item with that ref (among the asked states), the
    cursor goes on from there, and a ref no such item has is a 404."""
    batch = _submit(api, sources)
    path = f"/v1/batches/{batch['id']}/items"
    page = api.client.get(path, params={"from_ref": "sku-3", "limit": 2}).json()
    assert [i["ref"] for i in page["items"]] == ["sku-3", "sku-4"]
    rest = api.client.get(path, params={"cursor": page["next_cursor"]}).json()
    assert [f"sku-{n}" for n in range(5, len(sources))] == [i["ref"] for i in rest["items"]]
    claim = api.app.leases.claim("test-worker", 1, group_ids=[batch["id"]])[0]
    api.app.leases.fail(claim, "invalid_image")
    failed = api.client.get(path, params={"from_ref": "sku-0", "state": "failed"}).json()
    assert [i["ref"] for i in failed["items"]] == ["sku-0"]
    problem = assert_problem(
        api.client.get(path, params={"from_ref": "sku-1", "state": "failed"}), 404
    )
    assert "sku-1" in problem["detail"]
    assert "failed" in problem["detail"]
    assert_problem(api.client.get(path, params={"from_ref": "nope"}), 404)
