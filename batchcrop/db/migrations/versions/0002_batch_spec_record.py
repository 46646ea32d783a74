"""The render request as one JSON record per batch.

The `ratios` (comma-separated), `max_side` and `quality` columns become one `spec` column holding
`RenderSpec.to_record()`, so a render setting added later needs no migration of its own.
Existing rows are converted in place.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

# The table as this revision sees it (the application's `tables` module follows the newest one).
_batches = sa.table(
    "batchcrop_batches",
    sa.column("seq", sa.BigInteger),
    sa.column("ratios", sa.String),
    sa.column("max_side", sa.Integer),
    sa.column("quality", sa.Integer),
    sa.column("spec", sa.JSON),
)


def upgrade() -> None:
    """Add `spec`, fill it from the three columns, then drop them."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.add_column(sa.Column("spec", sa.JSON, nullable=True))
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(_batches.c.seq, _batches.c.ratios, _batches.c.max_side, _batches.c.quality)
    ).all()
    for row in rows:
        record = {
            "ratios": str(row.ratios).split(","),
            "max_side": int(row.max_side),
            "quality": int(row.quality),
        }
        conn.execute(_batches.update().where(_batches.c.seq == row.seq).values(spec=record))
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.alter_column("spec", existing_type=sa.JSON, nullable=False)
        batch.drop_column("ratios")
        batch.drop_column("max_side")
        batch.drop_column("quality")


def downgrade() -> None:
    """Back to three columns (fields added to the record since are dropped)."""
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.add_column(sa.Column("ratios", sa.String(200), nullable=True))
        batch.add_column(sa.Column("max_side", sa.Integer, nullable=True))
        batch.add_column(sa.Column("quality", sa.Integer, nullable=True))
    conn = op.get_bind()
    for row in conn.execute(sa.select(_batches.c.seq, _batches.c.spec)).all():
        spec = row.spec
        conn.execute(
            _batches.update()
            .where(_batches.c.seq == row.seq)
            .values(
                ratios=",".join(spec["ratios"]),
                max_side=int(spec["max_side"]),
                quality=int(spec["quality"]),
            )
        )
    with op.batch_alter_table("batchcrop_batches") as batch:
        batch.alter_column("ratios", existing_type=sa.String(200), nullable=False)
        batch.alter_column("max_side", existing_type=sa.Integer, nullable=False)
        batch.alter_column("quality", existing_type=sa.Integer, nullable=False)
        batch.drop_column("spec")
