"""Attempt messages: why an attempt ended, in its ender's words, beside the category — on the
item (`lease_items.error_message`, the last attempt's) and on each event (`lease_events.message`)
(docs/design.md §3; ADR 0017). Rows written before have none.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The engine's MESSAGE_MAX_CHARS when this revision was written (a migration never changes).
MESSAGE_CHARS = 200


# Plain ALTER TABLE on both databases (SQLite adds and drops columns in place): a batch
# operation could rebuild a table other rows refer to, which fails with foreign keys on.


def upgrade() -> None:
    op.add_column("lease_items", sa.Column("error_message", sa.String(MESSAGE_CHARS)))
    op.add_column("lease_events", sa.Column("message", sa.String(MESSAGE_CHARS)))


def downgrade() -> None:
    op.drop_column("lease_events", "message")
    op.drop_column("lease_items", "error_message")
