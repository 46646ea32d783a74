"""Why an item failed, not only how: each failed attempt keeps a short, safe message (what the
decoder or store said) on its item and event, shown by the CLI, the API and the worker's log;
`public_message` is the one place that makes such text safe (docs/design.md §3; ADR 0017)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batchcrop.errors import REDACTED_PATH, REDACTED_SECRET, REDACTED_URL, public_message
from leases import MESSAGE_MAX_CHARS
from tests.api.live import running
from tests.apps import app_factory
from tests.cli.test_cli import Cli
from tests.images import photo

HOSTILE = [
    # (what a library said, what may be shown)
    (
        "source not found: /home/ops/catalogue/2024 spring/shoe.jpg",
        f"source not found: {REDACTED_PATH}",
    ),
    ("/srv/photos/a b.jpg: Permission denied", f"{REDACTED_PATH}: Permission denied"),
    (
        "store refused the write: s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG@bucket/k.jpg: "
        "403 AccessDenied",
        f"store refused the write: {REDACTED_URL}: 403 AccessDenied",
    ),
    (
        "put derivatives/ab12/1x1-0a1b2c3d4e5f.jpg: 403 AccessDenied",
        f"put {REDACTED_PATH}: 403 AccessDenied",
    ),
    ("fetch https://user:hunter2@example.com/x?sig=abc failed", f"fetch {REDACTED_URL}"),
    ("C:\\Users\\ops\\My Pictures\\x.jpg: not found", f"{REDACTED_PATH}: not found"),
    ("bad\nline\r\x00two\x1b[31m red\x1b[0m\x1b]0;title\x07\u2028end", "bad line two red end"),
    (
        'decoder crashed\nTraceback (most recent call last):\n  File "/usr/lib/x.py", line 3',
        "decoder crashed",
    ),
    ("password=hunter2 api_key: abc Authorization: Bearer xyz", None),
    ("leaked AKIAIOSFODNN7EXAMPLE key", f"leaked {REDACTED_SECRET} key"),
    (
        "image file is truncated (3 bytes not processed)",
        "image file is truncated (3 bytes not processed)",
    ),
    ("", None),
    ("\x00\x1b[2J\n", None),
]


@pytest.mark.parametrize(("said", "shown"), HOSTILE)
def test_public_message_strips_paths_urls_secrets_controls_and_traces(
    said: str, shown: str | None
) -> None:
    """Each hostile message comes out as one clean line with its dangerous parts replaced."""
    cleaned = public_message(said)
    if shown is not None:
        assert shown == cleaned
    if cleaned is not None:
        assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in cleaned)
        for secret in ("hunter2", "wJalr", "AKIA", "/home", "/srv", "Users", "Traceback", "xyz"):
            assert secret not in cleaned


def test_public_message_is_capped() -> None:
    """A long message is cut to `MESSAGE_MAX_CHARS` with an ellipsis, however long it was."""
    cleaned = public_message("x " * 5000)
    assert cleaned is not None
    assert len(cleaned) == MESSAGE_MAX_CHARS
    assert cleaned.endswith("…")


# -- end to end: real corrupt files through `batchcrop run` -----------------------------------

CORRUPT = {
    "truncated.jpg": "image file is truncated",
    "text.jpg": "cannot identify image file",
    "empty.jpg": "empty file (0 bytes)",
}


def _sources(folder: Path) -> Path:
    """A good photo and three bad files named as JPEGs: a JPEG cut in its pixel data, a text
    file and an empty file."""
    folder.mkdir(parents=True)
    whole = photo(400, 300)
    (folder / "good.jpg").write_bytes(whole)
    (folder / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (folder / "text.jpg").write_bytes(b"this is a text file, not a picture\n")
    (folder / "empty.jpg").write_bytes(b"")
    return folder


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Iterator[Cli]:
    """The CLI on this test's database, with a store folder in tmp_path."""
    runner = Cli(database_url, tmp_path / "out")
    yield runner
    runner.kill_all()


def _by_source(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {Path(d["source"]).name: d for d in documents}


@pytest.mark.slow
def test_corrupt_files_fail_with_their_messages_everywhere(
    cli: Cli, database_url: str, tmp_path: Path
) -> None:
    """A truncated JPEG, a text file and an empty file named .jpg each fail `invalid_image`
    with what the decoder said: on the item and its failed event (CLI JSON and tables, the API
    item and events documents) and on the worker's `transition` log line; no path appears."""
    src = _sources(tmp_path / "src")
    ran = cli("--log-level", "INFO", "run", str(src), "--json", "--no-progress")
    assert ran.returncode == 1, ran.stderr
    batch = json.loads(ran.stdout)
    assert batch["failures"] == {"invalid_image": 3}

    items = _by_source(cli.json("items", batch["id"])["items"])
    for name, said in CORRUPT.items():
        assert items[name]["error_category"] == "invalid_image"
        assert said in items[name]["error_message"], items[name]
    assert items["good.jpg"]["error_message"] is None

    events = cli.json("events", batch["id"])["events"]
    failed = {e["item_id"]: e for e in events if e["to_state"] == "failed"}
    for name in CORRUPT:
        item = items[name]
        assert item["error_message"] == failed[item["id"]]["message"]
    assert all(e["message"] is None for e in events if e["to_state"] != "failed")

    cli.env["COLUMNS"] = "400"  # wide enough that no cell wraps
    items_table = cli("items", batch["id"])
    events_table = cli("events", batch["id"])
    assert 0 == items_table.returncode == events_table.returncode
    for name in CORRUPT:
        assert items[name]["error_message"] in items_table.stdout
    for event in failed.values():
        for field in ("message", "lease_token", "correlation_id"):
            assert event[field] in events_table.stdout

    for name, said in CORRUPT.items():
        lines = [line for line in ran.stderr.splitlines() if "msg=transition" in line]
        item_lines = [line for line in lines if items[name]["id"] in line]
        assert item_lines, ran.stderr
        assert "outcome=failed" in item_lines[-1]
        assert said in item_lines[-1]

    with (
        app_factory(database_url=cli.env["BATCHCROP_DATABASE_URL"]) as make,
        running(make()) as api,
    ):
        for name, said in CORRUPT.items():
            item_id = items[name]["id"]
            document = api.client.get(f"/v1/batches/{batch['id']}/items/{item_id}").json()
            assert said in document["error_message"]
            timeline = api.client.get(
                f"/v1/batches/{batch['id']}/events", params={"item": item_id}
            ).json()["events"]
            assert [document["error_message"]] == [
                e["message"] for e in timeline if e["to_state"] == "failed"
            ]

    for message in [i["error_message"] for i in items.values()] + [e["message"] for e in events]:
        assert message is None or str(tmp_path) not in message


@pytest.mark.slow
def test_a_store_failure_at_the_cap_keeps_its_message_without_the_path(
    cli: Cli, tmp_path: Path
) -> None:
    """A store that cannot take a derivative (a file stands where its folder goes) ends the
    item `attempts_exhausted` at the attempts cap, still saying what the store said, with the
    store folder's path replaced."""
    src = tmp_path / "src"
    src.mkdir()
    data = photo(200, 150)
    (src / "good.jpg").write_bytes(data)
    out = tmp_path / "out"
    (out / "derivatives").mkdir(parents=True)
    (out / "derivatives" / hashlib.sha256(data).hexdigest()).write_text("in the way")
    ran = cli("run", str(src), "--out", str(out), "--max-attempts", "1", "--json", "--no-progress")
    assert ran.returncode == 1, ran.stderr
    batch = json.loads(ran.stdout)
    (item,) = cli.json("items", batch["id"])["items"]
    assert item["error_category"] == "attempts_exhausted"
    assert item["error_message"].startswith("store unavailable: "), item
    assert str(tmp_path) not in item["error_message"]
    events = cli.json("events", batch["id"], "--item", item["id"])["events"]
    assert item["error_message"] == events[-1]["message"]
