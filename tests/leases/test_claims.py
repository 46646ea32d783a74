"""Claim (transition A): exclusive ownership under concurrency, eligibility and fairness."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter

import sqlalchemy as sa

from leases import LeaseManager, State, make_engine
from tests.leases.conftest import (
    ManagerFactory,
    duplicate_claims,
    expire_deadline,
    expire_leases,
    make_due,
    new_group,
)

THREADS = 8
PROCESSES = 3


def _drain(manager: LeaseManager, worker: str, claimed: list[tuple[str, int, str]]) -> None:
    while batch := manager.claim(worker, 3):
        for claim in batch:
            claimed.append((claim.item_id, claim.attempt, claim.lease_token))
            manager.complete(claim)


def test_threads_never_share_an_attempt(manager: LeaseManager, engine: sa.Engine) -> None:
    """Eight threads draining one group claim every item exactly once, each attempt once."""
    group_id, ids = new_group(manager, 300)
    results: list[list[tuple[str, int, str]]] = [[] for _ in range(THREADS)]
    threads = [
        threading.Thread(target=_drain, args=(manager, f"w{i}", results[i])) for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [c for result in results for c in result]
    assert sorted(ids) == sorted(item for item, _, _ in claimed)
    assert duplicate_claims(engine) == []
    assert manager.group(group_id).counts[State.SUCCEEDED] == 300
    assert manager.recount(group_id) == manager.counted(group_id)


def _drain_in_process(url: str, worker: str, out: multiprocessing.Queue[list[str]]) -> None:
    engine = make_engine(url)
    claimed: list[tuple[str, int, str]] = []
    _drain(LeaseManager(engine), worker, claimed)
    out.put([item for item, _, _ in claimed])
    engine.dispose()


def test_processes_never_share_an_attempt(
    manager: LeaseManager, engine: sa.Engine, database_url: str
) -> None:
    """Three processes plus this one draining a group claim every item exactly once."""
    group_id, ids = new_group(manager, 300)
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[list[str]] = context.Queue()
    procs = [
        context.Process(target=_drain_in_process, args=(database_url, f"p{i}", out))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    mine: list[tuple[str, int, str]] = []
    _drain(manager, "parent", mine)
    claimed = [item for item, _, _ in mine]
    for _ in procs:
        claimed.extend(out.get(timeout=120))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(ids) == sorted(claimed)
    assert duplicate_claims(engine) == []
    assert manager.recount(group_id) == manager.counted(group_id)


def test_claim_sets_lease_attempt_and_payload(manager: LeaseManager) -> None:
    """A claim carries attempt 1, a fresh token, a future expiry and the item's payload."""
    group_id, ids = new_group(manager, 2)
    first, second = manager.claim("w", 2)
    assert {first.item_id, second.item_id} == set(ids)
    assert first.attempt == 1
    assert first.lease_token != second.lease_token
    assert first.correlation_id != second.correlation_id
    assert first.group_id == group_id
    assert first.payload["ref"].startswith("ref-")
    assert first.lease_expires_at > manager.group(group_id).created_at
    assert first.lease_expires_at.tzinfo is not None
    assert manager.claim("w", 5) == []


def test_no_claim_from_cancelled_or_expired_group(manager: LeaseManager, engine: sa.Engine) -> None:
    """Groups past their deadline or with cancel requested give out no work."""
    expired, _ = new_group(manager, 3)
    cancelled, _ = new_group(manager, 3)
    _, open_ids = new_group(manager, 2)
    expire_deadline(engine, expired)
    manager.cancel(cancelled)
    claimed = manager.claim("w", 10)
    assert sorted(open_ids) == sorted(c.item_id for c in claimed)


def test_retryable_claimed_only_when_due(make_manager: ManagerFactory, engine: sa.Engine) -> None:
    """A retryable item waits out its backoff, then is claimed again with the next attempt."""
    manager = make_manager(retry_backoff_seconds=3600.0, retry_backoff_max_seconds=3600.0)
    _, ids = new_group(manager, 1)
    (claim,) = manager.claim("w", 1)
    assert manager.retry_later(claim, "source_unavailable") == (State.RETRYABLE)
    assert manager.claim("w", 1) == []
    make_due(engine)
    (again,) = manager.claim("w", 1)
    assert (again.item_id, again.attempt) == (ids[0], 2)


def test_group_filter(manager: LeaseManager) -> None:
    """With group_ids, only those groups' items are claimed."""
    _, _ = new_group(manager, 5)
    wanted, wanted_ids = new_group(manager, 2)
    claimed = manager.claim("w", 10, group_ids=[wanted])
    assert sorted(wanted_ids) == sorted(c.item_id for c in claimed)


def test_small_group_not_starved_behind_big_one(manager: LeaseManager) -> None:
    """A small group created while a big one is half done is served within the next claims."""
    big, _ = new_group(manager, 400)
    for claim in manager.claim("w", 150):
        manager.complete(claim)
    small, small_ids = new_group(manager, 5)
    next_claims = manager.claim("w", 10)
    by_group = Counter(c.group_id for c in next_claims)
    assert by_group[small] == 5
    assert by_group[big] == 5
    assert set(small_ids) <= {c.item_id for c in next_claims}


def test_reclaimed_after_expiry_gets_next_attempt(manager: LeaseManager, engine: sa.Engine) -> None:
    """An expired, reaped lease comes back as attempt 2 under a new token."""
    _, ids = new_group(manager, 1)
    (first,) = manager.claim("a", 1)
    expire_leases(engine)
    assert manager.reap().retried == 1
    make_due(engine)
    (second,) = manager.claim("b", 1)
    assert (second.item_id, second.attempt) == (ids[0], 2)
    assert second.lease_token != first.lease_token


def test_no_claim_in_a_group_whose_cancel_flag_is_set(
    manager: LeaseManager, engine: sa.Engine
) -> None:
    """Between `cancel` setting the flag and abandoning the queued items (two transactions), a
    claim must not take any of them: the claim itself refuses cancelled groups."""
    cancelled, _ = new_group(manager, 2)
    _, open_ids = new_group(manager, 1)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE lease_groups SET cancel_requested = :t WHERE id = :g"),
            {"t": True, "g": cancelled},
        )
    claims = manager.claim("w", 5)
    assert open_ids == [c.item_id for c in claims]
    assert manager.group(cancelled).counts[State.QUEUED] == 2
