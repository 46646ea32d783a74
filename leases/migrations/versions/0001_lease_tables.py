"""Create the lease tables: groups, items, events, sharded counters.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ITEMS_FILLFACTOR_PERCENT = 80
STATES = ("queued", "in_progress", "retryable", "succeeded", "failed", "abandoned")


def _where(sql: str) -> dict[str, Any]:
    """A partial-index predicate for both dialects (the queries repeat it literally)."""
    return {"postgresql_where": sa.text(sql), "sqlite_where": sa.text(sql)}


def upgrade() -> None:
    op.create_table(
        "lease_groups",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("deadline_at", sa.BigInteger, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
    )
    state_list = ", ".join(f"'{s}'" for s in STATES)
    op.create_table(
        "lease_items",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("group_id", sa.String(64), sa.ForeignKey("lease_groups.id"), nullable=False),
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
        sa.Column("correlation_id", sa.String(32)),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.CheckConstraint(f"state IN ({state_list})", name="ck_lease_items_state"),
        sa.UniqueConstraint("group_id", "seq", name="uq_lease_items_group_seq"),
        # Room on each page for the updated row versions, so heartbeats stay HOT updates.
        postgresql_with={"fillfactor": ITEMS_FILLFACTOR_PERCENT},
    )
    # Listing by state, reaping a cancelled/expired group's items, recount: per group and state.
    op.create_index("ix_lease_items_group_state_seq", "lease_items", ["group_id", "state", "seq"])
    # Claim of queued work in seq order across groups (the fairness order).
    op.create_index(
        "ix_lease_items_queued_seq", "lease_items", ["seq"], **_where("state = 'queued'")
    )
    # Claim of due retryable work by due time.
    op.create_index(
        "ix_lease_items_retryable_due",
        "lease_items",
        ["next_attempt_at"],
        **_where("state = 'retryable'"),
    )
    # The reaper's expired-lease scan reads the in-progress items (at most the leases held at
    # once) and filters on expiry. lease_expires_at itself is deliberately in no index: then a
    # heartbeat changes no indexed column and PostgreSQL updates the row in place (HOT).
    op.create_index(
        "ix_lease_items_in_progress",
        "lease_items",
        ["group_id"],
        **_where("state = 'in_progress'"),
    )
    # A group's oldest unfinished item, one probe (the status document's oldest_updated_at).
    op.create_index(
        "ix_lease_items_unfinished_updated",
        "lease_items",
        ["group_id", "updated_at"],
        **_where("state IN ('in_progress', 'queued', 'retryable')"),
    )
    op.create_table(
        "lease_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
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
    )
    op.create_index("ix_lease_events_group_id", "lease_events", ["group_id", "id"])
    op.create_index("ix_lease_events_item_id", "lease_events", ["item_id", "id"])
    op.create_table(
        "lease_counters",
        sa.Column("group_id", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(16), primary_key=True),
        sa.Column("category", sa.String(64), primary_key=True),
        sa.Column("shard", sa.Integer, primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("lease_counters")
    op.drop_table("lease_events")
    op.drop_table("lease_items")
    op.drop_table("lease_groups")
