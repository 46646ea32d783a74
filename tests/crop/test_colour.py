"""Colour: embedded RGB and grey ICC profiles are converted to sRGB with LittleCMS, so a tagged
source looks the same after cropping (docs/design.md §6)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageCms

from batchcrop.crop import Ratio, RenderSpec, render
from tests.crop.images import adobe_rgb_profile, decode, grey_profile

SIZE = (480, 360)


CELL = 60


def _patches(mode: str, profile: bytes | None = None) -> Image.Image:
    """Blocks of many colours (or greys) inside sRGB's gamut, expressed in `profile`'s space
    (so they are in gamut for the conversion back), large enough to survive JPEG."""
    rng = np.random.default_rng(5)
    cells = rng.integers(40, 216, (SIZE[1] // CELL, SIZE[0] // CELL, 3), dtype=np.uint8)
    picture = Image.fromarray(cells, "RGB").resize(SIZE, Image.Resampling.NEAREST)
    if mode == "L":
        picture = picture.convert("L")
    if profile is None:
        return picture
    target = ImageCms.ImageCmsProfile(io.BytesIO(profile))
    srgb = ImageCms.createProfile("sRGB")
    converted = ImageCms.profileToProfile(
        picture if mode == "RGB" else picture.convert("RGB"),
        srgb,
        target,
        renderingIntent=ImageCms.Intent.RELATIVE_COLORIMETRIC,
        outputMode=mode,
    )
    assert converted is not None
    return converted


def _lab(image: Image.Image) -> np.ndarray:
    to_lab = ImageCms.buildTransform(
        ImageCms.createProfile("sRGB"), ImageCms.createProfile("LAB"), "RGB", "LAB"
    )
    lab = np.asarray(to_lab.apply(image.convert("RGB")), dtype=np.float64)
    # Pillow's LAB: L 0..255 for 0..100, a and b offset by 128.
    return np.stack([lab[..., 0] * 100 / 255, lab[..., 1] - 128, lab[..., 2] - 128], -1)


def _mean_delta_e(ours: Image.Image, reference: Image.Image) -> float:
    """Mean ΔE76 between the two images' cell centres (JPEG blurs the cells' edges either way)."""
    centres = [
        (x + CELL // 3, y + CELL // 3, x + 2 * CELL // 3, y + 2 * CELL // 3)
        for y in range(0, SIZE[1], CELL)
        for x in range(0, SIZE[0], CELL)
    ]
    differences = [
        _lab(ours.crop(box)).mean((0, 1)) - _lab(reference.crop(box)).mean((0, 1))
        for box in centres
    ]
    return float(np.mean([np.sqrt((d**2).sum()) for d in differences]))


@pytest.mark.parametrize(
    ("mode", "profile", "fmt"),
    [
        ("RGB", adobe_rgb_profile(), "PNG"),
        ("RGB", adobe_rgb_profile(), "JPEG"),
        ("L", grey_profile(1.0), "PNG"),
    ],
    ids=["adobe-rgb-png", "adobe-rgb-jpeg", "linear-grey-png"],
)
def test_a_tagged_source_keeps_its_colours(mode: str, profile: bytes, fmt: str) -> None:
    """Against a colour-managed reference of the same pixels, the output is within mean ΔE76 1;
    the same pixels read as sRGB (the profile dropped) are visibly off."""
    picture = _patches(mode, profile)
    buffer = io.BytesIO()
    picture.save(buffer, format=fmt, icc_profile=profile, quality=95)
    source = Image.open(io.BytesIO(buffer.getvalue()))
    source.load()
    reference = ImageCms.profileToProfile(
        source,
        ImageCms.ImageCmsProfile(io.BytesIO(profile)),
        ImageCms.createProfile("sRGB"),
        renderingIntent=ImageCms.Intent.RELATIVE_COLORIMETRIC,
        outputMode="RGB",
    )
    assert reference is not None
    spec = RenderSpec((Ratio(4, 3),), max_side=SIZE[0], quality=95)
    (rendition,) = render(buffer.getvalue(), spec)
    ours = decode(rendition.data)
    assert ours.size == SIZE
    assert _mean_delta_e(ours, reference) < 1.0
    assert _mean_delta_e(source.convert("RGB"), reference) > 2.0


def test_an_srgb_tagged_source_is_left_as_it_is() -> None:
    """Most cameras tag sRGB: those pixels are not run through a transform at all."""
    picture = _patches("RGB")
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    tagged, untagged = io.BytesIO(), io.BytesIO()
    picture.save(tagged, format="PNG", icc_profile=srgb)
    picture.save(untagged, format="PNG")
    spec = RenderSpec((Ratio(4, 3),), max_side=SIZE[0], quality=90)
    assert render(tagged.getvalue(), spec)[0].data == render(untagged.getvalue(), spec)[0].data


def test_a_broken_profile_is_ignored() -> None:
    """Garbage in the ICC chunk loses nothing: the pixels are read as sRGB."""
    picture = _patches("RGB")
    broken, untagged = io.BytesIO(), io.BytesIO()
    picture.save(broken, format="PNG", icc_profile=b"not a profile at all" * 8)
    picture.save(untagged, format="PNG")
    spec = RenderSpec((Ratio(4, 3),), max_side=SIZE[0], quality=90)
    assert render(broken.getvalue(), spec)[0].data == render(untagged.getvalue(), spec)[0].data


def test_a_grey_profile_on_colour_pixels_keeps_the_colour() -> None:
    """A grey profile attached to an RGB source describes nothing we can apply to colour:
    the pixels are read as sRGB, not turned grey."""
    picture = _patches("RGB")
    tagged, untagged = io.BytesIO(), io.BytesIO()
    picture.save(tagged, format="PNG", icc_profile=grey_profile(1.0))
    picture.save(untagged, format="PNG")
    spec = RenderSpec((Ratio(4, 3),), max_side=SIZE[0], quality=90)
    assert render(tagged.getvalue(), spec)[0].data == render(untagged.getvalue(), spec)[0].data


def _cielab_tiff(lab: tuple[float, float, float]) -> bytes:
    """An 8-bit CIELab TIFF of one colour, encoded as TIFF 6.0 says (L* 0..100 as 0..255; Pillow's
    LAB mode keeps a* and b* offset by 128 and writes them signed)."""
    lightness, a_star, b_star = lab
    pixel = (round(lightness * 255 / 100), round(a_star) + 128, round(b_star) + 128)
    buffer = io.BytesIO()
    Image.new("LAB", SIZE, pixel).save(buffer, format="TIFF")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("lab", "srgb"),
    [((50.0, 0.0, 0.0), (119, 119, 119)), ((60.0, 40.0, -30.0), (193, 117, 199))],
    ids=["grey-l50", "violet"],
)
def test_a_cielab_tiff_is_converted_to_srgb(
    lab: tuple[float, float, float], srgb: tuple[int, int, int]
) -> None:
    """An 8-bit CIELab TIFF goes through LittleCMS (Lab D50 to sRGB): L* 50 grey is about
    (119, 119, 119), not its L byte read as grey or its channels read as RGB."""
    spec = RenderSpec((Ratio(4, 3),), max_side=SIZE[0], quality=95)
    (rendition,) = render(_cielab_tiff(lab), spec)
    centre = decode(rendition.data).getpixel((SIZE[0] // 2, SIZE[1] // 2))
    assert isinstance(centre, tuple)
    assert all(abs(ours - theirs) <= 2 for ours, theirs in zip(centre, srgb, strict=True)), centre


def test_cached_transforms_do_not_keep_their_profiles_bytes() -> None:
    """Sources with large profiles leave only digests in the transform cache, not the
    profiles: the Python memory still held after rendering them is far below their size."""
    import tracemalloc  # noqa: PLC0415 (this test only)

    from batchcrop.crop import colour  # noqa: PLC0415

    padding_bytes = 2 << 20
    sources = []
    for n in range(6):
        # Trailing bytes after the profile's declared size: a distinct 2 MiB profile each.
        profile = adobe_rgb_profile() + bytes([n + 1]) * padding_bytes
        buffer = io.BytesIO()
        Image.new("RGB", (48, 32), (40, 120, 200)).save(buffer, format="JPEG", icc_profile=profile)
        sources.append(buffer.getvalue())
    spec = RenderSpec((Ratio(1, 1),), max_side=16)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for data in sources:
            render(data, spec)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert held < padding_bytes
    assert all(len(key) == 32 for key in colour._transform_to_srgb.digests())


def _tagged_jpeg(profile: bytes) -> bytes:
    """A small JPEG of Adobe RGB-looking patches carrying `profile`."""
    buffer = io.BytesIO()
    _patches("RGB").save(buffer, format="JPEG", quality=90, icc_profile=profile)
    return buffer.getvalue()


def test_a_profile_over_the_size_limit_is_ignored_and_the_pixels_taken_as_srgb() -> None:
    """A source whose embedded profile is larger than `MAX_PROFILE_BYTES` renders exactly as
    the same pixels untagged would (sRGB assumed), and the render says the profile's size;
    a real-sized profile of the same pixels still converts them."""
    from batchcrop.crop import colour  # noqa: PLC0415
    from batchcrop.renders.job import RenderJob, render_in_process  # noqa: PLC0415

    junk = adobe_rgb_profile() + b"\x01" * colour.MAX_PROFILE_BYTES
    spec = RenderSpec((Ratio(1, 1),), max_side=64)
    huge = render_in_process(RenderJob(_tagged_jpeg(junk), spec))
    untagged = render_in_process(RenderJob(_tagged_jpeg(b""), spec))
    honoured = render_in_process(RenderJob(_tagged_jpeg(adobe_rgb_profile()), spec))

    assert huge.renditions[0].data == untagged.renditions[0].data
    assert honoured.renditions[0].data != untagged.renditions[0].data
    assert (huge.ignored_profile_bytes, untagged.ignored_profile_bytes) == (len(junk), 0)
    assert honoured.ignored_profile_bytes == 0


def test_the_transform_cache_is_bounded_in_profile_bytes() -> None:
    """Distinct profiles under the size limit fill the transform cache only up to
    `TRANSFORM_CACHE_BYTES` of profiles; the least recently used are dropped."""
    from batchcrop.crop import colour  # noqa: PLC0415

    cache = colour._TransformCache(64, 8 << 20)
    profiles = [adobe_rgb_profile() + bytes([n + 1]) * (3 << 20) for n in range(5)]
    for profile in profiles:
        assert cache(profile) is not None

    assert cache.held_bytes <= 8 << 20
    assert len(cache.digests()) == 2
    assert cache.held_bytes == sum(len(profile) for profile in profiles[-2:])
