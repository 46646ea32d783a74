"""How many failed items a batch tolerates (docs/design.md §4, ADR 0035), and the ids of the
batches `prune` deleted (§4, retention). Additive: batches submitted before it tolerate no
failure, and batches pruned before it are not remembered.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    """Add the nullable `allow_failures` column and the `batchcrop_pruned` table."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.add_column(sa.Column("allow_failures", sa.String(8), nullable=True))
    op.create_table(
        "batchcrop_pruned",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "pruned_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.current_timestamp(),
        ),
    )


def downgrade() -> None:
    """Drop them."""
    op.drop_table("batchcrop_pruned")
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.drop_column("allow_failures")
