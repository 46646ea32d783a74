"""PostgreSQL query plans: claim, reap and summary reads use their indexes, never a table scan."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg.sql
import pytest
import sqlalchemy as sa
from sqlalchemy.sql.dml import Update

from leases import (
    LeaseManager,
    NewItem,
    State,
    group_queries,
    held_queries,
    make_engine,
    pgqueries,
    queries,
    transitions,
    upgrade,
)
from leases.transitions import Source

BIG_GROUP_ITEMS = 30_000
SMALL_GROUP_ITEMS = 300

pytestmark = pytest.mark.postgres


@pytest.fixture
def loaded(postgres_url: str) -> Iterator[tuple[sa.Engine, str, str]]:
    """A PostgreSQL database holding a big and a small group, some work in flight, analyzed."""
    engine = make_engine(postgres_url)
    upgrade(engine)
    manager = LeaseManager(engine)
    ids = []
    for n in (BIG_GROUP_ITEMS, SMALL_GROUP_ITEMS):
        group_id = str(uuid.uuid4())
        manager.create_group(
            group_id,
            deadline_seconds=3600,
            max_attempts=3,
            items=(NewItem(str(uuid.uuid4()), {}) for _ in range(n)),
        )
        ids.append(group_id)
    for claim in manager.claim("w", 500):
        manager.complete(claim)
    manager.claim("w", 200)
    manager.cancel(ids[1])
    with engine.begin() as conn:
        conn.execute(sa.text("ANALYZE"))
    yield engine, ids[0], ids[1]
    engine.dispose()


def _plan(engine: sa.Engine, stmt: sa.Select[Any], **params: object) -> str:
    bound = stmt.params(p_worker_id="w", log_correlation_id="c", **params)
    compiled = bound.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
    with engine.connect() as conn:
        lines = conn.exec_driver_sql(f"EXPLAIN {compiled}").scalars().all()
    return "\n".join(lines)


def _logged(move: Update, source: Source) -> sa.Select[Any]:
    """The statement PostgreSQL really runs: the move wrapped with its log."""
    return pgqueries.logged(move, transitions.log_spec(source, 8))


def _assert_uses(plan: str, *indexes: str) -> None:
    """The plan reads lease_items through one of `indexes` and never scans or sorts it whole."""
    assert any(index in plan for index in indexes), plan
    assert "Seq Scan on lease_items" not in plan, plan
    # Sorting is allowed only for the few counter deltas, never for items.
    assert "Sort Key: lease_items" not in plan, plan


def test_claim_uses_the_queue_indexes(loaded: tuple[sa.Engine, str, str]) -> None:
    """The claim statement (with its log) walks the retryable-by-due index and, per claimable
    group, an ordered index of its queued items: it ranks groups, never sorts the queue."""
    engine, big, _ = loaded
    for filtered, params in ((False, {}), (True, {"p_group_ids": [big]})):
        claim = pgqueries.claim(limit=10, lease_ms=1000, filtered=filtered, aging_ms=1000)
        plan = _plan(engine, _logged(claim, Source(None)), p_lane=None, **params)
        _assert_uses(plan, "ix_lease_items_retryable_due")
        # The planner may walk the group's own index or the global queue index filtered by
        # group (when the group holds most queued rows); either way an ordered index walk.
        _assert_uses(plan, "ix_lease_items_group_state_seq", "ix_lease_items_queued_seq")


def test_lane_count_reads_the_lane_index(loaded: tuple[sa.Engine, str, str]) -> None:
    """A lane's in-progress count is a range of the partial index of in-progress lanes."""
    engine, _, _ = loaded
    _assert_uses(
        _plan(engine, queries.lane_in_progress(), p_lane="store"),
        "ix_lease_items_in_progress_lane",
    )


def _prepared_plan(
    engine: sa.Engine, stmt: sa.Select[Any], params: dict[str, Any], mode: str
) -> str:
    """The plan of `stmt` prepared, as psycopg prepares a statement run a few times:
    `plan_cache_mode` `force_custom_plan` (made for these values) or `force_generic_plan` (made
    without them, and kept)."""
    compiled = stmt.compile(dialect=engine.dialect)
    sql, values = str(compiled), []
    for n, name in enumerate(compiled.params, start=1):
        sql = sql.replace(f"%({name})s", f"${n}")
        values.append(params[name])
    with engine.connect() as conn:
        raw: Any = conn.connection.dbapi_connection
        conn.exec_driver_sql(f"SET plan_cache_mode = {mode}")
        conn.exec_driver_sql(f"PREPARE plan_test AS {sql}")
        arguments = ", ".join(psycopg.sql.Literal(v).as_string(raw) for v in values)
        lines = conn.exec_driver_sql(f"EXPLAIN EXECUTE plan_test({arguments})").scalars().all()
        conn.exec_driver_sql("DEALLOCATE plan_test")
        conn.exec_driver_sql("RESET plan_cache_mode")
    return "\n".join(lines)


def test_set_statements_probe_the_primary_key(loaded: tuple[sa.Engine, str, str]) -> None:
    """A heartbeat or an ending of a set of held leases finds each item by its id, or among the
    in-progress items (an index of the leases held at once), never by scanning the items: in
    the plan made for the values and in the generic one a prepared statement keeps."""
    engine, big, _ = loaded
    claims = LeaseManager(engine).claim("w", 10, group_ids=[big])
    leases = [(c.item_id, c.lease_token) for c in claims]
    held = held_queries.held_params("postgresql", held_queries.HELD_COLUMNS, leases)
    beat = held_queries.heartbeat_held("postgresql", lease_ms=1000, max_attempt_ms=2000)
    # As a CTE of a SELECT, as `_plan` takes it: the UPDATE's plan is the same.
    beat_select = sa.select(beat.cte("beat"))
    endings = [(*lease, "succeeded", None, None) for lease in leases]
    ended = held_queries.held_params("postgresql", held_queries.ENDING_COLUMNS, endings)
    finish = _logged(held_queries.finish_held("postgresql"), Source(State.IN_PROGRESS))
    indexes = ("lease_items_pkey", "ix_lease_items_in_progress")
    for stmt, params in ((beat_select, held), (finish, ended)):
        for mode in ("force_custom_plan", "force_generic_plan"):
            _assert_uses(_prepared_plan(engine, stmt, params, mode), *indexes)


def test_reap_uses_the_expiry_and_group_indexes(loaded: tuple[sa.Engine, str, str]) -> None:
    """The reaper finds expired leases by the expiry index and closed groups' work per group."""
    engine, _, small = loaded
    expired = queries.retry_or_fail_expired(5000, base_ms=1000, max_ms=2000)
    _assert_uses(
        _plan(engine, _logged(expired, Source(State.IN_PROGRESS, None, "c"))),
        "ix_lease_items_in_progress",
    )
    closed = _plan(engine, queries.closed_groups_with_work())
    assert "ix_lease_items_unfinished_updated" in closed, closed
    for state in (State.QUEUED, State.RETRYABLE):
        move = queries.abandon(state, "cancelled", 5000)
        plan = _plan(engine, _logged(move, Source(state, None, "c")), p_group_id=small)
        # A per-group index bounds the walk to this group's items; the retryable partial index
        # (only retryable rows, of any group) is as good while few items back off.
        _assert_uses(
            plan,
            "ix_lease_items_group_state_seq",
            "ix_lease_items_unfinished_updated",
            "ix_lease_items_retryable_due",
        )


def test_summary_reads_do_not_scan_items(loaded: tuple[sa.Engine, str, str]) -> None:
    """A group summary touches the counters and one index probe, not the group's items."""
    engine, big, _ = loaded
    _assert_uses(
        _plan(engine, group_queries.oldest_unfinished(big)), "ix_lease_items_unfinished_updated"
    )
    assert "lease_items" not in _plan(engine, group_queries.counter_totals(big))
