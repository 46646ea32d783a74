"""The application's own tables, beside the lease engine's: batches, the manifest, the source
previews, the callback outbox and the operators' re-crops.

A batch's id is its lease group's id; its items, states and counters live in the lease engine.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

batches = sa.Table(
    "batchcrop_batches",
    metadata,
    # An integer key orders batches newest first and makes a stable listing cursor.
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("id", sa.String(36), nullable=False, unique=True),
    # The render request as `RenderSpec.to_record()` wrote it (docs/design.md §6).
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("idempotency_key", sa.String(200), nullable=True, unique=True),
    sa.Column("request_hash", sa.String(64), nullable=False),
    # The canonical URL of the store its derivatives go to (docs/design.md §5); NULL for batches
    # submitted before stores were recorded, which any worker serves.
    sa.Column("store", sa.String(1100), nullable=True),
    # A human label (docs/design.md §7), or NULL.
    sa.Column("label", sa.String(200), nullable=True),
    sa.Index("batchcrop_batches_label", "label"),
    # Where the final status document is POSTed when the batch ends (docs/design.md §7,
    # callbacks); NULL: no callback. The column keeps the URL's former name (ADR 0030).
    sa.Column("notify_url", sa.String(2048), nullable=True),
    # How many failed items the batch tolerates, as given (`5`, `2.5%`; docs/design.md §4);
    # NULL: none.
    sa.Column("allow_failures", sa.String(8), nullable=True),
)

# The outbox: one row per delivery of a completion callback. A delivery is also a lease group
# of one item with the same id (its attempts are that item's claims and transitions; ADR 0013),
# written in the transaction that made the batch terminal. `notification_id` names the
# callback (one per time the batch became terminal; the column keeps its first name, ADR 0030);
# redeliveries repeat it, and it is the `Idempotency-Key` a receiver deduplicates on.
deliveries = sa.Table(
    "batchcrop_deliveries",
    metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("id", sa.String(36), nullable=False, unique=True),
    sa.Column("batch_id", sa.String(36), nullable=False),
    sa.Column("notification_id", sa.String(36), nullable=False),
    sa.Index("batchcrop_deliveries_batch", "batch_id"),
)

derivatives = sa.Table(
    "batchcrop_derivatives",
    metadata,
    sa.Column("item_id", sa.String(36), primary_key=True),
    sa.Column("ratio", sa.String(16), primary_key=True),
    # One row per (item, ratio, format); rows written before formats existed are JPEG's.
    sa.Column("format", sa.String(8), primary_key=True, server_default="jpeg"),
    sa.Column("batch_id", sa.String(36), nullable=False),
    sa.Column("key", sa.String(1024), nullable=False),
    sa.Column("width", sa.Integer, nullable=False),
    sa.Column("height", sa.Integer, nullable=False),
    sa.Column("bytes", sa.Integer, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("crop_box", sa.String(64), nullable=False),
    # One row per requested width too (0: the single size of `max_side`); the fit used, its
    # padding (`l,t,r,b` output pixels) and the trimmed box (`l,t,r,b`, null: no trim asked).
    sa.Column("requested_width", sa.Integer, primary_key=True, server_default="0"),
    sa.Column("fit", sa.String(4), nullable=False, server_default="crop"),
    sa.Column("padding", sa.String(64), nullable=False, server_default="0,0,0,0"),
    sa.Column("trim_box", sa.String(64), nullable=True),
    sa.Index("batchcrop_derivatives_batch", "batch_id"),
)

# One row per batch `prune` deleted (docs/design.md §4, retention): its id and when, so a
# reader asking for it hears it was pruned, not that no such batch was ever submitted.
pruned = sa.Table(
    "batchcrop_pruned",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column(
        "pruned_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.func.current_timestamp(),
    ),
)

# The stored preview of an item's source (docs/design.md §5, previews): at most one row per
# item, written with its manifest in the transaction that makes it `succeeded`.
previews = sa.Table(
    "batchcrop_previews",
    metadata,
    sa.Column("item_id", sa.String(36), primary_key=True),
    sa.Column("batch_id", sa.String(36), nullable=False),
    sa.Column("key", sa.String(1024), nullable=False),
    sa.Column("width", sa.Integer, nullable=False),
    sa.Column("height", sa.Integer, nullable=False),
    sa.Column("bytes", sa.Integer, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("source_width", sa.Integer, nullable=False),
    sa.Column("source_height", sa.Integer, nullable=False),
    sa.Index("batchcrop_previews_batch", "batch_id"),
)

# One row per operator re-crop (docs/design.md §6, re-crop; ADR 0018), written in the
# transaction of the item's `recrop` event, whose correlation id it carries: the timeline shows
# each re-crop with its box. `focus_box` is [left, top, right, bottom] in upright source pixels.
recrops = sa.Table(
    "batchcrop_recrops",
    metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("correlation_id", sa.String(32), nullable=False, unique=True),
    sa.Column("batch_id", sa.String(36), nullable=False),
    sa.Column("item_id", sa.String(36), nullable=False),
    sa.Column("focus_box", sa.JSON, nullable=False),
    sa.Index("batchcrop_recrops_batch", "batch_id"),
)
