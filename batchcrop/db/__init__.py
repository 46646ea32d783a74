"""batchcrop's own tables beside the lease engine's (docs/design.md §7).

`tables` declares them (SQLAlchemy Core), `queries` holds every statement on them (one small
function each), `migrations` is the Alembic history and `revisions` tells where a database's
migrations stand against this version's (ADR 0015).

May import only the floor (`errors`) and SQLAlchemy/Alembic. Knows nothing of batches,
workers or images.
"""
