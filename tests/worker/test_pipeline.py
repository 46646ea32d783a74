"""The whole pipeline in process: submit → workers → derivatives in the store → status."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
from PIL import Image

import batchcrop
from batchcrop.app import App
from batchcrop.batches.errors import IdempotencyConflict
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.service import BatchService
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec, Rendition, render, variant_of
from batchcrop.logs import log_event
from batchcrop.worker import processing
from batchcrop.worker.facts import derivative_facts
from batchcrop.worker.processing import derivative_key
from batchcrop.worker.worker import WorkerOptions
from storage import AccessDenied, LocalStore, ObjectStore, S3Settings, S3Store
from storage.port import SHA256_METADATA_KEY
from tests.app_fixtures import run_batch
from tests.images import write_corrupt, write_photos

RATIOS = tuple(Ratio.parse(r) for r in ("1:1", "4:3", "16:9", "3:4"))


def _request(
    paths: list[Path], *, max_attempts: int = 3, idempotency_key: str | None = None
) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p), ref=p.stem) for p in paths),
        spec=RenderSpec(ratios=RATIOS, max_side=400, quality=80),
        deadline_seconds=3600,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
    )


def test_good_and_bad_images_end_failed_with_every_good_ratio_stored(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Good items succeed with every ratio stored; corrupt ones fail invalid_image; batch failed."""
    good = write_photos(tmp_path / "src", 3)
    bad = write_corrupt(tmp_path / "src")
    status, created = app.batches.submit(_request(good + bad))
    assert created

    final = run_batch(app, store, status["id"])

    assert final["state"] == "failed"
    assert final["counts"]["succeeded"] == 3
    assert final["counts"]["failed"] == 2
    assert final["failures"] == {"invalid_image": 2}
    assert final["terminal_reason"] == "2 of 5 items failed (invalid_image: 2)."
    assert sum(final["counts"].values()) == final["total"] == 5
    items, _ = app.batches.items(status["id"])
    stored = {info.key: info for info in store.list("derivatives/")}
    manifest_keys = set()
    for item in items:
        if item["ref"].startswith("photo"):
            assert item["state"] == "succeeded"
            assert [d["ratio"] for d in item["derivatives"]] == [str(r) for r in RATIOS]
            for d in item["derivatives"]:
                body = store.get(d["key"])
                assert hashlib.sha256(body).hexdigest() == d["sha256"]
                assert stored[d["key"]].size == len(body) == d["bytes"]
                assert max(d["width"], d["height"]) <= 400
                manifest_keys.add(d["key"])
        else:
            assert (item["state"], item["error_category"], item["derivatives"]) == (
                "failed",
                "invalid_image",
                [],
            )
    assert set(stored) == manifest_keys


def test_the_same_sources_twice_give_byte_identical_derivatives(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """A second batch over the same sources names the same keys with the same sha256."""
    sources = write_photos(tmp_path / "src", 2)
    first, _ = app.batches.submit(_request(sources))
    second, _ = app.batches.submit(_request(sources))
    assert first["id"] != second["id"]

    assert run_batch(app, store, first["id"])["state"] == "succeeded"
    assert run_batch(app, store, second["id"])["state"] == "succeeded"

    def manifest(batch_id: str) -> set[tuple[str, str, str]]:
        return {(m["ratio"], m["key"], m["sha256"]) for m in app.batches.manifest(batch_id)}

    assert manifest(first["id"]) == manifest(second["id"])
    assert len(manifest(first["id"])) == 2 * len(RATIOS)
    assert len(list(store.list("derivatives/"))) == 2 * len(RATIOS)


def test_status_counters_equal_a_group_by_over_the_items(
    make_app: Callable[..., App], store: ObjectStore, tmp_path: Path
) -> None:
    """After a run with successes and failures the counters equal a GROUP BY recount."""
    app = make_app()
    paths = write_photos(tmp_path / "src", 4) + write_corrupt(tmp_path / "src")
    status, _ = app.batches.submit(_request(paths))
    final = run_batch(app, store, status["id"], concurrency=3)
    recount: dict[str, int] = {}
    for (state, _category), n in app.leases.recount(status["id"]).items():
        recount[state.value] = recount.get(state.value, 0) + n
    assert {k: v for k, v in final["counts"].items() if v} == recount


def test_idempotency_key_returns_the_same_batch_and_refuses_another_request(
    app: App, tmp_path: Path
) -> None:
    """Same key + same request ⇒ same batch; same key + other request ⇒ IdempotencyConflict."""
    sources = write_photos(tmp_path / "src", 2)
    first, created = app.batches.submit(_request(sources, idempotency_key="import-7"))
    again, created_again = app.batches.submit(_request(sources, idempotency_key="import-7"))
    assert (created, created_again, again["id"]) == (True, False, first["id"])
    with pytest.raises(IdempotencyConflict):
        app.batches.submit(_request(sources[:1], idempotency_key="import-7"))


def test_a_lost_race_on_an_idempotency_key_returns_the_winners_batch(
    app: App, tmp_path: Path
) -> None:
    """Two submissions of one key that both looked before either wrote: the loser's insert
    meets the unique key, and it answers with the winner's batch instead of an error."""
    sources = write_photos(tmp_path / "src", 1)
    winner, _ = app.batches.submit(_request(sources, idempotency_key="import-8"))
    loser = BatchService(app.leases, poll_margin_seconds=app.poll_margin_seconds)
    looks: list[str] = []
    look_up = loser.submissions._by_idempotency_key

    def first_look_misses(key: str, fingerprint: str, store: str | None) -> str | None:
        looks.append(key)
        return None if len(looks) == 1 else look_up(key, fingerprint, store)

    loser.submissions._by_idempotency_key = first_look_misses  # type: ignore[method-assign]
    document, created = loser.submit(_request(sources, idempotency_key="import-8"))
    assert (winner["id"], False) == (document["id"], created)
    assert looks == ["import-8", "import-8"]
    assert len(app.batches.list_batches()[0]) == 1
    with app.leases.reading() as conn:
        groups = conn.execute(sa.text("SELECT id FROM lease_groups")).scalars().all()
    assert groups == [winner["id"]], "the loser's half-written group is deleted"


def test_an_unexpected_error_at_commit_is_retried_and_the_slot_lives_on(
    app: App, tmp_path: Path
) -> None:
    """A commit that fails for a reason nobody planned for (here a trigger refusing every
    manifest row) retries the item as `internal_error`; the worker is not harmed."""
    sources = write_photos(tmp_path / "src", 1)
    status, _ = app.batches.submit(_request(sources))
    worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[status["id"]]))
    (claim,) = app.leases.claim("test-worker", 1, group_ids=[status["id"]])
    with app.leases.transaction() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse_manifest BEFORE INSERT ON batchcrop_derivatives "
                    "BEGIN SELECT RAISE(ABORT, 'refused'); END"
                )
            )
        else:
            conn.execute(
                sa.text(
                    "CREATE FUNCTION refuse_manifest() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE unique_violation USING MESSAGE = 'refused'; END $$"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse_manifest BEFORE INSERT ON batchcrop_derivatives "
                    "FOR EACH ROW EXECUTE FUNCTION refuse_manifest()"
                )
            )

    outcome = worker.process(claim)

    item = app.leases.item(claim.item_id)
    assert item is not None
    assert (
        outcome,
        item.state,
        item.error_category,
    ) == ("retryable", "retryable", "internal_error")


def test_an_unreachable_store_makes_items_retryable_not_failed(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """A store outage is transient: attempts end retryable (storage_unavailable), never failed,
    and are not counted against max_attempts (the attempt number is taken back)."""
    app = make_app(store="s3://derivatives")  # the batch's store, which the worker serves
    sources = write_photos(tmp_path / "src", 2)
    status, _ = app.batches.submit(_request(sources))
    dead = S3Settings(
        endpoint_url="http://127.0.0.1:9",
        region="us-east-1",
        total_max_attempts=1,
        connect_timeout_seconds=0.5,
    )
    session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="y")
    store = S3Store("derivatives", settings=dead, client=dead.client(session))
    worker = app.worker(store, WorkerOptions(concurrency=2, batch_ids=[status["id"]]))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while app.batches.status(status["id"])["counts"]["retryable"] < 2:
            assert time.monotonic() < deadline, app.batches.status(status["id"])
            time.sleep(0.05)
    finally:
        worker.stop()
        worker.join(30)
    items, _ = app.batches.items(status["id"])
    assert [(i["state"], i["error_category"], i["attempt"]) for i in items] == [
        ("retryable", "storage_unavailable", 0),
        ("retryable", "storage_unavailable", 0),
    ]


def test_a_cancel_seen_in_a_heartbeat_abandons_the_held_item(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """Cancel while an item is held: its next heartbeat says so and the item ends cancelled."""
    app = make_app(lease_seconds=0.15)
    sources = write_photos(tmp_path / "src", 1, size=(2400, 1800))
    status, _ = app.batches.submit(_request(sources))
    worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[status["id"]]))
    (claim,) = app.leases.claim("test-worker", 1, group_ids=[status["id"]])
    app.batches.cancel(status["id"])

    outcome = worker.process(claim)

    item = app.leases.item(claim.item_id)
    assert item is not None
    assert (outcome, item.state, item.error_category) == ("abandoned", "abandoned", "cancelled")
    assert app.batches.manifest(status["id"]) == []  # orphans may remain; no manifest names them
    assert app.batches.status(status["id"])["state"] == "abandoned"


def test_with_source_roots_the_worker_confines_reads_again(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """A source that is (or became) outside the roots fails source_not_found; inside succeeds."""
    inside = write_photos(tmp_path / "roots" / "catalogue", 1)
    outside = write_photos(tmp_path / "elsewhere", 1)
    link = tmp_path / "roots" / "catalogue" / "swapped.jpg"
    link.symlink_to(outside[0])  # a symlink under the root pointing out of it
    app = make_app(source_roots=(str(tmp_path / "roots"),))
    status, _ = app.batches.submit(_request([inside[0], link]))

    final = run_batch(app, LocalStore(tmp_path / "store"), status["id"])

    items, _ = app.batches.items(status["id"])
    assert [(i["state"], i["error_category"]) for i in items] == [
        ("succeeded", None),
        ("failed", "source_not_found"),
    ]
    assert final["failures"] == {"source_not_found": 1}


def test_the_fingerprint_hashes_the_canonical_request() -> None:
    """The idempotency fingerprint is sha256 over the sorted-key JSON of the items, the render
    request's fields at the top level and the batch limits — the form stored fingerprints were
    made with, so keys already used keep matching."""
    request = BatchRequest(
        items=(ItemRequest(source="/srv/a.jpg", ref="sku-1"),),
        spec=RenderSpec(ratios=(Ratio(16, 9), Ratio(1, 1)), max_side=640, quality=70),
        deadline_seconds=3600.0,
        max_attempts=3,
    )
    body = {
        "items": [["/srv/a.jpg", "sku-1"]],
        "ratios": ["16:9", "1:1"],
        "max_side": 640,
        "quality": 70,
        "deadline_seconds": 3600.0,
        "max_attempts": 3,
    }
    expected = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    assert expected == request.fingerprint()


SWAPS = {
    "symlink loop": lambda path: path.symlink_to(path),
    # No worker slot may wait for a writer that never comes.
    "FIFO": os.mkfifo,
}


@pytest.mark.parametrize("swap", list(SWAPS))
def test_a_source_swapped_for_an_unreadable_kind_fails_once_as_not_found(
    app: App, tmp_path: Path, swap: str
) -> None:
    """A source replaced after submission by a symlink loop or a FIFO is `source_not_found` at
    its first attempt, at once: not an `internal_error` retried until the cap, never a hang."""
    sources = write_photos(tmp_path / "src", 1)
    status, _ = app.batches.submit(_request(sources))
    sources[0].unlink()
    SWAPS[swap](sources[0])
    final = run_batch(app, LocalStore(tmp_path / "store"), status["id"])
    (item,) = app.batches.items(status["id"])[0]
    assert (item["state"], item["error_category"], item["attempt"]) == (
        "failed",
        "source_not_found",
        1,
    )
    assert final["failures"] == {"source_not_found": 1}


STOPS = {
    # The batch's deadline passes while the item is held: it ends abandoned.
    "deadline": (
        "UPDATE lease_groups SET deadline_at = 1 WHERE id = :g",
        ("abandoned", "abandoned", "deadline_exceeded"),
    ),
    # The attempt has run past max_attempt_seconds: it is retried as a dependency timeout.
    "over-long attempt": (
        "UPDATE lease_items SET attempt_started_at = 1 WHERE group_id = :g",
        ("retryable", "retryable", "dependency_timeout"),
    ),
}


@pytest.mark.parametrize("stop", list(STOPS))
def test_a_held_item_told_to_stop_ends_as_its_reason_says(
    app: App, tmp_path: Path, stop: str
) -> None:
    """Past its batch's deadline a held item is abandoned (`deadline_exceeded`); an attempt past
    `max_attempt_seconds` is retried (`dependency_timeout`); nothing of either is committed."""
    statement, expected = STOPS[stop]
    sources = write_photos(tmp_path / "src", 1)
    status, _ = app.batches.submit(_request(sources))
    worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[status["id"]]))
    (claim,) = app.leases.claim("test-worker", 1, group_ids=[status["id"]])
    with app.engine.begin() as conn:
        conn.execute(sa.text(statement), {"g": status["id"]})

    outcome = worker.process(claim)

    item = app.leases.item(claim.item_id)
    assert item is not None
    assert expected == (outcome, item.state, item.error_category)
    assert app.batches.manifest(status["id"]) == []


def test_derivatives_are_stored_with_their_type_and_facts(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Each derivative object carries its facts — source sha256, ratio, variant, crop box, width,
    height, bytes, writer — read back by the store, and on S3 it says what it is to any S3 client:
    `Content-Type: image/jpeg` and the facts as `x-amz-meta-*` beside the sha256."""
    sources = write_photos(tmp_path / "src", 1)
    status, _ = app.batches.submit(_request(sources))
    run_batch(app, store, status["id"])
    manifest = app.batches.manifest(status["id"])
    assert sorted(str(r) for r in RATIOS) == sorted(row["ratio"] for row in manifest)
    for row in manifest:
        facts = {
            "source-sha256": hashlib.sha256(sources[0].read_bytes()).hexdigest(),
            "ratio": row["ratio"],
            "format": "jpeg",
            "variant": variant_of(_request(sources).spec),
            "crop-box": row["crop_box"],
            "width": str(row["width"]),
            "height": str(row["height"]),
            "bytes": str(row["bytes"]),
            "writer": f"batchcrop/{batchcrop.__version__}",
        }
        info = store.head(row["key"])
        assert (facts, row["sha256"], row["bytes"]) == (info.metadata, info.sha256, info.size)
        if isinstance(store, S3Store):
            head = store.client.head_object(Bucket=store.bucket, Key=row["key"])
            assert ("image/jpeg", {**facts, "sha256": row["sha256"]}) == (
                head["ContentType"],
                head["Metadata"],
            )


def _first_rendition(source: Path) -> tuple[str, str, str, Rendition]:
    """(key, source sha256, variant, rendition) of the first ratio, as a worker renders it."""
    data = source.read_bytes()
    spec = _request([source]).spec
    rendition = render(data, spec)[0]
    source_sha256, variant = hashlib.sha256(data).hexdigest(), variant_of(spec)
    return derivative_key(source_sha256, rendition, variant), source_sha256, variant, rendition


def _as_another_cpu_would(rendition: Rendition) -> Rendition:
    """The same derivative with other bytes and a crop box one pixel narrower (other SIMD
    rounding; still inside the source, as any box batchcrop writes)."""
    buffer = io.BytesIO()
    Image.open(io.BytesIO(rendition.data)).save(buffer, "JPEG", quality=79)
    data = buffer.getvalue()
    left, top, right, bottom = rendition.crop_box
    return dataclasses.replace(
        rendition,
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        crop_box=(left, top, right - 1, bottom),
    )


def _recorded_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The attempt's log events, recorded (whatever the logging configuration)."""
    events: list[tuple[str, dict[str, Any]]] = []

    def record(event: str, **fields: Any) -> None:
        events.append((event, fields))
        log_event(event, **fields)

    monkeypatch.setattr(processing, "log_event", record)
    return events


def _differ_count(app: App) -> float:
    value = app.metrics.registry.get_sample_value("batchcrop_derivative_bytes_differ_total")
    return 0.0 if value is None else value


def test_a_key_holding_the_same_derivative_in_other_bytes_succeeds_with_the_stored_facts(
    app: App, store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose write meets other bytes whose facts name the same source, ratio and variant
    (another CPU got there first) succeeds: the manifest records the STORED object's sha256,
    bytes, size and crop box, the stored object stays, and the difference is counted and logged."""
    sources = write_photos(tmp_path / "src", 1)
    key, source_sha256, variant, ours = _first_rendition(sources[0])
    theirs = _as_another_cpu_would(ours)
    assert theirs.sha256 != ours.sha256
    store.put_if_absent(
        key,
        theirs.data,
        content_type="image/jpeg",
        metadata=derivative_facts(source_sha256, variant, theirs),
    )
    events = _recorded_events(monkeypatch)
    status, _ = app.batches.submit(_request(sources))

    assert run_batch(app, store, status["id"])["state"] == "succeeded"

    (item,) = app.batches.items(status["id"])[0]
    derivatives = {d["ratio"]: d for d in item["derivatives"]}
    assert derivatives.pop(str(ours.ratio)) == {
        "ratio": str(ours.ratio),
        "format": "jpeg",
        "key": key,
        "location": f"{store.url}/{key}",
        "width": theirs.width,
        "height": theirs.height,
        "bytes": len(theirs.data),
        "sha256": theirs.sha256,
        "crop_box": list(theirs.crop_box),
        "fit": "crop",
        "padding": [0, 0, 0, 0],
        "trim_box": None,
        "requested_width": None,
        "capped": False,
    }
    assert store.get(key) == theirs.data
    for other in derivatives.values():  # the ratios nobody wrote before are ours
        assert hashlib.sha256(store.get(other["key"])).hexdigest() == other["sha256"]
    assert _differ_count(app) == 1.0
    (differs,) = [fields for event, fields in events if event == "write_differs"]
    assert differs == {
        "level": logging.WARNING,
        "item": item["id"],
        "attempt": 1,
        "corr": differs["corr"],
        "ratio": str(ours.ratio),
        "format": "jpeg",
        "key": key,
        "ours": ours.sha256,
        "stored": theirs.sha256,
        "stored_bytes": len(theirs.data),
    }


TAKEN_BY = {
    "another source": {"source-sha256": "0" * 64},
    "another ratio": {"ratio": "2:1"},
    "another variant": {"variant": "ffffffffffff"},
    "a writer other than batchcrop": {"writer": "somebody/1.0"},
    # Facts edited in the store: well formed enough for int(), out of range or malformed.
    "a crop box outside the source": {"crop-box": "0,0,99999,99999"},
    "an empty crop box": {"crop-box": "10,20,10,40"},
    "a crop box of three numbers": {"crop-box": "0,0,10"},
    "a zero width": {"width": "0"},
    "a signed height": {"height": "+64"},
    "a height with an underscore": {"height": "6_4"},
}


@pytest.mark.parametrize("taken_by", [*TAKEN_BY, "an object without facts"])
def test_a_key_holding_something_else_fails_derivative_conflict(
    app: App, store: ObjectStore, tmp_path: Path, taken_by: str
) -> None:
    """Other bytes whose facts name another source, ratio or variant — or that carry no facts
    at all (batchcrop did not write them) — fail the item `derivative_conflict` at once, and the
    stored object stays as it was."""
    sources = write_photos(tmp_path / "src", 1)
    key, source_sha256, variant, ours = _first_rendition(sources[0])
    theirs = _as_another_cpu_would(ours)
    facts = derivative_facts(source_sha256, variant, theirs)
    metadata = {**facts, **TAKEN_BY[taken_by]} if taken_by in TAKEN_BY else None
    store.put_if_absent(key, theirs.data, metadata=metadata)
    status, _ = app.batches.submit(_request(sources))

    final = run_batch(app, store, status["id"])

    (item,) = app.batches.items(status["id"])[0]
    assert (item["state"], item["error_category"], item["attempt"]) == (
        "failed",
        "derivative_conflict",
        1,
    )
    assert final["failures"] == {"derivative_conflict": 1}
    assert app.batches.manifest(status["id"]) == []
    assert (store.get(key), _differ_count(app)) == (theirs.data, 0.0)


def test_a_key_holding_identical_bytes_without_facts_succeeds_as_before(
    app: App, store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object written before derivatives carried facts, with the very bytes we render, is
    success (`created=False`) and the manifest is ours: nothing differs, nothing is counted."""
    sources = write_photos(tmp_path / "src", 1)
    key, _, _, ours = _first_rendition(sources[0])
    store.put_if_absent(key, ours.data, metadata={"ratio": str(ours.ratio)})
    events = _recorded_events(monkeypatch)
    status, _ = app.batches.submit(_request(sources))

    assert run_batch(app, store, status["id"])["state"] == "succeeded"

    (row,) = [r for r in app.batches.manifest(status["id"]) if r["key"] == key]
    assert (row["sha256"], row["bytes"]) == (ours.sha256, len(ours.data))
    assert (_differ_count(app), [e for e, _ in events if e == "write_differs"]) == (0.0, [])


def test_a_source_needing_more_than_the_decode_memory_fails_alone(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """With a 64 MiB decode budget, a 12 MP RGBA PNG (about 150 MiB decoded) fails once as
    `image_too_large` while the JPEG beside it succeeds: memory, not only pixels, is limited."""
    app = make_app(decode_memory_mib=64)
    src = tmp_path / "src"
    src.mkdir()
    Image.new("RGBA", (4000, 3000), (200, 30, 30, 255)).save(src / "huge.png")
    Image.new("RGB", (4000, 3000), (200, 30, 30)).save(src / "photo.jpg")
    status, _ = app.batches.submit(_request([src / "huge.png", src / "photo.jpg"]))
    final = run_batch(app, LocalStore(tmp_path / "store"), status["id"])
    assert (final["counts"]["succeeded"], final["counts"]["failed"]) == (1, 1)
    assert final["failures"] == {"image_too_large": 1}
    (failed,) = [i for i in app.batches.items(status["id"])[0] if i["state"] == "failed"]
    assert failed["attempt"] == 1
    assert app.decode_budget.used_bytes == 0


def test_a_metadata_sha256_that_is_not_the_bytes_is_not_trusted(
    make_app: Callable[..., App], moto_s3: S3Store, tmp_path: Path
) -> None:
    """An S3 object whose metadata claims the sha256 of the bytes we render, and our facts, but
    holds other bytes: the 412 is resolved by hashing the stored bytes, not by the claim, so
    the facts (describing other bytes) are dropped and the item fails `derivative_conflict`
    instead of recording a manifest that does not describe the object."""
    sources = write_photos(tmp_path / "src", 1)
    key, source_sha256, variant, ours = _first_rendition(sources[0])
    theirs = _as_another_cpu_would(ours)
    forged = {**derivative_facts(source_sha256, variant, ours), SHA256_METADATA_KEY: ours.sha256}
    moto_s3.client.put_object(Bucket=moto_s3.bucket, Key=key, Body=theirs.data, Metadata=forged)
    app = make_app(store=moto_s3.url)
    status, _ = app.batches.submit(_request(sources))

    final = run_batch(app, moto_s3, status["id"])

    assert final["failures"] == {"derivative_conflict": 1}
    assert app.batches.manifest(status["id"]) == []
    assert hashlib.sha256(moto_s3.get(key)).hexdigest() == theirs.sha256


class _HeldReads:
    """A source reader whose reads wait until the test lets them go (at most 30 s): items stay
    held, with nothing else happening, for as long as the test needs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.go = threading.Event()

    def read(self, source: str, *, max_bytes: int) -> bytes:
        self.go.wait(30)
        return bytes(self.inner.read(source, max_bytes=max_bytes))


def test_a_worker_renews_all_its_held_items_in_one_statement(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """Three items held at once by one worker are renewed together, one statement per beat
    carrying all three leases, never one statement per item; then they all succeed."""
    app = make_app(lease_seconds=0.3)
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 3)))
    worker = app.worker(LocalStore(tmp_path / "store"), WorkerOptions(batch_ids=[status["id"]]))
    reads = _HeldReads(worker.sources)
    worker.sources = reads  # type: ignore[assignment]
    claims = app.leases.claim("test-worker", 3, group_ids=[status["id"]])
    beats: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE LEASE_ITEMS SET LEASE_EXPIRES_AT"):
            beats.append((statement, parameters))

    def leases_in(parameters: Any) -> int:
        if isinstance(parameters, dict):
            return len(parameters["p_held_id"])
        (held,) = [p for p in parameters if isinstance(p, str) and p.startswith("[")]
        return len(json.loads(held))

    sa.event.listen(app.engine, "before_cursor_execute", record)
    outcomes: list[str] = []
    threads = [
        threading.Thread(target=lambda c=c: outcomes.append(worker.process(c))) for c in claims
    ]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while not any(leases_in(p) == 3 for _, p in list(beats)):
            assert time.monotonic() < deadline, beats
            time.sleep(0.02)
    finally:
        reads.go.set()
        for thread in threads:
            thread.join(60)
        sa.event.remove(app.engine, "before_cursor_execute", record)

    assert all("held" in statement for statement, _ in beats)
    assert outcomes == ["succeeded"] * 3


class _OneKeyDenied:
    """A store that refuses the 16:9 derivative at once and writes the others slowly, the
    last ratio and the preview slowest."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url

    def put_if_absent(self, key: str, data: bytes, **kwargs: Any) -> Any:
        if key.startswith("derivatives/") and "/16x9-" in key:
            raise AccessDenied(f"permission denied: {key}")
        time.sleep(1.0 if "/3x4-" in key or key.startswith("previews/") else 0.1)
        return self.inner.put_if_absent(key, data, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_failed_write_ends_the_attempt_only_after_the_items_other_writes(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """The worker's write threads are shared by its slots and outlive an attempt, yet a failed
    write is raised only once the item's other writes have ended: when the item is failed,
    every other object of it is already in the store (none lands later, unaccounted)."""
    (source,) = write_photos(tmp_path / "src", 1)
    status, _ = app.batches.submit(_request([source], max_attempts=1))
    final = run_batch(app, _OneKeyDenied(store), status["id"])  # type: ignore[arg-type]
    assert (final["state"], final["failures"]) == ("failed", {"storage_access_denied": 1})
    stored = sorted(info.key.split("/")[-1].split("-")[0] for info in store.list("derivatives/"))
    assert stored == ["1x1", "3x4", "4x3"]
    assert len(list(store.list("previews/"))) == 1


def test_a_worker_wakes_its_follower_when_an_attempt_ends(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """`wait_for_progress` returns when an item ends, not at its timeout: `run` reads the
    batch's status then, and ends with its last item."""
    (source,) = write_photos(tmp_path / "src", 1)
    status, _ = app.batches.submit(_request([source]))
    worker = app.worker(store, WorkerOptions(concurrency=1, batch_ids=[status["id"]]))
    worker.start()
    try:
        started = time.monotonic()
        worker.wait_for_progress(120)
        assert time.monotonic() - started < 100
        assert app.batches.status(status["id"])["state"] == "succeeded"
    finally:
        worker.stop()
        worker.join(30)
