"""PostgreSQL: drop the foreign key from `lease_items.group_id` to `lease_groups` (ADR 0023).

PostgreSQL checks a foreign key with a trigger per inserted row, which was about a third of the
time a million-item creation spent in the server. The engine keeps items and groups together
itself: items are written only by transactions that hold their group's row lock and have seen
the group (creation chunks, `add_group` in the group's own transaction), and a group row is
deleted only after its items, under the same lock. SQLite keeps the constraint it was created
with (dropping one means rebuilding the table), where its check is an index probe of no
measurable cost.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

CONSTRAINT = "lease_items_group_id_fkey"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(CONSTRAINT, "lease_items", type_="foreignkey")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_foreign_key(CONSTRAINT, "lease_items", "lease_groups", ["group_id"], ["id"])
