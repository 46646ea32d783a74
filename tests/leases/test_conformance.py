"""One conformance suite for both drivers: every transition A to K, run on SQLite and on PostgreSQL,
leaves the same item row, the same event rows and the same counters (docs/design.md §3).

The dialects reach the database by different paths — PostgreSQL moves, logs and counts in one
statement (`leases.pgqueries`), SQLite moves and then records beside it (`leases.transitions`),
and their claims differ too — so each scenario's outcome is written once, here, and both
dialects must produce exactly it. After every scenario the counters must also equal a recount of
the item rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa

from leases import Claim, GroupCancelled, LeaseManager, NoSuchItem, NotRedoable, State, StopReason
from tests.leases.conftest import (
    ManagerFactory,
    age_attempts,
    expire_deadline,
    expire_leases,
    make_due,
    new_group,
)

# (item index, attempt, from, to, reason, has worker id, has lease token, own correlation id)
Event = tuple[int, int, str | None, str, str | None, bool, bool, bool]


@dataclass
class World:
    """One group and what a scenario did to it."""

    manager: LeaseManager
    engine: sa.Engine
    group_id: str
    ids: list[str]
    claims: list[Claim] = field(default_factory=list)

    def claim(self, n: int = 1) -> list[Claim]:
        claimed = self.manager.claim("w", n, group_ids=[self.group_id])
        self.claims.extend(claimed)
        return claimed


@dataclass(frozen=True)
class Scenario:
    """Steps on a fresh group of `items` items, and the rows they must leave."""

    items: int
    max_attempts: int
    steps: Callable[[World], None]
    events: list[Event]
    final: list[tuple[str, int, str | None]]
    failures: dict[str, int] = field(default_factory=dict)


CLAIMED: Event = (0, 1, "queued", "in_progress", None, True, True, False)


def _claim(w: World) -> None:
    w.claim()


def _heartbeat(w: World) -> None:
    (claim,) = w.claim()
    reply = w.manager.heartbeat(claim)
    assert reply.stop_reason is None
    assert reply.lease_expires_at >= claim.lease_expires_at


def _heartbeat_after_cancel(w: World) -> None:
    (claim,) = w.claim()
    w.manager.cancel(w.group_id)
    assert StopReason.CANCELLED is w.manager.heartbeat(claim).stop_reason
    assert StopReason.CANCELLED is w.manager.check(claim)


def _heartbeat_past_the_deadline(w: World) -> None:
    (claim,) = w.claim()
    expire_deadline(w.engine, w.group_id)
    assert StopReason.DEADLINE_EXCEEDED is w.manager.heartbeat(claim).stop_reason
    assert StopReason.DEADLINE_EXCEEDED is w.manager.check(claim)


def _heartbeat_of_an_over_long_attempt(w: World) -> None:
    (claim,) = w.claim()
    age_attempts(w.engine, w.manager.max_attempt_seconds)
    assert StopReason.MAX_ATTEMPT_SECONDS is w.manager.heartbeat(claim).stop_reason
    assert StopReason.MAX_ATTEMPT_SECONDS is w.manager.check(claim)


def _due_retryable_before_queued(w: World) -> None:
    (first,) = w.claim()
    w.manager.retry_later(first, "storage_unavailable")
    make_due(w.engine)
    (again,) = w.claim()
    assert first.item_id == again.item_id


def _cancel_a_held_item(w: World) -> None:
    (claim,) = w.claim()
    w.manager.cancel(w.group_id)
    assert StopReason.CANCELLED is w.manager.heartbeat(claim).stop_reason
    w.manager.abandon(claim, StopReason.CANCELLED)


def _requeue_chosen_items(w: World) -> None:
    for claim in w.claim(2):
        w.manager.fail(claim, "invalid_image")
    assert w.manager.requeue(w.group_id, item_ids=[w.ids[1]]) == 1


def _complete(w: World) -> None:
    (claim,) = w.claim()
    w.manager.complete(claim)


def _fail(w: World) -> None:
    (claim,) = w.claim()
    w.manager.fail(claim, "invalid_image")


def _retry(w: World) -> None:
    (claim,) = w.claim()
    assert State.RETRYABLE is w.manager.retry_later(claim, "storage_unavailable")


def _retry_then_claim_again(w: World) -> None:
    _retry(w)
    make_due(w.engine)
    w.claim()


def _retry_at_cap(w: World) -> None:
    (claim,) = w.claim()
    assert State.FAILED is w.manager.retry_later(claim, "storage_unavailable")


def _give_back(w: World) -> None:
    (claim,) = w.claim()
    w.manager.give_back(claim)


def _reap_expired(w: World) -> None:
    w.claim()
    expire_leases(w.engine)
    w.manager.reap()


def _reap_closed_group(w: World) -> None:
    w.claim()
    expire_leases(w.engine)
    expire_deadline(w.engine, w.group_id)
    w.manager.reap()


def _cancel(w: World) -> None:
    w.manager.cancel(w.group_id)


def _abandon(w: World) -> None:
    (claim,) = w.claim()
    w.manager.abandon(claim, "deadline_exceeded")


def _requeue(w: World) -> None:
    _fail(w)
    assert w.manager.requeue(w.group_id) == 1


def _redo(w: World, *, succeed: bool) -> None:
    (claim,) = w.claim()
    if succeed:
        w.manager.complete(claim)
    else:
        w.manager.fail(claim, "invalid_focus")
    with w.manager.transaction() as conn:
        w.manager.redo(
            w.group_id, claim.item_id, payload={"n": 2}, reason="recrop", open_seconds=60, conn=conn
        )
    item = w.manager.item(claim.item_id)
    assert item is not None
    assert dict(item.payload) == {"n": 2}
    (again,) = w.claim()
    assert (claim.item_id, 2) == (again.item_id, again.attempt)


SCENARIOS = {
    "K redo of a succeeded item": Scenario(
        1,
        1,
        lambda w: _redo(w, succeed=True),
        [
            CLAIMED,
            (0, 1, "in_progress", "succeeded", None, True, True, False),
            (0, 1, "succeeded", "queued", "recrop", False, False, True),
            (0, 2, "queued", "in_progress", None, True, True, False),
        ],
        [("in_progress", 2, None)],
    ),
    "K redo of a failed item": Scenario(
        1,
        1,
        lambda w: _redo(w, succeed=False),
        [
            CLAIMED,
            (0, 1, "in_progress", "failed", "invalid_focus", True, True, False),
            (0, 1, "failed", "queued", "recrop", False, False, True),
            (0, 2, "queued", "in_progress", None, True, True, False),
        ],
        [("in_progress", 2, None)],
    ),
    "A claim": Scenario(1, 3, _claim, [CLAIMED], [("in_progress", 1, None)]),
    "A claim of a due retryable item": Scenario(
        1,
        3,
        _retry_then_claim_again,
        [
            CLAIMED,
            (0, 1, "in_progress", "retryable", "storage_unavailable", True, True, False),
            (0, 2, "retryable", "in_progress", None, True, True, False),
        ],
        [("in_progress", 2, None)],
    ),
    "B heartbeat": Scenario(1, 3, _heartbeat, [CLAIMED], [("in_progress", 1, None)]),
    "B heartbeat told to stop": Scenario(
        2,
        3,
        _heartbeat_after_cancel,
        [
            CLAIMED,
            (1, 0, "queued", "abandoned", "cancelled", False, False, True),
        ],
        [("in_progress", 1, None), ("abandoned", 0, "cancelled")],
        {"cancelled": 1},
    ),
    "B heartbeat past the deadline": Scenario(
        1, 3, _heartbeat_past_the_deadline, [CLAIMED], [("in_progress", 1, None)]
    ),
    "B heartbeat of an over-long attempt": Scenario(
        1, 3, _heartbeat_of_an_over_long_attempt, [CLAIMED], [("in_progress", 1, None)]
    ),
    "A due retryable items before queued ones": Scenario(
        2,
        3,
        _due_retryable_before_queued,
        [
            CLAIMED,
            (0, 1, "in_progress", "retryable", "storage_unavailable", True, True, False),
            (0, 2, "retryable", "in_progress", None, True, True, False),
        ],
        [("in_progress", 2, None), ("queued", 0, None)],
    ),
    "H and I cancel with an item held": Scenario(
        2,
        3,
        _cancel_a_held_item,
        [
            CLAIMED,
            (1, 0, "queued", "abandoned", "cancelled", False, False, True),
            (0, 1, "in_progress", "abandoned", "cancelled", True, True, False),
        ],
        [("abandoned", 1, "cancelled"), ("abandoned", 0, "cancelled")],
        {"cancelled": 2},
    ),
    "J requeue of chosen items": Scenario(
        2,
        3,
        _requeue_chosen_items,
        [
            CLAIMED,
            (1, 1, "queued", "in_progress", None, True, True, False),
            (0, 1, "in_progress", "failed", "invalid_image", True, True, False),
            (1, 1, "in_progress", "failed", "invalid_image", True, True, False),
            (1, 1, "failed", "queued", None, False, False, True),
        ],
        [("failed", 1, "invalid_image"), ("queued", 1, None)],
        {"invalid_image": 1},
    ),
    "C complete": Scenario(
        1,
        3,
        _complete,
        [CLAIMED, (0, 1, "in_progress", "succeeded", None, True, True, False)],
        [("succeeded", 1, None)],
    ),
    "D fail": Scenario(
        1,
        3,
        _fail,
        [CLAIMED, (0, 1, "in_progress", "failed", "invalid_image", True, True, False)],
        [("failed", 1, "invalid_image")],
        {"invalid_image": 1},
    ),
    "E retry": Scenario(
        1,
        3,
        _retry,
        [
            CLAIMED,
            (0, 1, "in_progress", "retryable", "storage_unavailable", True, True, False),
        ],
        [("retryable", 1, "storage_unavailable")],
    ),
    "E retry at the attempts cap": Scenario(
        1,
        1,
        _retry_at_cap,
        [
            CLAIMED,
            (0, 1, "in_progress", "failed", "attempts_exhausted", True, True, False),
        ],
        [("failed", 1, "attempts_exhausted")],
        {"attempts_exhausted": 1},
    ),
    "F give back": Scenario(
        1,
        3,
        _give_back,
        [CLAIMED, (0, 1, "in_progress", "queued", "interrupted", True, True, False)],
        [("queued", 0, None)],
    ),
    "G reap an expired lease": Scenario(
        1,
        3,
        _reap_expired,
        [
            CLAIMED,
            (0, 1, "in_progress", "retryable", "lease_expired", True, True, True),
        ],
        [("retryable", 1, "lease_expired")],
    ),
    "G reap an expired lease at the cap": Scenario(
        1,
        1,
        _reap_expired,
        [
            CLAIMED,
            (0, 1, "in_progress", "failed", "attempts_exhausted", True, True, True),
        ],
        [("failed", 1, "attempts_exhausted")],
        {"attempts_exhausted": 1},
    ),
    "G and H reap a group past its deadline": Scenario(
        2,
        3,
        _reap_closed_group,
        [
            CLAIMED,
            (1, 0, "queued", "abandoned", "deadline_exceeded", False, False, True),
            (0, 1, "in_progress", "abandoned", "deadline_exceeded", True, True, True),
        ],
        [("abandoned", 1, "deadline_exceeded"), ("abandoned", 0, "deadline_exceeded")],
        {"deadline_exceeded": 2},
    ),
    "H cancel": Scenario(
        1,
        3,
        _cancel,
        [(0, 0, "queued", "abandoned", "cancelled", False, False, True)],
        [("abandoned", 0, "cancelled")],
        {"cancelled": 1},
    ),
    "I abandon": Scenario(
        1,
        3,
        _abandon,
        [
            CLAIMED,
            (0, 1, "in_progress", "abandoned", "deadline_exceeded", True, True, False),
        ],
        [("abandoned", 1, "deadline_exceeded")],
        {"deadline_exceeded": 1},
    ),
    "J requeue": Scenario(
        1,
        3,
        _requeue,
        [
            CLAIMED,
            (0, 1, "in_progress", "failed", "invalid_image", True, True, False),
            (0, 1, "failed", "queued", None, False, False, True),
        ],
        [("queued", 1, None)],
    ),
}


def _events(w: World) -> list[Event]:
    """The group's event log, oldest first, with ids reduced to facts both dialects share."""
    index = {item_id: n for n, item_id in enumerate(w.ids)}
    claimed = {(c.item_id, c.attempt): c.correlation_id for c in w.claims}
    rows = w.manager.events(w.group_id, limit=1000)
    return [
        (
            index[e.item_id],
            e.attempt,
            None if e.from_state is None else e.from_state.value,
            e.to_state.value,
            e.reason,
            e.worker_id is not None,
            e.lease_token is not None,
            e.correlation_id != claimed.get((e.item_id, e.attempt)),
        )
        for e in rows
    ]


def _recount(engine: sa.Engine, group_id: str) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT state, count(*) FROM lease_items WHERE group_id = :g GROUP BY state"),
            {"g": group_id},
        ).all()
    return {str(state): int(n) for state, n in rows}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_transition_leaves_the_same_rows_on_every_dialect(
    make_manager: ManagerFactory, engine: sa.Engine, name: str
) -> None:
    """Each transition's item rows, events and counters are exactly the ones written here."""
    scenario = SCENARIOS[name]
    manager = make_manager()
    group_id, ids = new_group(manager, scenario.items, max_attempts=scenario.max_attempts)
    world = World(manager, engine, group_id, ids)

    scenario.steps(world)

    finals = []
    for item_id in ids:
        item = manager.item(item_id)
        assert item is not None
        finals.append((item.state.value, item.attempt, item.error_category))
    assert scenario.final == finals
    assert scenario.events == _events(world)
    summary = manager.group(group_id)
    counted = {state.value: n for state, n in summary.counts.items() if n}
    assert _recount(engine, group_id) == counted
    assert scenario.failures == summary.failures


def test_claims_interleave_groups_in_the_same_order_on_every_dialect(
    manager: LeaseManager,
) -> None:
    """Queued items are claimed by position across groups: every group's first item before any
    group's second, the same on both dialects."""
    first, first_ids = new_group(manager, 3)
    second, second_ids = new_group(manager, 3)
    position = {item_id: n for ids in (first_ids, second_ids) for n, item_id in enumerate(ids)}
    order = [(c.group_id, position[c.item_id]) for _ in range(6) for c in manager.claim("w", 1)]
    assert [n for _, n in order] == [0, 0, 1, 1, 2, 2]
    for n in range(3):
        assert {first, second} == {group for group, at in order if at == n}


def test_redo_refuses_what_it_does_not_take(
    make_manager: ManagerFactory, engine: sa.Engine
) -> None:
    """K takes one succeeded or failed item of an open or expired group: a queued item is
    `NotRedoable` with its payload, a cancelled group `GroupCancelled`, another group's item
    `NoSuchItem`; a group past its deadline is given `open_seconds` from now."""
    manager = make_manager()
    group_id, ids = new_group(manager, 2, max_attempts=3)
    other_id, _ = new_group(manager, 1, max_attempts=3)
    with pytest.raises(NotRedoable) as refused, manager.transaction() as conn:
        manager.redo(group_id, ids[0], payload={}, reason="recrop", open_seconds=60, conn=conn)
    assert ("queued", dict(manager.item(ids[0]).payload)) == (  # type: ignore[union-attr]
        refused.value.state,
        refused.value.payload,
    )
    with pytest.raises(NoSuchItem), manager.transaction() as conn:
        manager.redo(other_id, ids[0], payload={}, reason="recrop", open_seconds=60, conn=conn)
    (claim,) = manager.claim("w", 1, group_ids=[group_id])
    manager.complete(claim)
    expire_deadline(engine, group_id)
    with manager.transaction() as conn:
        manager.redo(
            group_id, claim.item_id, payload={}, reason="recrop", open_seconds=600, conn=conn
        )
    summary = manager.group(group_id)
    assert summary.deadline_at > summary.updated_at
    manager.cancel(group_id)
    with pytest.raises(GroupCancelled), manager.transaction() as conn:
        manager.redo(
            group_id, claim.item_id, payload={}, reason="recrop", open_seconds=60, conn=conn
        )
