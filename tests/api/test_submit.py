"""POST /v1/batches through a live server: creation, idempotency, validation and confinement."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from batchcrop.api.models import (
    ITEMS_PER_BATCH_MAX,
    REF_CHARS_MAX,
    SOURCE_CHARS_MAX,
    storable_text,
)
from batchcrop.batches.submission import IDEMPOTENCY_KEY_CHARS_MAX
from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer

# Validation and confinement happen before the database is touched: SQLite alone covers them.
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_submit_creates_a_batch(api: LiveServer, sources: list[str]) -> None:
    """A new batch answers 201, a Location that resolves, and a queued status document."""
    response = api.client.post("/v1/batches", json=batch_body(sources))
    assert response.status_code == 201, response.text
    document = response.json()
    assert f"/v1/batches/{document['id']}" == response.headers["location"]
    assert document["state"] == "queued"
    assert len(sources) == document["total"]
    assert document["ratios"] == ["1:1", "16:9"]
    assert (document["max_side"], document["quality"]) == (64, 80)
    assert len(sources) == document["counts"]["queued"]
    fetched = api.client.get(response.headers["location"])
    assert document == fetched.json()


def test_the_failure_allowance_is_stored_and_shown(api: LiveServer, sources: list[str]) -> None:
    """`allow_failures` as a count or a percentage reaches the status document with the number
    of failed items it tolerates (a percentage of the items, rounded down)."""
    counted = api.client.post("/v1/batches", json=batch_body(sources, allow_failures=1))
    assert counted.status_code == 201, counted.text
    assert (counted.json()["allow_failures"], counted.json()["failures_allowed"]) == ("1", 1)
    share = api.client.post("/v1/batches", json=batch_body(sources, allow_failures="50%"))
    assert share.status_code == 201, share.text
    expected = ("50%", len(sources) // 2)
    assert expected == (share.json()["allow_failures"], share.json()["failures_allowed"])
    plain = api.client.post("/v1/batches", json=batch_body(sources)).json()
    assert (plain["allow_failures"], plain["failures_allowed"]) == (None, 0)


def test_a_batch_no_live_worker_serves_is_answered_with_a_warning_header(
    api: LiveServer, sources: list[str]
) -> None:
    """Without a live worker of the server's store the 201 carries `Batchcrop-Warning` naming
    the store; once one is registered the header is gone."""
    response = api.client.post("/v1/batches", json=batch_body(sources))
    assert response.status_code == 201, response.text
    store = response.json()["store"]
    assert response.headers["batchcrop-warning"].startswith(
        f"no live worker serves its store {store}"
    )
    api.app.leases.worker_seen("w-1", {"store": store, "batch_ids": None})
    served = api.client.post("/v1/batches", json=batch_body(sources, label="served"))
    assert served.status_code == 201, served.text
    assert "batchcrop-warning" not in served.headers


def test_items_keep_refs_and_normalised_sources(
    api: LiveServer, sources: list[str], source_root: Path
) -> None:
    """Items keep their refs in submission order; sources are stored as resolved paths."""
    relative_spelling = str(source_root / "shoes" / ".." / Path(sources[0]).name)
    body = batch_body([relative_spelling, *sources[1:]])
    batch = api.client.post("/v1/batches", json=body).json()
    items = api.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    assert [f"sku-{n}" for n in range(len(sources))] == [i["ref"] for i in items]
    assert sources[0] == items[0]["source"]


def test_focus_boxes_reach_the_item_documents(api: LiveServer, sources: list[str]) -> None:
    """An item's `focus_box` is stored as given and shown by the item endpoints (null without
    one); it is part of the request, so the same key with another focus box is a 409."""
    body = batch_body(sources[:2])
    body["items"][0]["focus_box"] = [10, 20, 60, 70]
    headers = {"Idempotency-Key": "import-focus"}
    response = api.client.post("/v1/batches", json=body, headers=headers)
    assert response.status_code == 201, response.text
    batch_id = response.json()["id"]
    items = api.client.get(f"/v1/batches/{batch_id}/items").json()["items"]
    assert [i["focus_box"] for i in items] == [[10, 20, 60, 70], None]
    one = api.client.get(f"/v1/batches/{batch_id}/items/{items[0]['id']}").json()
    assert one["focus_box"] == [10, 20, 60, 70]
    assert api.client.post("/v1/batches", json=body, headers=headers).status_code == 200
    body["items"][0]["focus_box"] = [10, 20, 60, 71]
    assert_problem(api.client.post("/v1/batches", json=body, headers=headers), 409)
    body["items"][0]["focus_box"] = None  # null is the same as leaving it out
    assert_problem(api.client.post("/v1/batches", json=body, headers=headers), 409)


def test_defaults_apply(api: LiveServer, sources: list[str]) -> None:
    """Only items are required: ratios, max_side and quality take the documented defaults."""
    response = api.client.post("/v1/batches", json={"items": [{"source": sources[0]}]})
    assert response.status_code == 201, response.text
    document = response.json()
    assert document["ratios"] == ["1:1", "4:3", "16:9", "3:4"]
    assert (document["max_side"], document["quality"]) == (1200, 85)


def test_idempotency_key_replays_the_same_batch(api: LiveServer, sources: list[str]) -> None:
    """Same key and body ⇒ the same batch with 200; the same key with another body ⇒ 409."""
    headers = {"Idempotency-Key": "import-2026-11-30"}
    first = api.client.post("/v1/batches", json=batch_body(sources), headers=headers)
    again = api.client.post("/v1/batches", json=batch_body(sources), headers=headers)
    other = api.client.post("/v1/batches", json=batch_body(sources[:1]), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert first.headers["location"] == again.headers["location"]
    assert_problem(other, 409)
    listed = api.client.get("/v1/batches").json()["batches"]
    assert [first.json()["id"]] == [b["id"] for b in listed]


def test_without_key_every_post_is_a_new_batch(api: LiveServer, sources: list[str]) -> None:
    """Without Idempotency-Key two identical posts create two batches."""
    ids = {api.client.post("/v1/batches", json=batch_body(sources)).json()["id"] for _ in "ab"}
    assert len(ids) == 2


BAD_BODIES: list[tuple[str, dict[str, Any], str]] = [
    ("no items", {"items": []}, "items"),
    ("items missing", {"items": None}, "items"),
    ("source missing", {"items": [{"ref": "x"}]}, "items[0].source"),
    ("empty source", {"items": [{"source": ""}]}, "items[0].source"),
    ("source not a string", {"items": [{"source": 7}]}, "items[0].source"),
    ("source too long", {"items": [{"source": "/" + "a" * SOURCE_CHARS_MAX}]}, "items[0].source"),
    (
        "ref too long",
        {"items": [{"source": "/x.jpg", "ref": "r" * (REF_CHARS_MAX + 1)}]},
        "items[0].ref",
    ),
    ("NUL in ref", {"items": [{"source": "/x.jpg", "ref": "a\u0000b"}]}, "items[0].ref"),
    ("unknown item field", {"items": [{"source": "/x.jpg", "sku": "1"}]}, "items[0].sku"),
    ("bad ratio", {"ratios": ["16/9"]}, "ratios[0]"),
    ("ratio term zero", {"ratios": ["1:1", "0:9"]}, "ratios[1]"),
    ("ratio term too big", {"ratios": ["101:1"]}, "ratios[0]"),
    ("duplicate ratios", {"ratios": ["1:1", "1:1"]}, "ratios"),
    ("no ratios", {"ratios": []}, "ratios"),
    ("too many ratios", {"ratios": [f"{n}:1" for n in range(1, 18)]}, "ratios"),
    ("ratio not a string", {"ratios": [16]}, "ratios[0]"),
    ("max_side too small", {"max_side": 15}, "max_side"),
    ("max_side too big", {"max_side": 10_001}, "max_side"),
    ("max_side as string", {"max_side": "1200"}, "max_side"),
    ("max_side fractional", {"max_side": 12.5}, "max_side"),
    ("quality zero", {"quality": 0}, "quality"),
    ("quality over 100", {"quality": 101}, "quality"),
    ("quality boolean", {"quality": True}, "quality"),
    ("unknown format", {"formats": ["jpeg", "gif"]}, "formats[1]"),
    ("duplicate formats", {"formats": ["webp", "webp"]}, "formats"),
    ("no formats", {"formats": []}, "formats"),
    ("formats as text", {"formats": "jpeg,webp"}, "formats"),
    ("unknown quality match", {"quality_match": "ssim"}, "quality_match"),
    ("quality match as a list", {"quality_match": ["jpeg"]}, "quality_match"),
    ("deadline zero", {"deadline_seconds": 0}, "deadline_seconds"),
    ("deadline negative", {"deadline_seconds": -5}, "deadline_seconds"),
    ("deadline over 30 days", {"deadline_seconds": 31 * 86400}, "deadline_seconds"),
    ("max_attempts zero", {"max_attempts": 0}, "max_attempts"),
    ("max_attempts huge", {"max_attempts": 10**9}, "max_attempts"),
    ("unknown field", {"urgency": 1}, "urgency"),
    ("label with a bidi override", {"label": "invoice \u202egpj.exe"}, "label"),
    ("label with a bidi isolate", {"label": "a\u2067b\u2069"}, "label"),
    ("label with a control character", {"label": "bad\u001b[31m"}, "label"),
    *(
        (f"label with {name}", {"label": f"in{char}voice"}, "label")
        for name, char in [
            ("a zero-width space", "\u200b"),
            ("a byte order mark", "\ufeff"),
            ("a soft hyphen", "\u00ad"),
            ("a line separator", "\u2028"),
            ("a paragraph separator", "\u2029"),
            ("a tag character", "\U000e0041"),
        ]
    ),
    *(
        (f"allow_failures {case}", {"allow_failures": value}, "allow_failures")
        for case, value in [
            ("negative", -1),
            ("over 100%", "101%"),
            ("fractional", "1.5"),
            ("boolean", True),
            ("words", "five"),
        ]
    ),
    *(
        (f"render {case}", fields, field)
        for case, fields, field in [
            ("unknown fit", {"fit": "fill"}, "fit"),
            ("fit not a text", {"fit": 1}, "fit"),
            ("pad colour unparsable", {"pad_colour": "reddish"}, "pad_colour"),
            ("pad colour of five digits", {"pad_colour": "#12345"}, "pad_colour"),
            ("background auto", {"background": "auto"}, "background"),
            ("width too small", {"widths": [320, 8]}, "widths[1]"),
            ("width too large", {"widths": [20_000]}, "widths[0]"),
            ("width as text", {"widths": ["wide"]}, "widths[0]"),
            ("widths repeated", {"widths": [320, 320]}, "widths"),
            ("too many widths", {"widths": list(range(100, 1000, 100))}, "widths"),
            ("widths beside max_side", {"widths": [640], "max_side": 800}, "widths"),
            ("trim too loose", {"trim": 129}, "trim"),
        ]
    ),
    *(
        (f"focus_box {case}", {"items": [{"source": "/x.jpg", "focus_box": box}]}, field)
        for case, box, field in [
            ("as text", "10,20,300,400", "items[0].focus_box"),
            ("as object", {"left": 1}, "items[0].focus_box"),
            ("of three", [10, 20, 300], "items[0].focus_box"),
            ("of five", [10, 20, 300, 400, 500], "items[0].focus_box"),
            ("empty", [], "items[0].focus_box"),
            ("fractional", [10, 20, 300.5, 400], "items[0].focus_box[2]"),
            ("float", [10.0, 20, 300, 400], "items[0].focus_box[0]"),
            ("string term", ["10", 20, 300, 400], "items[0].focus_box[0]"),
            ("boolean term", [10, True, 300, 400], "items[0].focus_box[1]"),
            ("null term", [10, 20, None, 400], "items[0].focus_box[2]"),
            ("negative", [-1, 20, 300, 400], "items[0].focus_box[0]"),
            ("too big", [10, 20, 300, 80_000_001], "items[0].focus_box[3]"),
            ("right not after left", [300, 20, 300, 400], "items[0].focus_box"),
            ("bottom before top", [10, 400, 300, 20], "items[0].focus_box"),
        ]
    ),
]


@sqlite_only
@pytest.mark.parametrize(("case", "fields", "field"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_bodies_are_422_naming_the_field(
    api: LiveServer, sources: list[str], case: str, fields: dict[str, Any], field: str
) -> None:
    """Each broken rule is a 422 problem whose detail and errors name the field, once."""
    response = api.client.post("/v1/batches", json=batch_body(sources[:1], **fields))
    problem = assert_problem(response, 422, field=field)
    name = field.split("[", 1)[0]
    assert not problem["detail"].startswith((f"{field}: {name}", f"{field}: {field}")), problem
    assert api.client.get("/v1/batches").json()["batches"] == []


@sqlite_only
@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b"{not json", "application/json", 422),
        (b"[1, 2]", "application/json", 422),
        (b"", "application/json", 422),
        (b"items=1", "application/x-www-form-urlencoded", 422),
        (b'{"items": "\xff\xfe"}', "application/json", 400),
    ],
)
def test_malformed_bodies_are_client_errors(
    api: LiveServer, content: bytes, content_type: str, status: int
) -> None:
    """Bad JSON, a non-object, an empty body or another media type is a 422; bytes that are not
    UTF-8 at all are a 400 problem."""
    response = api.client.post(
        "/v1/batches", content=content, headers={"Content-Type": content_type}
    )
    assert_problem(response, status)


@sqlite_only
@pytest.mark.parametrize("content_type", [None, "text/plain"])
def test_a_body_without_its_json_media_type_says_so(
    api: LiveServer, content_type: str | None
) -> None:
    """A JSON body sent without `Content-Type: application/json` (curl -d's default is a form)
    is a 422 saying what the body must be and how to send it, not that a dictionary is wanted."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = api.client.post("/v1/batches", content=b"notjson", headers=headers)
    problem = assert_problem(response, 422, field="body")
    assert problem["detail"] == (
        "body: must be a JSON object, sent with Content-Type: application/json"
    ), problem


@sqlite_only
@pytest.mark.parametrize("number", ["NaN", "Infinity"])
def test_a_deadline_that_is_not_a_finite_number_is_422(
    api: LiveServer, sources: list[str], number: str
) -> None:
    """Python's JSON reads `NaN` and `Infinity`: a deadline given so is a 422 saying it must be
    a finite number (not that NaN is over 30 days)."""
    body = (
        json.dumps(batch_body(sources[:1])).removesuffix("}") + f', "deadline_seconds": {number}}}'
    )
    response = api.client.post(
        "/v1/batches", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    problem = assert_problem(response, 422, field="deadline_seconds")
    assert "finite number" in problem["detail"], problem


@sqlite_only
def test_too_many_items_is_422(api: LiveServer, sources: list[str]) -> None:
    """One item over the per-batch cap is refused before any source is looked at."""
    body = {"items": [{"source": sources[0]}] * (ITEMS_PER_BATCH_MAX + 1)}
    assert_problem(api.client.post("/v1/batches", json=body), 422, field="items")


def test_body_over_the_cap_is_413(serve: Any, sources: list[str]) -> None:
    """A declared Content-Length over the cap is refused unread; so is a chunked body."""
    live = serve()
    oversized = b'{"items": [' + b" " * (16 * 1024 * 1024) + b"]}"
    assert_problem(
        live.client.post(
            "/v1/batches", content=oversized, headers={"Content-Type": "application/json"}
        ),
        413,
    )

    def chunks() -> Any:
        yield b'{"items": ['
        for _ in range(17):
            yield b" " * (1024 * 1024)
        yield b"]}"

    chunked = live.client.post(
        "/v1/batches", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_problem(chunked, 413)
    assert live.client.get("/healthz").status_code == 200


@sqlite_only
def test_bad_idempotency_key_is_422(api: LiveServer, sources: list[str]) -> None:
    """An Idempotency-Key longer than the stored limit is a 422 naming the header."""
    too_long = "k" * (IDEMPOTENCY_KEY_CHARS_MAX + 1)
    response = api.client.post(
        "/v1/batches", json=batch_body(sources), headers={"Idempotency-Key": too_long}
    )
    assert_problem(response, 422, field="Idempotency-Key")


@sqlite_only
@pytest.mark.parametrize(
    "source",
    [
        "/etc/passwd",
        "http://example.com/a.jpg",
        "ftp://host/a.jpg",
        "file:///etc/hosts",
        "s3://bucket/key.jpg",
        "relative/path.jpg",
    ],
)
def test_sources_outside_the_roots_are_refused(
    api: LiveServer, sources: list[str], source: str
) -> None:
    """Paths outside the roots, other URL schemes and unlisted buckets are 422, never fetched."""
    body = batch_body([sources[0], source])
    problem = assert_problem(
        api.client.post("/v1/batches", json=body), 422, field="items[1].source"
    )
    assert "/etc" not in problem["detail"]


@sqlite_only
def test_dot_dot_and_symlinks_cannot_escape(
    api: LiveServer, sources: list[str], source_root: Path, tmp_path: Path
) -> None:
    """`..` segments and symlinks leading out of a root are refused; the target is not echoed."""
    secret = tmp_path / "private" / "secret.jpg"
    secret.parent.mkdir()
    secret.write_bytes(b"not for you")
    link = source_root / "innocent.jpg"
    os.symlink(secret, link)
    for escape in (str(source_root / ".." / "private" / "secret.jpg"), str(link)):
        response = api.client.post("/v1/batches", json=batch_body([escape]))
        problem = assert_problem(response, 422, field="items[0].source")
        assert "private" not in response.text, problem


def test_s3_sources_under_an_s3_root_are_accepted(serve: Any, source_root: Path) -> None:
    """With an s3://bucket/prefix root, keys under the prefix pass and other keys do not."""
    live = serve(source_roots=(str(source_root), "s3://catalogue/imports"))
    ok = live.client.post("/v1/batches", json=batch_body(["s3://catalogue/imports/a.jpg"]))
    assert ok.status_code == 201, ok.text
    for refused in ("s3://catalogue/other/a.jpg", "s3://catalogue/imports/../x.jpg"):
        response = live.client.post("/v1/batches", json=batch_body([refused]))
        assert_problem(response, 422, field="items[0].source")


def test_no_roots_configured_refuses_every_source(serve: Any, sources: list[str]) -> None:
    """With BATCHCROP_SOURCE_ROOTS empty, nothing may be submitted through the API."""
    live = serve(source_roots=())
    response = live.client.post("/v1/batches", json=batch_body(sources))
    assert_problem(response, 422, field="items[0].source")


@sqlite_only
def test_a_file_url_is_refused_even_under_a_root(api: LiveServer, sources: list[str]) -> None:
    """A `file://` URL of a source under the roots is a 422 naming the field: a local source
    is its plain path (docs/api.md)."""
    body = batch_body([sources[0], f"file://{sources[1]}"])
    problem = assert_problem(
        api.client.post("/v1/batches", json=body), 422, field="items[1].source"
    )
    assert "must be local paths or s3:// URLs" in problem["detail"]


def test_the_characters_refused_as_control_are_unicodes_control_characters() -> None:
    """A source, ref or label is refused for a control character exactly when it holds one of
    Unicode's category Cc (checked by a pattern, not per character in Python), and for a lone
    surrogate as not storable."""
    for code in range(0x10000):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            with pytest.raises(ValueError, match="lone surrogates"):
                storable_text(f"a{char}")
        elif unicodedata.category(char) == "Cc":
            with pytest.raises(ValueError, match=r"NUL|control characters"):
                storable_text(f"a{char}")
        else:
            assert storable_text(f"a{char}") == f"a{char}"
