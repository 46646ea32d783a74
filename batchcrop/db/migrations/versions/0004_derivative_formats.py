"""Output formats: a manifest row per (item, ratio, format) (docs/adr/0009, docs/design.md §5).

`batchcrop_derivatives` gains `format` (`jpeg`, `webp`, `avif`), which joins its primary key.
Rows written before are JPEG derivatives and read `jpeg`. PostgreSQL alters the table in place
(adding a column with a constant default rewrites nothing); SQLite, which cannot change a primary
key, copies the table into its new shape. The downgrade drops every non-JPEG row first.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"

TABLE = "batchcrop_derivatives"
PRIMARY_KEY = "batchcrop_derivatives_pkey"  # PostgreSQL's name for 0001's unnamed key
INDEX = "batchcrop_derivatives_batch"
_COLUMNS = ("item_id", "ratio", "batch_id", "key", "width", "height", "bytes", "sha256", "crop_box")


def upgrade() -> None:
    """Add `format` (existing rows: `jpeg`) to the table and its primary key."""
    if op.get_bind().dialect.name == "postgresql":
        op.add_column(
            TABLE, sa.Column("format", sa.String(8), nullable=False, server_default="jpeg")
        )
        op.drop_constraint(PRIMARY_KEY, TABLE, type_="primary")
        op.create_primary_key(PRIMARY_KEY, TABLE, ["item_id", "ratio", "format"])
    else:
        _rebuild(with_format=True)


def downgrade() -> None:
    """Back to one row per (item, ratio): the WebP and AVIF rows are deleted."""
    op.execute(sa.text(f"DELETE FROM {TABLE} WHERE format <> 'jpeg'"))  # noqa: S608 - constants
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(PRIMARY_KEY, TABLE, type_="primary")
        op.create_primary_key(PRIMARY_KEY, TABLE, ["item_id", "ratio"])
        op.drop_column(TABLE, "format")
    else:
        _rebuild(with_format=False)


def _rebuild(*, with_format: bool) -> None:
    """SQLite: copy the table into the shape with (or without) `format` in the primary key."""
    new = f"{TABLE}_new"
    key = ["item_id", "ratio", "format"] if with_format else ["item_id", "ratio"]
    columns: list[sa.schema.SchemaItem] = [
        sa.Column("item_id", sa.String(36), nullable=False),
        sa.Column("ratio", sa.String(16), nullable=False),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("key", sa.String(1024), nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("height", sa.Integer, nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("crop_box", sa.String(64), nullable=False),
    ]
    if with_format:
        columns.append(sa.Column("format", sa.String(8), nullable=False, server_default="jpeg"))
    op.create_table(new, *columns, sa.PrimaryKeyConstraint(*key))
    names = ", ".join(_COLUMNS)
    op.execute(sa.text(f"INSERT INTO {new} ({names}) SELECT {names} FROM {TABLE}"))  # noqa: S608
    op.drop_index(INDEX, TABLE)
    op.drop_table(TABLE)
    op.rename_table(new, TABLE)
    op.create_index(INDEX, TABLE, ["batch_id"])
