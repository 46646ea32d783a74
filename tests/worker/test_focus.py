"""Per-item focus boxes end to end: submission, the worker, keys, the item document, failures.

Real databases (SQLite and PostgreSQL through `database_url`) and a real local folder store.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from batchcrop.app import App
from batchcrop.batches.errors import IdempotencyConflict
from batchcrop.batches.items import FocusError, ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from storage import LocalStore
from tests.app_fixtures import run_batch
from tests.images import busy_corner

Box = tuple[int, int, int, int]
RATIOS = tuple(Ratio.parse(r) for r in ("1:1", "16:9", "9:16", "2:1", "3:4"))
SPEC = RenderSpec(ratios=RATIOS, max_side=320, quality=80)
WIDTH, HEIGHT = 960, 640
FOCUS: Box = (800, 470, 900, 560)
"""Bottom right, far from the busy object top left, where saliency alone puts every window."""


def _request(*items: ItemRequest) -> BatchRequest:
    return BatchRequest(items=items, spec=SPEC, deadline_seconds=3600, max_attempts=2)


SOURCE_PX_PER_OUTPUT_PX = max(WIDTH, HEIGHT) // SPEC.max_side


def _contains(outer: list[int], inner: Box, *, slack: int = 0) -> bool:
    """Whether `inner` lies inside `outer`, each edge allowed to fall `slack` pixels short."""
    return (
        outer[0] - slack <= inner[0]
        and outer[1] - slack <= inner[1]
        and inner[2] <= outer[2] + slack
        and inner[3] <= outer[3] + slack
    )


def _write(folder: Path, name: str, data: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return str(path)


def _items_by_ref(app: App, batch_id: str) -> dict[str, dict[str, object]]:
    items, _ = app.batches.items(batch_id)
    return {str(item["ref"]): item for item in items}


def _boxes(item: dict[str, object]) -> dict[str, list[int]]:
    derivatives = item["derivatives"]
    assert isinstance(derivatives, list)
    return {d["ratio"]: d["crop_box"] for d in derivatives}


def _keys(item: dict[str, object]) -> dict[str, str]:
    derivatives = item["derivatives"]
    assert isinstance(derivatives, list)
    return {d["ratio"]: d["key"] for d in derivatives}


def test_focused_windows_contain_the_box_and_have_their_own_keys(app: App, tmp_path: Path) -> None:
    """Every ratio's crop box contains the focus box although saliency alone puts each window
    elsewhere; focused and unfocused items of one source get different keys, both stored."""
    source = _write(tmp_path / "src", "busy.jpg", busy_corner(WIDTH, HEIGHT))
    status, _ = app.batches.submit(
        _request(
            ItemRequest(source=source, ref="plain"),
            ItemRequest(source=source, ref="focused", focus_box=FOCUS),
        )
    )
    store = LocalStore(tmp_path / "store")

    assert run_batch(app, store, status["id"])["state"] == "succeeded"

    items = _items_by_ref(app, status["id"])
    assert items["plain"]["focus_box"] is None
    assert items["focused"]["focus_box"] == list(FOCUS)
    plain, focused = _boxes(items["plain"]), _boxes(items["focused"])
    assert list(focused) == [str(r) for r in RATIOS]
    for ratio, box in focused.items():
        assert _contains(box, FOCUS), (ratio, box)
        assert not _contains(plain[ratio], FOCUS), (ratio, plain[ratio])
    plain_keys, focused_keys = _keys(items["plain"]), _keys(items["focused"])
    sha = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    for ratio in plain_keys:
        assert plain_keys[ratio] != focused_keys[ratio]
        # Same source, same ratio: only the variant differs.
        for key in (plain_keys[ratio], focused_keys[ratio]):
            assert key.startswith(f"derivatives/{sha}/{ratio.replace(':', 'x')}-")
    stored = {info.key for info in store.list("derivatives/")}
    assert stored == set(plain_keys.values()) | set(focused_keys.values())


def test_a_box_wider_than_the_window_centres_it(app: App, tmp_path: Path) -> None:
    """A focus box a window cannot hold along its free axis is centred in it."""
    source = _write(tmp_path / "src", "busy.jpg", busy_corner(WIDTH, HEIGHT))
    wide: Box = (300, 500, 900, 600)  # 600 px wide: more than the 360 px of a 9:16 window
    status, _ = app.batches.submit(_request(ItemRequest(source=source, ref="wide", focus_box=wide)))

    assert run_batch(app, LocalStore(tmp_path / "store"), status["id"])["state"] == "succeeded"

    box = _boxes(_items_by_ref(app, status["id"])["wide"])["9:16"]
    assert abs((box[0] + box[2]) / 2 - (wide[0] + wide[2]) / 2) <= 1, box
    assert box[1] <= wide[1]
    assert wide[3] <= box[3]


@pytest.mark.parametrize("orientation", [6, 8])
def test_exif_rotated_sources_take_the_box_in_upright_pixels(
    app: App, tmp_path: Path, orientation: int
) -> None:
    """The same picture stored rotated with an EXIF orientation, given the same focus box in
    upright pixels, gets the crop boxes of the upright file."""
    folder = tmp_path / "src"
    upright = _write(folder, "upright.jpg", busy_corner(WIDTH, HEIGHT))
    rotated = _write(folder, "rotated.jpg", busy_corner(WIDTH, HEIGHT, orientation=orientation))
    status, _ = app.batches.submit(
        _request(
            ItemRequest(source=upright, ref="upright", focus_box=FOCUS),
            ItemRequest(source=rotated, ref="rotated", focus_box=FOCUS),
        )
    )

    assert run_batch(app, LocalStore(tmp_path / "store"), status["id"])["state"] == "succeeded"

    items = _items_by_ref(app, status["id"])
    assert _boxes(items["rotated"]) == _boxes(items["upright"])
    for ratio, box in _boxes(items["rotated"]).items():
        assert _contains(box, FOCUS), (ratio, box)


def test_a_box_outside_the_picture_fails_the_item_alone(app: App, tmp_path: Path) -> None:
    """A focus box wholly outside the picture fails that item `invalid_focus`; the rest of the
    batch succeeds, and a box reaching past the picture is clipped, not refused."""
    source = _write(tmp_path / "src", "busy.jpg", busy_corner(WIDTH, HEIGHT))
    outside: Box = (WIDTH, 100, WIDTH + 50, 200)
    reaching: Box = (900, 500, 5000, 5000)
    status, _ = app.batches.submit(
        _request(
            ItemRequest(source=source, ref="outside", focus_box=outside),
            ItemRequest(source=source, ref="reaching", focus_box=reaching),
            ItemRequest(source=source, ref="plain"),
        )
    )
    store = LocalStore(tmp_path / "store")

    final = run_batch(app, store, status["id"])

    assert (final["state"], final["failures"]) == ("failed", {"invalid_focus": 1})
    assert final["counts"]["succeeded"] == 2
    items = _items_by_ref(app, status["id"])
    failed = items["outside"]
    assert (failed["state"], failed["error_category"], failed["derivatives"]) == (
        "failed",
        "invalid_focus",
        [],
    )
    assert failed["attempt"] == 1  # permanent: never retried
    assert failed["focus_box"] == list(outside)
    # Clipped to the picture, the box touches its edges, and so does each window; `crop_box`
    # reports the pixels shown, which at an edge may be one output pixel short of the window.
    clipped: Box = (900, 500, WIDTH, HEIGHT)
    for ratio, box in _boxes(items["reaching"]).items():
        assert _contains(box, clipped, slack=SOURCE_PX_PER_OUTPUT_PX), (ratio, box)


def test_focus_boxes_are_part_of_the_fingerprint_only_when_given(app: App, tmp_path: Path) -> None:
    """A request without focus boxes keeps the fingerprint it always had; adding a focus box
    makes it another request (same idempotency key ⇒ conflict)."""
    source = _write(tmp_path / "src", "busy.jpg", busy_corner(WIDTH, HEIGHT))
    plain = _request(ItemRequest(source=source, ref="a"))
    before_focus_boxes = {
        "items": [[source, "a"]],
        **SPEC.fingerprinted(),
        "deadline_seconds": 3600,
        "max_attempts": 2,
    }
    expected = hashlib.sha256(json.dumps(before_focus_boxes, sort_keys=True).encode()).hexdigest()
    assert plain.fingerprint() == expected
    focused = _request(ItemRequest(source=source, ref="a", focus_box=FOCUS))
    moved = _request(ItemRequest(source=source, ref="a", focus_box=(0, 0, 10, 10)))
    assert len({plain.fingerprint(), focused.fingerprint(), moved.fingerprint()}) == 3

    first, _ = app.batches.submit(replace(focused, idempotency_key="import-focus"))
    again, created = app.batches.submit(replace(focused, idempotency_key="import-focus"))
    assert (again["id"], created) == (first["id"], False)
    with pytest.raises(IdempotencyConflict):
        app.batches.submit(replace(plain, idempotency_key="import-focus"))
    with pytest.raises(IdempotencyConflict):
        app.batches.submit(replace(moved, idempotency_key="import-focus"))


@pytest.mark.parametrize(
    ("box", "term", "message"),
    [
        ((10, 10, 10, 20), "right", "right must be greater than left"),
        ((10, 20, 30, 5), "bottom", "bottom must be greater than top"),
        ((-1, 0, 10, 10), "left", "left must be in 0..80000000"),
        ((0, 0, 10, 80_000_001), "bottom", "bottom must be in 0..80000000"),
        ((0, 0, 10), "left", "a focus box is four numbers: left, top, right, bottom"),
        ((0, 0, 10.5, 10), "right", "right must be a whole number"),
        ((0, False, 10, 10), "top", "top must be a whole number"),
    ],
)
def test_bad_focus_boxes_are_refused_naming_the_term(
    box: tuple[object, ...], term: str, message: str
) -> None:
    """An item request checks its focus box (four whole numbers forming a box) before anything
    is stored, naming the offending term."""
    with pytest.raises(FocusError) as raised:
        ItemRequest(source="/x.jpg", focus_box=box)  # type: ignore[arg-type]
    assert (raised.value.term, str(raised.value)) == (term, message)


def test_a_focus_list_becomes_a_tuple() -> None:
    """A list (as JSON gives it) is normalised, so equal requests hash and compare equal."""
    item = ItemRequest(source="/x.jpg", focus_box=[1, 2, 3, 4])  # type: ignore[arg-type]
    assert item == ItemRequest(source="/x.jpg", focus_box=(1, 2, 3, 4))
    assert item.payload() == {"source": "/x.jpg", "ref": None, "focus_box": [1, 2, 3, 4]}
    assert ItemRequest(source="/x.jpg").payload() == {"source": "/x.jpg", "ref": None}
