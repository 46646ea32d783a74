"""Convert any decoded Pillow mode to 8-bit RGB without the classic mistakes.

- Transparency is flattened onto a background (white unless the request says otherwise) by
  its alpha, so the (often black) colour stored under
  fully transparent pixels never shows; or, for outputs that keep it (WebP, AVIF), kept as RGBA.
- 16-bit and 32-bit grayscale is rescaled from 0..65535, not clipped at 255 (which turns it white).
- CMYK, RGB and grey pixels go through their embedded ICC profile to sRGB (LittleCMS, relative
  colorimetric for RGB and grey, perceptual for CMYK); untagged or sRGB-tagged pixels are sRGB,
  and so are pixels whose profile is larger than `MAX_PROFILE_BYTES` (no real profile is: such
  a profile is junk or an attack on memory; `ignored_profile_bytes` says so for the item).
Pure functions; safe from any thread.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
from PIL import Image, ImageCms

from batchcrop.crop.budget import MIB
from batchcrop.crop.errors import UnsupportedImage

BACKGROUND_RGB = (255, 255, 255)
_SRGB = ImageCms.createProfile("sRGB")
STRIP_PIXELS = 1 << 18
"""Pixels converted at a time by the strip-wise conversions (a few MiB of temporaries)."""
SIXTEEN_BIT_MAX = 65535
_WIDE_GRAY_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
GREY_MODES = _WIDE_GRAY_MODES | {"1", "L", "LA", "La"}
"""Decoded modes of grey pictures: their outputs are written as 1-channel (grey) JPEGs."""
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
# Floating-point pixels have no agreed range (0..1, 0..255, HDR): no faithful 8-bit conversion.
_REFUSED_MODES = frozenset({"F"})


def has_alpha(image: Image.Image) -> bool:
    """Whether `image` (opened) has an alpha channel or palette/colour-key transparency."""
    return image.mode in _ALPHA_MODES or "transparency" in image.info


def to_rgb(
    image: Image.Image,
    *,
    keep_alpha: bool = False,
    background: tuple[int, int, int] = BACKGROUND_RGB,
) -> Image.Image:
    """Return `image` (loaded) as mode RGB in sRGB, transparency flattened onto `background`;
    raise UnsupportedImage for modes with no
    conversion. An embedded CMYK, RGB or grey ICC profile is honoured (untagged pixels are sRGB;
    a CMYK image without a usable profile gets Pillow's naive conversion). With `keep_alpha`, an
    image with transparency (`has_alpha`) is returned as RGBA instead, its colour converted the
    same way and its alpha unchanged."""
    convert = _transform_to_srgb(_usable_profile(image))
    # The pixels the profile describes: "RGB", "L" or "CMYK" (None: untagged or sRGB).
    reads = None if convert is None else convert.input_mode
    if keep_alpha and has_alpha(image) and image.mode not in _REFUSED_MODES:
        return _with_alpha(image, convert, reads)
    if image.mode == "CMYK":
        if convert is not None and reads == "CMYK":
            return convert.apply(image)
        return image.convert("RGB")
    rgb = _as_rgb(image, background)
    if convert is not None and reads == "RGB":
        return convert.apply(rgb)
    if convert is not None and reads == "L" and image.mode in GREY_MODES:
        # A grey source's RGB has three equal channels, so its grey is recovered exactly.
        return convert.apply(rgb.convert("L"))
    return rgb  # untagged, sRGB, or a profile describing other pixels than these


# Per profile colour space: the pixels LittleCMS reads, and the intent (perceptual for print
# profiles, whose gamut differs most from sRGB's).
_PROFILE_INPUTS = {
    "RGB": ("RGB", ImageCms.Intent.RELATIVE_COLORIMETRIC),
    "GRAY": ("L", ImageCms.Intent.RELATIVE_COLORIMETRIC),
    "CMYK": ("CMYK", ImageCms.Intent.PERCEPTUAL),
}


MAX_PROFILE_BYTES = 4 * MIB
"""An embedded ICC profile larger than this is ignored and the pixels taken as sRGB: camera and
print profiles are a few KB to about 1 MB (a large CMYK device link); a bigger one costs its
size again in every transform built from it."""
TRANSFORM_CACHE_ENTRIES = 64
"""Profiles whose transforms to sRGB a process keeps (least recently used dropped first)."""
TRANSFORM_CACHE_BYTES = 16 * MIB
"""The most profile bytes the cached transforms stand for: a transform keeps its parsed input
profile, about the profile's size (least recently used dropped first)."""


def ignored_profile_bytes(image: Image.Image) -> int:
    """The size of `image`'s (opened) embedded profile when `to_rgb` ignores it for its size,
    else 0."""
    size = len(image.info.get("icc_profile") or b"")
    return size if size > MAX_PROFILE_BYTES else 0


def _usable_profile(image: Image.Image) -> bytes:
    icc: bytes = image.info.get("icc_profile") or b""
    return b"" if len(icc) > MAX_PROFILE_BYTES else icc


class _TransformCache:
    """Transforms to sRGB keyed by their profile's SHA-256, never by its bytes: a cache keyed by
    the bytes kept every profile alive, and 24 sources with 16 MB profiles took a process from
    30 to 478 MiB. Bounded in entries and in the profile bytes they stand for. Thread-safe; two
    threads missing the same profile may both build it."""

    def __init__(self, entries: int, max_bytes: int) -> None:
        self._entries = entries
        self._max_bytes = max_bytes
        self._transforms: OrderedDict[bytes, tuple[ImageCms.ImageCmsTransform | None, int]] = (
            OrderedDict()
        )
        self._bytes = 0
        self._lock = threading.Lock()

    def __call__(self, icc: bytes) -> ImageCms.ImageCmsTransform | None:
        if not icc:
            return None
        digest = hashlib.sha256(icc).digest()
        with self._lock:
            if digest in self._transforms:
                self._transforms.move_to_end(digest)
                return self._transforms[digest][0]
        transform = _built_transform(icc)
        # A transform that does nothing (sRGB, unreadable) keeps no profile: it costs its key.
        cost = 0 if transform is None else len(icc)
        with self._lock:
            if digest not in self._transforms:
                self._transforms[digest] = (transform, cost)
                self._bytes += cost
            while self._transforms and (
                len(self._transforms) > self._entries or self._bytes > self._max_bytes
            ):
                _, (_, dropped) = self._transforms.popitem(last=False)
                self._bytes -= dropped
        return transform

    @property
    def held_bytes(self) -> int:
        """The profile bytes the cached transforms stand for."""
        with self._lock:
            return self._bytes

    def digests(self) -> list[bytes]:
        """The digests held, least recently used first."""
        with self._lock:
            return list(self._transforms)


_transform_to_srgb = _TransformCache(TRANSFORM_CACHE_ENTRIES, TRANSFORM_CACHE_BYTES)


def _built_transform(icc: bytes) -> ImageCms.ImageCmsTransform | None:
    """A transform from an embedded profile to sRGB, or None when there is nothing to do: an
    sRGB profile, another colour space, or an unreadable one (a broken profile should not lose
    the picture)."""
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        space = profile.profile.xcolor_space.strip()
        if space not in _PROFILE_INPUTS or (space == "RGB" and _is_srgb(profile)):
            return None
        mode, intent = _PROFILE_INPUTS[space]
        return ImageCms.buildTransform(profile, _SRGB, mode, "RGB", renderingIntent=intent)
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return None


def _is_srgb(profile: ImageCms.ImageCmsProfile) -> bool:
    """Whether a profile says it is sRGB (most cameras' and editors' tag): converting would only
    cost time and move values by rounding."""
    return "srgb" in (ImageCms.getProfileDescription(profile) or "").lower()


def _as_rgb(image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in _REFUSED_MODES:
        raise UnsupportedImage(f"image mode {mode} is not supported")
    if mode in _WIDE_GRAY_MODES:
        return _wide_gray_to_rgb(image)
    if mode in _ALPHA_MODES or "transparency" in image.info:
        return _flatten(image, background)
    try:
        return image.convert("RGB")
    except ValueError as exc:
        raise UnsupportedImage(f"image mode {mode} is not supported") from exc


def _with_alpha(
    image: Image.Image, convert: ImageCms.ImageCmsTransform | None, reads: str | None
) -> Image.Image:
    try:
        rgba = image.convert("RGBA")
    except ValueError as exc:
        raise UnsupportedImage(f"image mode {image.mode} is not supported") from exc
    if convert is None or reads not in {"RGB", "L"}:
        return rgba
    if reads == "L" and image.mode not in GREY_MODES:
        return rgba  # a grey profile on colour pixels is not applied (as in `to_rgb`)
    colour = convert.apply(rgba.convert(reads))
    colour.putalpha(rgba.getchannel("A"))
    return colour


def _strips(image: Image.Image) -> Iterator[tuple[int, int]]:
    """Row ranges [top, bottom) of about `STRIP_PIXELS` each, covering the image."""
    rows = max(1, STRIP_PIXELS // max(1, image.width))
    for top in range(0, image.height, rows):
        yield top, min(image.height, top + rows)


def _flatten(image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """Paste onto `background` through the alpha (or the palette/colour-key transparency).

    Strip by strip, so the peak is the source plus the result (`decode.decode_cost`).
    """
    result = Image.new("RGB", image.size, background)
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
