"""A version per counter row, bumped by every change of the row: a group's version is the sum of
its counter rows' versions, read in one statement to tell cheaply whether anything happened to
the group (docs/design.md §3, group versions; ADR 0021). Existing rows start at 1.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both databases, as 0004: SQLite adds and drops the column in place
# instead of copying every counter row into a rebuilt table.


def upgrade() -> None:
    op.add_column(
        "lease_counters",
        sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("1")),
    )


def downgrade() -> None:
    op.drop_column("lease_counters", "version")
