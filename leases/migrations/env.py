"""Alembic environment for the lease tables: runs on the connection `leases.migrate` passes."""

from __future__ import annotations

from alembic import context

from leases.versions import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
