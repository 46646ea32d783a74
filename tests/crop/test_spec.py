"""Ratio parsing, RenderSpec validation and the variant hash."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from batchcrop.crop import (
    ALGORITHM_VERSION,
    IMAGE_SUFFIXES,
    Ratio,
    RenderSpec,
    SpecError,
    variant_of,
)
from batchcrop.crop.fields import KeyPart, whole_field

SQUARE = (Ratio(1, 1),)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16:9", Ratio(16, 9)),
        ("16x9", Ratio(16, 9)),
        (" 3 : 4 ", Ratio(3, 4)),
        ("1X1", Ratio(1, 1)),
    ],
)
def test_parse_accepts_colon_and_x(text: str, expected: Ratio) -> None:
    """Both `16:9` and `16x9` spellings parse to the same ratio."""
    assert expected == Ratio.parse(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0:1", "1..100"),
        ("1:0", "1..100"),
        ("101:1", "1..100"),
        ("-1:1", "16:9"),
        ("16/9", "16:9"),
        ("abc", "16:9"),
        ("", "16:9"),
        ("1.5:1", "16:9"),
        ("16:9:1", "16:9"),
        ("\u0661\u0666:\u0669", "16:9"),
    ],
)
def test_parse_rejects_with_clear_message(text: str, message: str) -> None:
    """Junk, non-positive and oversized terms are ValueErrors that say what is expected."""
    with pytest.raises(ValueError, match=message):
        Ratio.parse(text)


def test_ratio_text_and_key() -> None:
    """A ratio prints as `16:9` and keys as `16x9`, and ratios sort by their terms."""
    ratio = Ratio.parse("16:9")
    assert (str(ratio), ratio.key) == ("16:9", "16x9")
    assert [Ratio(1, 1), Ratio(3, 4), Ratio(16, 9)] == sorted(
        [Ratio(16, 9), Ratio(1, 1), Ratio(3, 4)]
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ratios": ()}, "ratios"),
        ({"ratios": tuple(Ratio(i, 1) for i in range(1, 18))}, "ratios"),
        ({"ratios": (Ratio(1, 1), Ratio(1, 1))}, "ratios"),
        ({"ratios": [Ratio(1, 1)]}, "ratios"),
        ({"ratios": SQUARE, "max_side": 15}, "max_side"),
        ({"ratios": SQUARE, "max_side": 10_001}, "max_side"),
        ({"ratios": SQUARE, "quality": 0}, "quality"),
        ({"ratios": SQUARE, "quality": 101}, "quality"),
        ({"ratios": SQUARE, "quality": True}, "quality"),
    ],
)
def test_render_spec_rejects_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    """An out-of-range RenderSpec raises ValueError naming the offending field."""
    with pytest.raises(ValueError, match=field):
        RenderSpec(**kwargs)  # type: ignore[arg-type]


def test_render_spec_defaults() -> None:
    """Defaults are 1200 px and quality 85."""
    spec = RenderSpec(SQUARE)
    assert (spec.max_side, spec.quality) == (1200, 85)


def test_variant_is_short_hex_and_stable() -> None:
    """The variant is 12 hex digits, equal for equal settings whatever the ratios."""
    first = variant_of(RenderSpec(SQUARE))
    again = variant_of(RenderSpec((Ratio(16, 9), Ratio(3, 4))))
    assert first == again
    assert len(first) == 12
    int(first, 16)
    assert ALGORITHM_VERSION


@pytest.mark.parametrize("change", [{"max_side": 800}, {"quality": 90}])
def test_variant_changes_with_settings_that_change_bytes(change: dict[str, int]) -> None:
    """Max side and quality each change the variant."""
    assert variant_of(RenderSpec(SQUARE)) != variant_of(RenderSpec(SQUARE, **change))


def test_record_round_trips_and_keeps_field_order() -> None:
    """`to_record` gives JSON values in declaration order; `from_record` reads them back."""
    spec = RenderSpec(ratios=(Ratio(16, 9), Ratio(1, 1)), max_side=640, quality=70)
    record = spec.to_record()
    assert record == {
        "ratios": ["16:9", "1:1"],
        "max_side": 640,
        "quality": 70,
        "formats": ["jpeg"],
        "widths": [],
        "fit": "crop",
        "pad_colour": "auto",
        "trim": 0,
        "background": "#ffffff",
        "quality_match": "table",
    }
    assert list(record) == [d.name for d in RenderSpec.declarations()]
    assert spec == RenderSpec.from_record(record)
    sized = RenderSpec(widths=(320, 640), fit="pad", pad_colour="#102030", trim=9)
    assert sized.to_record()["widths"] == [320, 640]
    assert sized == RenderSpec.from_record(sized.to_record())


def test_a_record_from_before_fit_and_widths_reads_their_defaults() -> None:
    """A batch stored with only the first fields renders as it always did."""
    old = {"ratios": ["1:1"], "max_side": 800, "quality": 80, "formats": ["jpeg"]}
    spec = RenderSpec.from_record(old)
    assert (spec.fit, spec.pad_colour, spec.trim, spec.background, spec.widths) == (
        "crop",
        "auto",
        0,
        "#ffffff",
        (),
    )
    # Formats, too, came after the first release: hashed only off its default.
    assert spec.fingerprinted() == {"ratios": ["1:1"], "max_side": 800, "quality": 80}


def test_from_input_fills_defaults_and_reads_comma_separated_ratios() -> None:
    """Absent or None fields take the spec's defaults; a comma-separated text is split."""
    spec = RenderSpec.from_input({"ratios": "16x9, 1:1", "max_side": None, "other": 1})
    assert (Ratio(16, 9), Ratio(1, 1)) == spec.ratios
    assert (spec.max_side, spec.quality) == (1200, 85)
    assert tuple(str(r) for r in RenderSpec.from_input({}).ratios) == ("1:1", "4:3", "16:9", "3:4")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"ratios": ["1:1", "16/9"]}, "ratios[1]"),
        ({"ratios": [16]}, "ratios[0]"),
        ({"ratios": ["1:1", "1:1"]}, "ratios"),
        ({"ratios": []}, "ratios"),
        ({"max_side": 5}, "max_side"),
        ({"quality": 101}, "quality"),
        ({"max_side": "1200"}, "max_side"),
        ({"formats": "jpeg,gif"}, "formats"),
        ({"formats": ["jpeg", 1]}, "formats[1]"),
        ({"formats": ["jpeg", "JPEG"]}, "formats"),
        ({"formats": 7}, "formats"),
    ],
)
def test_from_input_names_the_bad_field(values: dict[str, object], field: str) -> None:
    """Each refusal is a `SpecError` whose `field` says where the input is wrong."""
    with pytest.raises(SpecError) as caught:
        RenderSpec.from_input(values)
    assert field == caught.value.field


def test_image_suffixes_are_the_contracts_eight() -> None:
    """Source folders and prefixes expand to the contract's eight lower-case image suffixes."""
    expected = {".jpg", ".jpeg", ".png", ".gif", ".webp", ".tif", ".tiff", ".bmp"}
    assert expected == IMAGE_SUFFIXES


@dataclass(frozen=True)
class _WithSharpening(RenderSpec):
    """The spec as it would be with a render setting added after the first release."""

    sharpen: int = whole_field(0, 0, 10, help="extra sharpening", key=KeyPart.VARIANT)


def test_a_later_field_at_its_default_leaves_the_fingerprint_alone() -> None:
    """A field added later is fingerprinted only when a request sets it to something else, so
    requests that do not use it keep their fingerprints (and idempotency keys) across upgrades;
    the first release's fields are always fingerprinted."""
    base = RenderSpec(ratios=SQUARE)
    assert base.fingerprinted() == {"ratios": ["1:1"], "max_side": 1200, "quality": 85}
    assert base.fingerprinted() == _WithSharpening(ratios=SQUARE).fingerprinted()
    assert _WithSharpening(ratios=SQUARE, sharpen=3).fingerprinted()["sharpen"] == 3


def test_a_later_field_is_checked_read_and_recorded_by_its_declaration() -> None:
    """A declared field gets its limits checked (naming it), is read from input and appears in
    the record, with no code of its own."""
    with pytest.raises(SpecError) as caught:
        _WithSharpening.from_input({"sharpen": 11})
    assert (
        caught.value.field,
        str(caught.value),
    ) == ("sharpen", "sharpen must be in 0..10, got 11")
    spec = _WithSharpening.from_input({"sharpen": 4})
    assert spec.to_record()["sharpen"] == 4
    assert spec == _WithSharpening.from_record(spec.to_record())


def test_a_field_without_a_declaration_is_refused() -> None:
    """A field not made by `whole_field` or `list_field` cannot be used: it would have no flag,
    no body field and no part in the key."""

    @dataclass(frozen=True)
    class Undeclared(RenderSpec):
        crop_mode: str = "smart"

    with pytest.raises(TypeError, match=r"Undeclared\.crop_mode is not declared"):
        Undeclared()
