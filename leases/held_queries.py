"""Statements about several held leases at once: one heartbeat, or one ending, for a holder's set.

The set travels as bound values whose number does not depend on its size, so each statement
is built, compiled and (by psycopg) prepared once: on PostgreSQL as parallel arrays read by
`unnest`, on SQLite as one JSON array read by `json_each`. The statements are `UPDATE ... FROM`
that set and join it on `id` and `lease_token`, with `state = 'in_progress'`: each row is
fenced by its own token exactly as the one-item statements of `leases.queries` are. A row whose
token is stale matches nothing, is not written and is missing from RETURNING; the caller
reports it lost while the others go through.

Concurrency: every row is a compare-and-set of its own; the caller passes the set sorted by
item id, which is the order PostgreSQL's nested loop over `unnest` takes the rows' locks in, so
two multi-item writers of one holder cannot lock a pair of rows in opposite orders.
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
    """The bound set (parameter `p_held`, a JSON array of arrays) as a table named `held` with
    `columns` (all text)."""
    held = sa.bindparam("p_held", type_=sa.String)
    if dialect_name == "postgresql":
        rows = sa.func.json_array_elements(sa.cast(held, postgresql.JSON))
        each = rows.table_valued("value")
        fields = [each.c.value.op("->>")(inline(i)).label(name) for i, name in enumerate(columns)]
    else:
        each = sa.func.json_each(held).table_valued("value")
        fields = [
            sa.func.json_extract(each.c.value, inline(f"$[{i}]")).label(name)
            for i, name in enumerate(columns)
        ]
    return sa.select(*fields).subquery("held")


def held_params(rows: Sequence[tuple[str | None, ...]]) -> dict[str, Any]:
    """The bound value of a set of `rows`, tuples in the order of its columns (`HELD_COLUMNS`
    or `ENDING_COLUMNS`)."""
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
