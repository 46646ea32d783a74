"""Alembic history of the application's own tables (the lease engine keeps its own)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

VERSION_TABLE = "batchcrop_alembic_version"
SCRIPT_LOCATION = Path(__file__).resolve().parent


def upgrade(engine: sa.Engine) -> None:
    """Bring the application tables to the newest revision; a no-op when they are current."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
