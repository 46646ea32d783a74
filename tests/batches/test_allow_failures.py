"""A batch's failure allowance (docs/design.md §4, ADR 0035): at most that many failed items,
none abandoned, and the batch ends `succeeded` with its failures counted as before."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from batchcrop.app import App
from batchcrop.batches.allowance import allow_failures_text, failures_allowed
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec
from leases import State
from storage import LocalStore, ObjectStore
from tests.app_fixtures import run_batch
from tests.images import write_corrupt, write_photos
from tests.receiver import SECRET

local_store = pytest.mark.parametrize("store", ["local"], indirect=True)


def _request(paths: list[Path], allow_failures: str | None, **more: str) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p)) for p in paths),
        spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 64}),
        deadline_seconds=3600,
        max_attempts=1,
        allow_failures=allow_failures,
        **more,
    )


@pytest.mark.parametrize(
    ("given", "text"), [("5", "5"), ("007", "7"), (0, "0"), ("2.5%", "2.5%"), ("100.0%", "100%")]
)
def test_an_allowance_is_kept_in_its_canonical_form(given: str | int, text: str) -> None:
    """Counts and percentages are stored in one spelling each."""
    assert text == allow_failures_text(given)


@pytest.mark.parametrize("given", ["-1", "1.5", "101%", "2.555%", "five", "", "5 %", True, "1e3"])
def test_a_bad_allowance_is_refused_naming_the_field(given: str | bool) -> None:
    """Negative, fractional, over 100% or unparsable allowances are a ValueError naming it."""
    with pytest.raises(ValueError, match="allow_failures must be"):
        allow_failures_text(given)


def test_a_percentage_is_of_the_batchs_items_rounded_down() -> None:
    """5% of 164 items tolerates 8 failures; no allowance tolerates none."""
    assert (
        failures_allowed("5%", 164),
        failures_allowed("100%", 164),
        failures_allowed(None, 164),
        failures_allowed("3", 164),
    ) == (8, 164, 0, 3)


@local_store
@pytest.mark.parametrize(
    "case",
    [("2", "succeeded", 2), ("40%", "succeeded", 2), ("1", "failed", 1), (None, "failed", 0)],
)
def test_a_batch_within_its_allowance_ends_succeeded_with_its_failures_counted(
    app: App, store: ObjectStore, tmp_path: Path, case: tuple[str | None, str, int]
) -> None:
    """3 good and 2 corrupt items: with 2 (or 40%) allowed the batch is succeeded, its counts
    and failures as without; with 1 allowed it is failed; listings filter on that state."""
    allow, state, allowed = case
    paths = write_photos(tmp_path / "src", 3) + write_corrupt(tmp_path / "src")
    status, _ = app.batches.submit(_request(paths, allow))
    assert (status["allow_failures"], status["failures_allowed"]) == (allow, allowed)
    final = run_batch(app, store, status["id"])
    assert (state, {"succeeded": 3, "failed": 2}) == (
        final["state"],
        {s: final["counts"][s] for s in ("succeeded", "failed")},
    )
    assert final["failures"] == {"invalid_image": 2}
    if state == "succeeded":
        assert final["terminal_reason"] == (
            "2 of 5 items failed (invalid_image: 2), within the 2 allowed."
        )
    listed, _ = app.batches.list_batches(state=State(state))
    assert [b["id"] for b in listed] == [status["id"]]


def test_the_allowance_is_part_of_the_idempotency_fingerprint(tmp_path: Path) -> None:
    """The same sources with another allowance are another request."""
    paths = [tmp_path / "a.jpg"]
    plain = _request(paths, None)
    assert plain.fingerprint() == dataclasses.replace(plain).fingerprint()
    assert plain.fingerprint() != _request(paths, "1").fingerprint()
    assert _request(paths, "1").fingerprint() != _request(paths, "1%").fingerprint()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_callback_of_a_batch_within_its_allowance_says_succeeded(
    make_app: Callable[..., App], tmp_path: Path
) -> None:
    """The callback document written when the batch ends is the status: `succeeded`, with the
    failed item counted and `failures_allowed` beside it."""
    app = make_app(callback_secret=SECRET, callback_hosts=("127.0.0.1:*",))
    paths = write_photos(tmp_path / "src", 1) + write_corrupt(tmp_path / "src")
    request = _request(paths, "2", callback_url="http://127.0.0.1:9/hook")
    status, _ = app.batches.submit(request)
    final = run_batch(app, LocalStore(tmp_path / "store"), status["id"])
    assert final["state"] == "succeeded"
    (delivery,) = app.batches.deliveries(status["id"])
    item = app.leases.item(delivery["id"])
    assert item is not None
    body = json.loads(str(item.payload["body"]))
    assert (
        body["state"],
        body["counts"]["failed"],
        body["failures_allowed"],
    ) == ("succeeded", 2, 2)
