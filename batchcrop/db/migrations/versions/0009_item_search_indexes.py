"""Expression indexes on the item payload fields a batch search matches exactly (`ref`,
`source`; docs/api.md, `GET /v1/batches?q=`), so finding the batches of an item is an index
probe on any number of items. The expressions are written exactly as `batchcrop.db.queries`
writes them. The ref index goes on with the group and `seq`, so the first item of one batch with
a ref (`?from_ref=`) is one probe however many batches share the ref. On PostgreSQL the source
index is a hash index: a source may be longer than a btree entry can hold. Neither index covers
a column a lease update changes, so heartbeats stay HOT updates.

Revision ID: 0009
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0007"

INDEXES = {"batchcrop_items_ref": "ref", "batchcrop_items_source": "source"}
POSTGRESQL_METHODS = {"ref": "btree", "source": "hash"}
FOLLOWING_COLUMNS = {"ref": ", group_id, seq", "source": ""}


def upgrade() -> None:
    """Create both indexes on `lease_items`."""
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name, key in INDEXES.items():
        if postgresql:
            expression = f"(payload ->> '{key}')"
            method = f"USING {POSTGRESQL_METHODS[key]} "
        else:
            expression, method = f"json_extract(payload, '$.{key}')", ""
        op.execute(
            f"CREATE INDEX {name} ON lease_items {method}({expression}{FOLLOWING_COLUMNS[key]})"
        )


def downgrade() -> None:
    """Drop them."""
    for name in INDEXES:
        op.execute(f"DROP INDEX {name}")
