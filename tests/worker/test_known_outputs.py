"""Known outputs: an item whose derivatives and preview are all stored with facts naming its
source, ratio and variant succeeds from them without a decode; a changed spec or `--force`
renders (docs/design.md §5, known outputs)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.worker.facts import SOURCE_SHA256
from storage import ObjectStore
from tests.app_fixtures import run_batch
from tests.images import write_photos

RATIOS = (Ratio.parse("1:1"), Ratio.parse("16:9"))
GARBAGE = b"these bytes are no image at all: decoding them fails invalid_image\n" * 20


def _request(paths: list[Path], *, max_side: int = 300, label: str | None = None) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p), ref=p.stem) for p in paths),
        spec=RenderSpec(ratios=RATIOS, max_side=max_side, quality=80, formats=("jpeg", "webp")),
        deadline_seconds=3600,
        max_attempts=1,
        label=label,
    )


def _count(app: App, name: str) -> float:
    return app.metrics.registry.get_sample_value(f"batchcrop_{name}_total") or 0.0


def _manifest(app: App, batch_id: str) -> list[tuple[str, str, str, str, int, str]]:
    return sorted(
        (m["ratio"], m["format"], m["key"], m["sha256"], m["bytes"], str(m["crop_box"]))
        for m in app.batches.manifest(batch_id)
    )


def test_an_unchanged_rerun_succeeds_from_the_stored_facts_without_rendering(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """A second batch over the same sources renders nothing, writes nothing, and records the
    same manifest and previews as the first."""
    sources = write_photos(tmp_path / "src", 3)
    first, _ = app.batches.submit(_request(sources, label="first"))
    assert run_batch(app, store, first["id"])["state"] == "succeeded"
    assert (_count(app, "renders"), _count(app, "known_outputs")) == (3, 0)
    stored_before = sorted(info.key for info in store.list(""))

    second, _ = app.batches.submit(_request(sources, label="second"))
    assert run_batch(app, store, second["id"])["state"] == "succeeded"

    assert (_count(app, "renders"), _count(app, "known_outputs")) == (3, 3)
    assert _count(app, "put_if_absent_hits") == 0  # not even a write was tried
    assert _manifest(app, first["id"]) == _manifest(app, second["id"])
    assert len(_manifest(app, second["id"])) == 3 * len(RATIOS) * 2
    items, _ = app.batches.items(second["id"])
    assert all(item["preview"] is not None for item in items)
    assert sorted(info.key for info in store.list("")) == stored_before


def _copy_outputs(store: ObjectStore, source_sha256: str, to_sha256: str) -> None:
    """Store the outputs of `source_sha256` again as those of `to_sha256` (keys and facts)."""
    for prefix in ("derivatives/", "previews/"):
        for listed in store.list(f"{prefix}{source_sha256}/"):
            info = store.head(listed.key)
            store.put_if_absent(
                listed.key.replace(source_sha256, to_sha256),
                store.get(listed.key),
                metadata={**info.metadata, SOURCE_SHA256: to_sha256},
            )


def test_a_source_that_cannot_be_decoded_succeeds_when_its_outputs_are_stored(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Proof that no decode happens: a source of garbage bytes whose every output is stored
    (with facts naming its digest) succeeds from them; with --force it is decoded and fails."""
    photo = write_photos(tmp_path / "src", 1)
    garbage = tmp_path / "src" / "garbage.jpg"
    garbage.write_bytes(GARBAGE)
    first, _ = app.batches.submit(_request(photo))
    assert run_batch(app, store, first["id"])["state"] == "succeeded"
    photo_sha256 = hashlib.sha256(photo[0].read_bytes()).hexdigest()
    garbage_sha256 = hashlib.sha256(GARBAGE).hexdigest()
    _copy_outputs(store, photo_sha256, garbage_sha256)

    known, _ = app.batches.submit(_request([garbage]))
    assert run_batch(app, store, known["id"])["state"] == "succeeded"
    assert _count(app, "known_outputs") == 1
    keys = {m["key"] for m in app.batches.manifest(known["id"])}
    assert all(key.startswith(f"derivatives/{garbage_sha256}/") for key in keys)

    forced, _ = app.batches.submit(_request([garbage], label="forced"))
    final = run_batch(app, store, forced["id"], force=True)
    assert (final["state"], final["failures"]) == ("failed", {"invalid_image": 1})
    assert _count(app, "known_outputs") == 1


def test_a_changed_spec_renders_and_force_renders_an_unchanged_one(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Another max side names other variants (not stored: rendered); --force renders the
    unchanged spec again, its writes finding the same bytes already there."""
    sources = write_photos(tmp_path / "src", 2)
    first, _ = app.batches.submit(_request(sources))
    assert run_batch(app, store, first["id"])["state"] == "succeeded"

    changed, _ = app.batches.submit(_request(sources, max_side=200))
    assert run_batch(app, store, changed["id"])["state"] == "succeeded"
    assert (_count(app, "renders"), _count(app, "known_outputs")) == (4, 0)

    forced, _ = app.batches.submit(_request(sources, label="forced"))
    assert run_batch(app, store, forced["id"], force=True)["state"] == "succeeded"
    assert (_count(app, "renders"), _count(app, "known_outputs")) == (6, 0)
    assert _count(app, "put_if_absent_hits") == 2 * len(RATIOS) * 2
    assert _manifest(app, first["id"]) == _manifest(app, forced["id"])


def test_an_item_whose_stored_facts_name_another_source_renders(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Keys holding objects whose facts name another source are not this item's outputs: it
    renders, and its writes fail derivative_conflict as before; its neighbour succeeds from
    its own stored outputs."""
    photos = write_photos(tmp_path / "src", 2)
    first, _ = app.batches.submit(_request(photos[:1]))
    assert run_batch(app, store, first["id"])["state"] == "succeeded"
    taken_sha256 = hashlib.sha256(photos[0].read_bytes()).hexdigest()
    other_sha256 = hashlib.sha256(photos[1].read_bytes()).hexdigest()
    # The second photo's keys hold the first's objects, facts unchanged (naming the first).
    for prefix in ("derivatives/", "previews/"):
        for listed in store.list(f"{prefix}{taken_sha256}/"):
            info = store.head(listed.key)
            store.put_if_absent(
                listed.key.replace(taken_sha256, other_sha256),
                store.get(listed.key),
                metadata=dict(info.metadata),
            )

    mixed, _ = app.batches.submit(_request(photos, label="mixed"))
    final = run_batch(app, store, mixed["id"])

    assert final["failures"] == {"derivative_conflict": 1}
    assert (_count(app, "renders"), _count(app, "known_outputs")) == (2, 1)
