"""Writing the items of a group being created (docs/design.md §3, creation; ADR 0007, ADR 0023).

Items go in chunks, each in its own short transaction. A chunk's size follows the time the last
one held the database (`ChunkSizer`), so that on any machine a chunk holds SQLite's write lock
for about `CHUNK_SECONDS["sqlite"]`, and a PostgreSQL transaction stays short while round trips
stop mattering. Rows travel in the dialect's bulk form — PostgreSQL's COPY in text format,
SQLite's `json_each` over one JSON array per chunk — with nothing per row but the row's own text,
and no event rows: an item's creation is its row (ADR 0023).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

import sqlalchemy as sa

from leases import group_queries, pgqueries
from leases.executor import Executor
from leases.models import ItemPair, State

CHUNK_ROWS_FIRST = 2000
"""Items in a creation's first chunk, before its pace is known."""
CHUNK_ROWS_MIN = 100
CHUNK_ROWS_MAX = 50_000
"""Bounds of a chunk (the upper one bounds the memory a chunk takes, about 10 MB)."""
CHUNK_GROWTH_MAX = 2.0
"""A chunk is at most this many times the previous one: a chunk that met warm caches must not
make the next one long."""
CHUNK_SECONDS = {"sqlite": 0.06, "postgresql": 0.25}
"""How long a chunk's transaction should take. SQLite: well within the 0.1 s a creation may
hold the write lock (docs/design.md §3). PostgreSQL blocks nobody on new rows; a quarter of a
second keeps the transaction short (vacuum horizon, retries) while its round trips cost next to
nothing."""
CHUNK_SECONDS_OTHER = 0.1
COPY_BLOCK_ROWS = 1000
"""Rows formatted and sent at a time inside one COPY, so the server works while the next block
is formatted."""

_COPY_SPECIALS = ("\\", "\t", "\n", "\r")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def chunk_seconds(dialect_name: str) -> float:
    """The time a creation chunk aims at on this dialect."""
    return CHUNK_SECONDS.get(dialect_name, CHUNK_SECONDS_OTHER)


class ChunkSizer:
    """The size of the next chunk, from the pace of the last: the chunk then takes about
    `target_seconds`. It grows at most `CHUNK_GROWTH_MAX`-fold at a time and shrinks at once,
    within `CHUNK_ROWS_MIN`..`CHUNK_ROWS_MAX`."""

    def __init__(self, target_seconds: float) -> None:
        self.target_seconds = target_seconds
        self.rows = CHUNK_ROWS_FIRST

    def took(self, rows: int, seconds: float) -> None:
        """Record that a chunk of `rows` items held the database for `seconds`."""
        if rows <= 0:
            return
        paced = rows * self.target_seconds / max(seconds, 1e-6)
        ceiling = min(CHUNK_ROWS_MAX, rows * CHUNK_GROWTH_MAX)
        self.rows = int(max(CHUNK_ROWS_MIN, min(ceiling, paced)))


class Pacer:
    """SQLite's gap between two writes of one creation: `gap_seconds` from the end of one
    transaction to the start of the next (time spent meanwhile preparing rows counts), so that
    a writer polling for the lock finds it free (docs/adr/0007). Nothing on other dialects."""

    def __init__(self, gap_seconds: float) -> None:
        self.gap_seconds = gap_seconds
        self._free_at = 0.0

    def wait(self) -> None:
        """Sleep until the gap since the last `ended()` is over."""
        remaining = self._free_at - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)

    def ended(self) -> None:
        """The creation's transaction just committed (or rolled back)."""
        self._free_at = time.perf_counter() + self.gap_seconds


def payload_text(payload: Mapping[str, Any] | str) -> str:
    """A payload's JSON text: JSON text as given, a mapping encoded."""
    return payload if isinstance(payload, str) else json.dumps(payload)


def prepared_rows(dialect_name: str, items: Sequence[ItemPair]) -> str | None:
    """What `write_items` needs that can be built before the transaction (so the write lock is
    not held while it is): on SQLite the chunk's JSON array of `[id, payload]` pairs; elsewhere
    None (PostgreSQL formats its COPY text while the server reads it)."""
    if dialect_name != "sqlite":
        return None
    # Each payload goes in as a JSON string that SQLite parses on its own (`json()`): spliced in
    # as it is, a text that is not one JSON value could close its pair and open another.
    encode = encode_basestring_ascii
    pairs = [f"[{encode(i)},{encode(payload_text(p))}]" for i, p in items]
    return "[" + ",".join(pairs) + "]"


def write_items(
    db: Executor,
    conn: sa.Connection,
    group_id: str,
    items: Sequence[ItemPair],
    *,
    first_seq: int,
    now: int,
    prepared: str | None = None,
) -> None:
    """Insert `items` queued, `seq` from `first_seq` on, due and dated `now`, in `conn`'s
    transaction. `prepared`: `prepared_rows` of the same items, when built beforehand."""
    if not items:
        return
    if db.dialect_name == "sqlite":
        rows = prepared if prepared is not None else prepared_rows("sqlite", items)
        params = {"p_rows": rows, "p_group_id": group_id, "p_first_seq": first_seq, "p_now": now}
        written = db.rowcount(conn, group_queries.insert_items_from_json(), params)
        if written != len(items):
            # Not expected (each payload is a string parsed on its own): a second guard that the
            # chunk is exactly its items. The chunk is rolled back.
            raise ValueError(f"a payload is not one JSON value: {written} rows from {len(items)}")
    elif db.dialect_name == "postgresql" and db.can_copy(conn):
        blocks = copy_blocks(group_id, items, first_seq, now)
        db.copy_text(conn, pgqueries.copy_new_items(), blocks)
    else:
        db.execute_many(
            conn, group_queries.insert_items(), _item_dicts(group_id, items, first_seq, now)
        )


def copy_blocks(
    group_id: str, items: Sequence[ItemPair], first_seq: int, now: int
) -> Iterator[str]:
    """COPY text of the items, `COPY_BLOCK_ROWS` lines a block, in the columns of
    `group_queries.NEW_ITEM_COLUMNS`: id, seq, payload, then the values every new item shares."""
    shared = f"\t{_copy_escaped(group_id)}\t{State.QUEUED.value}\t0\t0\t{now}\t{now}\t{now}\n"
    for start in range(0, len(items), COPY_BLOCK_ROWS):
        block = items[start : start + COPY_BLOCK_ROWS]
        ids = [i for i, _ in block]
        payloads = [payload_text(p) for _, p in block]
        # Escaping is needed only where a backslash, tab or line break occurs (a JSON escape
        # such as \u00e9, say): a few scans of the block's text decide it for the whole block.
        if _needs_escaping("".join(ids)):
            ids = [_copy_escaped(i) for i in ids]
        if _needs_escaping("".join(payloads)):
            payloads = [_copy_escaped(p) for p in payloads]
        seqs = range(first_seq + start, first_seq + start + len(block))
        yield "".join(
            [f"{i}\t{s}\t{p}{shared}" for s, i, p in zip(seqs, ids, payloads, strict=True)]
        )


def _needs_escaping(text: str) -> bool:
    """Whether `text` holds a character COPY's text format escapes."""
    return any(special in text for special in _COPY_SPECIALS)


def _copy_escaped(text: str) -> str:
    """`text` as a COPY text-format field (its backslashes, tabs and line breaks escaped)."""
    return text.translate(_COPY_ESCAPES)


def _item_dicts(
    group_id: str, items: Sequence[ItemPair], first_seq: int, now: int
) -> list[dict[str, Any]]:
    """Rows for SQLAlchemy's executemany (a driver without COPY): JSON payloads as values."""
    return [
        {
            "id": item_id,
            "group_id": group_id,
            "seq": seq,
            "state": State.QUEUED.value,
            "attempt": 0,
            "attempt_base": 0,
            "next_attempt_at": now,
            "created_at": now,
            "updated_at": now,
            "payload": json.loads(payload) if isinstance(payload, str) else payload,
        }
        for seq, (item_id, payload) in enumerate(items, first_seq)
    ]
