"""Properties over many random sources and specs, determinism and thread-safety."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from batchcrop.crop import Ratio, RenderSpec, render
from batchcrop.crop.geometry import window_size
from tests.crop.images import decode, draw_subject, encode, scene, within_one_pixel

ratios = st.builds(Ratio, st.integers(1, 100), st.integers(1, 100))
specs = st.builds(
    RenderSpec,
    ratios=st.lists(ratios, min_size=1, max_size=4, unique=True).map(tuple),
    max_side=st.integers(16, 400),
    quality=st.integers(1, 100),
)


@st.composite
def sources(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """A small noisy picture as JPEG or PNG, with its width and height."""
    width, height = draw(st.integers(1, 640)), draw(st.integers(1, 640))
    seed = draw(st.integers(0, 2**16))
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    fmt = draw(st.sampled_from(["JPEG", "PNG"]))
    return encode(Image.fromarray(pixels), fmt), width, height


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=sources(), spec=specs)
def test_every_output_has_its_ratio_and_fits(
    source: tuple[bytes, int, int], spec: RenderSpec
) -> None:
    """Outputs keep their ratio within a pixel, never exceed max side or the source, boxes fit."""
    data, width, height = source
    renditions = render(data, spec)
    assert [r.ratio for r in renditions] == list(spec.ratios)
    for rendition in renditions:
        left, top, right, bottom = rendition.crop_box
        assert 0 <= left < right <= width
        assert 0 <= top < bottom <= height
        win_w, win_h = right - left, bottom - top
        # The largest window of its ratio: it spans the source's full width or full height.
        assert win_w == width or win_h == height
        assert within_one_pixel(win_w, win_h, rendition.ratio.w, rendition.ratio.h)
        assert (rendition.width, rendition.height) == decode(rendition.data).size
        assert max(rendition.width, rendition.height) <= spec.max_side
        assert rendition.width <= right - left
        assert rendition.height <= bottom - top
        assert within_one_pixel(
            rendition.width, rendition.height, rendition.ratio.w, rendition.ratio.h
        )


@st.composite
def subjects(draw: st.DrawFn) -> tuple[int, int, tuple[int, int, int, int], Ratio]:
    """A source size, a subject box in it, and a ratio whose largest window can hold the
    subject with room to spare (so where the window goes is the only question)."""
    width, height = draw(st.integers(240, 720)), draw(st.integers(240, 720))
    ratio = draw(ratios.filter(lambda r: 1 / 4 <= r.aspect <= 4))
    if width * ratio.h >= height * ratio.w:
        win_w, win_h = height * ratio.w // ratio.h, height
    else:
        win_w, win_h = width, width * ratio.h // ratio.w
    side = draw(st.integers(max(12, min(win_w, win_h) // 8), max(12, min(win_w, win_h) // 3)))
    left = draw(st.integers(0, width - side))
    top = draw(st.integers(0, height - side))
    return width, height, (left, top, left + side, top + side), ratio


# How far (in source pixels, as a share of the longer side) a window edge may cut into the
# subject: saliency is computed on a copy of at most 192 px, so one of its cells spans this much.
PLACEMENT_SLACK = 1 / 96


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=subjects())
def test_the_window_goes_where_the_subject_is(
    case: tuple[int, int, tuple[int, int, int, int], Ratio],
) -> None:
    """A lone subject on a quiet background, anywhere, lies inside every window that can hold it
    (up to the saliency map's resolution)."""
    width, height, subject, ratio = case
    data = encode(scene(width, height, subject), "PNG")
    (rendition,) = render(data, RenderSpec(ratios=(ratio,), max_side=128))
    left, top, right, bottom = rendition.crop_box
    slack = PLACEMENT_SLACK * max(width, height)
    assert left <= subject[0] + slack
    assert top <= subject[1] + slack
    assert right >= subject[2] - slack
    assert bottom >= subject[3] - slack


@settings(max_examples=300, deadline=None)
@given(width=st.integers(1, 5000), height=st.integers(1, 5000), ratio=ratios)
def test_window_is_largest_of_its_ratio(width: int, height: int, ratio: Ratio) -> None:
    """The window spans the full width or height and matches the ratio within a pixel."""
    win_w, win_h = window_size(ratio, width, height)
    assert win_w == width or win_h == height
    assert win_w <= width
    assert win_h <= height
    assert within_one_pixel(win_w, win_h, ratio.w, ratio.h)


FOUR = RenderSpec(tuple(Ratio.parse(t) for t in ("1:1", "4:3", "16:9", "3:4")), max_side=300)


def test_deterministic_bytes() -> None:
    """Rendering the same bytes with the same spec twice gives identical bytes and hashes."""
    data = encode(scene(1400, 900, (900, 200, 1100, 500)), "JPEG", quality=90)
    first, second = render(data, FOUR), render(data, FOUR)
    assert [(r.data, r.sha256, r.crop_box) for r in first] == [
        (r.data, r.sha256, r.crop_box) for r in second
    ]


def test_threads_give_the_same_bytes_as_one_thread() -> None:
    """Concurrent renders in threads produce exactly the sequential results."""
    sources = [
        encode(scene(1200, 800, (100 * i, 50 * i, 100 * i + 200, 50 * i + 200), seed=i), "JPEG")
        for i in range(4)
    ]
    expected = [[r.sha256 for r in render(data, FOUR)] for data in sources]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda d: [r.sha256 for r in render(d, FOUR)], sources * 3))
    assert expected * 3 == results


def test_output_is_baseline_jpeg() -> None:
    """Outputs are baseline (not progressive) JPEGs with no EXIF, at the requested size."""
    data = encode(scene(800, 600, (300, 200, 500, 400)), "JPEG", progressive=True)
    for rendition in render(data, FOUR):
        image = decode(rendition.data)
        assert not image.info.get("progressive")
        assert not image.info.get("progression")
        assert "exif" not in image.info
        assert image.mode == "RGB"


def _sources() -> list[bytes]:
    """A large JPEG (several DCT reductions in play), the same stored sideways with EXIF
    orientation 6, and a PNG (decoded whole)."""
    picture = scene(2400, 1600, (1500, 300, 1900, 900), seed=7)
    exif = picture.getexif()
    exif[0x0112] = 6
    return [
        encode(picture, "JPEG", quality=90),
        encode(picture.transpose(Image.Transpose.ROTATE_90), "JPEG", quality=90, exif=exif),
        encode(picture.resize((900, 600)), "PNG"),
    ]


RATIO_POOL = ("1:1", "4:3", "16:9", "3:4", "9:16", "2:1", "1:2", "5:4")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.integers(0, 2),
    ratios=st.lists(st.sampled_from(RATIO_POOL), min_size=1, max_size=6, unique=True),
    max_side=st.sampled_from([200, 640, 1200]),
)
def test_each_ratio_is_rendered_as_if_alone(source: int, ratios: list[str], max_side: int) -> None:
    """Whatever other ratios are asked for with it, and in whatever order, a ratio's bytes and
    crop box are those of rendering it alone: its key (which names only its ratio) always
    means the same object."""
    data = SOURCES[source]
    together = render(data, RenderSpec(tuple(Ratio.parse(r) for r in ratios), max_side, 85))
    for rendition in together:
        (alone,) = render(data, RenderSpec((rendition.ratio,), max_side, 85))
        assert (rendition.sha256, rendition.crop_box) == (alone.sha256, alone.crop_box), ratios


SOURCES = _sources()


def test_an_output_shows_its_crop_box() -> None:
    """Outputs cut from a shared canvas match a direct Lanczos resize of their crop box.

    On this pattern a one-pixel error in the box costs ~3.5 levels on average. The box is whole
    source pixels and an output cut from its scale's canvas may span up to one output pixel more
    or less than its box, so the best match within a pixel of the box must be close.
    """
    rows, cols = np.mgrid[0:1100, 0:1700]
    pattern = 128 + 60 * np.sin(cols / 7.0) * np.sin(rows / 9.0)
    source = Image.fromarray(pattern.astype(np.uint8)).convert("RGB")
    draw_subject(source, (1000, 300, 1300, 700))
    ratios = tuple(Ratio.parse(t) for t in ("1:1", "4:3", "16:9", "3:4", "2:3"))
    for rendition in render(encode(source, "PNG"), RenderSpec(ratios, 400, quality=100)):
        shared = np.asarray(decode(rendition.data), dtype=np.float64)
        left, top, right, bottom = rendition.crop_box
        errors = []
        for shift in (-1.0, -0.5, 0.0, 0.5, 1.0):
            box = (left + shift, top, right + shift, bottom)
            if box[0] < 0 or box[2] > source.width:
                continue
            direct = source.resize(shared.shape[1::-1], Image.Resampling.LANCZOS, box=box)
            errors.append(np.abs(shared - np.asarray(direct, dtype=np.float64)).mean())
        assert min(errors) < 2.0, (rendition.ratio, errors)


@pytest.mark.parametrize(
    ("size", "ratio"),
    [((800, 8), "100:1"), ((200, 3), "100:1"), ((3, 200), "1:100"), ((1, 1000), "1:100")],
)
@pytest.mark.parametrize("max_side", [16, 17])
def test_very_thin_sources_render(size: tuple[int, int], ratio: str, max_side: int) -> None:
    """A scale whose canvas would be under one pixel on a side resamples the window alone
    (it raised a bare ValueError from Pillow and failed every ratio of the item)."""
    data = encode(Image.new("RGB", size, (9, 99, 200)), "PNG")
    (rendition,) = render(data, RenderSpec((Ratio.parse(ratio),), max_side, 85))
    assert max(rendition.width, rendition.height) == max_side
    left, top, right, bottom = rendition.crop_box
    assert 0 <= left < right <= size[0]
    assert 0 <= top < bottom <= size[1]
