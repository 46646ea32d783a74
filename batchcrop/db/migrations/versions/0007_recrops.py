"""Operator re-crops (docs/design.md §6, re-crop; ADR 0018): one row per re-crop, carrying the
correlation id of the item's `recrop` event and the focus box asked for.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    """Create `batchcrop_recrops`."""
    op.create_table(
        "batchcrop_recrops",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("correlation_id", sa.String(32), nullable=False, unique=True),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("item_id", sa.String(36), nullable=False),
        sa.Column("focus_box", sa.JSON, nullable=False),
    )
    op.create_index("batchcrop_recrops_batch", "batchcrop_recrops", ["batch_id"])


def downgrade() -> None:
    """Drop it."""
    op.drop_index("batchcrop_recrops_batch", table_name="batchcrop_recrops")
    op.drop_table("batchcrop_recrops")
