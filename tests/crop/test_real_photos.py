"""The real-photo test set itself: every photo loads, its boxes fit, and rotated copies read back.

Crop tests lean on these boxes, so a photo that went missing from its package, a box typed outside
the picture, or an EXIF copy that does not restore the upright picture must fail here, plainly,
rather than as a puzzling crop failure elsewhere.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from tests.crop.real_photos import ORIENTATION_TAG, RealPhoto, by_name, photos, rotated

NAMES = [photo.name for photo in photos()]
MAX_MEAN_ABS_DIFF = 3.0


def pixels(data: bytes) -> np.ndarray:
    """The upright pixels of encoded `data` as an int16 array (RGB, or 2-D for grey)."""
    with Image.open(io.BytesIO(data)) as image:
        upright = ImageOps.exif_transpose(image)
        if upright.mode not in ("L", "RGB"):
            upright = upright.convert("RGB")
        return np.asarray(upright, dtype=np.int16)


def digest(data: bytes) -> str:
    """SHA-256 of `data`: compare these, never the bytes (pytest diffs big bytes for ages)."""
    return hashlib.sha256(data).hexdigest()


def test_the_set_is_big_enough() -> None:
    """At least six photos with eight faces in all, one of them grey, names unique."""
    every = photos()
    assert len(every) >= 6
    assert len(set(NAMES)) == len(NAMES)
    assert sum(len(photo.faces) for photo in every) >= 8
    assert any(pixels(photo.data).ndim == 2 for photo in every)
    assert any(photo.people for photo in every)


@pytest.mark.parametrize("name", NAMES)
def test_photo_loads_at_its_size(name: str) -> None:
    """Each photo decodes whole, upright as stored (no EXIF orientation), at its stated size."""
    photo = by_name(name)
    with Image.open(io.BytesIO(photo.data)) as image:
        image.load()
        assert image.size == photo.size
        assert image.getexif().get(ORIENTATION_TAG, 1) == 1
        assert image.mode in ("L", "RGB")
    assert photo.origin


@pytest.mark.parametrize("name", NAMES)
def test_boxes_are_inside_and_non_empty(name: str) -> None:
    """Every face and person box has positive area and lies inside the picture."""
    photo = by_name(name)
    width, height = photo.size
    boxes = photo.faces + photo.people
    assert boxes, "a photo of people marks at least one face or person"
    for left, top, right, bottom in boxes:
        assert 0 <= left < right <= width
        assert 0 <= top < bottom <= height


@pytest.mark.parametrize("orientation", range(2, 9))
@pytest.mark.parametrize("name", NAMES)
def test_rotated_copy_reads_back_upright(name: str, orientation: int) -> None:
    """exif_transpose of the rotated copy gives the original picture, up to JPEG noise."""
    photo = by_name(name)
    copy = rotated(photo, orientation)
    assert isinstance(copy, RealPhoto)
    assert (copy.size, copy.faces, copy.people) == (photo.size, photo.faces, photo.people)
    assert digest(copy.data) != digest(photo.data)
    with Image.open(io.BytesIO(copy.data)) as stored:
        assert stored.format == "JPEG"
        assert stored.getexif().get(ORIENTATION_TAG) == orientation
        width, height = photo.size
        assert stored.size == ((height, width) if orientation >= 5 else (width, height))
    original, restored = pixels(photo.data), pixels(copy.data)
    assert restored.shape == original.shape
    assert float(np.abs(restored - original).mean()) < MAX_MEAN_ABS_DIFF


def test_rotated_stores_transformed_pixels() -> None:
    """The stored pixels really are turned: read without EXIF they differ from the original."""
    photo = by_name("grace_hopper")
    with Image.open(io.BytesIO(rotated(photo, 3).data)) as stored:
        raw = np.asarray(stored.convert("RGB"), dtype=np.int16)
    assert float(np.abs(raw - pixels(photo.data)).mean()) > 20


def test_rotated_rejects_unknown_orientation() -> None:
    """Orientations outside EXIF's 1..8 are refused rather than silently stored."""
    with pytest.raises(ValueError, match=r"1\.\.8"):
        rotated(by_name("camera"), 9)
