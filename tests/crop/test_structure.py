"""The structural checks refuse CPU bombs before decoding, and only them."""

from __future__ import annotations

import io
import time

import pytest
from PIL import Image

from batchcrop.crop import InvalidImage, RenderSpec, render
from batchcrop.crop.structure import MAX_JPEG_SCANS, refuse_scan_bombs
from batchcrop.errors import Category
from tests.scans import repeated_scans, scans


def test_a_progressive_jpeg_with_too_many_scans_is_refused_before_decoding() -> None:
    """A JPEG whose scan repeats past the limit fails `invalid_image`, saying why, at once."""
    bomb = repeated_scans(64, MAX_JPEG_SCANS)
    started = time.perf_counter()

    with pytest.raises(InvalidImage) as caught:
        render(bomb, RenderSpec())

    assert caught.value.category is Category.INVALID_IMAGE
    assert f"more than {MAX_JPEG_SCANS} scans" in caught.value.detail
    assert time.perf_counter() - started < 1.0


def test_ordinary_progressive_and_baseline_jpegs_pass() -> None:
    """An encoder's own progressive and baseline files, and one just under the limit, render."""
    picture = Image.new("RGB", (96, 64), (30, 140, 90))
    for options in ({"progressive": True}, {}):
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", **options)
        refuse_scan_bombs(buffer.getvalue())
    near = repeated_scans(64, MAX_JPEG_SCANS - 20)
    assert MAX_JPEG_SCANS - 20 < len(scans(near)) <= MAX_JPEG_SCANS
    assert len(render(near, RenderSpec())) == len(RenderSpec().ratios)


def test_scan_markers_inside_a_segment_are_not_counted() -> None:
    """Bytes that look like SOS markers inside a comment segment are skipped by its length."""
    buffer = io.BytesIO()
    Image.new("L", (32, 32), 128).save(buffer, format="JPEG")
    data = buffer.getvalue()
    body = b"\xff\xda" * 1000  # 2000 bytes of look-alike markers
    comment = b"\xff\xfe" + (len(body) + 2).to_bytes(2, "big") + body
    refuse_scan_bombs(data[:2] + comment + data[2:], max_scans=1)
    with pytest.raises(InvalidImage):
        refuse_scan_bombs(data[:2] + comment + data[2:], max_scans=0)
