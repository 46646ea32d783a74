"""A human label per batch (docs/design.md §7), indexed for `batches --label`.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    """Add the nullable `label` column and its index."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.add_column(sa.Column("label", sa.String(200), nullable=True))
    op.create_index("batchcrop_batches_label", "batchcrop_batches", ["label"])


def downgrade() -> None:
    """Drop them."""
    op.drop_index("batchcrop_batches_label", "batchcrop_batches")
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.drop_column("label")
