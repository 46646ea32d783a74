"""Batches and the derivative manifest.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    """Create the batch settings table and the manifest table."""
    op.create_table(
        "batchcrop_batches",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("ratios", sa.String(200), nullable=False),
        sa.Column("max_side", sa.Integer, nullable=False),
        sa.Column("quality", sa.Integer, nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=True, unique=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
    )
    op.create_table(
        "batchcrop_derivatives",
        sa.Column("item_id", sa.String(36), primary_key=True),
        sa.Column("ratio", sa.String(16), primary_key=True),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("key", sa.String(1024), nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("height", sa.Integer, nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("crop_box", sa.String(64), nullable=False),
    )
    op.create_index("batchcrop_derivatives_batch", "batchcrop_derivatives", ["batch_id"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_index("batchcrop_derivatives_batch", "batchcrop_derivatives")
    op.drop_table("batchcrop_derivatives")
    op.drop_table("batchcrop_batches")
