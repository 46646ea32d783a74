"""Completion callbacks (docs/design.md §7, callbacks; ADR 0013): a batch's `notify_url`, and
the outbox of deliveries, each one a lease group of one item written in the transaction that
makes its batch terminal.

Revision ID: 0006
Revises: 0003 (merge note: re-chain after the main line's 0005)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    """Add `batchcrop_batches.notify_url` and the `batchcrop_deliveries` table."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.add_column(sa.Column("notify_url", sa.String(2048), nullable=True))
    op.create_table(
        "batchcrop_deliveries",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("notification_id", sa.String(36), nullable=False),
    )
    op.create_index("batchcrop_deliveries_batch", "batchcrop_deliveries", ["batch_id"])


def downgrade() -> None:
    """Drop them."""
    op.drop_index("batchcrop_deliveries_batch", table_name="batchcrop_deliveries")
    op.drop_table("batchcrop_deliveries")
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.drop_column("notify_url")
