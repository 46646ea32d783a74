"""Product-like pictures on plain backgrounds from installed packages, with measured extents.

A catalogue's photographs are products on white (or black, or transparent); these are pictures
of that kind that well-known packages ship inside their wheels, so nothing is downloaded while
tests run: matplotlib's present (a rendered product on transparency), scikit-image's logo and
horse (on white) and its colour wheel (on black). A product's extent is measured, not marked:
the box of every pixel further than `PRODUCT_TOLERANCE` levels from the background, in the
picture flattened onto white (as the render flattens it). Only the packages' locations are
looked up (as `tests/crop/real_photos.py` does), never their code imported.
"""

from __future__ import annotations

import functools
import importlib.util
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from tests.crop.images import Box

PRODUCT_TOLERANCE = 32
"""Levels (any channel) from the background beyond which a pixel is the product's."""


@dataclass(frozen=True)
class ProductPhoto:
    """One picture: its bytes (a PNG), its size, its background colour and its product's box."""

    name: str
    data: bytes = field(repr=False)
    size: tuple[int, int]
    background: tuple[int, int, int]
    product: Box


_SOURCES = (
    ("present", "matplotlib", "mpl-data/sample_data/Minduka_Present_Blue_Pack.png"),
    ("logo", "skimage", "data/logo.png"),
    ("horse", "skimage", "data/horse.png"),
    ("colour-wheel", "skimage", "data/color.png"),
)


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None, f"{package} is not installed"
    assert spec.submodule_search_locations, f"{package} is not a package"
    return Path(next(iter(spec.submodule_search_locations)))


def _measured(name: str, data: bytes) -> ProductPhoto:
    with Image.open(io.BytesIO(data)) as image:
        flat = Image.new("RGB", image.size, (255, 255, 255))
        rgba = image.convert("RGBA")
        flat.paste(rgba.convert("RGB"), (0, 0), rgba.getchannel("A"))
    pixels = np.asarray(flat, dtype=np.int16)
    background = tuple(int(v) for v in pixels[0, 0])
    product = (np.abs(pixels - np.array(background)) > PRODUCT_TOLERANCE).any(axis=2)
    columns, rows = np.flatnonzero(product.any(axis=0)), np.flatnonzero(product.any(axis=1))
    box = (int(columns[0]), int(rows[0]), int(columns[-1]) + 1, int(rows[-1]) + 1)
    red, green, blue = background
    return ProductPhoto(name, data, flat.size, (red, green, blue), box)


@functools.cache
def products() -> tuple[ProductPhoto, ...]:
    """Every product picture, read and measured once per session."""
    return tuple(
        _measured(name, (_package_dir(package) / path).read_bytes())
        for name, package, path in _SOURCES
    )
