"""Where windows go: EXIF orientation, tiny and extreme sources, subjects at edges and corners."""

from __future__ import annotations

import pytest
from PIL import Image

from batchcrop.crop import Ratio, RenderSpec, render
from tests.crop.images import (
    STORE_AS,
    SUBJECT_RGB,
    Box,
    contains,
    decode,
    draw_subject,
    encode,
    mean_rgb,
    scene,
)

FOUR = tuple(Ratio.parse(text) for text in ("1:1", "4:3", "16:9", "3:4"))


def subject_colour_at(rendition_data: bytes, crop: Box, subject: Box) -> tuple[float, ...]:
    """Mean colour of the rendition around where the subject's centre should be."""
    image = decode(rendition_data)
    scale = image.width / (crop[2] - crop[0])
    centre_x = ((subject[0] + subject[2]) / 2 - crop[0]) * scale
    centre_y = ((subject[1] + subject[3]) / 2 - crop[1]) * scale
    return mean_rgb(
        image, (int(centre_x) - 1, int(centre_y) - 1, int(centre_x) + 2, int(centre_y) + 2)
    )


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation(orientation: int) -> None:
    """Crop boxes are in upright coordinates and contain the subject for all 8 orientations."""
    subject = (40, 50, 100, 110)
    upright = scene(480, 320, subject)
    transpose = STORE_AS[orientation]
    stored = upright if transpose is None else upright.transpose(transpose)
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(stored, "JPEG", quality=95, exif=exif.tobytes())
    for rendition in render(data, RenderSpec(FOUR, max_side=240)):
        _left, _top, right, bottom = rendition.crop_box
        assert right <= 480
        assert bottom <= 320
        assert contains(rendition.crop_box, subject), (rendition.ratio, rendition.crop_box)
        red_part = (subject[0], subject[1], subject[0] + 8, subject[3])
        red, green, _ = subject_colour_at(rendition.data, rendition.crop_box, red_part)
        assert red > 150, (rendition.ratio, red, green)
        assert green < 80, (rendition.ratio, red, green)


@pytest.mark.parametrize("size", [(1, 1), (3, 2), (2, 3), (1, 50), (50, 1)])
def test_tiny_sources_render_every_ratio(size: tuple[int, int]) -> None:
    """Sources of a few pixels render every ratio at a size no larger than the source."""
    data = encode(Image.new("RGB", size, (10, 200, 10)), "PNG")
    renditions = render(data, RenderSpec(FOUR))
    assert [r.ratio for r in renditions] == list(FOUR)
    for rendition in renditions:
        assert (rendition.width, rendition.height) == decode(rendition.data).size
        assert rendition.width <= size[0]
        assert rendition.height <= size[1]
        assert rendition.width >= 1
        assert rendition.height >= 1


def test_never_upscales() -> None:
    """A source smaller than max side renders at its own resolution."""
    data = encode(scene(300, 200, (100, 50, 160, 110)), "JPEG")
    sizes = [(r.width, r.height) for r in render(data, RenderSpec(FOUR, max_side=1200))]
    assert sizes == [(200, 200), (267, 200), (300, 169), (150, 200)]


@pytest.mark.parametrize(
    ("size", "subject"),
    [
        ((2000, 200), (1500, 60, 1560, 120)),
        ((2000, 200), (0, 40, 60, 100)),
        ((200, 2000), (60, 1700, 120, 1760)),
        ((200, 2000), (70, 1940, 130, 2000)),
    ],
)
def test_panoramas_and_tall_images(size: tuple[int, int], subject: Box) -> None:
    """On 10:1 and 1:10 sources, every window finds the subject, even at the far end."""
    data = encode(scene(*size, subject), "JPEG", quality=92)
    for rendition in render(data, RenderSpec(FOUR, max_side=300)):
        assert contains(rendition.crop_box, subject), (rendition.ratio, rendition.crop_box)


CORNERS_AND_EDGES = {
    "top-left": (0, 0, 90, 90),
    "top-right": (1110, 0, 1200, 90),
    "bottom-left": (0, 710, 90, 800),
    "bottom-right": (1110, 710, 1200, 800),
    "left-edge": (0, 350, 90, 440),
    "right-edge": (1110, 350, 1200, 440),
    "top-edge": (560, 0, 650, 90),
    "bottom-edge": (560, 710, 650, 800),
}


@pytest.mark.parametrize("where", sorted(CORNERS_AND_EDGES))
def test_subject_at_edges_and_corners_is_kept(where: str) -> None:
    """A subject touching the image border stays inside every crop box."""
    subject = CORNERS_AND_EDGES[where]
    data = encode(scene(1200, 800, subject, seed=3), "JPEG", quality=90)
    for rendition in render(data, RenderSpec(FOUR, max_side=400)):
        assert contains(rendition.crop_box, subject), (rendition.ratio, rendition.crop_box)


def test_small_subject_on_plain_background_is_centred() -> None:
    """A small subject on a plain background is centred in the window, not pushed to its edge."""
    subject = (700, 380, 740, 420)
    data = encode(scene(1200, 800, subject), "JPEG", quality=90)
    for rendition in render(data, RenderSpec((Ratio(1, 1), Ratio(3, 4)), max_side=400)):
        left, _, right, _ = rendition.crop_box
        assert abs((left + right) / 2 - 720) <= 0.05 * (right - left), rendition.crop_box


def test_subject_colour_survives_the_crop() -> None:
    """The rendered pixels at the subject's place are the subject's colour."""
    subject = (820, 300, 1000, 480)
    data = encode(scene(1200, 800, subject), "PNG")
    for rendition in render(data, RenderSpec(FOUR, max_side=600)):
        box = (subject[0] + 10, subject[1] + 2, subject[0] + 20, subject[1] + 12)
        colour = subject_colour_at(rendition.data, rendition.crop_box, box)
        assert max(abs(c - s) for c, s in zip(colour, SUBJECT_RGB, strict=True)) < 25


def test_large_subject_at_the_border_is_kept_whole() -> None:
    """A subject as wide as the square window, touching the border, fills that window exactly."""
    subject = (0, 50, 800, 800)
    data = encode(scene(1200, 800, subject), "JPEG", quality=90)
    (square,) = render(data, RenderSpec((Ratio(1, 1),), max_side=200))
    assert square.crop_box == (0, 0, 800, 800)


def test_horizon_does_not_outweigh_the_subject() -> None:
    """A strong horizon across the frame is structure: the window goes to the subject instead."""
    image = scene(600, 1100, None)
    image.paste((60, 40, 20), (0, 800, 600, 1100))  # dark ground under a bright sky
    image.paste((250, 250, 250), (0, 900, 600, 915))  # and a white fence rail along it
    subject = (260, 120, 340, 330)
    draw_subject(image, subject)
    data = encode(image, "JPEG", quality=90)
    for rendition in render(data, RenderSpec((Ratio(1, 1), Ratio(4, 3)), max_side=200)):
        assert contains(rendition.crop_box, subject), (rendition.ratio, rendition.crop_box)
