"""The variant follows the render request's declaration: today's keys are pinned, and a field
added later changes every key off its default and none at it (docs/design.md §5)."""

from __future__ import annotations

import hashlib
from dataclasses import make_dataclass
from typing import Any

import cv2
import pytest
from PIL import features

from batchcrop.crop import ALGORITHM_VERSION, Ratio, RenderSpec, variant_of
from batchcrop.crop.faces import face_detector
from batchcrop.crop.fields import KeyPart, list_field, text_field, whole_field
from batchcrop.crop.matching import encoder_settings
from batchcrop.crop.people import PEOPLE_SCALE_STEP, PEOPLE_SEARCH_SIDE_PX, PERSON_SCORE
from batchcrop.crop.resample import vips_version
from batchcrop.crop.spec import FORMAT_NAMES
from batchcrop.crop.variant import _library_versions, variant_text

SQUARE = (Ratio(1, 1),)
FOCUS = (10, 20, 300, 400)
EVERY_KEY = [(focus, output) for focus in (None, FOCUS) for output in FORMAT_NAMES]
"""A variant per kind of key: each output format, without and with a focus box."""


def _text(spec: Any, focus: tuple[int, int, int, int] | None = None, output: str = "jpeg") -> str:
    """The variant text with the library versions part (which changes with every upgrade)
    written `LIBS`."""
    return variant_text(spec, focus, output).replace(_library_versions(), "LIBS")


def _keys(spec: Any) -> list[str]:
    return [variant_of(spec, focus, output) for focus, output in EVERY_KEY]


def test_the_variant_text_of_todays_fields_is_pinned() -> None:
    """The text is what it was before the fields were declared, so stored derivatives keep
    their keys: max side and quality in that order, then format, algorithm and libraries, an
    other format's encoder settings, the focus box; ratios and formats asked for are not in it."""
    spec = RenderSpec(ratios=(Ratio(16, 9), Ratio(1, 1)), max_side=640, quality=70)
    head = f"max_side=640;quality=70;format=jpeg-baseline-420;algorithm={ALGORITHM_VERSION};LIBS"
    assert head == _text(spec)
    assert f"{head};focus=10,20,300,400" == _text(spec, FOCUS)
    webp = f"{head};output={encoder_settings('webp', 70)};focus=10,20,300,400"
    assert webp == _text(spec, FOCUS, "webp")
    other_request = RenderSpec(ratios=SQUARE, max_side=640, quality=70, formats=FORMAT_NAMES)
    assert _text(spec, FOCUS, "avif") == _text(other_request, FOCUS, "avif")


def test_the_variant_is_the_texts_hash() -> None:
    """The variant is the first 12 hex digits of the text's sha256, for every kind of key."""
    spec = RenderSpec(ratios=SQUARE, max_side=800, quality=90)
    for focus, output in EVERY_KEY:
        text = variant_text(spec, focus, output)
        assert hashlib.sha256(text.encode()).hexdigest()[:12] == variant_of(spec, focus, output)


_LATER_FIELDS = [
    pytest.param(
        whole_field(0, 0, 10, help="extra sharpening", key=KeyPart.VARIANT),
        3,
        "extra=3",
        id="whole number",
    ),
    pytest.param(
        list_field(
            ("srgb",),
            2,
            item_type=str,
            parse_item=str.strip,
            noun="profile",
            example="p3",
            help="colour spaces",
            key=KeyPart.VARIANT,
            choices=("srgb", "p3"),
        ),
        ("p3", "srgb"),
        "extra=p3,srgb",
        id="list",
    ),
    pytest.param(
        text_field(
            "soft",
            parse_item=str.lower,
            example="crisp",
            help="a sharpening",
            key=KeyPart.VARIANT,
            choices=("soft", "crisp"),
        ),
        "crisp",
        "extra=crisp",
        id="choice",
    ),
]


@pytest.mark.parametrize(("declaration", "value", "setting"), _LATER_FIELDS)
def test_a_byte_changing_field_added_later_changes_every_key_only_off_its_default(
    declaration: Any, value: Any, setting: str
) -> None:
    """A `KeyPart.VARIANT` field added to the declaration leaves every key as it was at its
    default (requests that do not use it meet their stored derivatives) and changes every key
    otherwise (a batch using it never takes another batch's bytes for its own)."""
    later = make_dataclass(
        "Later", [("extra", type(value), declaration)], bases=(RenderSpec,), frozen=True
    )
    today = RenderSpec(ratios=SQUARE, formats=FORMAT_NAMES)
    assert _keys(today) == _keys(later(ratios=SQUARE, formats=FORMAT_NAMES))
    changed = _keys(later(ratios=SQUARE, formats=FORMAT_NAMES, extra=value))
    assert [key for key in changed if key in _keys(today)] == []
    head = f"max_side=1200;quality=85;{setting};format=jpeg-baseline-420;"
    assert _text(later(ratios=SQUARE, extra=value)).startswith(head)


@pytest.mark.parametrize("part", [KeyPart.NAMED, KeyPart.NONE])
def test_a_field_the_key_names_or_that_changes_no_bytes_is_not_in_the_variant(
    part: KeyPart,
) -> None:
    """Only `KeyPart.VARIANT` fields are hashed: a field named in the key by itself (as the
    ratio is) or one that changes no bytes leaves every variant alone, whatever its value."""
    declaration = whole_field(0, 0, 10, help="a setting", key=part)
    later = make_dataclass(
        "Later", [("setting", int, declaration)], bases=(RenderSpec,), frozen=True
    )
    assert _keys(RenderSpec(ratios=SQUARE)) == _keys(later(ratios=SQUARE, setting=7))


def test_each_fields_part_in_the_key_is_declared() -> None:
    """The declaration gives each field its part in the key: max side, quality, fit, padding colour,
    trim, background and the quality match are hashed, ratios, formats and widths named in the key
    by themselves."""
    parts = {declared.name: declared.key for declared in RenderSpec.declarations()}
    assert parts == {
        "ratios": KeyPart.NAMED,
        "max_side": KeyPart.VARIANT,
        "quality": KeyPart.VARIANT,
        "formats": KeyPart.NAMED,
        "widths": KeyPart.NAMED,
        "fit": KeyPart.VARIANT,
        "pad_colour": KeyPart.VARIANT,
        "trim": KeyPart.VARIANT,
        "background": KeyPart.VARIANT,
        "quality_match": KeyPart.VARIANT,
    }


def test_the_variant_names_the_detectors_that_place_the_windows() -> None:
    """The libraries' part names the face detector reading landmarks (the turn of a face moves
    its room) and the person prior with its settings beside OpenCV's version (its HOG weights),
    so a worker placing windows otherwise never writes under these keys."""
    libraries = _library_versions()
    assert f"detector={face_detector()}" in libraries
    assert str(face_detector()).endswith("+landmarks")
    people = f"people=hog-people@{PEOPLE_SEARCH_SIDE_PX}/{PEOPLE_SCALE_STEP}/{PERSON_SCORE}"
    assert libraries.endswith(people)
    assert f"opencv={cv2.__version__};" in libraries
    assert ALGORITHM_VERSION == "9"


def test_the_new_fields_at_their_defaults_leave_todays_variant_text() -> None:
    """A request naming fit, padding colour, trim, background and widths at their defaults has
    today's variant text, so every derivative stored before them keeps its key."""
    spelled = RenderSpec.from_input(
        {"fit": "crop", "pad_colour": "auto", "trim": 0, "background": "#FFF", "widths": ""}
    )
    head = f"max_side=1200;quality=85;format=jpeg-baseline-420;algorithm={ALGORITHM_VERSION};LIBS"
    assert [head, head] == [_text(spelled), _text(RenderSpec())]
    assert _keys(spelled) == _keys(RenderSpec())


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"fit": "pad"}, "fit=pad"),
        ({"fit": "auto", "pad_colour": "#000"}, "fit=auto;pad_colour=#000000"),
        ({"trim": 10}, "trim=10"),
        ({"background": "#102030"}, "background=#102030"),
    ],
)
def test_each_new_field_off_its_default_is_in_the_variant_text(
    values: dict[str, Any], setting: str
) -> None:
    """Fit, padding colour, trim and background change bytes: off their defaults they are in
    the text after quality, in declaration order, and every key changes."""
    spec = RenderSpec.from_input(values)
    assert _text(spec).startswith(f"max_side=1200;quality=85;{setting};format=")
    assert [key for key in _keys(spec) if key in _keys(RenderSpec())] == []


def test_widths_are_not_in_the_variant() -> None:
    """Widths are named in the key by themselves: a width's variant is the same whichever
    other widths are asked with it."""
    assert _keys(RenderSpec(widths=(640,))) == _keys(RenderSpec(widths=(320, 640, 1280)))
    assert _keys(RenderSpec(widths=(640,))) == _keys(RenderSpec())


def test_a_webp_or_avif_variant_by_default_is_the_calibrated_one() -> None:
    """Under the default `quality_match` (`table`) WebP's and AVIF's settings text is the
    calibrated settings' (the keys they had before matching existed) and the request's text
    does not name the mode."""
    spec = RenderSpec(ratios=SQUARE, max_side=1200, quality=85)
    webp = f"webp-lossy-q85/85/95-m1-alpha;webp={features.version('webp')}"
    assert encoder_settings("webp", 85) == webp
    assert encoder_settings("avif", 85).startswith("avif-aom-q75/75/85-s9-t1-4:2:0-alpha;libavif=")
    assert f";output={webp}" in variant_text(spec, None, "webp")
    assert "quality_match" not in variant_text(spec, None, "webp")


def test_a_matched_webp_or_avif_variant_names_the_mode_and_the_search() -> None:
    """Under `quality_match` `jpeg`, the request's text names the mode and WebP's and AVIF's
    settings text the matching search, its starts and the encoder's effort per size class, so
    every key differs from the default mode's; a JPEG's text names no search."""
    spec = RenderSpec(ratios=SQUARE, max_side=1200, quality=85, quality_match="jpeg")
    default = RenderSpec(ratios=SQUARE, max_side=1200, quality=85)
    search = "match1-ssimulacra2-ge-jpeg-le-jpeg-bytes"
    webp = (
        f"webp-lossy-{search}-start81/86/91-m6/6/4-vips-sharp/vips-sharp/pil-alpha;"
        f"webp={features.version('webp')};vips={vips_version()}"
    )
    assert encoder_settings("webp", 85, "jpeg") == webp
    assert encoder_settings("avif", 85, "jpeg").startswith(
        f"avif-aom-{search}-start63/72/78-s6/6/8-t1-4:2:0/4:4:4/4:4:4-alpha-cq0;libavif="
    )
    calibrated = f"output=webp-lossy-q85/85/95-m1-alpha;webp={features.version('webp')}"
    assert calibrated not in variant_text(spec, None, "webp")
    assert webp in variant_text(spec, None, "webp")
    assert search not in variant_text(spec)
    assert variant_text(spec).startswith("max_side=1200;quality=85;quality_match=jpeg;format=")
    assert variant_of(spec, None, "webp") != variant_of(spec, None, "avif") != variant_of(spec)
    assert [key for key in _keys(spec) if key in _keys(default)] == []
