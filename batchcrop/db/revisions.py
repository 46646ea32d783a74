"""Where the database's schema stands against this version's migrations (docs/design.md §7).

The database holds two Alembic histories: the lease engine's (`leases_alembic_version`) and the
application's (`batchcrop_alembic_version`). Only `batchcrop db upgrade` (or `worker`/`serve
--migrate`, and `run`/`submit` on SQLite) moves them; every other process reads where they
stand and refuses to start behind them (docs/adr/0015-migrations-are-a-deploy-step.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import sqlalchemy as sa

from batchcrop.errors import BatchcropError
from leases import versions as lease_versions

VERSION_TABLE = "batchcrop_alembic_version"
SCRIPT_LOCATION = Path(__file__).resolve().parent / "migrations"
"""The application's history (`batchcrop.db.migrations`)."""
UPGRADE_HINT = "run `batchcrop db upgrade` (the deploy step) before starting this version"


class Position(StrEnum):
    """One history's revision against this version's head."""

    AT_HEAD = "at head"
    BEHIND = "behind"
    MISSING = "missing"
    AHEAD = "ahead"
    """A revision this version does not know: a newer batchcrop migrated the database."""


@dataclass(frozen=True)
class History:
    """One Alembic history in the database: its applied revision and this version's head."""

    name: str
    current: str | None
    head: str
    known: frozenset[str]

    @property
    def position(self) -> Position:
        """At head, behind it, not there at all, or ahead of this version."""
        if self.current is None:
            return Position.MISSING
        if self.current == self.head:
            return Position.AT_HEAD
        return Position.BEHIND if self.current in self.known else Position.AHEAD

    def describe(self) -> str:
        """`leases 0004 (head 0005)`."""
        return f"{self.name} {self.current or 'none'} (head {self.head})"


class SchemaBehind(BatchcropError):
    """The database's schema is older than this version's (exit 3); `db upgrade` fixes it."""


def histories(engine: sa.Engine) -> list[History]:
    """Both histories, lease engine first; reads only."""
    from batchcrop.db import migrations  # noqa: PLC0415  (Alembic: only when asked)
    from leases import migrate  # noqa: PLC0415

    lease_revisions = migrate.revisions()
    app_revisions = migrations.revisions()
    return [
        History("leases", migrate.current(engine), lease_revisions[0], frozenset(lease_revisions)),
        History(
            "batchcrop", migrations.current(engine), app_revisions[0], frozenset(app_revisions)
        ),
    ]


def at_head(engine: sa.Engine) -> bool:
    """Whether both histories stand at this version's heads, read with two plain SELECTs and a
    listing of the migration files (`leases.versions`), without importing Alembic: the common
    start-up of a command on a database it migrated before."""
    with engine.connect() as connection:
        return all(
            lease_versions.recorded_revision(connection, table)
            == lease_versions.newest_revision(folder)
            for table, folder in (
                (lease_versions.VERSION_TABLE, lease_versions.MIGRATIONS_DIR),
                (VERSION_TABLE, SCRIPT_LOCATION),
            )
        )


def behind_message(found: list[History]) -> str:
    """One line: which histories are behind, and what to run."""
    behind = [h for h in found if h.position in (Position.BEHIND, Position.MISSING)]
    listed = ", ".join(h.describe() for h in behind)
    return f"the database schema is behind this batchcrop ({listed}): {UPGRADE_HINT}"


def ahead_message(found: list[History]) -> str:
    """One line for histories a newer batchcrop migrated."""
    listed = ", ".join(h.describe() for h in found if h.position is Position.AHEAD)
    return f"the database schema is newer than this batchcrop ({listed})"


def is_empty(found: list[History]) -> bool:
    """No history at all: a database batchcrop never touched."""
    return all(h.position is Position.MISSING for h in found)
