"""Re-cropping an item with a focus box through a live server: the preview of each ratio's
window, the re-crop itself, its conflicts, and two operators re-cropping one item at once."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer
from tests.web.conftest import process

CONCURRENT_OPERATORS = 6


def _done_batch(api: LiveServer, sources: list[str]) -> tuple[str, dict[str, Any]]:
    """A batch of the first source, processed; (batch id, its item document)."""
    response = api.client.post("/v1/batches", json=batch_body(sources[:1]))
    assert response.status_code == 201, response.text
    batch_id = response.json()["id"]
    assert process(api, batch_id)["state"] == "succeeded"
    (item,) = api.client.get(f"/v1/batches/{batch_id}/items").json()["items"]
    return batch_id, item


def _box_in(item: dict[str, Any], api: LiveServer) -> list[int]:
    """A focus box in the source's left third, from its thumbnail's source size."""
    thumb = api.client.get(f"/v1/batches/{item['batch_id']}/items/{item['id']}/source-thumbnail")
    width, height = int(thumb.headers["x-source-width"]), int(thumb.headers["x-source-height"])
    return [1, height // 4, max(2, width // 4), max(height // 4 + 1, height // 2)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_recrop_renders_the_item_again_under_new_keys(
    api: LiveServer, sources: list[str]
) -> None:
    """The preview's windows are the new derivatives' crop boxes; the re-crop queues the item
    (counts and ETag move), a worker renders it under new keys, the old objects stay, and the
    timeline records the re-crop with its box."""
    batch_id, item = _done_batch(api, sources)
    base = f"/v1/batches/{batch_id}/items/{item['id']}"
    unfocused = api.client.get(f"{base}/windows").json()
    assert [d["crop_box"] for d in item["derivatives"]] == [
        w["crop_box"] for w in unfocused["windows"]
    ]
    box = _box_in(item, api)
    previewed = api.client.get(f"{base}/windows", params={"focus": ",".join(map(str, box))})
    assert previewed.status_code == 200, previewed.text
    assert box == previewed.json()["focus_box"]
    before = api.client.get(f"/v1/batches/{batch_id}")

    response = api.client.post(f"{base}/recrop", json={"focus_box": box})

    assert response.status_code == 202, response.text
    pending = response.json()
    assert ("queued", box) == (pending["state"], pending["focus_box"])
    assert item["derivatives"] == pending["derivatives"]  # kept until the new success
    after = api.client.get(f"/v1/batches/{batch_id}")
    assert (after.json()["state"], after.json()["counts"]["queued"]) == ("queued", 1)
    assert before.headers["etag"] != after.headers["etag"]

    assert process(api, batch_id)["state"] == "succeeded"
    redone = api.client.get(base).json()
    assert [w["crop_box"] for w in previewed.json()["windows"]] == [
        d["crop_box"] for d in redone["derivatives"]
    ]
    old_keys = {d["key"] for d in item["derivatives"]}
    new_keys = {d["key"] for d in redone["derivatives"]}
    assert len(new_keys) == len(item["derivatives"])
    assert not old_keys & new_keys
    store = Path(api.app.settings.store.removeprefix("file://"))
    for derivative in item["derivatives"]:
        assert derivative["sha256"] == _sha256(store / derivative["key"])
    assert len(redone["derivatives"]) == len(api.app.batches.manifest(batch_id))
    events = api.client.get(f"/v1/batches/{batch_id}/events", params={"item": item["id"]}).json()
    recrops = [e for e in events["events"] if e["reason"] == "recrop"]
    assert [("succeeded", "queued", box)] == [
        (e["from_state"], e["to_state"], e["focus_box"]) for e in recrops
    ]
    assert all(e["focus_box"] is None for e in events["events"] if e["reason"] != "recrop")


def test_a_recrop_of_an_unfinished_item_or_a_cancelled_batch_is_409(
    api: LiveServer, sources: list[str]
) -> None:
    """A queued item is a 409 naming its state; a pending re-crop's box is named to the next
    operator; a cancelled batch is a 409 of its own."""
    batch_id, item = _done_batch(api, sources)
    path = f"/v1/batches/{batch_id}/items/{item['id']}/recrop"
    first = api.client.post(path, json={"focus_box": [0, 0, 10, 10]})
    assert first.status_code == 202, first.text
    second = assert_problem(api.client.post(path, json={"focus_box": [5, 5, 20, 20]}), 409)
    assert (
        second["type"],
        second["state"],
        second["focus_box"],
    ) == ("urn:batchcrop:problem:recrop-conflict", "queued", [0, 0, 10, 10])
    api.client.post(f"/v1/batches/{batch_id}/cancel")
    api.client.post(f"/v1/batches/{batch_id}/requeue", json={"deadline_seconds": 60})
    api.client.post(f"/v1/batches/{batch_id}/cancel")
    cancelled = assert_problem(api.client.post(path, json={"focus_box": [5, 5, 20, 20]}), 409)
    assert cancelled["type"] == "urn:batchcrop:problem:batch-cancelled"


def test_bad_focus_boxes_are_422_naming_the_field(api: LiveServer, sources: list[str]) -> None:
    """Boxes are checked as at submission, in the body and in the preview's query; a box
    wholly outside the picture is refused by the preview and by the re-crop; unknown items
    are 404."""
    batch_id, item = _done_batch(api, sources)
    base = f"/v1/batches/{batch_id}/items/{item['id']}"
    for body, field in (
        ({"focus_box": [1, 2, 3]}, "focus_box"),
        ({"focus_box": [5, 0, 5, 10]}, "focus_box"),
        ({"focus_box": [0, 0, "9", 9]}, "focus_box[2]"),
        ({"focus_box": [0, 0, 9, 9], "extra": 1}, "extra"),
        ({}, "focus_box"),
    ):
        assert_problem(api.client.post(f"{base}/recrop", json=body), 422, field=field)
    for text in ("1,2,3", "0,0,x,9", "5,0,5,10", "-1,0,4,4", "0,0,99999999999,4"):
        assert_problem(
            api.client.get(f"{base}/windows", params={"focus": text}), 422, field="focus"
        )
    outside = api.client.get(f"{base}/windows", params={"focus": "5000,5000,5010,5010"})
    assert "outside" in assert_problem(outside, 422, field="focus")["detail"]
    missed = api.client.post(f"{base}/recrop", json={"focus_box": [5000, 5000, 5010, 5010]})
    assert "outside" in assert_problem(missed, 422, field="focus_box")["detail"]
    unknown = f"/v1/batches/{batch_id}/items/00000000-0000-4000-8000-000000000000"
    assert_problem(api.client.post(f"{unknown}/recrop", json={"focus_box": [0, 0, 9, 9]}), 404)
    assert_problem(api.client.get(f"{unknown}/windows"), 404)
    assert api.client.get(base).json()["state"] == "succeeded"


def test_two_operators_recropping_one_item_at_once_one_wins(
    api: LiveServer, sources: list[str]
) -> None:
    """Concurrent re-crops of one item with different boxes: exactly one is 202, every other is
    a 409 naming the winner's box, and the item and its timeline hold that one re-crop."""
    batch_id, item = _done_batch(api, sources)
    path = f"{api.url}/v1/batches/{batch_id}/items/{item['id']}/recrop"
    start = threading.Barrier(CONCURRENT_OPERATORS)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def operator(n: int) -> None:
        with httpx.Client(timeout=30) as client:
            start.wait()
            response = client.post(path, json={"focus_box": [n, n, n + 10, n + 10]})
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=operator, args=(n,)) for n in range(CONCURRENT_OPERATORS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(a.status_code for a in answers) == [202] + [409] * (CONCURRENT_OPERATORS - 1)
    (won,) = [a.json() for a in answers if a.status_code == 202]
    assert {str(won["focus_box"])} == {
        str(a.json()["focus_box"]) for a in answers if a.status_code == 409
    }
    assert (
        won["focus_box"]
        == api.client.get(won["batch_id"] and f"/v1/batches/{batch_id}/items/{item['id']}").json()[
            "focus_box"
        ]
    )
    events = api.client.get(f"/v1/batches/{batch_id}/events", params={"item": item["id"]}).json()
    assert [won["focus_box"]] == [
        e["focus_box"] for e in events["events"] if e["reason"] == "recrop"
    ]


def test_a_derivative_url_is_revalidated_and_shows_the_recropped_picture(
    api: LiveServer, sources: list[str]
) -> None:
    """A derivative's URL names its ratio, not its key: it must be revalidated (no `immutable`),
    its ETag answers 304 while the key stands, and after a re-crop the old ETag gets the new
    bytes."""
    batch_id, item = _done_batch(api, sources)
    base = f"/v1/batches/{batch_id}/items/{item['id']}"
    url = f"{base}/derivatives/{item['derivatives'][0]['ratio'].replace(':', 'x')}"
    first = api.client.get(url)
    assert first.status_code == 200, first.text
    assert first.headers["cache-control"] == "private, no-cache"
    old_tag = first.headers["etag"]
    unchanged = api.client.get(url, headers={"If-None-Match": old_tag})
    assert (unchanged.status_code, unchanged.content) == (304, b"")
    assert unchanged.headers["etag"] == old_tag

    response = api.client.post(f"{base}/recrop", json={"focus_box": _box_in(item, api)})
    assert response.status_code == 202, response.text
    assert process(api, batch_id)["state"] == "succeeded"
    redone = api.client.get(base).json()["derivatives"][0]
    fresh = api.client.get(url, headers={"If-None-Match": old_tag})
    assert fresh.status_code == 200, fresh.text
    assert redone["sha256"] == hashlib.sha256(fresh.content).hexdigest()
    assert fresh.headers["etag"] != old_tag


def test_the_windows_of_a_padded_trimmed_batch_are_its_derivatives(
    api: LiveServer, sources: list[str]
) -> None:
    """Under `pad` with trim, the preview gives each ratio the fit, the crop box and the trimmed
    box its derivatives have, and a frame around the crop box (reaching past it by the
    padding)."""
    body = batch_body(sources[:1], fit="pad", trim=12)
    response = api.client.post("/v1/batches", json=body)
    assert response.status_code == 201, response.text
    batch_id = response.json()["id"]
    assert process(api, batch_id)["state"] == "succeeded"
    (item,) = api.client.get(f"/v1/batches/{batch_id}/items").json()["items"]
    windows = api.client.get(f"/v1/batches/{batch_id}/items/{item['id']}/windows").json()
    assert [(d["ratio"], d["fit"], d["crop_box"]) for d in item["derivatives"]] == [
        (w["ratio"], w["fit"], w["crop_box"]) for w in windows["windows"]
    ]
    assert windows["trim_box"] == item["derivatives"][0]["trim_box"]
    for window in windows["windows"]:
        frame, crop = window["frame_box"], window["crop_box"]
        assert [frame[0] <= crop[0], frame[1] <= crop[1]] == [True, True]
        assert [frame[2] >= crop[2], frame[3] >= crop[3]] == [True, True]
