"""Table definitions the statements in `leases.queries` are built on.

The migrations in `leases/migrations/versions` create exactly these tables; times are epoch
milliseconds from the database clock (BIGINT), see docs/adr/0001.
"""

from __future__ import annotations

import sqlalchemy as sa

from leases.models import MESSAGE_MAX_CHARS

metadata = sa.MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias), not a BIGINT one.
EVENT_ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

groups = sa.Table(
    "lease_groups",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("deadline_at", sa.BigInteger, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    # False while the group's items are still being written (docs/design.md §3, creation).
    sa.Column("sealed", sa.Boolean, nullable=False, server_default=sa.true()),
    # True: the owner's `on_group_finished` hook runs in the transaction that ends the group's
    # last unfinished item (docs/design.md §3, finish hook; ADR 0013).
    sa.Column("notify_finish", sa.Boolean, nullable=False, server_default=sa.false()),
    # Claims prefer groups of higher priority, with aging (docs/design.md §3, sharing; ADR 0041).
    sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
    # True: no item of the group is claimed; its deadline runs on (docs/design.md §3, sharing).
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
)

items = sa.Table(
    "lease_items",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    # No foreign key on PostgreSQL since lease migration 0007 (ADR 0023): items are written and
    # their group deleted only under the group's row lock. SQLite keeps the one it was made with.
    sa.Column("group_id", sa.String(64), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("attempt_base", sa.Integer, nullable=False),
    sa.Column("lease_token", sa.String(64)),
    sa.Column("lease_expires_at", sa.BigInteger),
    sa.Column("attempt_started_at", sa.BigInteger),
    sa.Column("next_attempt_at", sa.BigInteger, nullable=False),
    sa.Column("worker_id", sa.String(200)),
    sa.Column("error_category", sa.String(64)),
    # Why the last attempt ended, in the caller's words (docs/design.md §3; ADR 0017).
    sa.Column("error_message", sa.String(MESSAGE_MAX_CHARS)),
    sa.Column("correlation_id", sa.String(32)),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("payload", sa.JSON, nullable=False),
    # The lane the last claim counted against (`Lane`: a resource with a cap on the attempts
    # in progress at once), or NULL; counted through a partial index of in-progress items.
    sa.Column("lane", sa.String(64)),
)

events = sa.Table(
    "lease_events",
    metadata,
    sa.Column("id", EVENT_ID_TYPE, primary_key=True, autoincrement=True),
    sa.Column("item_id", sa.String(64), nullable=False),
    sa.Column("group_id", sa.String(64), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("from_state", sa.String(16)),
    sa.Column("to_state", sa.String(16), nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("worker_id", sa.String(200)),
    sa.Column("lease_token", sa.String(64)),
    sa.Column("reason", sa.String(64)),
    sa.Column("correlation_id", sa.String(32)),
    sa.Column("message", sa.String(MESSAGE_MAX_CHARS)),
)

counters = sa.Table(
    "lease_counters",
    metadata,
    sa.Column("group_id", sa.String(64), primary_key=True),
    sa.Column("state", sa.String(16), primary_key=True),
    sa.Column("category", sa.String(64), primary_key=True),
    sa.Column("shard", sa.Integer, primary_key=True),
    sa.Column("n", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    # +1 on every change of the row: the sum over a group's rows is the group's version, which
    # moves with every transition of its items (docs/design.md §3, group versions; ADR 0021).
    sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("1")),
)

# One row per live worker process (docs/design.md §3, worker registry): written at start,
# `last_seen_at` refreshed every few seconds, deleted on a clean shutdown. `info` is the
# application's own description of the process (host, pid, version, ...), opaque here.
workers = sa.Table(
    "lease_workers",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("started_at", sa.BigInteger, nullable=False),
    sa.Column("last_seen_at", sa.BigInteger, nullable=False),
    sa.Column("info", sa.JSON, nullable=False),
)
