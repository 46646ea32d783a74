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


# Plain ALTER TABLE on both databases: SQLite adds and drops a column in place. A batch
# operation would rebuild `lease_groups` on SQLite, and dropping the old table fails while
# `lease_items` rows refer to it (foreign keys are on).


def upgrade() -> None:
    op.add_column(
        "lease_groups",
        sa.Column("notify_finish", sa.Boolean, nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("lease_groups", "notify_finish")
