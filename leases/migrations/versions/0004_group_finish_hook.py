"""The finish hook: a group may ask to be told, in the transaction that ends its last unfinished
item, that it is finished (docs/design.md §3; ADR 0013). Existing groups do not ask.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lease_groups") as batch:
        batch.add_column(
            sa.Column("notify_finish", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("lease_groups") as batch:
        batch.drop_column("notify_finish")
