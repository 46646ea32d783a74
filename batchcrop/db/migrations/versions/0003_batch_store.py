"""The store a batch writes to, recorded at submission (docs/adr/0010, docs/design.md §5).

Batches created before this revision have none (NULL): any worker serves them, as before.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    """Add the nullable `store` column (the canonical store URL)."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.add_column(sa.Column("store", sa.String(1100), nullable=True))


def downgrade() -> None:
    """Drop it."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.drop_column("store")
