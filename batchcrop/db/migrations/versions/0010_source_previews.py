"""Source previews (docs/design.md §5, previews; ADR 0020): the `batchcrop_previews` table, one
row per item whose worker stored a small preview of its source. Additive: items rendered before
it have no row and their thumbnails are decoded from the source, as before.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    """Create `batchcrop_previews` and its batch index."""
    op.create_table(
        "batchcrop_previews",
        sa.Column("item_id", sa.String(36), primary_key=True),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("key", sa.String(1024), nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("height", sa.Integer, nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("source_width", sa.Integer, nullable=False),
        sa.Column("source_height", sa.Integer, nullable=False),
    )
    op.create_index("batchcrop_previews_batch", "batchcrop_previews", ["batch_id"])


def downgrade() -> None:
    """Drop it (the stored preview objects stay in the store, unreferenced)."""
    op.drop_index("batchcrop_previews_batch", table_name="batchcrop_previews")
    op.drop_table("batchcrop_previews")
