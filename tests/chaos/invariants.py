"""docs/design.md §8 checked after a chaos run, from the database rows and the store's objects.

`check(app, store, batches)` returns an `Audit`: a list of violations (each one sentence naming
the item or key) and the figures the report prints. It reads only: it never repairs anything.
The store is read directly, never through a fault proxy, so what it sees is what is really there.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from batchcrop.app import App
from batchcrop.worker.processing import PREVIEW_KEY_PREFIX
from batchcrop.worker.worker import OUTAGE_CATEGORIES
from leases import EventRow, ItemRow, State
from storage import ObjectStore
from tests.receiver import Receiver

PAGE_ROWS = 5000
STORE_READ_THREADS = 8
REAPER_REASONS = frozenset(
    {"lease_expired", "attempts_exhausted", "deadline_exceeded", "cancelled"}
)
TERMINAL_STATES = frozenset({State.SUCCEEDED, State.FAILED, State.ABANDONED})
# A move to retryable with one of these reasons is a put-off (E'): the attempt is taken back.
PUT_OFF_REASONS = frozenset(str(category) for category in OUTAGE_CATEGORIES)


RECLAIM_REASONS = frozenset({"lease_expired", "worker_lost", "not_in_flight"})
"""A lease taken from a holder that died or stopped working on it: expired and reaped, released
because its worker was no longer seen, or because no slot of its live worker worked on it."""


@dataclass
class Audit:
    """What the checks found: violations (must be empty) and counted figures."""

    violations: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    reclaims: int = 0
    retries: int = 0
    objects: int = 0
    orphans: int = 0
    manifest_rows: int = 0
    callbacks: int = 0
    callback_requests: int = 0
    callback_duplicates: int = 0

    def violate(self, text: str) -> None:
        """Record one violation."""
        self.violations.append(text)


def _paged(fetch: Callable[[int | None], list[Any]], key: Callable[[Any], int]) -> list[Any]:
    rows: list[Any] = []
    after: int | None = None
    while True:
        page = fetch(after)
        rows.extend(page)
        if len(page) < PAGE_ROWS:
            return rows
        after = key(page[-1])


def all_items(app: App, batch_id: str) -> list[ItemRow]:
    """Every item of a batch."""
    return _paged(
        lambda after: app.leases.items(batch_id, after_seq=after, limit=PAGE_ROWS),
        lambda row: row.seq,
    )


def all_events(app: App, batch_id: str) -> list[EventRow]:
    """Every event of a batch, oldest first."""
    return _paged(
        lambda after: app.leases.events(batch_id, after_id=after, limit=PAGE_ROWS),
        lambda row: row.id,
    )


def check_events(
    audit: Audit, events: Iterable[EventRow], items: list[ItemRow], max_attempts: int
) -> None:
    """Invariant 2 and the timeline: one success per item (between redos); every write out of
    `in_progress` is fenced; each item's events form one chain; attempts match claims and stay
    in budget.

    Every event leaving `in_progress` carries the token of the item's latest claim (the reaper's
    too: it logs the token it expired), and each claim is left exactly once. Each event starts
    in the state the previous one ended in, the first in `queued` (an item is created queued,
    with no event: ADR 0023). An item's attempt number is its claims minus its
    give-backs, releases and put-offs, each claim logs it, and it never exceeds the batch's
    `max_attempts` (no requeue happens in a run).
    """
    events = list(events)
    last_state, attempts, undecided = _replay(audit, events)
    for row in items:
        last = last_state.get(row.id, State.QUEUED)
        if row.state is not last:
            audit.violate(f"item {row.id}: {row.state}, its last event says {last}")
        kept = (
            {attempts[row.id], attempts[row.id] - 1} if row.id in undecided else {attempts[row.id]}
        )
        if row.attempt not in kept or row.attempt > max_attempts:
            audit.violate(
                f"item {row.id}: attempt {row.attempt}, {attempts[row.id]} claims kept, "
                f"budget {max_attempts}; events: {_chain(events, row.id)}"
            )


def _chain(events: list[EventRow], item_id: str) -> str:
    """One item's events in a line, for a violation to show what happened."""
    return "; ".join(
        f"{e.from_state}->{e.to_state} {e.reason} attempt {e.attempt}"
        for e in events
        if e.item_id == item_id
    )


def _check_fenced(audit: Audit, event: EventRow, token: str | None, left: set[str]) -> None:
    """An event leaving `in_progress` carries the latest claim's token, once per claim."""
    if event.lease_token != token:
        audit.violate(
            f"item {event.item_id}: event {event.id} ({event.to_state}) carries token "
            f"{event.lease_token}, the latest claim holds {token}"
        )
    if event.lease_token in left:
        audit.violate(f"item {event.item_id}: claim {event.lease_token} left twice")
    left.add(event.lease_token or "")


def _count_claim(
    audit: Audit, event: EventRow, attempts: Counter[str], undecided: set[str]
) -> None:
    """One claim counted: the attempt number it logs is the claims kept so far."""
    item = event.item_id
    if item in undecided and event.attempt == attempts[item]:
        attempts[item] -= 1  # the ending before this claim was a put-off
    undecided.discard(item)
    attempts[item] += 1
    if event.attempt != attempts[item]:
        audit.violate(
            f"item {item}: event {event.id} claims attempt {event.attempt}, "
            f"{attempts[item]} claims kept"
        )


def _replay(
    audit: Audit, events: Iterable[EventRow]
) -> tuple[dict[str, State], Counter[str], set[str]]:
    """Walk the log once: (each item's last state, its claims kept, the items whose last
    ending may have been a put-off or a counted retry), violations recorded."""
    latest_claim: dict[str, str | None] = {}
    last_state: dict[str, State] = {}
    left: set[str] = set()
    successes: Counter[str] = Counter()
    attempts: Counter[str] = Counter()
    # A put-off (E′) and a counted retry of a store error share their reason: a store that
    # answers its check counts the failure (docs/design.md §3). Both events log the attempt
    # they ended, so the next claim tells them apart: a put-off's claims the same number again.
    undecided: set[str] = set()
    for event in events:
        item = event.item_id
        previous = last_state.get(item, State.QUEUED)
        if event.from_state is not previous:
            audit.violate(
                f"item {item}: event {event.id} starts in {event.from_state}, "
                f"the previous one ended in {previous}"
            )
        last_state[item] = event.to_state
        if event.from_state is State.SUCCEEDED:
            successes[item] = 0  # a redo (a re-crop): the next success is its own
        if event.to_state is State.SUCCEEDED:
            successes[item] += 1
        if event.to_state is State.RETRYABLE:
            audit.retries += 1
        if event.from_state is State.IN_PROGRESS:
            _check_fenced(audit, event, latest_claim.get(item), left)
            audit.reclaims += event.reason in RECLAIM_REASONS
            if event.to_state is State.QUEUED:
                attempts[item] -= 1  # a give-back or a release takes its claim back
            elif event.to_state is State.RETRYABLE and event.reason in PUT_OFF_REASONS:
                undecided.add(item)
        if event.to_state is State.IN_PROGRESS:
            latest_claim[item] = event.lease_token
            _count_claim(audit, event, attempts, undecided)
    for item_id, n in successes.items():
        if n > 1:
            audit.violate(f"item {item_id}: {n} transitions to succeeded")
    return last_state, attempts, undecided


def check_counts(audit: Audit, app: App, batch_id: str, items: list[ItemRow]) -> None:
    """Invariant 5: counters equal a GROUP BY, counts add up, the state follows section 4."""
    recount = app.leases.recount(batch_id)
    if app.leases.counted(batch_id) != recount:
        audit.violate(f"batch {batch_id}: counters {app.leases.counted(batch_id)} != {recount}")
    status = app.batches.status(batch_id)
    if sum(status["counts"].values()) != status["total"] or status["total"] != len(items):
        audit.violate(f"batch {batch_id}: counts {status['counts']} do not add up to {len(items)}")
    states = Counter(i.state for i in items)
    if states[State.SUCCEEDED] == len(items):
        expected = "succeeded"
    elif states[State.ABANDONED]:
        expected = "abandoned"
    else:
        expected = "failed"
    if any(s not in TERMINAL_STATES for s in states):
        audit.violate(f"batch {batch_id}: items not terminal: {dict(states)}")
    elif status["state"] != expected:
        audit.violate(f"batch {batch_id}: state {status['state']}, items say {expected}")


def check_manifest(
    audit: Audit, app: App, batch_id: str, items: list[ItemRow]
) -> list[dict[str, Any]]:
    """Invariant 4: a succeeded item has one manifest row per ratio and format; no other item has
    any."""
    spec = app.batches.batch(batch_id).spec
    wanted = {(str(r), name) for r in spec.ratios for name in spec.formats}
    rows = app.batches.manifest(batch_id)
    audit.manifest_rows += len(rows)
    by_item: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for row in rows:
        by_item[str(row["item_id"])].add((str(row["ratio"]), str(row["format"])))
    for item in items:
        have = by_item.get(item.id, set())
        if item.state is State.SUCCEEDED and have != wanted:
            audit.violate(f"item {item.id}: succeeded with manifest rows {sorted(have)}")
        if item.state is not State.SUCCEEDED and have:
            audit.violate(f"item {item.id}: {item.state} but has manifest rows")
    return rows


def _whole(store: ObjectStore, key: str) -> tuple[str, str | None, int]:
    """(sha256 of the bytes read, sha256 the object's metadata claims, size) of one object."""
    data = store.get(key)
    return hashlib.sha256(data).hexdigest(), store.head(key).sha256, len(data)


def _split_key(key: str) -> tuple[str, str] | None:
    """`derivatives/{source}/{rw}x{rh}-{variant}.jpg` ⇒ (source, variant)."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "derivatives" or "-" not in parts[2]:
        return None
    return parts[1], parts[2].rsplit("-", 1)[1].removesuffix(".jpg")


def check_store(
    audit: Audit,
    store: ObjectStore,
    manifests: dict[str, list[dict[str, Any]]],
    succeeded: set[str],
) -> None:
    """Invariant 3: manifest keys whole; listing shows whole objects only; no strays in a
    succeeded batch (objects another batch's manifest names are fine)."""
    named: dict[str, str] = {}
    for rows in manifests.values():
        for row in rows:
            if named.setdefault(row["key"], row["sha256"]) != row["sha256"]:
                audit.violate(f"key {row['key']}: two manifests name different sha256")
    listed = {info.key: info.size for info in store.list()}
    audit.objects = len(listed)
    with ThreadPoolExecutor(STORE_READ_THREADS) as pool:
        reads = dict(zip(listed, pool.map(lambda k: _whole(store, k), listed), strict=True))
    for key, sha in named.items():
        if key not in listed:
            audit.violate(f"key {key}: named by a manifest, missing from the store")
        elif reads[key][0] != sha:
            audit.violate(f"key {key}: stored bytes do not match the manifest's sha256")
    for key, (actual, claimed, size) in reads.items():
        if actual != claimed or size != listed[key]:
            audit.violate(f"key {key}: listed but not whole (sha256/size mismatch)")
    spaces = {
        _split_key(str(row["key"])) for batch in succeeded for row in manifests.get(batch, [])
    }
    for key in listed:
        # Source previews (docs/design.md §5) are named by preview records, not manifests: they
        # are checked whole above and are not orphans.
        if key in named or key.startswith(PREVIEW_KEY_PREFIX):
            continue
        audit.orphans += 1
        if _split_key(key) in spaces:
            audit.violate(f"key {key}: object no manifest names, in a succeeded batch's space")


def check(app: App, store: ObjectStore, batch_ids: Iterable[str]) -> Audit:
    """Every check of docs/design.md §8 over these batches (the whole store is listed)."""
    audit = Audit()
    manifests: dict[str, list[dict[str, Any]]] = {}
    succeeded: set[str] = set()
    for batch_id in batch_ids:
        items = all_items(app, batch_id)
        for item in items:
            if item.state not in TERMINAL_STATES:
                audit.violate(f"item {item.id}: left {item.state}")
            audit.outcomes[f"{item.state.value}:{item.error_category or '-'}"] += 1
        max_attempts = app.leases.group(batch_id).max_attempts
        check_events(audit, all_events(app, batch_id), items, max_attempts)
        check_counts(audit, app, batch_id, items)
        manifests[batch_id] = check_manifest(audit, app, batch_id, items)
        if items and all(i.state is State.SUCCEEDED for i in items):
            succeeded.add(batch_id)
    check_store(audit, store, manifests, succeeded)
    return audit


def check_callbacks(audit: Audit, app: App, batch_ids: Iterable[str], receiver: Receiver) -> None:
    """Invariant 10: every terminal batch's last notification was delivered (its delivery
    `succeeded`) and processed once by the deduplicating receiver, signed, with the batch's
    final state; no request was unsigned, and no notification arrived for another batch."""
    ids = list(batch_ids)
    for batch_id in ids:
        status = app.batches.status(batch_id)
        deliveries = status["deliveries"]
        if status["state"] not in {s.value for s in TERMINAL_STATES}:
            continue
        if not deliveries or deliveries[-1]["state"] != State.SUCCEEDED.value:
            audit.violate(f"batch {batch_id}: callback not delivered: {deliveries}")
            continue
        body = receiver.processed.get(deliveries[-1]["notification_id"])
        if body is None or body.get("id") != batch_id or body.get("state") != status["state"]:
            audit.violate(f"batch {batch_id}: the receiver holds {body and body.get('state')}")
        if len({d["notification_id"] for d in deliveries}) != 1:
            audit.violate(f"batch {batch_id}: {len(deliveries)} notifications, no requeue ran")
    unsigned = [r.key for r in receiver.requests if not r.signed]
    if unsigned:
        audit.violate(f"{len(unsigned)} callback requests failed the signature check")
    strangers = {str(b.get("id")) for b in receiver.processed.values()} - set(ids)
    if strangers:
        audit.violate(f"callbacks for batches not in the run: {sorted(strangers)}")
    audit.callbacks = len(receiver.processed)
    audit.callback_requests = len(receiver.requests)
    audit.callback_duplicates = receiver.duplicates
