"""A version per counter row, bumped by every change of the row: a group's version is the sum of
its counter rows' versions, read in one statement to tell cheaply whether anything happened to
the group (docs/design.md §3, group versions; ADR 0021). Existing rows start at 1.

Revision ID: 0006
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lease_counters") as batch:
        batch.add_column(
            sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("1"))
        )


def downgrade() -> None:
    with op.batch_alter_table("lease_counters") as batch:
        batch.drop_column("version")
