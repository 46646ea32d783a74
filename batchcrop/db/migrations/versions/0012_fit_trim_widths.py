"""Fit, trim and widths: a manifest row per (item, ratio, format, requested width), with the fit
used, its padding and the trimmed box (docs/adr/0040, docs/design.md §5).

`batchcrop_derivatives` gains `requested_width` (0: the single size of `max_side`), which joins
its primary key, `fit` (`crop` or `pad`), `padding` (`l,t,r,b` output pixels) and `trim_box`
(`l,t,r,b` source pixels, null: no trim asked). Rows written before are single-size crops without
trim and read so. PostgreSQL alters the table in place (columns with constant defaults rewrite
nothing); SQLite, which cannot change a primary key, copies the table into its new shape. The
downgrade drops every row of a width first.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"

TABLE = "batchcrop_derivatives"
PRIMARY_KEY = "batchcrop_derivatives_pkey"
INDEX = "batchcrop_derivatives_batch"
_KEY = ["item_id", "ratio", "format"]
_COLUMNS = (
    "item_id",
    "ratio",
    "format",
    "batch_id",
    "key",
    "width",
    "height",
    "bytes",
    "sha256",
    "crop_box",
)
_ADDED = ("requested_width", "fit", "padding", "trim_box")


def _added() -> list[sa.Column[object]]:
    return [
        sa.Column("requested_width", sa.Integer, nullable=False, server_default="0"),
        sa.Column("fit", sa.String(4), nullable=False, server_default="crop"),
        sa.Column("padding", sa.String(64), nullable=False, server_default="0,0,0,0"),
        sa.Column("trim_box", sa.String(64), nullable=True),
    ]


def upgrade() -> None:
    """Add the columns (existing rows: single size, `crop`, no padding, no trim) and put
    `requested_width` in the primary key."""
    if op.get_bind().dialect.name == "postgresql":
        for column in _added():
            op.add_column(TABLE, column)
        op.drop_constraint(PRIMARY_KEY, TABLE, type_="primary")
        op.create_primary_key(PRIMARY_KEY, TABLE, [*_KEY, "requested_width"])
    else:
        _rebuild(added=True)


def downgrade() -> None:
    """Back to one row per (item, ratio, format): the rows of a width are deleted."""
    op.execute(sa.text(f"DELETE FROM {TABLE} WHERE requested_width <> 0"))  # noqa: S608
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(PRIMARY_KEY, TABLE, type_="primary")
        op.create_primary_key(PRIMARY_KEY, TABLE, _KEY)
        for name in reversed(_ADDED):
            op.drop_column(TABLE, name)
    else:
        _rebuild(added=False)


def _rebuild(*, added: bool) -> None:
    """SQLite: copy the table into the shape with (or without) the added columns."""
    new = f"{TABLE}_new"
    columns: list[sa.schema.SchemaItem] = [
        sa.Column("item_id", sa.String(36), nullable=False),
        sa.Column("ratio", sa.String(16), nullable=False),
        sa.Column("format", sa.String(8), nullable=False, server_default="jpeg"),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("key", sa.String(1024), nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("height", sa.Integer, nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("crop_box", sa.String(64), nullable=False),
    ]
    key = list(_KEY)
    if added:
        columns.extend(_added())
        key.append("requested_width")
    op.create_table(new, *columns, sa.PrimaryKeyConstraint(*key))
    names = ", ".join(_COLUMNS)
    op.execute(sa.text(f"INSERT INTO {new} ({names}) SELECT {names} FROM {TABLE}"))  # noqa: S608
    op.drop_index(INDEX, TABLE)
    op.drop_table(TABLE)
    op.rename_table(new, TABLE)
    op.create_index(INDEX, TABLE, ["batch_id"])
