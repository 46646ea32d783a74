"""The worker registry: one row per live worker process, refreshed in database time.

A worker writes its row when it starts, refreshes `last_seen_at` every few seconds and deletes it
on a clean shutdown; the reaper releases the leases of workers not seen for the configured
timeout (docs/design.md §3, worker registry; ADR 0011).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lease_workers",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("started_at", sa.BigInteger, nullable=False),
        sa.Column("last_seen_at", sa.BigInteger, nullable=False),
        sa.Column("info", sa.JSON, nullable=False),
    )
    # The reaper's absent-holder move joins in-progress items to their worker's row by id.
    op.create_index(
        "ix_lease_items_in_progress_worker",
        "lease_items",
        ["worker_id"],
        postgresql_where=sa.text("state = 'in_progress'"),
        sqlite_where=sa.text("state = 'in_progress'"),
    )


def downgrade() -> None:
    op.drop_index("ix_lease_items_in_progress_worker", table_name="lease_items")
    op.drop_table("lease_workers")
