"""Sharing one fleet: a group's priority and pause flag, and the lane an attempt was claimed in
(docs/design.md §3, sharing; ADR 0041).

`lease_groups.priority` orders claims between groups (higher first, with aging);
`lease_groups.paused` keeps a group's items from being claimed while its deadline runs on;
`lease_items.lane` names the shared resource (the application's: a store) a claim counted
against, so the in-progress attempts of one lane are counted through a partial index that holds
only the leases held at once.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

IN_PROGRESS = "state = 'in_progress'"

# Plain ALTER TABLE on both databases, as 0004 and 0006: columns with a constant default are
# added in place (no table rewrite on PostgreSQL 11+, no table copy on SQLite).


def upgrade() -> None:
    op.add_column(
        "lease_groups",
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "lease_groups",
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column("lease_items", sa.Column("lane", sa.String(64), nullable=True))
    op.create_index(
        "ix_lease_items_in_progress_lane",
        "lease_items",
        ["lane"],
        postgresql_where=sa.text(IN_PROGRESS),
        sqlite_where=sa.text(IN_PROGRESS),
    )


def downgrade() -> None:
    op.drop_index("ix_lease_items_in_progress_lane", table_name="lease_items")
    op.drop_column("lease_items", "lane")
    op.drop_column("lease_groups", "paused")
    op.drop_column("lease_groups", "priority")
