"""Output formats: JPEG, WebP and AVIF from one render (docs/design.md §6, ADR 0009).

Each (ratio, format) is one derivative; the crop box and the resampled pixels are shared, a JPEG is
the same bytes whatever other formats were asked for, transparency is kept by WebP and AVIF and
flattened for JPEG, colour is sRGB in every format, and every encoder gives the same bytes for
the same input across runs, threads and processes.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageDraw

from batchcrop.crop import Ratio, RenderSpec, SpecError, render, variant_of
from batchcrop.crop.decode import open_image
from batchcrop.crop.encode import (
    CALIBRATION,
    FORMATS,
    MATCH_STARTS,
    SIZE_CLASSES_PX,
    WEBP_METHOD,
    WEBP_METHODS,
    WEBP_SHARP,
    _sharp_webp,
    encode_at,
    encoder_quality,
    size_class,
)
from batchcrop.crop.encode import encode as encode_output
from batchcrop.crop.matching import encode_formats
from batchcrop.crop.render import plan
from batchcrop.crop.spec import FORMAT_NAMES
from batchcrop.crop.variant import ALGORITHM_VERSION, OUTPUT_FORMAT, _library_versions
from tests.crop.images import adobe_rgb_profile, encode, scene
from tests.crop.real_photos import photos

ALL = ("jpeg", "webp", "avif")
RATIOS = (Ratio(1, 1), Ratio(16, 9), Ratio(3, 4))
SPEC = RenderSpec(RATIOS, max_side=320, quality=85, formats=ALL)
PILLOW_FORMATS = {"jpeg": "JPEG", "webp": "WEBP", "avif": "AVIF"}
ROOT = Path(__file__).resolve().parents[2]


def _photo() -> bytes:
    return encode(scene(900, 600, (500, 150, 700, 450), seed=3), "JPEG", quality=92)


def _logo() -> bytes:
    """A 600x400 RGBA PNG: a red disc and a blue bar on a fully transparent background."""
    image = Image.new("RGBA", (600, 400), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.ellipse((200, 100, 400, 300), fill=(220, 30, 30, 255))
    draw.rectangle((50, 330, 550, 360), fill=(20, 40, 200, 160))
    return encode(image, "PNG")


def _digests(data: bytes, spec: RenderSpec) -> list[tuple[str, str, str]]:
    return [(str(r.ratio), r.format, r.sha256) for r in render(data, spec)]


def test_the_request_takes_formats_with_jpeg_as_default() -> None:
    """`formats` defaults to jpeg, parses lists and comma-separated text, refuses unknown,
    repeated or no formats naming the field, and is recorded; its default is left out of the
    fingerprint (so earlier requests keep theirs) while another value is in it."""
    default = RenderSpec.from_input({})
    assert default.formats == ("jpeg",)
    assert RenderSpec.from_input({"formats": "webp, AVIF"}).formats == ("webp", "avif")
    assert RenderSpec.from_input({"formats": ["avif", "jpeg"]}).formats == ("avif", "jpeg")
    for bad, field in (("gif", "formats"), ("jpeg,jpeg", "formats"), ("", "formats")):
        with pytest.raises(SpecError) as caught:
            RenderSpec.from_input({"formats": bad})
        assert caught.value.field == field
    with pytest.raises(SpecError) as caught:
        RenderSpec.from_input({"formats": ["jpeg", 3]})
    assert caught.value.field == "formats[1]"
    assert default.to_record()["formats"] == ["jpeg"]
    assert "formats" not in default.fingerprinted()
    assert SPEC.fingerprinted()["formats"] == list(ALL)
    assert RenderSpec.from_record(SPEC.to_record()) == SPEC
    assert RenderSpec.from_record({"ratios": ["1:1"]}).formats == ("jpeg",)


def test_the_request_takes_a_quality_match_with_table_as_default() -> None:
    """`quality_match` defaults to table, reads jpeg in any case, refuses another choice or a
    non-text naming the field, and is recorded; its default is left out of the fingerprint and
    the variant (so earlier requests keep theirs) while jpeg is in both."""
    default = RenderSpec.from_input({})
    assert default.quality_match == "table"
    assert RenderSpec.from_input({"quality_match": " JPEG"}).quality_match == "jpeg"
    for bad in ("ssim", "", 3, ["jpeg"]):
        with pytest.raises(SpecError) as caught:
            RenderSpec.from_input({"quality_match": bad})
        assert caught.value.field == "quality_match"
    assert default.to_record()["quality_match"] == "table"
    assert "quality_match" not in default.fingerprinted()
    assert "quality_match" not in default.variant_settings()
    matched = replace(default, quality_match="jpeg")
    assert matched.fingerprinted()["quality_match"] == "jpeg"
    assert matched.variant_settings()["quality_match"] == "jpeg"


def test_a_jpeg_keeps_the_variant_it_always_had_and_other_formats_get_their_own() -> None:
    """The JPEG variant hashes exactly what it hashed before formats existed, whatever formats
    the request lists; WebP's and AVIF's add their encoder settings and differ from it and from
    each other."""
    spec = RenderSpec(RATIOS, max_side=320, quality=85)
    before = (
        f"max_side=320;quality=85;format={OUTPUT_FORMAT};"
        f"algorithm={ALGORITHM_VERSION};{_library_versions()}"
    )
    expected = hashlib.sha256(before.encode()).hexdigest()[:12]
    assert variant_of(spec) == variant_of(SPEC) == variant_of(SPEC, None, "jpeg") == expected
    variants = {name: variant_of(SPEC, None, name) for name in ALL}
    assert len(set(variants.values())) == 3
    assert variant_of(replace(SPEC, quality=60), None, "avif") != variants["avif"]


def test_one_render_gives_every_ratio_in_every_format_sharing_boxes_and_sizes() -> None:
    """Renditions come ratio by ratio, each ratio's formats in the request's order; they decode
    as their format at the same size, with the same crop box, and look alike."""
    data = _photo()
    renditions = render(data, SPEC)
    assert [(r.ratio, r.format) for r in renditions] == [(q, f) for q in RATIOS for f in ALL]
    for index in range(0, len(renditions), len(ALL)):
        group = renditions[index : index + len(ALL)]
        assert len({r.crop_box for r in group}) == 1
        pixels = []
        for rendition in group:
            with Image.open(io.BytesIO(rendition.data)) as image:
                assert image.format == PILLOW_FORMATS[rendition.format]
                assert image.size == (rendition.width, rendition.height)
                assert "icc_profile" not in image.info or not image.info["icc_profile"]
                assert "exif" not in image.info or not image.info["exif"]
                pixels.append(np.asarray(image.convert("RGB"), dtype=np.int16))
            assert hashlib.sha256(rendition.data).hexdigest() == rendition.sha256
        for other in pixels[1:]:
            assert np.abs(other - pixels[0]).mean() < 4


@pytest.mark.parametrize("source", ["photo", "logo"])
def test_a_derivative_does_not_depend_on_the_other_formats_asked_for(source: str) -> None:
    """Each format's bytes are those of a request for that format alone (the key promises it),
    for an opaque photo and for a source with transparency."""
    data = _photo() if source == "photo" else _logo()
    together = {(r, f): d for r, f, d in _digests(data, SPEC)}
    for name in ALL:
        alone = _digests(data, replace(SPEC, formats=(name,)))
        assert alone == [(r, f, together[r, f]) for r, f, _ in alone]


def test_transparency_is_kept_by_webp_and_avif_and_flattened_onto_white_for_jpeg() -> None:
    """A logo on a transparent background stays transparent in WebP and AVIF (its corners fully
    transparent, the disc opaque red) and is white behind it in JPEG."""
    spec = replace(SPEC, ratios=(Ratio(3, 2),), max_side=300)
    for rendition in render(_logo(), spec):
        with Image.open(io.BytesIO(rendition.data)) as image:
            if rendition.format == "jpeg":
                assert image.mode == "RGB"
                corner = image.getpixel((2, 2))
                assert isinstance(corner, tuple)
                assert min(corner) >= 250
                continue
            assert image.mode == "RGBA", rendition.format
            rgba = np.asarray(image)
            assert rgba[:5, :5, 3].max() <= 2
            centre = rgba[rgba.shape[0] // 2, rgba.shape[1] // 2]
            assert centre[3] >= 250
            assert centre[0] > 180 > centre[2]


def test_colour_is_converted_to_srgb_in_every_format() -> None:
    """An Adobe RGB source is converted to sRGB once, for all formats: the WebP and AVIF look
    like the JPEG (which test_colour holds to a colour-managed reference), not like the raw
    Adobe RGB values."""
    rng = np.random.default_rng(9)
    cells = rng.integers(20, 236, (6, 8, 3), dtype=np.uint8)
    cells[..., rng.integers(0, 3)] //= 4  # saturated colours, where the two spaces differ most
    srgb = Image.fromarray(cells, "RGB").resize((480, 360), Image.Resampling.NEAREST)
    adobe = ImageCms.profileToProfile(
        srgb,
        ImageCms.createProfile("sRGB"),
        ImageCms.ImageCmsProfile(io.BytesIO(adobe_rgb_profile())),
        outputMode="RGB",
    )
    assert adobe is not None
    data = encode(adobe, "PNG", icc_profile=adobe_rgb_profile())
    renditions = render(data, replace(SPEC, ratios=(Ratio(4, 3),), max_side=480))
    pixels = {
        r.format: np.asarray(Image.open(io.BytesIO(r.data)).convert("RGB"), dtype=np.int16)
        for r in renditions
    }
    raw = np.asarray(adobe, dtype=np.int16)
    expected = np.asarray(srgb, dtype=np.int16)
    for name in ("webp", "avif"):
        assert np.abs(pixels[name] - pixels["jpeg"]).mean() < 4
        assert np.abs(pixels[name] - expected).mean() < np.abs(pixels[name] - raw).mean()


def test_grey_sources_stay_grey_in_every_format() -> None:
    """A grey source's outputs are grey: 1-channel JPEG and AVIF; WebP, which has no grey mode,
    with three equal channels."""
    data = encode(scene(400, 300, None, seed=2).convert("L"), "PNG")
    for rendition in render(data, replace(SPEC, ratios=(Ratio(1, 1),))):
        with Image.open(io.BytesIO(rendition.data)) as image:
            rgb = np.asarray(image.convert("RGB"), dtype=np.int16)
            assert np.abs(rgb[..., 0] - rgb[..., 2]).max() <= 2, rendition.format


def test_every_format_gives_the_same_bytes_across_runs_and_threads() -> None:
    """Rendering the same source in eight threads at once, twice, gives one set of digests."""
    data = photos()[0].data
    spec = replace(SPEC, max_side=400)
    first = _digests(data, spec)
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda _: _digests(data, spec), range(8)))
    assert all(run == first for run in runs)


def test_every_format_gives_the_same_bytes_in_another_process() -> None:
    """A fresh interpreter (other allocations, other thread timing) writes the same bytes."""
    data = photos()[0].data
    spec = replace(SPEC, max_side=400)
    script = (
        "import sys, json, hashlib\n"
        "from batchcrop.crop import RenderSpec, render\n"
        "spec = RenderSpec.from_record(json.loads(sys.argv[1]))\n"
        "data = sys.stdin.buffer.read()\n"
        "print(json.dumps([[str(r.ratio), r.format, r.sha256] for r in render(data, spec)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(spec.to_record())],
        input=data,
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    assert [tuple(row) for row in json.loads(done.stdout)] == _digests(data, spec)


@pytest.mark.parametrize("tables", [CALIBRATION, MATCH_STARTS], ids=["calibration", "starts"])
def test_one_quality_number_maps_onto_each_encoder_monotonically(
    tables: tuple[tuple[tuple[int, int, int], ...], ...],
) -> None:
    """JPEG takes the number as is; WebP's and AVIF's settings (calibrated, or where the search
    starts) read their size class's table, exact at its rows, interpolated between them, never
    decreasing, within 1..100."""
    for klass, table in enumerate(tables):
        side = (0, *SIZE_CLASSES_PX)[klass] + 1
        assert size_class(side) == klass
        for jpeg_q, webp_q, avif_q in table:
            assert encoder_quality("jpeg", jpeg_q, side, tables) == jpeg_q
            assert encoder_quality("webp", jpeg_q, side, tables) == webp_q
            assert encoder_quality("avif", jpeg_q, side, tables) == avif_q
        for name in ("webp", "avif"):
            settings = [encoder_quality(name, q, side, tables) for q in range(1, 101)]
            assert settings == sorted(settings)
            assert 1 <= min(settings) <= max(settings) <= 100


def test_an_output_is_encoded_with_its_size_class_setting() -> None:
    """By default a 300 px and a 900 px output of the same picture use their own class's
    calibrated WebP setting, at the one calibrated method."""
    picture = Image.open(io.BytesIO(_photo())).convert("RGB")
    for side in (300, 900):
        image = picture.resize((side, side * 3 // 4))
        expected = io.BytesIO()
        image.save(
            expected,
            format="WEBP",
            quality=encoder_quality("webp", 85, side),
            method=WEBP_METHOD,
            lossless=False,
        )
        assert encode_output(image, "webp", 85) == expected.getvalue()


def test_by_default_each_output_is_encoded_once_per_format_at_the_calibrated_setting() -> None:
    """Under the default `quality_match` each format's bytes are the one calibrated encode of
    the output, whatever else is asked for with it; under `jpeg` WebP's and AVIF's are not."""
    picture = Image.open(io.BytesIO(_photo())).convert("RGB").resize((400, 300))
    once = {name: encode_output(picture, name, 85) for name in ALL}
    assert encode_formats(picture, ALL, 85) == once
    assert encode_formats(picture, ("avif",), 85) == {"avif": once["avif"]}
    matched = encode_formats(picture, ALL, 85, "jpeg")
    assert matched["jpeg"] == once["jpeg"]
    assert (matched["webp"], matched["avif"]) != (once["webp"], once["avif"])


def test_a_matched_output_is_encoded_with_its_size_class_effort() -> None:
    """A 300 px and a 900 px matched output of the same picture use their own class's WebP
    method and encoder: libvips' libwebp with sharp YUV for the small classes, Pillow's for
    the largest (encode.WEBP_SHARP)."""
    picture = Image.open(io.BytesIO(_photo())).convert("RGB")
    small = picture.resize((300, 225))
    assert WEBP_SHARP[size_class(300)]
    assert not WEBP_SHARP[size_class(900)]
    assert encode_at(small, "webp", 80) == _sharp_webp(small, 80, WEBP_METHODS[size_class(300)])
    pillows = io.BytesIO()
    small.save(pillows, format="WEBP", quality=80, method=WEBP_METHODS[0], lossless=False)
    assert encode_at(small, "webp", 80) != pillows.getvalue()
    large = picture.resize((900, 675))
    expected = io.BytesIO()
    large.save(
        expected, format="WEBP", quality=80, method=WEBP_METHODS[size_class(900)], lossless=False
    )
    assert encode_at(large, "webp", 80) == expected.getvalue()
    assert WEBP_METHODS[0] != WEBP_METHODS[-1]


def test_every_format_is_named_once() -> None:
    """The encoders, the request's format names and the tests' list agree."""
    assert set(FORMATS) == set(FORMAT_NAMES) == set(ALL)


def test_the_memory_plan_counts_the_extra_encodes() -> None:
    """Asking for more formats raises the render's reserved estimate (their bytes, and AVIF's
    encoder), never lowers it."""
    opened = open_image(_photo(), 10**8)
    jpeg = plan(opened, replace(SPEC, formats=("jpeg",))).cost_bytes
    webp = plan(opened, replace(SPEC, formats=("jpeg", "webp"))).cost_bytes
    every = plan(opened, SPEC).cost_bytes
    assert jpeg < webp < every
