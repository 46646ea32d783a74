"""How many failed items a batch tolerates (docs/design.md §4, ADR 0031). Additive: batches
submitted before it have none, and their state is computed as before.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    """Add the nullable `allow_failures` column."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.add_column(sa.Column("allow_failures", sa.String(8), nullable=True))


def downgrade() -> None:
    """Drop it."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.drop_column("allow_failures")
