"""Dialect-specific SQL expressions: the database clock in epoch milliseconds, random values.

Each compiles to PostgreSQL and SQLite text; statements use them so that every time comes from
the one database clock and random tokens are drawn per row inside set-based statements.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement, FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal


class db_now_ms(FunctionElement[int]):
    """The database clock as epoch milliseconds, stable within one statement."""

    type = sa.BigInteger()
    inherit_cache = True


@compiles(db_now_ms, "postgresql")
def _now_pg(element: db_now_ms, compiler: Any, **kw: Any) -> str:
    # statement_timestamp(): one value per statement (unlike clock_timestamp()), but it moves on
    # between statements of one transaction (unlike now()). Written short: it appears several
    # times in the claim, whose text must stay within psycopg's parse cache (4,096 bytes).
    return "floor(extract(epoch FROM statement_timestamp())*1000)::bigint"


@compiles(db_now_ms, "sqlite")
def _now_sqlite(element: db_now_ms, compiler: Any, **kw: Any) -> str:
    # julianday('now') has millisecond resolution (CURRENT_TIMESTAMP only whole seconds) and is
    # constant within one sqlite3_step(); unixepoch('subsec') needs SQLite 3.42.
    return "CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"


class random_token(FunctionElement[str]):
    """A fresh random 32-hex-digit token per row (lease tokens)."""

    type = sa.String()
    inherit_cache = True


@compiles(random_token, "postgresql")
def _token_pg(element: random_token, compiler: Any, **kw: Any) -> str:
    return "replace(CAST(gen_random_uuid() AS TEXT), '-', '')"


@compiles(random_token, "sqlite")
def _token_sqlite(element: random_token, compiler: Any, **kw: Any) -> str:
    return "lower(hex(randomblob(16)))"


class random_short_id(FunctionElement[str]):
    """A fresh random 12-hex-digit id per row (correlation ids)."""

    type = sa.String()
    inherit_cache = True


@compiles(random_short_id, "postgresql")
def _short_pg(element: random_short_id, compiler: Any, **kw: Any) -> str:
    return "substr(replace(CAST(gen_random_uuid() AS TEXT), '-', ''), 1, 12)"


@compiles(random_short_id, "sqlite")
def _short_sqlite(element: random_short_id, compiler: Any, **kw: Any) -> str:
    return "lower(hex(randomblob(6)))"


class random_unit(FunctionElement[float]):
    """A uniform random number in [0, 1) per row (jitter)."""

    type = sa.Float()
    inherit_cache = True


@compiles(random_unit, "postgresql")
def _unit_pg(element: random_unit, compiler: Any, **kw: Any) -> str:
    return "random()"


@compiles(random_unit, "sqlite")
def _unit_sqlite(element: random_unit, compiler: Any, **kw: Any) -> str:
    # random() is a signed 64-bit integer; keep 20 bits of it.
    return "((random() & 1048575) / 1048576.0)"


class in_picked(ColumnElement[bool]):
    """`column IN (SELECT id FROM picked)`, rendered so PostgreSQL probes the primary key.

    PostgreSQL plans `IN (SELECT ...)` as a hash semi-join and, when it over-estimates the
    picked rows, scans the whole table to feed it; `= ANY(ARRAY(SELECT ...))` is always an
    index lookup per picked id. SQLite keeps the plain form (it has no arrays).
    """

    type = sa.Boolean()
    # Already a predicate: without this SQLite's non-native booleans would get "= 1" appended.
    _is_implicitly_boolean = True
    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012  (SQLAlchemy's cache-key protocol expects a list)
        ("column", InternalTraversal.dp_clauseelement),
        ("picked", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, column: ColumnElement[Any], picked: sa.CTE) -> None:
        self.column = column
        self.picked = picked


@compiles(in_picked, "postgresql")
def _in_picked_pg(element: in_picked, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    ids = compiler.process(sa.select(element.picked.c.id), **kw)
    return f"{column} = ANY(ARRAY({ids}))"


@compiles(in_picked, "sqlite")
def _in_picked_sqlite(element: in_picked, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    ids = compiler.process(sa.select(element.picked.c.id), **kw)
    return f"{column} IN ({ids})"
