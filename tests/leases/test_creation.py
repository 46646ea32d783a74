"""Creating a group in short transactions: invisible until sealed, cleaned up when left half-done
(docs/design.md §3, creation)."""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from leases import (
    ConstraintViolation,
    DatabaseUnavailable,
    ItemPair,
    LeaseManager,
    NewItem,
    NoSuchGroup,
    State,
    creation,
    make_engine,
    upgrade,
)
from leases import engine as lease_engine
from leases.creation import CHUNK_ROWS_FIRST
from leases.executor import Executor
from leases.schema import items as lease_items
from tests.leases.conftest import LONG_AGO_MS, new_group, set_column

TABLES = ("lease_groups", "lease_items", "lease_events", "lease_counters")


def _rows(engine: sa.Engine, group_id: str) -> dict[str, int]:
    """How many rows each lease table holds for the group."""
    counts = {}
    with engine.connect() as conn:
        for table in TABLES:
            column = "id" if table == "lease_groups" else "group_id"
            sql = sa.text(f"SELECT count(*) FROM {table} WHERE {column} = :g")
            counts[table] = conn.execute(sql, {"g": group_id}).scalar_one()
    return counts


def _items(n: int, midway: Callable[[], None]) -> Iterator[NewItem]:
    """`n` items; `midway` runs when the creator asks for an item after the first chunk, that
    is, once the first chunk has committed and before the group is sealed."""
    for i in range(n):
        if i == CHUNK_ROWS_FIRST + 1:
            midway()
        yield NewItem(str(uuid.uuid4()), {"ref": f"ref-{i}"})


def test_a_group_being_created_is_invisible_to_claims_reads_cancel_and_the_reaper(
    engine: sa.Engine, manager: LeaseManager
) -> None:
    """Half-way through a creation, its first chunk is committed yet nobody can see or touch
    it; once sealed, all of it appears at once."""
    group_id = str(uuid.uuid4())
    seen: dict[str, object] = {}

    def look() -> None:
        seen["rows"] = _rows(engine, group_id)
        seen["claimed"] = manager.claim("w", 10)
        seen["listed"] = manager.groups([group_id])
        for name, act in (
            ("read", lambda: manager.group(group_id)),
            ("cancel", lambda: manager.cancel(group_id)),
            ("requeue", lambda: manager.requeue(group_id, deadline_seconds=60)),
        ):
            with pytest.raises(NoSuchGroup):
                act()
            seen[name] = "NoSuchGroup"
        seen["reaped"] = manager.reap().total
        seen["queued"] = manager.queue().counts

    total = 2 * CHUNK_ROWS_FIRST + 5
    created = manager.create_group(
        group_id, deadline_seconds=60, max_attempts=3, items=_items(total, look)
    )
    assert seen == {
        "rows": {
            "lease_groups": 1,
            "lease_items": CHUNK_ROWS_FIRST,
            "lease_events": 0,
            "lease_counters": 8,
        },
        "claimed": [],
        "listed": [],
        "read": "NoSuchGroup",
        "cancel": "NoSuchGroup",
        "requeue": "NoSuchGroup",
        "reaped": 0,
        "queued": {},
    }
    assert created == total
    summary = manager.group(group_id)
    assert summary.counts[State.QUEUED] == total
    assert manager.recount(group_id) == {(State.QUEUED, ""): total}
    assert [c.payload["ref"] for c in manager.claim("w", 3)] == ["ref-0", "ref-1", "ref-2"]


def test_each_chunk_commits_before_the_next_is_read(
    engine: sa.Engine, manager: LeaseManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large group is written in short transactions of one chunk each: whenever the creator
    reads the first item of a chunk, every earlier chunk is already committed (another
    connection counts it), so no writer waits behind a whole submission. (Chunks held at 50
    items here, to know where each starts.)"""
    monkeypatch.setattr(creation, "CHUNK_ROWS_FIRST", 50)
    monkeypatch.setattr(creation, "CHUNK_ROWS_MIN", 50)
    monkeypatch.setattr(creation, "CHUNK_GROWTH_MAX", 1.0)
    group_id = str(uuid.uuid4())
    committed: list[int] = []

    def items() -> Iterator[NewItem]:
        for i in range(3 * 50 + 1):
            if i % 50 == 0:
                committed.append(_rows(engine, group_id)["lease_items"])
            yield NewItem(str(uuid.uuid4()), {})

    manager.create_group(group_id, deadline_seconds=60, max_attempts=3, items=items())
    assert committed == [0, 50, 100, 150]
    assert manager.group(group_id).total == 3 * 50 + 1


def test_chunks_follow_the_pace_of_the_last_one() -> None:
    """A chunk is sized to take the target time at the last chunk's pace, growing at most
    twofold at a time and shrinking at once, within its bounds."""
    sizer = creation.ChunkSizer(0.06)
    assert sizer.rows == CHUNK_ROWS_FIRST
    sizer.took(2000, 0.006)  # ten times faster than the target: doubles only
    assert sizer.rows == 4000
    sizer.took(4000, 0.03)
    assert sizer.rows == 8000
    sizer.took(8000, 0.24)  # four times too slow: a quarter at once
    assert sizer.rows == 2000
    sizer.took(2000, 60.0)
    assert sizer.rows == creation.CHUNK_ROWS_MIN
    for _ in range(20):
        sizer.took(sizer.rows, 0.0)
    assert sizer.rows == creation.CHUNK_ROWS_MAX


@pytest.mark.parametrize("error", [OSError("the upload was cut"), KeyboardInterrupt()])
def test_a_creation_that_fails_part_way_leaves_nothing(
    engine: sa.Engine, manager: LeaseManager, error: BaseException
) -> None:
    """An error from the item source after a committed chunk, or Ctrl-C, deletes every row
    written."""
    group_id = str(uuid.uuid4())

    def fail() -> None:
        raise error

    with pytest.raises(type(error)):
        manager.create_group(
            group_id, deadline_seconds=60, max_attempts=3, items=_items(CHUNK_ROWS_FIRST + 5, fail)
        )
    assert _rows(engine, group_id) == dict.fromkeys(TABLES, 0)


def test_a_failing_seal_callback_leaves_nothing(engine: sa.Engine, manager: LeaseManager) -> None:
    """The caller's rows written at the seal fail: the group goes with them."""
    group_id = str(uuid.uuid4())

    def on_seal(conn: sa.Connection) -> None:
        raise ValueError("refused by the caller")

    with pytest.raises(ValueError, match="refused"):
        manager.create_group(
            group_id,
            deadline_seconds=60,
            max_attempts=3,
            items=[NewItem(str(uuid.uuid4()), {})],
            on_seal=on_seal,
        )
    assert _rows(engine, group_id) == dict.fromkeys(TABLES, 0)


def test_the_reaper_deletes_a_creation_left_by_a_crash_only_once_it_is_old(
    engine: sa.Engine, manager: LeaseManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submitter killed mid-way (here: dying before its clean-up could run) leaves an
    unsealed group; the reaper removes it once it is older than the expiry, and never a
    sealed group."""
    group_id = str(uuid.uuid4())
    sealed_id, _ = new_group(manager, 3)

    def crash() -> None:
        raise SystemExit(137)

    items = _items(CHUNK_ROWS_FIRST + 5, crash)
    with monkeypatch.context() as dying:
        dying.setattr(manager, "_discard_unsealed", lambda *args, **kwargs: None)
        with pytest.raises(SystemExit):
            manager.create_group(group_id, deadline_seconds=60, max_attempts=3, items=items)
    left = _rows(engine, group_id)
    assert left["lease_items"] == CHUNK_ROWS_FIRST
    assert manager.reap().discarded_groups == 0
    assert _rows(engine, group_id) == left
    set_column(engine, "lease_groups", "created_at", LONG_AGO_MS, id=group_id)
    set_column(engine, "lease_groups", "created_at", LONG_AGO_MS, id=sealed_id)
    assert manager.reap().discarded_groups == 1
    assert _rows(engine, group_id) == dict.fromkeys(TABLES, 0)
    assert manager.group(sealed_id).counts[State.QUEUED] == 3


def test_the_deadline_counts_from_the_seal(engine: sa.Engine, manager: LeaseManager) -> None:
    """However long the items took to write, the group gets its whole deadline."""
    group_id = str(uuid.uuid4())

    def slow_start() -> None:
        set_column(engine, "lease_groups", "created_at", LONG_AGO_MS, id=group_id)
        set_column(engine, "lease_groups", "deadline_at", LONG_AGO_MS, id=group_id)

    manager.create_group(
        group_id,
        deadline_seconds=60,
        max_attempts=3,
        items=_items(CHUNK_ROWS_FIRST + 2, slow_start),
    )
    summary = manager.group(group_id)
    assert summary.deadline_at.timestamp() > summary.created_at.timestamp() + 60
    assert len(manager.claim("w", 2)) == 2


def test_a_creation_waits_its_turn_then_gives_up_writing_nothing(
    engine: sa.Engine, manager: LeaseManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite a creation waits while another holds the turn (a lock on a file beside the
    database) and gives up as unavailable after the wait, before writing anything; on
    PostgreSQL there is no turn to wait for."""
    if engine.dialect.name != "sqlite":
        assert new_group(manager, 2)[1]
        return
    monkeypatch.setattr(lease_engine, "CREATION_TURN_WAIT_SECONDS", 0.3)
    holder = os.open(f"{engine.url.database}-create.lock", os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        group_id = str(uuid.uuid4())
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match="another submission"):
            manager.create_group(
                group_id, deadline_seconds=60, max_attempts=3, items=[NewItem(group_id, {})]
            )
        assert 0.3 <= time.monotonic() - started < 3
        assert _rows(engine, group_id) == dict.fromkeys(TABLES, 0)
    finally:
        os.close(holder)
    assert new_group(manager, 2)[1]


AWKWARD_PAYLOADS = [
    {"source": "/a\tb/c\nd\re.jpg", "ref": "back\\slash \\N \\t"},
    {"source": "/ünï/çødé/🖼.jpg", "ref": None, "nested": {"list": [1, 2.5, True, None]}},
    {"source": "/plain.jpg", "ref": "\"quoted\" 'single'"},
]


def test_payloads_are_stored_exactly(manager: LeaseManager) -> None:
    """Whatever text a payload holds (tabs, line ends, backslashes, `\\N`, non-ASCII), the
    bulk insert (COPY text on PostgreSQL) stores it as given, and the rows are well formed."""
    group_id = str(uuid.uuid4())
    ids = [str(uuid.uuid4()) for _ in AWKWARD_PAYLOADS]
    manager.create_group(
        group_id,
        deadline_seconds=60,
        max_attempts=1,
        items=[NewItem(i, p) for i, p in zip(ids, AWKWARD_PAYLOADS, strict=True)],
    )
    items = manager.items(group_id)
    assert [(i.id, i.seq, i.state, i.attempt) for i in items] == [
        (item_id, seq, State.QUEUED, 0) for seq, item_id in enumerate(ids)
    ]
    assert [i.payload for i in items] == AWKWARD_PAYLOADS
    claims = manager.claim("w", 3, group_ids=[group_id])
    assert [c.payload for c in claims] == AWKWARD_PAYLOADS


def test_a_row_the_database_refuses_is_the_engines_error_and_leaves_nothing(
    engine: sa.Engine, manager: LeaseManager
) -> None:
    """A chunk the database refuses (here two items with one id) raises the engine's own
    `ConstraintViolation` on both databases, PostgreSQL's COPY included (never the driver's
    exception), and the group is discarded."""
    group_id, item_id = str(uuid.uuid4()), str(uuid.uuid4())
    twice = [NewItem(item_id, {"source": "/a.jpg"}), NewItem(item_id, {"source": "/b.jpg"})]
    with pytest.raises(ConstraintViolation):
        manager.create_group(group_id, deadline_seconds=60, max_attempts=1, items=twice)
    assert _rows(engine, group_id) == dict.fromkeys(TABLES, 0)


def test_a_payload_text_that_is_not_one_json_value_adds_no_row(
    engine: sa.Engine, manager: LeaseManager
) -> None:
    """Payload texts are given as JSON text; one that closes its pair and opens another, or
    that swallows the next item, must not create an item nobody submitted, lose one, or store
    a value other than its own: the creation fails and leaves nothing."""
    forged = '{"a": 1}],["' + str(uuid.uuid4()) + '", {"injected": true}'
    for texts in (
        ['{"a": 0}', forged],  # one more row
        ["[0", "{}]", '{}],["x",{}'],  # as many rows, other ones
        ["1,2"],  # two values, one kept
    ):
        group_id = str(uuid.uuid4())
        items: list[ItemPair] = [(str(uuid.uuid4()), text) for text in texts]
        with pytest.raises(sa.exc.DBAPIError):
            manager.create_group(group_id, deadline_seconds=60, max_attempts=1, items=items)
        assert _rows(engine, group_id) == dict.fromkeys(TABLES, 0), texts


def test_new_rows_hold_exactly_the_queued_item(engine: sa.Engine, manager: LeaseManager) -> None:
    """Every column of a created item is what a queued item holds, on both bulk paths (COPY on
    PostgreSQL, `json_each` on SQLite), and a payload given as JSON text (line breaks and tabs
    in it too) is stored as that object."""
    group_id = str(uuid.uuid4())
    manager.create_group(
        group_id,
        deadline_seconds=60,
        max_attempts=1,
        items=[NewItem("a", {"ref": "x"}), NewItem("b", '{"ref": "y",\n\t"n": [1, 2]}')],
    )
    with engine.connect() as conn:
        created_at = conn.execute(
            sa.text("SELECT created_at FROM lease_groups WHERE id = :g"), {"g": group_id}
        ).scalar_one()
        rows = conn.execute(
            sa.select(lease_items).where(lease_items.c.group_id == group_id).order_by("seq")
        ).all()
    expected = {
        "group_id": group_id,
        "state": "queued",
        "attempt": 0,
        "attempt_base": 0,
        "lease_token": None,
        "lease_expires_at": None,
        "attempt_started_at": None,
        "next_attempt_at": created_at,
        "worker_id": None,
        "error_category": None,
        "error_message": None,
        "correlation_id": None,
        "created_at": created_at,
        "updated_at": created_at,
        "lane": None,
    }
    assert [dict(r._mapping) for r in rows] == [
        {**expected, "id": "a", "seq": 0, "payload": {"ref": "x"}},
        {**expected, "id": "b", "seq": 1, "payload": {"ref": "y", "n": [1, 2]}},
    ]


def test_a_creation_hands_its_connection_back_as_it_found_it(database_url: str) -> None:
    """The creation's own connection leaves WAL checkpoints to the creator while it writes
    (SQLite); the pool gets it back checkpointing automatically again."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        upgrade(engine)
        new_group(LeaseManager(engine), 3)
        if engine.dialect.name == "sqlite":
            with engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                assert raw is not None
                assert raw.execute("PRAGMA wal_autocheckpoint").fetchone() == (1000,)
    finally:
        engine.dispose()


def test_a_postgresql_driver_without_copy_writes_the_same_rows(
    engine: sa.Engine, manager: LeaseManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the driver cannot COPY, the items go in by executemany, the same rows (SQLite has
    one bulk path only)."""
    monkeypatch.setattr(Executor, "can_copy", lambda self, conn: False)
    group_id = str(uuid.uuid4())
    manager.create_group(
        group_id,
        deadline_seconds=60,
        max_attempts=1,
        items=[NewItem("a", {"ref": "x"}), ("b", '{"ref": "y"}')],
    )
    assert [(i.id, i.seq, i.state, i.payload) for i in manager.items(group_id)] == [
        ("a", 0, State.QUEUED, {"ref": "x"}),
        ("b", 1, State.QUEUED, {"ref": "y"}),
    ]
    assert manager.recount(group_id) == manager.counted(group_id)
