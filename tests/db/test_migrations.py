"""The application's migrations: batches written before the render request became one JSON record
are converted in place, on SQLite and PostgreSQL, and read back as the same request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from batchcrop.app import build
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.db import migrations
from batchcrop.db.revisions import SCRIPT_LOCATION
from batchcrop.settings import Settings
from leases import make_engine
from leases import upgrade as upgrade_leases
from tests.leases.test_migrations import assert_named_by_revision

BATCH_ID = "5b0c6f0e-1c9e-4a55-9d1c-4a8c2f1f0a11"


def test_0002_converts_three_columns_into_the_spec_record(database_url: str) -> None:
    """A batch row of revision 0001 (comma-separated ratios, max_side, quality columns) becomes
    one `spec` record that `BatchService` reads as the same `RenderSpec`, and its status
    document shows the same fields as before."""
    engine = make_engine(database_url)
    try:
        upgrade_leases(engine)
        migrations.upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO batchcrop_batches (id, ratios, max_side, quality, request_hash) "
                    "VALUES (:id, '16:9,1:1', 640, 70, :hash)"
                ),
                {"id": BATCH_ID, "hash": "0" * 64},
            )
        migrations.upgrade(engine)
        columns = {c["name"] for c in sa.inspect(engine).get_columns("batchcrop_batches")}
        assert {"ratios", "max_side", "quality"}.isdisjoint(columns)
        assert "spec" in columns
    finally:
        engine.dispose()
    app = build(Settings(database_url=database_url))
    try:
        spec = app.batches.batch(BATCH_ID).spec
        expected = RenderSpec(ratios=(Ratio(16, 9), Ratio(1, 1)), max_side=640, quality=70)
        assert expected == spec
    finally:
        app.close()


def test_0002_downgrades_back_to_three_columns(database_url: str) -> None:
    """The downgrade restores the three columns from the record, so a rollback loses nothing."""
    engine = make_engine(database_url)
    try:
        upgrade_leases(engine)
        migrations.upgrade(engine)
        record = RenderSpec(ratios=(Ratio(4, 3),), max_side=300, quality=90).to_record()
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO batchcrop_batches (id, spec, request_hash) "
                    "VALUES (:id, :spec, :hash)"
                ).bindparams(sa.bindparam("spec", type_=sa.JSON)),
                {"id": BATCH_ID, "spec": record, "hash": "0" * 64},
            )
        migrations.downgrade(engine, "0001")
        with engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT ratios, max_side, quality FROM batchcrop_batches")
            ).one()
        assert tuple(row) == ("4:3", 300, 90)
    finally:
        engine.dispose()


def test_0010_adds_the_previews_table_and_its_downgrade_drops_it(database_url: str) -> None:
    """From 0009 the upgrade creates `batchcrop_previews` (items keep their manifests and have
    no preview until rendered again); the downgrade drops it and leaves the rest."""
    engine = make_engine(database_url)
    try:
        upgrade_leases(engine)
        migrations.upgrade(engine, "0009")
        assert "batchcrop_previews" not in sa.inspect(engine).get_table_names()
        migrations.upgrade(engine, "0010")
        inspector = sa.inspect(engine)
        columns = [c["name"] for c in inspector.get_columns("batchcrop_previews")]
        assert columns == [
            "item_id",
            "batch_id",
            "key",
            "width",
            "height",
            "bytes",
            "sha256",
            "source_width",
            "source_height",
        ]
        assert [i["name"] for i in inspector.get_indexes("batchcrop_previews")] == [
            "batchcrop_previews_batch"
        ]
        migrations.downgrade(engine, "0009")
        tables = sa.inspect(engine).get_table_names()
        assert "batchcrop_previews" not in tables
        assert {"batchcrop_batches", "batchcrop_derivatives"} <= set(tables)
    finally:
        engine.dispose()


def test_0011_adds_the_allowance_and_the_pruned_table_and_its_downgrade_drops_them(
    database_url: str,
) -> None:
    """0011 adds the nullable `allow_failures` column to the batch rows (batches before it
    tolerate no failure) and the `batchcrop_pruned` table; its downgrade drops them again."""
    engine = make_engine(database_url)
    try:
        upgrade_leases(engine)
        migrations.upgrade(engine, "0010")
        columns = {c["name"] for c in sa.inspect(engine).get_columns("batchcrop_batches")}
        assert "allow_failures" not in columns
        migrations.upgrade(engine, "0011")
        (column,) = [
            c
            for c in sa.inspect(engine).get_columns("batchcrop_batches")
            if c["name"] == "allow_failures"
        ]
        assert column["nullable"]
        assert "batchcrop_pruned" in sa.inspect(engine).get_table_names()
        migrations.downgrade(engine, "0010")
        columns = {c["name"] for c in sa.inspect(engine).get_columns("batchcrop_batches")}
        assert "allow_failures" not in columns
        assert "batchcrop_pruned" not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_0007_adds_the_recrops_table_and_takes_it_back(database_url: str) -> None:
    """0007 creates `batchcrop_recrops` with its unique correlation id and batch index beside
    a database at 0006, and its downgrade drops it again, leaving the other tables."""
    engine = make_engine(database_url)
    try:
        upgrade_leases(engine)
        migrations.upgrade(engine, "0006")
        assert not sa.inspect(engine).has_table("batchcrop_recrops")
        migrations.upgrade(engine)
        inspector = sa.inspect(engine)
        columns = {c["name"] for c in inspector.get_columns("batchcrop_recrops")}
        assert {"seq", "correlation_id", "batch_id", "item_id", "focus_box"} == columns
        indexes = {i["name"] for i in inspector.get_indexes("batchcrop_recrops")}
        assert "batchcrop_recrops_batch" in indexes
        row = {"c": "abc123", "b": BATCH_ID, "i": BATCH_ID, "f": "[1, 2, 3, 4]"}
        insert = sa.text(
            "INSERT INTO batchcrop_recrops (correlation_id, batch_id, item_id, focus_box) "
            "VALUES (:c, :b, :i, :f)"
        )
        with engine.begin() as conn:
            conn.execute(insert, row)
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(insert, row)
        migrations.downgrade(engine, "0006")
        inspector = sa.inspect(engine)
        assert not inspector.has_table("batchcrop_recrops")
        assert inspector.has_table("batchcrop_derivatives")
    finally:
        engine.dispose()


def test_the_application_migration_files_are_named_by_their_revisions() -> None:
    """The application history's head can be read off its file names."""
    assert_named_by_revision(SCRIPT_LOCATION)


def _prepared_with_alembic(url: str) -> bool:
    """Whether `prepare_schema` on `url`, in a fresh interpreter, imported Alembic."""
    code = (
        "import sys\n"
        "from batchcrop.app import build\n"
        "from batchcrop.settings import Settings\n"
        f"app = build(Settings.load({{'database_url': {url!r}}}))\n"
        "app.prepare_schema()\n"
        "print('alembic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip() == "True"


def test_a_sqlite_database_at_head_is_prepared_without_alembic(tmp_path: Path) -> None:
    """`run`, `submit`, `batches` and `prune` on a SQLite database at this version's heads read
    the two version rows and import no Alembic (a third of their start-up); a new database is
    created and one behind is migrated, with Alembic, as before."""
    url = f"sqlite:///{tmp_path / 'batchcrop.db'}"
    assert _prepared_with_alembic(url)  # created
    assert not _prepared_with_alembic(url)  # at head
    engine = make_engine(url)
    try:
        migrations.downgrade(engine, migrations.revisions()[1])
        assert _prepared_with_alembic(url)  # behind: migrated
        assert migrations.current(engine) == migrations.revisions()[0]
    finally:
        engine.dispose()
    assert not _prepared_with_alembic(url)
