"""Convert any decoded Pillow mode to 8-bit RGB without the classic mistakes.

- Transparency is flattened onto white by its alpha, so the (often black) colour stored under
  fully transparent pixels never shows.
- 16-bit and 32-bit grayscale is rescaled from 0..65535, not clipped at 255 (which turns it white).
- CMYK, RGB and grey pixels go through their embedded ICC profile to sRGB (LittleCMS, relative
  colorimetric for RGB and grey, perceptual for CMYK); untagged or sRGB-tagged pixels are sRGB.
Pure functions; safe from any thread.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from functools import lru_cache

import numpy as np
from PIL import Image, ImageCms

from batchcrop.crop.errors import UnsupportedImage

BACKGROUND_RGB = (255, 255, 255)
_SRGB = ImageCms.createProfile("sRGB")
STRIP_PIXELS = 1 << 18
"""Pixels converted at a time by the strip-wise conversions (a few MiB of temporaries)."""
SIXTEEN_BIT_MAX = 65535
_WIDE_GRAY_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
_GREY_MODES = frozenset({"L", "LA", "La", "I;16", "I;16L", "I;16B", "I;16N", "I"})
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
# Floating-point pixels have no agreed range (0..1, 0..255, HDR): no faithful 8-bit conversion.
_REFUSED_MODES = frozenset({"F"})


def to_rgb(image: Image.Image) -> Image.Image:
    """Return `image` (loaded) as mode RGB in sRGB; raise UnsupportedImage for modes with no
    conversion. An embedded RGB or grey ICC profile is honoured (untagged pixels are sRGB)."""
    rgb = _as_rgb(image)
    if rgb.mode == "RGB" and image.mode != "CMYK":
        return _profiled_to_srgb(image, rgb)
    return rgb


def _profiled_to_srgb(source: Image.Image, rgb: Image.Image) -> Image.Image:
    """`rgb` (the source's pixels as RGB) converted from the source's embedded RGB or grey
    profile to sRGB with LittleCMS; unchanged when untagged, tagged sRGB, or unreadable."""
    transform = _transform_to_srgb(source.info.get("icc_profile") or b"")
    if transform is None:
        return rgb
    space, apply = transform
    if space == "GRAY":
        if source.mode not in _GREY_MODES:
            return rgb  # a grey profile on colour pixels describes nothing we can apply
        # A grey source's RGB has three equal channels, so its grey is recovered exactly.
        return apply(rgb.convert("L"))
    return apply(rgb)


@lru_cache(maxsize=64)
def _transform_to_srgb(icc: bytes) -> tuple[str, Callable[[Image.Image], Image.Image]] | None:
    """A cached (colour space, apply) for an embedded profile, or None when nothing to do."""
    if not icc:
        return None
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        space = profile.profile.xcolor_space.strip()
        if space not in ("RGB", "GRAY") or _is_srgb(profile):
            return None
        transform = ImageCms.buildTransform(
            profile,
            _SRGB,
            "RGB" if space == "RGB" else "L",
            "RGB",
            renderingIntent=ImageCms.Intent.RELATIVE_COLORIMETRIC,
        )
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        # A broken embedded profile should not lose the picture: treat it as sRGB.
        return None

    def apply(image: Image.Image) -> Image.Image:
        return transform.apply(image)

    return space, apply


def _is_srgb(profile: ImageCms.ImageCmsProfile) -> bool:
    """Whether a profile says it is sRGB (most cameras' and editors' tag): converting would only
    cost time and move values by rounding."""
    return "srgb" in (ImageCms.getProfileDescription(profile) or "").lower()


def _as_rgb(image: Image.Image) -> Image.Image:
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


def _strips(image: Image.Image) -> Iterator[tuple[int, int]]:
    """Row ranges [top, bottom) of about `STRIP_PIXELS` each, covering the image."""
    rows = max(1, STRIP_PIXELS // max(1, image.width))
    for top in range(0, image.height, rows):
        yield top, min(image.height, top + rows)


def _flatten(image: Image.Image) -> Image.Image:
    """Paste onto white through the alpha (or the palette/colour-key transparency).

    Strip by strip, so the peak is the source plus the result (`decode.decode_cost`).
    """
    result = Image.new("RGB", image.size, BACKGROUND_RGB)
    for top, bottom in _strips(image):
        try:
            strip = image.crop((0, top, image.width, bottom)).convert("RGBA")
        except ValueError as exc:
            raise UnsupportedImage(f"image mode {image.mode} is not supported") from exc
        result.paste(strip.convert("RGB"), (0, top), strip.getchannel("A"))
    return result


def _wide_gray_to_rgb(image: Image.Image) -> Image.Image:
    """Map 0..65535 linearly onto 0..255 (rounded), clipping 32-bit values outside that range.

    Strip by strip in 64-bit integers, so the peak is the source plus the result."""
    result = Image.new("RGB", image.size)
    for top, bottom in _strips(image):
        pixels = np.asarray(image.crop((0, top, image.width, bottom))).astype(np.int64)
        clipped = np.clip(pixels, 0, SIXTEEN_BIT_MAX)
        scaled = (clipped * 255 + SIXTEEN_BIT_MAX // 2) // SIXTEEN_BIT_MAX
        result.paste(Image.fromarray(scaled.astype(np.uint8)).convert("RGB"), (0, top))
    return result


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
