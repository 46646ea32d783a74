"""Hostile inputs: bad images through the real CLI, hostile requests against a live API.

Every hostile image ends with its expected outcome (`failed` with the right category, or
`succeeded` when it is a legitimately renderable picture) without crashing a worker or holding
up the clean images beside it. Every hostile request is answered with a 4xx problem, never 5xx.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from batchcrop.app import build
from batchcrop.batches.submission import IDEMPOTENCY_KEY_CHARS_MAX
from batchcrop.settings import Settings
from tests.api.live import LiveServer, running
from tests.chaos import corpus

CLI_TIMEOUT_SECONDS = 180.0
CLEAN_IMAGES = 4


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchcrop", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )


@pytest.mark.slow
def test_hostile_images_end_as_expected_and_block_nothing(
    database_url: str, tmp_path: Path
) -> None:
    """`batchcrop run` over the hostile corpus and clean photos: each item's outcome as expected."""
    src = tmp_path / "src"
    src.mkdir()
    expected = {}
    for hostile in corpus.hostile():
        (src / hostile.name).write_bytes(hostile.data)
        expected[hostile.name] = (hostile.state, hostile.category)
    for n in range(CLEAN_IMAGES):
        (src / f"clean-{n}.jpg").write_bytes(corpus.clean_jpeg(n))
        expected[f"clean-{n}.jpg"] = ("succeeded", None)
    # Regression: a symlink loop in a folder crashed `run` with a traceback before anything
    # was processed; it is skipped when the folder is expanded, like any unreadable entry.
    (src / "loop-a.jpg").symlink_to(src / "loop-b.jpg")
    (src / "loop-b.jpg").symlink_to(src / "loop-a.jpg")
    env = {**os.environ, "BATCHCROP_DATABASE_URL": database_url}
    env.pop("BATCHCROP_STORE", None)
    args = ("run", str(src), "--out", str(tmp_path / "out"), "--ratios", "1:1,16:9")
    budget = ("--decode-memory-mib", str(corpus.HOSTILE_DECODE_MEMORY_MIB))
    result = _cli(env, tmp_path, *args, *budget, "--max-side", "128", "--workers", "2", "--json")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    items = json.loads(_cli(env, tmp_path, "items", document["id"], "--json").stdout)["items"]
    outcomes = {Path(i["source"]).name: (i["state"], i["error_category"]) for i in items}
    assert expected == outcomes
    assert all(i["attempt"] == 1 for i in items)  # a bad file fails once, it is not retried
    succeeded = [i for i in items if i["state"] == "succeeded"]
    assert all(len(i["derivatives"]) == 2 for i in succeeded)


@pytest.fixture
def live(database_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, Path]]:
    """A live API server whose only source root holds one real image."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.jpg").write_bytes(corpus.clean_jpeg(1))
    (tmp_path / "secret.jpg").write_bytes(corpus.clean_jpeg(2))
    (root / "escape.jpg").symlink_to(tmp_path / "secret.jpg")
    (root / "loop-a.jpg").symlink_to(root / "loop-b.jpg")
    (root / "loop-b.jpg").symlink_to(root / "loop-a.jpg")
    os.mkfifo(root / "fifo.jpg")
    app = build(
        Settings(
            database_url=database_url,
            source_roots=(str(root),),
            store=f"file://{tmp_path / 'out'}",
        )
    )
    app.upgrade()
    with running(app) as server:
        yield server, root
    app.close()


def _body(source: str, **fields: Any) -> dict[str, Any]:
    return {"items": [{"source": source, "ref": "sku"}], "ratios": ["1:1"], **fields}


def _is_problem(response: httpx.Response, status: int) -> None:
    assert status == response.status_code, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "Traceback" not in response.text


def _hostile_bodies(root: Path) -> list[tuple[str, Any, int]]:
    ok = str(root / "ok.jpg")
    return [
        ("traversal", _body(f"{root}/../../../etc/passwd"), 422),
        ("dotdot to a sibling", _body(f"{root}/../secret.jpg"), 422),
        ("symlink out of the root", _body(str(root / "escape.jpg")), 422),
        # Regression: a symlink loop was a 500 (Path.resolve raised RuntimeError).
        ("symlink loop", _body(str(root / "loop-a.jpg")), 422),
        # Regression: a FIFO was accepted, and reading it blocked a thread forever.
        ("a FIFO", _body(str(root / "fifo.jpg")), 422),
        ("file URL", _body("file:///etc/passwd"), 422),
        ("http URL", _body("http://169.254.169.254/latest/meta-data"), 422),
        ("s3 outside the roots", _body("s3://other-bucket/a.jpg"), 422),
        ("NUL in a source", _body(ok + "\x00.jpg"), 422),
        ("NUL in a ref", {"items": [{"source": ok, "ref": "a\x00b"}]}, 422),
        # Regression: control characters in refs reached operators' terminals raw.
        ("escape sequence in a ref", {"items": [{"source": ok, "ref": "\x1b]0;owned\x07"}]}, 422),
        ("carriage return in a ref", {"items": [{"source": ok, "ref": "ok\rFAILED"}]}, 422),
        ("escape sequence in a source", _body(ok.replace("ok.jpg", "\x1b[2Jok.jpg")), 422),
        ("items not a list", {"items": {"source": ok}}, 422),
        ("max_side as a string", _body(ok, max_side="100"), 422),
        ("quality as a float", _body(ok, quality=85.5), 422),
        ("huge integer", _body(ok, max_side=10**400), 422),
        ("ratios as a string", _body(ok, ratios="1:1"), 422),
        ("negative deadline", _body(ok, deadline_seconds=-1), 422),
        ("zero items", {"items": []}, 422),
        ("unknown field", _body(ok, colour="red"), 422),
        ("a JSON array", [1, 2, 3], 422),
        ("100,001 items", {"items": [{"source": ok}] * 100_001}, 422),
    ]


@pytest.mark.slow
def test_hostile_requests_get_4xx_never_5xx(live: tuple[LiveServer, Path]) -> None:
    """Traversal, wrong types and over-limit bodies are refused with a 422 problem each."""
    server, root = live
    failures = []
    for name, body, status in _hostile_bodies(root):
        response = server.client.post("/v1/batches", json=body)
        if response.status_code != status:
            failures.append(f"{name}: {response.status_code} {response.text[:200]}")
        else:
            _is_problem(response, status)
    assert failures == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "content", "status"),
    [
        ("invalid JSON", b"{not json", (400, 422)),
        ("deeply nested JSON", b"[" * 100_000 + b"]" * 100_000, (400, 422)),
        ("lone surrogate", b'{"items": [{"source": "\\ud800"}]}', (422,)),
        ("invalid UTF-8", b'{"items": [{"source": "\xff\xfe"}]}', (400, 422)),
        ("oversized body", b'{"items": [' + b" " * (17 * 1024 * 1024) + b"]}", (413,)),
    ],
)
def test_malformed_bodies_get_4xx(
    live: tuple[LiveServer, Path], name: str, content: bytes, status: tuple[int, ...]
) -> None:
    """Bodies no JSON parser should accept (or too big to read) are 4xx problems."""
    server, _ = live
    response = server.client.post(
        "/v1/batches", content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code in status, response.text[:300]
    _is_problem(response, response.status_code)


@pytest.mark.slow
def test_idempotency_key_at_its_limit_is_stored(live: tuple[LiveServer, Path]) -> None:
    """The longest Idempotency-Key the API accepts is stored (201), then found again (200).

    Regression: the API accepted 255 characters for a 200-character column, a 500 on PostgreSQL.
    """
    server, root = live
    body = _body(str(root / "ok.jpg"))
    key = "k" * IDEMPOTENCY_KEY_CHARS_MAX
    first = server.client.post("/v1/batches", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == 201, first.text
    again = server.client.post("/v1/batches", json=body, headers={"Idempotency-Key": key})
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    too_long = server.client.post("/v1/batches", json=body, headers={"Idempotency-Key": key + "k"})
    _is_problem(too_long, 422)


HOSTILE_QUERIES = [
    {"cursor": "²"},  # regression: str.isdigit() accepts it, int() does not (was a 500)
    {"cursor": "١٢"},
    {"cursor": "-1"},
    {"cursor": "9" * 40},
    {"cursor": "../../etc"},
    {"state": "bogus"},
    {"state": "in_progress'; DROP TABLE lease_items; --"},
    {"limit": "-1"},
    {"limit": "1" * 30},
    {"item": "not-a-uuid"},
]


@pytest.mark.slow
def test_hostile_query_parameters_get_4xx(live: tuple[LiveServer, Path]) -> None:
    """Listing endpoints never answer hostile cursors, states, limits or ids with a 5xx."""
    server, root = live
    created = server.client.post("/v1/batches", json=_body(str(root / "ok.jpg")))
    batch = created.json()["id"]
    paths = ["/v1/batches", f"/v1/batches/{batch}/items", f"/v1/batches/{batch}/events"]
    answers = {
        (path, str(query)): server.client.get(path, params=query).status_code
        for path in paths
        for query in HOSTILE_QUERIES
    }
    # A parameter an endpoint does not take is ignored (200); one it takes is checked (4xx).
    assert {k: v for k, v in answers.items() if v >= 500} == {}
    cursors = {k: v for k, v in answers.items() if "cursor" in k[1]}
    assert set(cursors.values()) == {422}


@pytest.mark.slow
def test_unicode_refs_round_trip(live: tuple[LiveServer, Path]) -> None:
    """Refs in any script, emoji and right-to-left text included, are stored as given."""
    server, root = live
    refs = ["靴-42", "👟🧦", "שלום", "e\u0301", "a" * 256]
    body = {"items": [{"source": str(root / "ok.jpg"), "ref": r} for r in refs]}
    created = server.client.post("/v1/batches", json=body)
    assert created.status_code == 201, created.text
    items = server.client.get(f"/v1/batches/{created.json()['id']}/items").json()["items"]
    assert [i["ref"] for i in items] == refs
    too_long = server.client.post(
        "/v1/batches",
        json=_body(str(root / "ok.jpg"))
        | {"items": [{"source": str(root / "ok.jpg"), "ref": "a" * 257}]},
    )
    _is_problem(too_long, 422)


@pytest.mark.slow
def test_cli_refuses_an_idempotency_key_the_database_cannot_hold(
    database_url: str, tmp_path: Path
) -> None:
    """`submit --idempotency-key` longer than the column: exit 2 with one line, no traceback."""
    (tmp_path / "ok.jpg").write_bytes(corpus.clean_jpeg(1))
    env = {**os.environ, "BATCHCROP_DATABASE_URL": database_url}
    key = "k" * (IDEMPOTENCY_KEY_CHARS_MAX + 1)
    result = _cli(env, tmp_path, "submit", str(tmp_path / "ok.jpg"), "--idempotency-key", key)
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert "idempotency key" in result.stderr


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # Regressions: `submit` crashed with a traceback (exit 1) on PostgreSQL; NaN and
        # infinite durations were accepted, to fail later wherever they became milliseconds.
        (("submit", "a.jpg", "--deadline", "inf"), "duration"),
        (("submit", "a.jpg", "--deadline", "1e400"), "duration"),
        (("submit", "a.jpg", "--deadline", "nan"), "duration"),
        (("submit", "a.jpg", "--max-attempts", "99999999999"), "--max-attempts"),
        # The deadline limit is the API's too: one constant, whichever way a batch arrives.
        (("submit", "a.jpg", "--deadline", "31d"), "30 days"),
        (("requeue", "7b1e4c1e-0000-4000-8000-000000000000", "--deadline", "31d"), "30 days"),
        (("submit", "a.jpg", "--ratios", "1:1,16/9"), "16:9"),
        (("requeue", "7b1e4c1e-0000-4000-8000-000000000000", "--deadline", "inf"), "duration"),
        (("worker", "--lease-seconds", "nan"), "lease_seconds"),
        (("worker", "--reaper-interval-seconds", "inf"), "reaper_interval_seconds"),
        # Regression: a missing items CSV ended in a FileNotFoundError traceback.
        (("submit", "--items-csv", "missing.csv"), "missing.csv"),
        (("submit", "--items-csv", "latin1.csv"), "latin1.csv"),
        # Regression: a symlink loop named on the command line was a traceback.
        (("submit", "loop.jpg"), "symlink loop"),
    ],
)
def test_hostile_command_lines_exit_2(
    postgres_url: str, tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    """Infinite, NaN and out-of-range numbers on the command line: exit 2, one line, no trace."""
    (tmp_path / "a.jpg").write_bytes(corpus.clean_jpeg(1))
    (tmp_path / "latin1.csv").write_bytes("source,ref\na.jpg,caf\u00e9\n".encode("latin-1"))
    (tmp_path / "loop.jpg").symlink_to(tmp_path / "loop.jpg")
    env = {**os.environ, "BATCHCROP_DATABASE_URL": postgres_url}
    env["BATCHCROP_STORE"] = f"file://{tmp_path / 'out'}"
    result = _cli(env, tmp_path, *args)
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert needle in result.stderr


@pytest.mark.slow
def test_items_csv_with_unicode_refs_is_submitted(database_url: str, tmp_path: Path) -> None:
    """An items CSV (UTF-8, refs in any script) becomes one item per row with its ref."""
    (tmp_path / "a.jpg").write_bytes(corpus.clean_jpeg(1))
    rows = "source,ref\na.jpg,靴-1\na.jpg,👟\n"
    (tmp_path / "items.csv").write_text(rows, encoding="utf-8")
    env = {**os.environ, "BATCHCROP_DATABASE_URL": database_url}
    submitted = _cli(env, tmp_path, "submit", "--items-csv", "items.csv")
    assert submitted.returncode == 0, submitted.stderr
    listed = _cli(env, tmp_path, "items", submitted.stdout.strip(), "--json")
    assert [i["ref"] for i in json.loads(listed.stdout)["items"]] == ["靴-1", "👟"]


@pytest.mark.slow
@pytest.mark.postgres
def test_a_hundred_thousand_items_are_accepted(postgres_url: str, tmp_path: Path) -> None:
    """The documented maximum of 100,000 items is one 201, with every item queued."""
    root = tmp_path / "root"
    root.mkdir()
    source = str(root / "ok.jpg")
    (root / "ok.jpg").write_bytes(corpus.clean_jpeg(1))
    app = build(Settings(database_url=postgres_url, source_roots=(str(root),)))
    app.upgrade()
    try:
        with running(app) as server:
            body = {"items": [{"source": source, "ref": f"r{n}"} for n in range(100_000)]}
            response = server.client.post("/v1/batches", json=body)
            assert response.status_code == 201, response.text[:500]
            document = response.json()
            assert (document["total"], document["counts"]["queued"]) == (100_000, 100_000)
    finally:
        app.close()
