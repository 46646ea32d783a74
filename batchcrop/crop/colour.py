"""Convert any decoded Pillow mode to 8-bit RGB without the classic mistakes.

- Transparency is flattened onto white by its alpha, so the (often black) colour stored under
  fully transparent pixels never shows.
- 16-bit and 32-bit grayscale is rescaled from 0..65535, not clipped at 255 (which turns it white).
- CMYK goes through its embedded ICC profile to sRGB when it has one.
Pure functions; safe from any thread.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageCms

from batchcrop.crop.errors import UnsupportedImage

BACKGROUND_RGB = (255, 255, 255)
SIXTEEN_BIT_MAX = 65535
_WIDE_GRAY_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
# Floating-point pixels have no agreed range (0..1, 0..255, HDR): no faithful 8-bit conversion.
_REFUSED_MODES = frozenset({"F"})


def to_rgb(image: Image.Image) -> Image.Image:
    """Return `image` (loaded) as mode RGB; raise UnsupportedImage for modes with no conversion."""
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in _REFUSED_MODES:
        raise UnsupportedImage(f"image mode {mode} is not supported")
    if mode in _WIDE_GRAY_MODES:
        return _wide_gray_to_rgb(image)
    if mode == "CMYK":
        return _cmyk_to_rgb(image)
    if mode in _ALPHA_MODES or "transparency" in image.info:
        return _flatten(image)
    try:
        return image.convert("RGB")
    except ValueError as exc:
        raise UnsupportedImage(f"image mode {mode} is not supported") from exc


def _flatten(image: Image.Image) -> Image.Image:
    """Composite onto white using the alpha (or the palette/colour-key transparency)."""
    try:
        rgba = image.convert("RGBA")
    except ValueError as exc:
        raise UnsupportedImage(f"image mode {image.mode} is not supported") from exc
    background = Image.new("RGBA", rgba.size, (*BACKGROUND_RGB, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def _wide_gray_to_rgb(image: Image.Image) -> Image.Image:
    """Map 0..65535 linearly onto 0..255 (rounded), clipping 32-bit values outside that range."""
    pixels = np.asarray(image).astype(np.int64)
    scaled = (np.clip(pixels, 0, SIXTEEN_BIT_MAX) * 255 + SIXTEEN_BIT_MAX // 2) // SIXTEEN_BIT_MAX
    return Image.fromarray(scaled.astype(np.uint8)).convert("RGB")


def _cmyk_to_rgb(image: Image.Image) -> Image.Image:
    """Use the embedded ICC profile when present and readable, else Pillow's naive conversion."""
    icc = image.info.get("icc_profile")
    if icc:
        try:
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            converted = ImageCms.profileToProfile(
                image,
                source,
                ImageCms.createProfile("sRGB"),
                renderingIntent=ImageCms.Intent.PERCEPTUAL,
                outputMode="RGB",
            )
        except (ImageCms.PyCMSError, OSError, ValueError):
            # A broken embedded profile should not lose the picture: fall back to the naive
            # conversion most viewers show for untagged CMYK.
            converted = None
        if converted is not None:
            return converted
    return image.convert("RGB")
