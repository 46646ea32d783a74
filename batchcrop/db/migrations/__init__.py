"""Alembic history of the application's own tables (the lease engine keeps its own)."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from batchcrop.db.revisions import SCRIPT_LOCATION, VERSION_TABLE


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Bring the application tables to `revision` (the newest by default); a no-op when there."""
    _run(engine, command.upgrade, revision)


def current(engine: sa.Engine) -> str | None:
    """The application history's applied revision, or None before the first upgrade."""
    from leases.migrate import current_revision  # noqa: PLC0415

    return current_revision(engine, VERSION_TABLE)


def revisions() -> tuple[str, ...]:
    """Every revision of the application's history, the head first."""
    from leases.migrate import revisions as walk  # noqa: PLC0415

    return walk(SCRIPT_LOCATION)


def downgrade(engine: sa.Engine, revision: str) -> None:
    """Take the application tables back to `revision` (an operator's rollback)."""
    _run(engine, command.downgrade, revision)


def _run(engine: sa.Engine, step: Callable[[Config, str], None], revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        step(config, revision)
