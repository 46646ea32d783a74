"""Fit, trim and widths end to end: a batch asking for several widths under `auto` with trim
stores one derivative per (ratio, width, format) under its own key, and its manifest, facts and
item document say the fit used, the padding, the trimmed box and the width asked, on SQLite and
PostgreSQL with the local folder, moto and (under CI) a live S3 gateway (ADR 0040)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from PIL import Image, ImageDraw

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec, variant_of
from storage import ObjectStore
from tests.app_fixtures import run_batch

RATIOS = (Ratio(1, 1), Ratio(16, 9))
WIDTHS = (160, 320, 4000)
PRODUCT = (60, 250, 940, 450)
"""A wide product on a white margin, in source pixels of a 1000x700 picture."""


def _product(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", (1000, 700), (255, 255, 255))
    ImageDraw.Draw(image).rectangle((60, 250, 939, 449), fill=(20, 60, 170))
    path = folder / "bottle.png"
    image.save(path)
    return path


def test_each_ratio_width_and_format_is_one_derivative_with_its_fit_and_padding(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Ratio by ratio, width by width: keys name the width, 1:1 is padded (cropping would cut
    the product) and 16:9 cropped (its window holds it), a width over the source is capped,
    and the stored facts and the known-outputs path give the same manifest."""
    source = _product(tmp_path / "src")
    spec = RenderSpec(ratios=RATIOS, widths=WIDTHS, fit="auto")
    request = BatchRequest(
        items=(ItemRequest(source=str(source), ref="bottle"),),
        spec=spec,
        deadline_seconds=3600,
        max_attempts=3,
    )
    status, _ = app.batches.submit(request)
    assert status["widths"] == list(WIDTHS)
    assert run_batch(app, store, status["id"])["state"] == "succeeded"
    (item,), _ = app.batches.items(status["id"])
    derivatives = item["derivatives"]
    assert [(d["ratio"], d["requested_width"]) for d in derivatives] == [
        (str(r), w) for r in RATIOS for w in WIDTHS
    ]
    source_sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
    variant = variant_of(spec)
    for d in derivatives:
        ratio_key = d["ratio"].replace(":", "x")
        assert d["key"] == (
            f"derivatives/{source_sha256}/{ratio_key}-w{d['requested_width']}-{variant}.jpg"
        )
        assert d["trim_box"] is None
        assert store.head(d["key"]).metadata["requested-width"] == str(d["requested_width"])
    fits = {(d["ratio"], d["fit"]) for d in derivatives}
    assert fits == {("1:1", "pad"), ("16:9", "crop")}
    padded = next(d for d in derivatives if d["ratio"] == "1:1" and d["requested_width"] == 320)
    assert (padded["width"], padded["height"]) == (320, 320)
    assert padded["padding"][1] > 0
    assert padded["padding"][0] + padded["padding"][2] == 0
    capped = [(d["ratio"], d["capped"]) for d in derivatives if d["requested_width"] == 4000]
    assert capped == [("1:1", True), ("16:9", True)]
    assert [d["capped"] for d in derivatives if d["requested_width"] != 4000] == [False] * 4

    again, _ = app.batches.submit(replace(request, label="again"))
    assert run_batch(app, store, again["id"])["state"] == "succeeded"
    (known,), _ = app.batches.items(again["id"])
    drop = ("location",)
    assert [{k: v for k, v in d.items() if k not in drop} for d in known["derivatives"]] == [
        {k: v for k, v in d.items() if k not in drop} for d in derivatives
    ]


def test_a_trimmed_batch_records_the_trimmed_box(
    app: App, store: ObjectStore, tmp_path: Path
) -> None:
    """Under trim, every derivative's manifest row, fact and document holds the trimmed box,
    which holds the product and little more; padded, it is also the crop box."""
    source = _product(tmp_path / "src")
    request = BatchRequest(
        items=(ItemRequest(source=str(source), ref="bottle"),),
        spec=RenderSpec(ratios=RATIOS, max_side=300, fit="pad", trim=10),
        deadline_seconds=3600,
        max_attempts=3,
    )
    status, _ = app.batches.submit(request)
    assert run_batch(app, store, status["id"])["state"] == "succeeded"
    (item,), _ = app.batches.items(status["id"])
    for d in item["derivatives"]:
        left, top, right, bottom = d["trim_box"]
        assert [left <= PRODUCT[0], top <= PRODUCT[1]] == [True, True]
        assert [right >= PRODUCT[2], bottom >= PRODUCT[3]] == [True, True]
        assert right - left <= PRODUCT[2] - PRODUCT[0] + 8
        assert (d["fit"], d["requested_width"], d["capped"]) == ("pad", None, False)
        assert store.head(d["key"]).metadata["trim-box"] == ",".join(map(str, d["trim_box"]))
