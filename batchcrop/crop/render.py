"""`render`: one source's bytes in, one encoded image per ratio and output format out.

Each output is a function of the source bytes, its own ratio and width and the render settings
only, never of the other ratios or widths asked for with it (docs/design.md §6, determinism).
Each ratio is first framed (`framing.frame`: trimmed, then cropped or padded) on the saliency
decode; a padded output is its picture resampled and pasted centred on the padding colour. Saliency
comes from the decode a whole-picture output would use (source and `max_side` alone); each output is
resampled with Lanczos from a decode whose DCT reduction depends on that output alone, decoding once
per distinct reduction, and cut from a canvas that depends on its scale alone (`resample`); every
output is encoded once per format asked for (`matching.encode_formats`): baseline JPEG, and WebP and
AVIF at the calibrated setting or, under `quality_match` `jpeg`, at the one matching the JPEG's
SSIMULACRA2 score; 1-channel for grey sources. The resampled pixels are shared by the formats,
except that a source with transparency is resampled a second time with its alpha for the formats
that keep it (WebP, AVIF), so that its JPEG is the same pixels whether or not other formats were
asked for. Deterministic: same bytes + ratio + format + spec + libraries ⇒ same output bytes and
crop box. Thread-safe: no shared mutable state; the heavy steps run inside libraries that release
the GIL: decoding and encoding in Pillow, resampling a canvas in libvips (Pillow for a cut resampled
alone or a picture with transparency; ADR 0024).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image

from batchcrop.crop.budget import MemoryBudget, reserved
from batchcrop.crop.colour import GREY_MODES, has_alpha
from batchcrop.crop.decode import OpenedImage, decode_rgb, open_image
from batchcrop.crop.encode import FORMATS
from batchcrop.crop.framing import Framed, frame
from batchcrop.crop.geometry import Box
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.matching import encode_formats
from batchcrop.crop.planning import (
    OutputSize,
    Plan,
    clipped_focus,
    cut_for,
    factors,
    output_sizes,
    padded_cut,
    plan,
)
from batchcrop.crop.resample import Cut, resample_all
from batchcrop.crop.spec import BACKGROUND_DEFAULT, RenderSpec, Rendition, colour_rgb

__all__ = ["Plan", "plan", "render"]


def render(
    data: bytes,
    spec: RenderSpec,
    *,
    focus: Box | None = None,
    max_pixels: int = MAX_SOURCE_PIXELS,
    budget: MemoryBudget | None = None,
    on_decode: DecodeHook | None = None,
) -> list[Rendition]:
    """Render every ratio of `spec` from the image `data` in every format of `spec.formats`:
    ratio by ratio in `spec.ratios` order, each ratio's formats in `spec.formats` order.

    `focus` is the item's focus box `(left, top, right, bottom)` in upright source pixels (after
    EXIF orientation, as `crop_box`): each window contains it when it can and is centred on it
    otherwise, instead of keeping the faces found (it then only avoids cutting them). A focus box
    reaching past the picture is clipped to it; one wholly outside raises `InvalidFocus`.

    Raises `InvalidImage`, `ImageTooLarge` (checked before decoding pixels, against
    `max_pixels` and, when given, against the whole memory `budget`) or `UnsupportedImage`.
    With a budget, the largest decode's estimated peak is reserved from it for the whole render
    (waiting while other renders hold it). No I/O beyond memory; safe from concurrent threads.

    `on_decode(picture, factor, size)` is called with each upright sRGB (RGB) decode the render
    makes, at DCT reduction `factor`, of the `size` source, before it is used: a caller can
    derive another picture of the source from it (the stored preview) instead of decoding the
    source again. It must leave `picture` unchanged.
    """
    opened = open_image(data, max_pixels)
    if focus is not None:
        focus = clipped_focus(focus, opened.size)
    decodes = plan(opened, spec)
    with reserved(budget, decodes.cost_bytes):
        return _render(
            data, opened, spec, decodes, max_pixels=max_pixels, focus=focus, on_decode=on_decode
        )


DecodeHook = Callable[[Image.Image, int, tuple[int, int]], None]
"""`render`'s `on_decode`: (picture, DCT reduction, upright source size)."""


def _render(
    data: bytes,
    opened: OpenedImage,
    spec: RenderSpec,
    decodes: Plan,
    *,
    max_pixels: int,
    focus: Box | None,
    on_decode: DecodeHook | None,
) -> list[Rendition]:
    size = opened.size
    grey = opened.image.mode in GREY_MODES
    # The formats encoded from the flattened (RGB) pixels, and those from RGBA pixels: the ones
    # keeping transparency, when the source has some.
    alpha = has_alpha(opened.image)
    flat = tuple(f for f in spec.formats if not (alpha and FORMATS[f].keeps_alpha))
    kept_alpha = tuple(f for f in spec.formats if alpha and FORMATS[f].keeps_alpha)
    background = colour_rgb(spec.background)
    # A picture flattened onto another colour than white is not the one the stored preview
    # is made from: the preview then decodes for itself.
    hooked = on_decode if not alpha or spec.background == BACKGROUND_DEFAULT else None
    unused = [opened]

    def decode(factor: int, *, keep_alpha: bool = False) -> Image.Image:
        # An opened image decodes once: the first decode uses it, later ones open the bytes again.
        fresh = unused.pop() if unused else open_image(data, max_pixels, structure_checked=True)
        picture = decode_rgb(fresh, factor, keep_alpha=keep_alpha, background=background)
        if hooked is not None and not keep_alpha:
            hooked(picture, factor, size)
        return picture

    stored = opened.image.size  # before a decode's draft changes it
    kept: Image.Image | None = None  # the look decode, when some output uses it too
    if decodes.look:
        picture = decode(decodes.saliency_factor)
        framed = frame(picture, size, spec, focus)
        kept = picture if flat else None
        del picture
    else:
        framed = frame(None, size, spec, focus)
    sizes = output_sizes(spec)
    chosen = factors(opened, framed, sizes, stored)
    if kept is not None and decodes.saliency_factor not in chosen:
        kept = None
    renditions: dict[tuple[int, str], Rendition] = {}
    # The kept look decode first, so that only one decode is ever alive.
    first = decodes.saliency_factor if kept is not None else None
    for factor in sorted(set(chosen), key=lambda f: (f != first, f)):
        members = [i for i, f in enumerate(chosen) if f == factor]
        for formats, keep_alpha in ((flat, False), (kept_alpha, True)):
            if not formats:
                continue
            if kept is not None and factor == first and not keep_alpha:
                picture = kept
            else:
                picture = decode(factor, keep_alpha=keep_alpha)
            kept = None
            outputs = [_output(framed, sizes[i], picture.size, size) for i in members]
            pictures = resample_all(picture, [output.cut for output in outputs], size)
            del picture
            for index, output, (image, box) in zip(members, outputs, pictures, strict=True):
                shown = output.padded(image, framed.colour)
                # A grey source's three channels are equal: L keeps every value (and a grey
                # padding's too).
                if grey and shown.mode == "RGB" and _is_grey(output, framed.colour):
                    shown = shown.convert("L")
                made = _Made(sizes[index], framed, output, box)
                encoded = encode_formats(shown, formats, spec.quality, spec.quality_match)
                for name in formats:
                    renditions[index, name] = _encoded(made, shown, encoded[name], name, size)
            del pictures
    return [renditions[index, name] for index in range(len(sizes)) for name in spec.formats]


@dataclass(frozen=True)
class _Output:
    """One output to make from a decode: the cut resampled, and for a padded one its size and
    padding (left, top, right, bottom) in output pixels."""

    fit: str
    cut: Cut
    size: tuple[int, int]
    padding: tuple[int, int, int, int]

    def padded(self, image: Image.Image, colour: tuple[int, int, int]) -> Image.Image:
        """`image` (the resampled cut) on its output: padded with `colour`, or transparent
        for a picture that keeps its alpha (its own background is transparent)."""
        if self.padding == (0, 0, 0, 0):
            return image
        fill = (*colour, 0) if image.mode == "RGBA" else colour
        canvas = Image.new(image.mode, self.size, fill)
        canvas.paste(image, self.padding[:2])
        return canvas


def _output(
    framed: Framed, size: OutputSize, decoded: tuple[int, int], source: tuple[int, int]
) -> _Output:
    framing = framed.ratios[size.index]
    if framing.fit == "crop":
        cut = cut_for(framing.box, size.ratio, size.long_side, decoded, source)
        return _Output("crop", cut, cut.size, (0, 0, 0, 0))
    cut, out, padding = padded_cut(framing, size.ratio, size.long_side, decoded, source)
    return _Output("pad", cut, out, padding)


def _is_grey(output: _Output, colour: tuple[int, int, int]) -> bool:
    return output.padding == (0, 0, 0, 0) or colour[0] == colour[1] == colour[2]


@dataclass(frozen=True)
class _Made:
    """What a rendition records besides its bytes."""

    size: OutputSize
    framed: Framed
    output: _Output
    box: Box


def _encoded(
    made: _Made, image: Image.Image, encoded: bytes, name: str, source: tuple[int, int]
) -> Rendition:
    return Rendition(
        ratio=made.size.ratio,
        data=encoded,
        width=image.width,
        height=image.height,
        sha256=hashlib.sha256(encoded).hexdigest(),
        crop_box=made.box,
        format=name,
        source_size=source,
        fit=made.output.fit,
        padding=made.output.padding,
        trim_box=made.framed.trim_box,
        requested_width=made.size.requested_width,
    )
