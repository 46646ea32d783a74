"""The API body's render fields are the render request's declaration (docs/design.md §6): every
`RenderSpec` field is a `BatchBody` field of the same name, with the declared type, default,
limits and description, as the OpenAPI schema shows them."""

from __future__ import annotations

from typing import Any

import pytest

from batchcrop.api.models import BatchBody
from batchcrop.api.requests import render_spec
from batchcrop.crop import RenderSpec
from batchcrop.crop.fields import RenderField

DECLARED = RenderSpec.declarations()


def _property(name: str) -> dict[str, Any]:
    properties: dict[str, dict[str, Any]] = BatchBody.model_json_schema()["properties"]
    assert name in properties, f"the render field {name} has no API body field"
    return properties[name]


@pytest.mark.parametrize("declared", DECLARED, ids=[d.name for d in DECLARED])
def test_every_render_field_is_a_body_field_as_declared(declared: RenderField) -> None:
    """The body field has the declaration's type, default, limits and help: a field added to
    `RenderSpec` without its body field, or a body field that drifts from it, fails here."""
    schema = _property(declared.name)
    assert (schema["default"], schema["description"]) == (declared.default_record, declared.help)
    if declared.text:
        assert (schema["type"], schema.get("enum", [])) == ("string", list(declared.choices))
    elif declared.is_list:
        limits = (schema["type"], schema["minItems"], schema["maxItems"])
        assert limits == ("array", declared.low, declared.high)
        items = schema["items"]
        item_type = "integer" if declared.item_type is int else "string"
        assert (items["type"], items.get("enum", [])) == (item_type, list(declared.choices))
    else:
        limits = (schema["type"], schema["minimum"], schema["maximum"])
        assert limits == ("integer", declared.low, declared.high)


def test_a_body_without_render_fields_gives_the_declared_defaults() -> None:
    """Only items are required: the render request is the spec's own default."""
    body = BatchBody.model_validate({"items": [{"source": "/photos/a.jpg"}]})
    assert render_spec(body) == RenderSpec()


def test_every_render_field_reaches_the_spec() -> None:
    """Each body field is handed to the spec by its name."""
    body = BatchBody.model_validate(
        {
            "items": [{"source": "/photos/a.jpg"}],
            "ratios": ["16:9", "1:1"],
            "quality": 70,
            "formats": ["webp", "jpeg"],
            "widths": [320, 640],
            "fit": "pad",
            "pad_colour": "#FFEEDD",
            "trim": 8,
            "background": "#000",
            "quality_match": "jpeg",
        }
    )
    expected = RenderSpec.from_input(
        {
            "ratios": "16:9,1:1",
            "quality": 70,
            "formats": "webp,jpeg",
            "widths": "320,640",
            "fit": "pad",
            "pad_colour": "#ffeedd",
            "trim": 8,
            "background": "#000000",
            "quality_match": "jpeg",
        }
    )
    assert expected == render_spec(body)
    # Every field but max_side (the single-size form widths replace) off its default, so a
    # field not handed over would show.
    unused = [d.name for d in DECLARED if getattr(expected, d.name) == d.default]
    assert unused == ["max_side"]
    assert render_spec(
        BatchBody.model_validate({"items": [{"source": "/a.jpg"}], "max_side": 640})
    ) == RenderSpec(max_side=640)
