"""Where an Alembic history stands, read without Alembic: a command's cheap start-up check.

Importing Alembic costs about 100 ms, a third of a command's start-up; a database already at this
version's heads needs none of it. Each migration file is named by its revision (`0008_….py`
holds revision "0008", a linear history: tests/leases/test_migrations.py checks both against
Alembic's own reading), so the head is the highest number among the files.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

VERSION_TABLE = "leases_alembic_version"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def newest_revision(migrations_dir: Path) -> str:
    """The head of the history in `migrations_dir`: the highest revision number among the files
    of its `versions/` folder."""
    numbers = [
        path.name.split("_", 1)[0] for path in (migrations_dir / "versions").glob("[0-9]*_*.py")
    ]
    if not numbers:
        raise ValueError(f"no migrations in {migrations_dir}")
    return max(numbers, key=int)


def recorded_revision(connection: sa.Connection, version_table: str) -> str | None:
    """The revision `version_table` records, or None when the table is absent or empty (one
    plain SELECT; reads only)."""
    if not sa.inspect(connection).has_table(version_table):
        return None
    found = connection.execute(
        sa.select(sa.column("version_num", sa.String)).select_from(sa.table(version_table))
    ).scalars()
    revisions: list[str] = list(found)
    return revisions[0] if len(revisions) == 1 else None
