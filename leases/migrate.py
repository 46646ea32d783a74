"""Run the lease engine's Alembic migrations programmatically (no alembic.ini needed).

The history is the lease engine's own, versioned in `leases_alembic_version`, so applications
keep their own Alembic history beside it in the same database.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from leases.engine import configure_sqlite
from leases.versions import MIGRATIONS_DIR, VERSION_TABLE

# PostgreSQL advisory lock key held while migrating, so that processes starting together
# (several workers, the API) do not race to create the same tables. Arbitrary but fixed.
MIGRATION_LOCK_KEY = 0x1EA5E5


def alembic_config(connection: sa.Connection) -> Config:
    """An Alembic config for the lease migrations, bound to `connection`."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Bring the lease tables to `revision` (default: the newest); a no-op when already there.

    One transaction; on PostgreSQL under an advisory lock, on SQLite under BEGIN IMMEDIATE.
    """
    configure_sqlite(engine)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(
                sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        command.upgrade(alembic_config(connection), revision)


def current(engine: sa.Engine) -> str | None:
    """The applied revision, or None before the first upgrade."""
    return current_revision(engine, VERSION_TABLE)


def current_revision(engine: sa.Engine, version_table: str) -> str | None:
    """The revision recorded in `version_table` (any Alembic history), or None when the table
    is absent or empty. Reads only: never creates the table."""
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415  (rarely needed)

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": version_table})
        return context.get_current_revision()


def revisions(script_location: Path = MIGRATIONS_DIR) -> tuple[str, ...]:
    """Every revision of the history in `script_location`, newest (the head) first."""
    from alembic.script import ScriptDirectory  # noqa: PLC0415  (rarely needed)

    script = ScriptDirectory(str(script_location))
    return tuple(s.revision for s in script.walk_revisions())


def head() -> str:
    """The newest revision of the lease engine's history."""
    return revisions()[0]
