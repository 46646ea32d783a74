"""Groups are created unsealed and sealed by their last write (docs/design.md §3, creation).

A group's items go in over several short transactions; until the last one sets `sealed`, the group
takes no claims and is invisible to readers and the reaper. Existing groups are sealed.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN on both dialects (SQLite allows it with a constant default); a batch
    # alter would rebuild the table, which its referencing items forbid.
    op.add_column(
        "lease_groups", sa.Column("sealed", sa.Boolean, nullable=False, server_default=sa.true())
    )


def downgrade() -> None:
    # Half-written groups have no meaning without the column: remove them with it.
    conn = op.get_bind()
    unsealed = sa.text("SELECT id FROM lease_groups WHERE NOT sealed")
    for table, column in (
        ("lease_events", "group_id"),
        ("lease_counters", "group_id"),
        ("lease_items", "group_id"),
        ("lease_groups", "id"),
    ):
        conn.execute(sa.text(f"DELETE FROM {table} WHERE {column} IN ({unsealed.text})"))  # noqa: S608
    op.execute("ALTER TABLE lease_groups DROP COLUMN sealed")
