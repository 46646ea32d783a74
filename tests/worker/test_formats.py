"""Output formats end to end: a batch asking for jpeg, webp and avif stores one derivative per
(ratio, format) with its own key, manifest row, facts and Content-Type, on SQLite and PostgreSQL
with the local folder, moto and (under CI) a live S3 gateway (docs/design.md §5, ADR 0009)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from PIL import Image, ImageDraw

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import FORMATS, Ratio, RenderSpec, variant_of
from storage import ObjectStore, S3Store
from tests.app_fixtures import run_batch
from tests.images import write_photos

RATIOS = (Ratio(1, 1), Ratio(16, 9))
ALL = ("jpeg", "webp", "avif")
PILLOW_FORMATS = {"jpeg": "JPEG", "webp": "WEBP", "avif": "AVIF"}


def _request(paths: list[Path], formats: tuple[str, ...]) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p), ref=p.stem) for p in paths),
        spec=RenderSpec(ratios=RATIOS, max_side=240, quality=80, formats=formats),
        deadline_seconds=3600,
        max_attempts=3,
    )


def _logo(folder: Path) -> Path:
    image = Image.new("RGBA", (300, 200), (0, 0, 0, 0))
    ImageDraw.Draw(image).ellipse((100, 50, 200, 150), fill=(200, 20, 20, 255))
    path = folder / "logo.png"
    image.save(path)
    return path


def test_each_ratio_and_format_is_one_derivative_with_its_key_type_and_facts(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Every item lists ratio by ratio each format in the request's order; each object decodes
    as its format, has the key `{ratio}-{variant}.{ext}` with the format's own variant, the
    format's Content-Type on S3 and a `format` fact; a transparent logo stays transparent in
    WebP and AVIF."""
    sources = [*write_photos(tmp_path / "src", 1), _logo(tmp_path / "src")]
    status, _ = app.batches.submit(_request(sources, ALL))
    assert status["formats"] == list(ALL)
    final = run_batch(app, store, status["id"])
    assert final["state"] == "succeeded", final
    items, _ = app.batches.items(status["id"])
    spec = app.batches.batch(status["id"]).spec
    keys = set()
    for item in items:
        derivatives = item["derivatives"]
        assert [(d["ratio"], d["format"]) for d in derivatives] == [
            (str(r), f) for r in RATIOS for f in ALL
        ]
        source = next(p for p in sources if p.stem == item["ref"]).read_bytes()
        source_sha256 = hashlib.sha256(source).hexdigest()
        for d in derivatives:
            output = FORMATS[d["format"]]
            variant = variant_of(spec, None, d["format"])
            ratio_key = d["ratio"].replace(":", "x")
            key = f"derivatives/{source_sha256}/{ratio_key}-{variant}.{output.extension}"
            assert d["key"] == key
            keys.add(key)
            body = store.get(key)
            assert hashlib.sha256(body).hexdigest() == d["sha256"]
            with Image.open(io.BytesIO(body)) as image:
                assert image.format == PILLOW_FORMATS[d["format"]]
                assert (d["width"], d["height"]) == image.size
                if item["ref"] == "logo" and output.keeps_alpha:
                    assert image.mode == "RGBA"
                    assert image.getpixel((0, 0))[3] == 0  # type: ignore[index]
            info = store.head(key)
            assert (info.metadata["format"], info.metadata["variant"]) == (d["format"], variant)
            if isinstance(store, S3Store):
                head = store.client.head_object(Bucket=store.bucket, Key=key)
                assert head["ContentType"] == output.media_type
    assert len(keys) == 2 * len(RATIOS) * len(ALL)
    assert {info.key for info in store.list("derivatives/")} == keys
    assert len(app.batches.manifest(status["id"])) == len(keys)


def test_a_jpeg_only_batch_and_a_batch_of_every_format_share_the_jpeg_objects(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """The JPEG derivatives of a jpeg,webp,avif batch are the very objects (key and sha256) of a
    JPEG-only batch over the same sources: adding formats never moves a JPEG key."""
    sources = write_photos(tmp_path / "src", 2)
    jpeg_only, _ = app.batches.submit(_request(sources, ("jpeg",)))
    every, _ = app.batches.submit(_request(sources, ("avif", "webp", "jpeg")))
    assert run_batch(app, store, jpeg_only["id"])["state"] == "succeeded"
    assert run_batch(app, store, every["id"])["state"] == "succeeded"

    def rows(batch_id: str, output: str) -> set[tuple[str, str, str]]:
        return {
            (m["ratio"], m["key"], m["sha256"])
            for m in app.batches.manifest(batch_id)
            if m["format"] == output
        }

    assert rows(jpeg_only["id"], "jpeg") == rows(every["id"], "jpeg")
    assert len(rows(every["id"], "webp")) == len(rows(every["id"], "avif")) == 2 * len(RATIOS)
    assert all(key.endswith(".jpg") for _, key, _ in rows(jpeg_only["id"], "jpeg"))
    assert len(list(store.list("derivatives/"))) == 2 * len(RATIOS) * len(ALL)
