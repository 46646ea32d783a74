"""Labels and retention (docs/design.md §4 and §7, ADR 0012): `prune` deletes the rows of
batches finished long enough ago, in small transactions, and never a stored object."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.errors import NoSuchBatch
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.cli.main import main
from batchcrop.crop import RenderSpec
from storage import LocalStore
from tests.app_fixtures import run_batch
from tests.images import write_photos

TABLES = ("lease_items", "lease_events", "lease_counters", "lease_groups")


def _request(paths: list[Path], label: str | None = None) -> BatchRequest:
    return BatchRequest(
        items=tuple(ItemRequest(source=str(p)) for p in paths),
        spec=RenderSpec.from_input({"ratios": "1:1", "max_side": 120}),
        deadline_seconds=3600,
        max_attempts=2,
        label=label,
    )


def _rows(app: App, batch_id: str) -> dict[str, int]:
    counts = {}
    with app.engine.connect() as conn:
        for table in TABLES:
            column = "id" if table == "lease_groups" else "group_id"
            counts[table] = conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE {column} = :g"), {"g": batch_id}
            ).scalar_one()
        for table in ("batchcrop_batches", "batchcrop_derivatives", "batchcrop_previews"):
            column = "id" if table == "batchcrop_batches" else "batch_id"
            counts[table] = conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE {column} = :g"), {"g": batch_id}
            ).scalar_one()
    return counts


def test_a_label_is_shown_and_filters_listings_without_changing_old_fingerprints(
    app: App, tmp_path: Path
) -> None:
    paths = write_photos(tmp_path / "src", 1)
    plain = _request(paths)
    assert plain.fingerprint() == _request(paths, label=None).fingerprint()
    assert plain.fingerprint() != _request(paths, label="autumn").fingerprint()
    labelled, _ = app.batches.submit(_request(paths, label="autumn import"))
    other, _ = app.batches.submit(plain)
    assert labelled["label"] == "autumn import"
    assert other["label"] is None
    page, _ = app.batches.list_batches(label="autumn import")
    assert [d["id"] for d in page] == [labelled["id"]]
    for bad in ("bad\x1b[31m", "invoice \u202egpj.exe", "a\u2066b", "mark\u200f"):
        with pytest.raises(ValueError, match="label"):
            app.batches.submit(_request(paths, label=bad))


def test_prune_deletes_only_finished_batches_rows_and_never_objects(
    app: App, tmp_path: Path
) -> None:
    paths = write_photos(tmp_path / "src", 3)
    done, _ = app.batches.submit(_request(paths))
    store = LocalStore(tmp_path / "store")
    assert run_batch(app, store, done["id"])["state"] == "succeeded"
    waiting, _ = app.batches.submit(_request(paths[:1]))
    objects = sorted(info.key for info in store.list(""))
    before = _rows(app, done["id"])
    assert (
        before["lease_events"],
        before["batchcrop_derivatives"],
        before["batchcrop_previews"],
    ) == (6, 3, 3)

    assert app.batches.prune(3600).batches == 0  # not old enough
    result = app.batches.prune(0.001)

    assert result.batches == 1
    assert result.rows >= sum(before.values()) - 1  # every row but the batch row is counted
    assert set(_rows(app, done["id"]).values()) == {0}
    with pytest.raises(NoSuchBatch):
        app.batches.status(done["id"])
    assert app.batches.status(waiting["id"])["counts"]["queued"] == 1
    assert _rows(app, waiting["id"])["lease_items"] == 1
    assert sorted(info.key for info in store.list("")) == objects


def test_prune_leaves_a_batch_requeued_in_the_meantime(app: App, tmp_path: Path) -> None:
    """A batch requeued after it was listed is no longer finished: nothing of it is deleted."""
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1)))
    app.batches.cancel(status["id"])
    listed = app.leases.finished_groups(0.001)
    assert listed == [status["id"]]
    app.batches.requeue(status["id"], deadline_seconds=3600)
    with app.leases.if_finished(status["id"]) as conn:
        assert conn is None
    assert app.leases.purge(status["id"]) == 0
    assert app.batches.prune(0.001).batches == 0
    assert app.batches.status(status["id"])["counts"]["queued"] == 1


def test_the_prune_command(
    make_app: Callable[..., App],
    tmp_path: Path,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = make_app()
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1)))
    app.batches.cancel(status["id"])
    argv = ["prune", "--finished-before", "0.001s", "--database-url", database_url]
    assert main([*argv, "--json"]) == 0
    assert '"batches": 1' in capsys.readouterr().out
    assert main(argv) == 0
    assert "pruned 0 batches" in capsys.readouterr().out
    assert main(["prune", "--finished-before", "soon", "--database-url", database_url]) == 2


def test_prune_keeps_a_batch_requeued_and_ended_again_since_it_was_listed(
    app: App, tmp_path: Path
) -> None:
    """Listed as finished two seconds ago, then requeued and ended again: the delete step
    re-checks the cutoff under the group's lock, so the batch, now finished just now, stays."""
    status, _ = app.batches.submit(_request(write_photos(tmp_path / "src", 1)))
    app.batches.cancel(status["id"])
    time.sleep(2.1)
    assert app.batches.prunable(2.0) == [(status["id"], [])]
    app.batches.requeue(status["id"], deadline_seconds=3600)
    app.batches.cancel(status["id"])
    assert app.batches.prune_batch(status["id"], [], 2.0) is None
    assert app.batches.status(status["id"])["counts"]["abandoned"] == 1
    assert app.batches.prune(2.0).batches == 0


def test_the_cli_refuses_a_label_with_bidi_controls(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`submit --label` with a right-to-left override is a usage error (exit 2) naming the
    label, and no batch is created."""
    (path,) = write_photos(tmp_path / "src", 1)
    argv = ["submit", str(path), "--database-url", database_url, "--store", f"file://{tmp_path}"]
    assert main([*argv, "--label", "invoice \u202egpj.exe"]) == 2
    assert "label" in capsys.readouterr().err
    assert main(["batches", "--json", "--database-url", database_url]) == 0
    assert json.loads(capsys.readouterr().out)["batches"] == []
