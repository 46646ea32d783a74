"""Migrations: their own version table, idempotent upgrades, room for the app's history."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import sqlalchemy as sa

from leases import LeaseManager, make_engine, upgrade
from leases.migrate import VERSION_TABLE, current
from leases.versions import MIGRATIONS_DIR, newest_revision

LEASE_TABLES = {"lease_groups", "lease_items", "lease_events", "lease_counters"}


def test_upgrade_twice_is_a_no_op(database_url: str) -> None:
    """A second upgrade changes nothing and keeps the rows and revision."""
    engine = make_engine(database_url)
    try:
        assert current(engine) is None
        upgrade(engine)
        revision = current(engine)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO lease_groups (id, created_at, deadline_at, max_attempts, "
                    "cancel_requested) VALUES ('g', 1, 2, 3, :f)"
                ),
                {"f": False},
            )
        upgrade(engine)
        assert current(engine) == revision == "0008"
        inspector = sa.inspect(engine)
        tables = set(inspector.get_table_names())
        assert LEASE_TABLES | {VERSION_TABLE} <= tables
        assert "alembic_version" not in tables
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM lease_groups")).scalar_one() == 1
    finally:
        engine.dispose()


def _a_group_with_an_item(engine: sa.Engine, *, deadline_at: int) -> None:
    """Group `g` with one queued item `i`, written in the columns every revision has."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO lease_groups (id, created_at, deadline_at, max_attempts, "
                "cancel_requested) VALUES ('g', 1, :deadline, 3, :f)"
            ),
            {"deadline": deadline_at, "f": False},
        )
        conn.execute(
            sa.text(
                "INSERT INTO lease_items (id, group_id, seq, state, attempt, attempt_base, "
                "next_attempt_at, created_at, updated_at, payload) "
                "VALUES ('i', 'g', 0, 'queued', 0, 0, 1, 1, 1, '{}')"
            )
        )


def test_sqlite_engine_uses_wal_and_busy_timeout(sqlite_url: str) -> None:
    """make_engine puts SQLite in WAL mode with a busy timeout."""
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) > 0
    finally:
        engine.dispose()


def test_0002_seals_the_groups_that_exist(database_url: str) -> None:
    """Groups created before creation was chunked stay claimable after the upgrade."""
    engine = make_engine(database_url)
    try:
        upgrade(engine, "0001")
        _a_group_with_an_item(engine, deadline_at=32503680000000)
        upgrade(engine, "0002")
        assert current(engine) == "0002"
        # Read directly: this version's claim needs the columns of later revisions.
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT sealed FROM lease_groups")).scalar_one()
    finally:
        engine.dispose()


def test_0003_adds_the_worker_registry_and_downgrades(database_url: str) -> None:
    """0003 creates `lease_workers` (and the holder index); its downgrade removes them."""
    from alembic import command  # noqa: PLC0415

    from leases.migrate import alembic_config  # noqa: PLC0415

    engine = make_engine(database_url)
    try:
        upgrade(engine, "0002")
        assert "lease_workers" not in sa.inspect(engine).get_table_names()
        upgrade(engine, "0003")
        assert current(engine) == "0003"
        LeaseManager(engine).worker_seen("w", {"pid": 1})
        assert [w.id for w in LeaseManager(engine).workers()] == ["w"]
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0002")
        assert "lease_workers" not in sa.inspect(engine).get_table_names()
        assert current(engine) == "0002"
    finally:
        engine.dispose()


def test_0004_adds_the_finish_flag_false_for_existing_groups_and_downgrades(
    database_url: str,
) -> None:
    """0004 adds `lease_groups.notify_finish` (false for groups written before); its downgrade
    drops it. Both with items referring to the group (a rebuild of `lease_groups` on SQLite
    would fail on their foreign key)."""
    from alembic import command  # noqa: PLC0415

    from leases.migrate import alembic_config  # noqa: PLC0415

    engine = make_engine(database_url)
    try:
        upgrade(engine, "0003")
        _a_group_with_an_item(engine, deadline_at=2)
        upgrade(engine, "0004")
        with engine.connect() as conn:
            flag = conn.execute(sa.text("SELECT notify_finish FROM lease_groups")).scalar_one()
        assert not flag
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0003")
        columns = {c["name"] for c in sa.inspect(engine).get_columns("lease_groups")}
        assert "notify_finish" not in columns
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM lease_items")).scalar_one() == 1
    finally:
        engine.dispose()


def test_0005_adds_attempt_messages_null_for_existing_rows_and_downgrades(
    database_url: str,
) -> None:
    """0005 adds `lease_items.error_message` and `lease_events.message` (null for rows written
    before, which stay readable and movable); a fail then keeps its message on both; the
    downgrade drops them."""
    from alembic import command  # noqa: PLC0415

    from leases.migrate import alembic_config  # noqa: PLC0415

    engine = make_engine(database_url)
    try:
        upgrade(engine, "0004")
        _a_group_with_an_item(engine, deadline_at=32503680000000)
        upgrade(engine, "0005")
        assert current(engine) == "0005"
        with engine.connect() as conn:
            message = conn.execute(sa.text("SELECT error_message FROM lease_items")).scalar_one()
        assert message is None
        upgrade(engine)  # this version's claim needs the later revisions too
        manager = LeaseManager(engine)
        before = manager.item("i")
        assert before is not None
        assert before.error_message is None
        (claim,) = manager.claim("w", 1)
        manager.fail(claim, "invalid_image", message="image file is truncated")
        after = manager.item("i")
        assert after is not None
        assert after.error_message == "image file is truncated"
        assert [e.message for e in manager.events("g")][-1:] == ["image file is truncated"]
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0004")
        item_columns = {c["name"] for c in sa.inspect(engine).get_columns("lease_items")}
        event_columns = {c["name"] for c in sa.inspect(engine).get_columns("lease_events")}
        assert "error_message" not in item_columns
        assert "message" not in event_columns
        assert current(engine) == "0004"
    finally:
        engine.dispose()


def test_0006_versions_existing_counters_and_moves_them_and_downgrades(
    database_url: str,
) -> None:
    """0006 adds `lease_counters.version` (1 for rows written before), which the next move of a
    row raises; its downgrade drops it."""
    from alembic import command  # noqa: PLC0415

    from leases.migrate import alembic_config  # noqa: PLC0415
    from tests.leases.conftest import new_group  # noqa: PLC0415

    engine = make_engine(database_url)
    try:
        upgrade(engine, "0004")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO lease_counters (group_id, state, category, shard, n, updated_at) "
                    "VALUES ('g', 'queued', '', 0, 5, 1)"
                )
            )
        upgrade(engine)
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version FROM lease_counters")).scalar_one()
        assert version == 1
        manager = LeaseManager(engine)
        group_id, _ = new_group(manager, 1)
        before = manager.version([group_id])
        manager.claim("w", 1, group_ids=[group_id])
        assert manager.version([group_id]) != before
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0004")
        columns = {c["name"] for c in sa.inspect(engine).get_columns("lease_counters")}
        assert "version" not in columns
    finally:
        engine.dispose()


def test_0007_drops_the_items_foreign_key_on_postgresql_and_downgrades(database_url: str) -> None:
    """0007 drops `lease_items`' foreign key to its group on PostgreSQL, where creation paid a
    trigger per row for it, and keeps SQLite's; its downgrade puts PostgreSQL's back, over the
    items already there."""
    from alembic import command  # noqa: PLC0415

    from leases.migrate import alembic_config  # noqa: PLC0415

    engine = make_engine(database_url)
    kept = [] if engine.dialect.name == "postgresql" else ["lease_groups"]
    try:
        upgrade(engine, "0006")
        _a_group_with_an_item(engine, deadline_at=2)
        upgrade(engine, "0007")
        foreign = sa.inspect(engine).get_foreign_keys("lease_items")
        assert [key["referred_table"] for key in foreign] == kept
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0006")
        foreign = sa.inspect(engine).get_foreign_keys("lease_items")
        assert [key["referred_table"] for key in foreign] == ["lease_groups"]
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM lease_items")).scalar_one() == 1
    finally:
        engine.dispose()


def test_0008_adds_priority_pause_and_lanes_and_downgrades(database_url: str) -> None:
    """0008 gives existing groups priority 0, unpaused, and existing items no lane, with the
    in-progress lane index; its downgrade drops them, over the rows already there."""
    from alembic import command  # noqa: PLC0415

    from leases.migrate import alembic_config  # noqa: PLC0415

    engine = make_engine(database_url)
    try:
        upgrade(engine, "0007")
        _a_group_with_an_item(engine, deadline_at=2)
        upgrade(engine, "0008")
        with engine.connect() as conn:
            group = conn.execute(sa.text("SELECT priority, paused FROM lease_groups")).one()
            lane = conn.execute(sa.text("SELECT lane FROM lease_items")).scalar_one()
        assert (group.priority, bool(group.paused), lane) == (0, False, None)
        indexes = {i["name"] for i in sa.inspect(engine).get_indexes("lease_items")}
        assert "ix_lease_items_in_progress_lane" in indexes
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0007")
        inspector = sa.inspect(engine)
        assert "lane" not in {c["name"] for c in inspector.get_columns("lease_items")}
        group_columns = {c["name"] for c in inspector.get_columns("lease_groups")}
        assert not {"priority", "paused"} & group_columns
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM lease_items")).scalar_one() == 1
    finally:
        engine.dispose()


def assert_named_by_revision(folder: Path) -> None:
    """Each migration file in `folder` is named by its revision, the history is one line, and
    the highest number is Alembic's head: what the start-up check (`leases.versions`) reads."""
    from alembic.script import ScriptDirectory  # noqa: PLC0415 - as the check itself avoids it

    scripts = list(ScriptDirectory(str(folder)).walk_revisions())
    assert scripts, folder
    for script in scripts:
        assert Path(script.path).name.split("_", 1)[0] == script.revision, script.path
    assert [s.revision for s in scripts] == sorted((s.revision for s in scripts), reverse=True)
    assert all(s.down_revision == n.revision for s, n in pairwise(scripts))
    assert newest_revision(folder) == scripts[0].revision


def test_the_lease_migration_files_are_named_by_their_revisions() -> None:
    """The lease history's head can be read off its file names."""
    assert_named_by_revision(MIGRATIONS_DIR)
