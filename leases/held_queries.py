"""Statements about several held leases at once: one heartbeat, or one ending, for a holder's set.

The set travels as bound values whose number does not depend on its size, so each statement
is built, compiled and (by psycopg) prepared once: on PostgreSQL as parallel arrays read by
`unnest`, on SQLite as one JSON array read by `json_each`. The statements are `UPDATE ... FROM`
that set and join it on `id` and `lease_token`, with `state = 'in_progress'`: each row is
fenced by its own token exactly as the one-item statements of `leases.queries` are. A row whose
token is stale matches nothing, is not written and is missing from RETURNING; the caller
reports it lost while the others go through.

Concurrency: every row is a compare-and-set of its own, and only the holder of a set's tokens
can match its rows, so two holders never wait on each other here. PostgreSQL finds the rows by
primary key (the planner takes an `unnest` of a bound array as 10 rows) or, while few leases
are held, among the in-progress items; never by scanning the table. The caller passes the set
sorted by item id. Two set statements of ONE holder over the same rows at once could still lock
them in opposite orders: PostgreSQL then fails one as deadlocked (`DatabaseUnavailable`), as it
would any transition.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.expression import FromClause

from leases.models import State
from leases.queries import MOVED, inline, state_is, stop_reason
from leases.schema import items
from leases.sqlfuncs import db_now_ms

HELD_COLUMNS = ("held_id", "held_token")
"""The columns of a set of held leases: item id and lease token."""
ENDING_COLUMNS = (*HELD_COLUMNS, "held_state", "held_category", "held_message")
"""A set of endings: the lease, then the state, error category and message to end it with."""


def _held_set(dialect_name: str, columns: tuple[str, ...]) -> FromClause:
    """The bound set as a table named `held` with `columns` (all text): on PostgreSQL one
    array parameter per column (`p_held_id`, ...) read by `unnest`, which the planner takes as
    10 rows in a generic plan (a JSON set read by a function would be taken as 100, and joined
    against every in-progress item however many there are); on SQLite one JSON array of rows
    (`p_held`) read by `json_each`."""
    if dialect_name == "postgresql":
        arrays = [sa.bindparam(f"p_{name}", type_=postgresql.ARRAY(sa.String)) for name in columns]
        return sa.func.unnest(*arrays).table_valued(*columns).render_derived(name="held")
    each = sa.func.json_each(sa.bindparam("p_held", type_=sa.String)).table_valued("value")
    fields = [
        sa.func.json_extract(each.c.value, inline(f"$[{i}]")).label(name)
        for i, name in enumerate(columns)
    ]
    return sa.select(*fields).subquery("held")


def held_params(
    dialect_name: str, columns: tuple[str, ...], rows: Sequence[tuple[str | None, ...]]
) -> dict[str, Any]:
    """The bound values of a set of `rows`, tuples in the order of `columns` (`HELD_COLUMNS` or
    `ENDING_COLUMNS`)."""
    if dialect_name == "postgresql":
        return {f"p_{name}": [row[i] for row in rows] for i, name in enumerate(columns)}
    return {"p_held": json.dumps(rows)}


def _fenced_by_held(held: FromClause) -> tuple[sa.ColumnElement[bool], ...]:
    """Each item of the set, still in progress under the set's token for it."""
    return (
        items.c.id == held.c.held_id,
        items.c.lease_token == held.c.held_token,
        state_is(State.IN_PROGRESS),
    )


@cache
def heartbeat_held(dialect_name: str, *, lease_ms: int, max_attempt_ms: int) -> Update:
    """B for a set: extend each held lease to now + `lease_ms` unless its attempt should stop
    (`queries.stop_reason`, decided per row in the same statement, as `queries.heartbeat`).

    Returns one row per lease still held: id, token, (new) expiry and stop reason; a lease
    whose token is stale returns no row and is not touched.
    """
    held = _held_set(dialect_name, HELD_COLUMNS)
    reason = stop_reason(max_attempt_ms)
    return (
        sa.update(items)
        .where(*_fenced_by_held(held))
        .values(
            lease_expires_at=sa.case(
                (reason.is_(None), db_now_ms() + inline(lease_ms)), else_=items.c.lease_expires_at
            )
        )
        .returning(
            items.c.id, items.c.lease_token, items.c.lease_expires_at, reason.label("stop_reason")
        )
    )


@cache
def finish_held(dialect_name: str) -> Update:
    """C, D and I for a set: end each held attempt in its own state (succeeded, failed or
    abandoned), error category and message. Returns MOVED for the items moved; an item whose
    token is stale returns no row and is not touched."""
    held = _held_set(dialect_name, ENDING_COLUMNS)
    return (
        sa.update(items)
        .where(*_fenced_by_held(held))
        .values(
            state=held.c.held_state,
            error_category=held.c.held_category,
            error_message=held.c.held_message,
            lease_expires_at=sa.null(),
            updated_at=db_now_ms(),
        )
        .returning(*MOVED)
    )
