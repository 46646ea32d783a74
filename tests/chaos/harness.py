"""The chaos harness: real worker processes, PostgreSQL and S3 behind fault proxies, faults.

`run(config)` builds everything on loopback — a private PostgreSQL cluster, a bucket on the live
Ceph RGW, a `FaultProxy` in front of each — uploads generated sources (clean JPEGs and the
hostile corpus), submits four batches through the real CLI (main, hostile, to-be-cancelled,
short deadline), starts `config.workers` `batchcrop worker` processes that reach PostgreSQL and
S3 only through the proxies, and injects faults as the main batch progresses: SIGKILLs (the
worker is restarted), SIGSTOP/SIGCONT pauses longer than the lease, `pg_ctl restart -m fast`,
dropped PostgreSQL connections, storage errors and resets on a fraction of S3 requests, short
storage outages, a cancel; and, when configured, PostgreSQL stopped at the moment a worker
commits an item (`pg_commit_cuts`) and store outages longer than every retry
(`long_storage_outages`), after each of which no item claimed before its end may stay
`in_progress` past `stranded_bound_seconds`, and no item may end failed by an outage. Every wait
is bounded; the run stops by itself. Then it checks docs/design.md §8
(`tests.chaos.invariants`) and returns a `Report`.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from batchcrop.app import App, build
from batchcrop.settings import Settings
from leases import DatabaseUnavailable, State
from leases.manager import RETRY_BACKOFF_SECONDS
from leases.schema import items as items_table
from leases.sqlfuncs import db_now_ms
from storage import LocalStore, ObjectStore, S3Store
from tests.chaos import corpus, invariants
from tests.chaos.backends import (
    MAX_SOURCE_BYTES,
    VANISHING_SOURCES,
    ApiServer,
    ChaosConfig,
    Services,
    config_root_store,
    env_for,
    start_services,
    submit_batches,
    upload_sources,
)
from tests.chaos.fleet import Fleet
from tests.chaos.poller import Poller
from tests.chaos.recovery import Kill, Recovery, recoveries
from tests.receiver import Receiver, receiving
from tests.services.proxy import FAULT_KINDS, FaultProxy

POLL_SECONDS = 0.5
# A sample of overdue leases is taken only this long after the last fault that can stop every
# reaper at once (a PostgreSQL restart or dropped connections): reapers must reconnect first.
OUTAGE_SETTLE_SECONDS = 5.0
# Slack on "no item in_progress past its lease + one reaper interval" for a loaded 2-core box.
OVERDUE_SLACK_SECONDS = 3.0
TERMINAL = ("succeeded", "failed", "abandoned")
# A run in which no item reaches a terminal state for this long is stuck: stop and audit it.
STALL_SECONDS = 120.0
# What a worker's success sends to PostgreSQL, as it crosses the proxy: the preview row's key (a
# bound value: psycopg sends prepared statements without their text), then the COMMIT.
COMMIT_MARKER = b"previews/"
COMMIT_THEN = b"COMMIT"
# Faults injected one at a time, each after the previous one's end.
SERIAL_OUTAGES = frozenset({"pg_commit_cut", "long_storage_outage"})
# Error categories of an item failed by an outage (directly, or its attempts used up by one).
OUTAGE_FAILURES = frozenset({"attempts_exhausted", "storage_unavailable", "source_unavailable"})
STALL_WINDOW_SECONDS = 0.5
# The callback receiver answers 503 to its first requests, then times out once (the deliverer
# waits 10 s), then accepts everything; once every batch is terminal, the fleet gets this long
# to deliver every callback before it is stopped.
RECEIVER_SCRIPT: tuple[int | str, ...] = ("fail", "fail", "fail", "hang")
RECEIVER_HANG_SECONDS = 12.0
CALLBACKS_WAIT_SECONDS = 60.0
# Time-to-recovery after a SIGKILL (tests/chaos/recovery.py) is held to its bound only for kills
# with no database fault (restart, dropped connections, stall) from this long before the kill to
# the end of the bound: an outage stops every reaper and is measured by its own invariants.
RECOVERY_FAULT_MARGIN_SECONDS = 10.0
# Slack on the recovery bounds for a loaded 2-core machine (as tests/worker/test_recovery.py).
RECOVERY_SLACK_SECONDS = 4.0
# A slot's idle sleep before it looks for due work again, and one item's processing.
RECOVERY_CLAIM_SLACK_SECONDS = 2.0


@dataclass
class Report:
    """What happened: faults by kind, outcomes, violations (must be empty), timings."""

    items: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    audit: invariants.Audit = field(default_factory=invariants.Audit)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    overdue_samples: int = 0
    wall_seconds: float = 0.0
    work_seconds: float = 0.0
    storage_requests: int = 0
    notes: list[str] = field(default_factory=list)
    api_answers: dict[int, int] = field(default_factory=dict)
    recoveries: list[Recovery] = field(default_factory=list)
    """Every item a SIGKILLed worker held, with its time to release and to the next claim."""
    recoveries_bounded: int = 0
    """How many of them were held to the bounds (no database fault near their kill)."""
    release_bound: float = 0.0
    reclaim_bound: float = 0.0
    outages: list[tuple[str, float]] = field(default_factory=list)
    """Each database or long store outage: its kind and how long it lasted (seconds)."""
    stranded: int = 0
    """Items found in_progress `stranded_bound_seconds` after an outage they were claimed
    before had ended."""
    stranded_checks: list[str] = field(default_factory=list)
    """One violation per outage that left items stranded (added to the audit at its end)."""
    failed_by_outage: int = 0
    """Items of the main batch that ended failed with an outage's category."""

    @property
    def violations(self) -> list[str]:
        """Every invariant violation found."""
        return self.audit.violations

    @property
    def throughput(self) -> float:
        """Items per second of the working phase."""
        return self.items / self.work_seconds if self.work_seconds else 0.0


def _schedule(config: ChaosConfig, rng: random.Random) -> list[tuple[float, str]]:
    """Faults keyed by the main batch's progress (fraction of terminal items)."""

    def spread(n: int, low: float, high: float) -> list[float]:
        return [low + (high - low) * (k + rng.random()) / n for k in range(n)] if n else []

    plan = [(f, "sigkill") for f in spread(config.kills, 0.02, 0.9)]
    plan += [(f, "sigstop") for f in spread(config.pauses, 0.1, 0.85)]
    plan += [(f, "pg_restart") for f in spread(config.pg_restarts, 0.25, 0.75)]
    plan += [(f, "pg_drop") for f in spread(config.pg_drops, 0.15, 0.85)]
    plan += [(f, "storage_outage") for f in spread(config.storage_outages, 0.1, 0.8)]
    plan += [(f, "pg_stall") for f in spread(config.pg_stalls, 0.2, 0.8)]
    plan += [(f, "s3_stall") for f in spread(config.s3_stalls, 0.3, 0.6)]
    plan += [(f, "pg_commit_cut") for f in spread(config.pg_commit_cuts, 0.1, 0.7)]
    plan += [(f, "long_storage_outage") for f in spread(config.long_storage_outages, 0.2, 0.6)]
    return sorted(plan)


def _overdue(app: App, allowed_ms: int) -> int:
    """Items `in_progress` whose lease expired more than `allowed_ms` ago (database clock)."""
    stmt = sa.select(sa.func.count()).where(
        items_table.c.state == "in_progress",
        items_table.c.lease_expires_at < db_now_ms() - allowed_ms,
    )
    with app.leases.reading() as conn:
        return int(conn.execute(stmt).scalar_one())


def _done(status: dict[str, Any]) -> float:
    """The fraction of a batch's items that are terminal."""
    return float(sum(status["counts"][s] for s in TERMINAL) / max(1, status["total"]))


class Run:
    """One chaos run; `execute()` returns the report."""

    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.report = Report()
        self.last_outage = 0.0
        self.cancel_after_end = False
        self.database_faults: list[datetime] = []
        self.services: Services | None = None
        # Outages that ended: (kind, when it ended in UTC, monotonic time to check at).
        self._ended: list[tuple[str, datetime, float]] = []
        self._ended_lock = threading.Lock()
        self._outage_under_way = threading.Event()

    def execute(self) -> Report:
        """Set up, run with faults until every batch is terminal (or the timeout), audit."""
        config = self.config
        started = time.monotonic()
        shutil.rmtree(config.root, ignore_errors=True)
        config.root.mkdir(parents=True)
        services = start_services(config)
        self.services = services
        try:
            with receiving(RECEIVER_SCRIPT, RECEIVER_HANG_SECONDS) as receiver:
                return self._execute(services, started, receiver)
        finally:
            services.stop()

    def _execute(self, services: Services, started: float, receiver: Receiver) -> Report:
        config = self.config
        expected = upload_sources(config, services)
        store_url = (
            f"file://{config_root_store(config)}"
            if config.store == "local"
            else f"s3://{services.bucket}/out"
        )
        direct = env_for(services, services.cluster.url, services.endpoint.url, store_url)
        ids = submit_batches(config, services, direct, receiver.url)
        for name in VANISHING_SOURCES:
            services.client.delete_object(Bucket=services.bucket, Key=f"src/hostile/{name}")
        proxied_db = f"postgresql+psycopg://postgres@127.0.0.1:{services.pg_proxy.port}/postgres"
        env = env_for(services, proxied_db, services.s3_proxy.url, store_url)
        # Every process (workers and serve) uses the same worker timeout, as a fleet must.
        env["BATCHCROP_WORKER_TIMEOUT_SECONDS"] = str(config.worker_timeout_seconds)
        app = build(Settings(database_url=services.cluster.url))
        fleet = Fleet(
            config.workers,
            [
                "--concurrency", str(config.concurrency),
                "--lease-seconds", str(config.lease_seconds),
                "--reaper-interval-seconds", str(config.reaper_interval_seconds),
                "--max-attempt-seconds", str(config.max_attempt_seconds),
                "--shutdown-grace-seconds", "5",
                "--max-source-bytes", str(MAX_SOURCE_BYTES),
                "--decode-memory-mib", str(corpus.HOSTILE_DECODE_MEMORY_MIB),
            ],
            env,
            config.root / "logs",
            self.rng,
        )  # fmt: skip
        self._storage_faults()
        work_started = time.monotonic()
        fleet.start()
        api = ApiServer(env, config.root / "logs" / "serve.log").start()
        poller = Poller(api.url, list(ids.values()))
        poller.start()
        try:
            self._chaos(app, services, fleet, ids)
            self._await_callbacks(fleet, receiver, len(ids))
        finally:
            poller.stop()
            api.stop()
            codes = fleet.stop()
            self.report.work_seconds = time.monotonic() - work_started
            services.s3_proxy.configure()
        self.report.notes += [f"unexpected worker exit: {e}" for e in fleet.unexpected_exits]
        self.report.notes += [f"traceback in {name}" for name in fleet.tracebacks()]
        self.report.notes.append(f"final worker exit codes: {codes}")
        self._audit(app, services, ids, expected)
        self._recovery(app, ids, fleet.kills)
        invariants.check_callbacks(self.report.audit, app, ids.values(), receiver)
        self.report.api_answers = dict(poller.answers)
        for violation in poller.violations:
            self.report.audit.violate(f"API: {violation}")
        app.close()
        self.report.wall_seconds = time.monotonic() - started
        return self.report

    def _chaos(self, app: App, services: Services, fleet: Fleet, ids: dict[str, str]) -> None:
        config = self.config
        plan = _schedule(config, self.rng)
        deadline = time.monotonic() + config.timeout_seconds
        allowed_ms = round((config.reaper_interval_seconds * 1.2 + OVERDUE_SLACK_SECONDS) * 1000)
        progress, moved_at = -1.0, time.monotonic()
        while time.monotonic() < deadline:
            self.report.faults["worker_restart"] += fleet.supervise()
            try:
                statuses = {name: app.batches.status(bid) for name, bid in ids.items()}
                quiet = time.monotonic() - self.last_outage > OUTAGE_SETTLE_SECONDS
                if quiet and _overdue(app, allowed_ms):
                    self.report.overdue_samples += 1
                self._check_stranded(app)
            except DatabaseUnavailable:
                time.sleep(POLL_SECONDS)
                continue
            if all(s["state"] in TERMINAL for s in statuses.values()):
                self._finish_outages(app, deadline)
                return
            total_done = sum(_done(s) for s in statuses.values())
            if total_done != progress:
                progress, moved_at = total_done, time.monotonic()
            elif time.monotonic() - moved_at > STALL_SECONDS:
                self.report.notes.append(f"no progress for {STALL_SECONDS:.0f} s: stopped")
                return
            if not self.report.faults["cancel"] and _done(statuses["cancel"]) >= 0.1:
                self._inject("cancel", app, services, fleet, ids)  # part-way through, not after
            done = _done(statuses["main"])
            while plan and plan[0][0] <= done:
                if plan[0][1] in SERIAL_OUTAGES and self._outage_under_way.is_set():
                    break  # one long outage at a time: each is checked on its own
                self._inject(plan.pop(0)[1], app, services, fleet, ids)
            time.sleep(POLL_SECONDS)
        self.report.notes.append(f"timed out after {config.timeout_seconds:.0f} s")

    def _await_callbacks(self, fleet: Fleet, receiver: Receiver, batches: int) -> None:
        """Give the fleet (still running, faults over) time to deliver every callback."""
        deadline = time.monotonic() + CALLBACKS_WAIT_SECONDS
        while time.monotonic() < deadline and len(receiver.processed) < batches:
            self.report.faults["worker_restart"] += fleet.supervise()
            time.sleep(POLL_SECONDS)
        if len(receiver.processed) < batches:
            self.report.notes.append(
                f"{len(receiver.processed)} of {batches} callbacks processed after "
                f"{CALLBACKS_WAIT_SECONDS:.0f} s"
            )

    def _inject(
        self, kind: str, app: App, services: Services, fleet: Fleet, ids: dict[str, str]
    ) -> None:
        config = self.config
        pause = config.lease_seconds + config.reaper_interval_seconds * 2 + 1.0
        injected = True
        if kind == "sigkill":
            injected = fleet.kill_random() is not None
            self.report.faults["worker_restart"] += fleet.supervise()
        elif kind == "sigstop":
            injected = fleet.pause_random(pause) is not None
        elif kind == "pg_restart":
            self.database_faults.append(datetime.now(UTC))
            services.cluster.restart()
            self.last_outage = time.monotonic()
        elif kind == "pg_drop":
            self.database_faults.append(datetime.now(UTC))
            services.pg_proxy.reset_all()
            self.last_outage = time.monotonic()
        elif kind == "storage_outage":
            services.s3_proxy.outage(config.storage_outage_seconds)
        elif kind == "pg_commit_cut":
            self._cut_at_commit(services)
            injected = False  # counted when the cut fires
        elif kind == "long_storage_outage":
            injected = self._long_storage_outage(services)
        elif kind == "pg_stall":
            self.database_faults.append(datetime.now(UTC))
            self._stall(services.pg_proxy, config.lease_seconds * 1.5)
            self.last_outage = time.monotonic() + config.lease_seconds * 1.5
        elif kind == "s3_stall":
            self._stall(services.s3_proxy, config.max_attempt_seconds + config.lease_seconds + 2)
        elif kind == "cancel":
            after = app.batches.cancel(ids["cancel"])
            if after["state"] in TERMINAL and not after["counts"]["abandoned"]:
                # Its last items ended between the poll that saw a tenth done and the cancel
                # (a slow poll on a busy machine): there was nothing left to cancel.
                self.cancel_after_end = True
                self.report.notes.append("the cancel came after its batch had ended")
        if injected:
            self.report.faults[kind] += 1

    def _cut_at_commit(self, services: Services) -> None:
        """Arm the PostgreSQL proxy to cut the next connection that commits an item, and the
        cluster to go down then (restarted, or stopped for a while). Half of the cuts let the
        COMMIT through and lose its answer."""
        self._outage_under_way.set()
        cuts = self.config.pg_commit_cut_seconds
        seconds = cuts[self.report.faults["pg_commit_cut"] % len(cuts)]

        def down() -> None:
            self.report.faults["pg_commit_cut"] += 1
            self.database_faults.append(datetime.now(UTC))
            self.last_outage = time.monotonic() + seconds + OUTAGE_SETTLE_SECONDS
            lasted = services.cluster.down_for(seconds) if seconds else services.cluster.restart()
            self._outage_ended(f"pg_commit_cut {seconds:g} s", lasted)

        services.pg_proxy.cut_at(COMMIT_MARKER, COMMIT_THEN, down, deliver=self.rng.random() < 0.5)

    def _long_storage_outage(self, services: Services) -> bool:
        """The S3 proxy refuses everything for `long_storage_outage_seconds`."""
        if self._outage_under_way.is_set():
            return False
        self._outage_under_way.set()
        seconds = self.config.long_storage_outage_seconds
        services.s3_proxy.outage(seconds)

        def ended() -> None:
            self._outage_ended(f"s3_outage {seconds:g} s", seconds)

        threading.Timer(seconds, ended).start()
        return True

    def _outage_ended(self, kind: str, lasted: float) -> None:
        self.report.outages.append((kind, round(lasted, 2)))
        with self._ended_lock:
            check_at = time.monotonic() + self.config.stranded_bound_seconds
            self._ended.append((kind, datetime.now(UTC), check_at))
        self._outage_under_way.clear()

    def _check_stranded(self, app: App) -> None:
        """For each outage that ended `stranded_bound_seconds` ago: no item claimed before its
        end is still in_progress (a violation per outage, counting the items)."""
        now = time.monotonic()
        with self._ended_lock:
            due = [e for e in self._ended if e[2] <= now]
            self._ended = [e for e in self._ended if e[2] > now]
        for kind, ended_at, _ in due:
            ended_ms = round(ended_at.timestamp() * 1000)
            stmt = sa.select(sa.func.count()).where(
                items_table.c.state == "in_progress",
                items_table.c.attempt_started_at < ended_ms,
            )
            with app.leases.reading() as conn:
                stranded = int(conn.execute(stmt).scalar_one())
            if stranded:
                self.report.stranded += stranded
                self.report.stranded_checks.append(
                    f"{stranded} items claimed before the end of {kind} still in_progress "
                    f"{self.config.stranded_bound_seconds:g} s after it ended"
                )

    def _finish_outages(self, app: App, deadline: float) -> None:
        """Every batch is terminal: wait for an outage still under way and its checks (a cut
        armed after the last commit never fires: it is dropped)."""
        assert self.services is not None, "services start before faults"
        if self.services.pg_proxy.disarm():
            self.report.notes.append("a commit cut armed after the last commit was dropped")
            self._outage_under_way.clear()
        while time.monotonic() < deadline and (self._outage_under_way.is_set() or self._ended):
            if self._ended and not self._outage_under_way.is_set():
                with self._ended_lock:
                    self._ended = [(k, at, time.monotonic()) for k, at, _ in self._ended]
            with contextlib.suppress(DatabaseUnavailable):
                self._check_stranded(app)
            time.sleep(POLL_SECONDS)

    def _stall(self, proxy: FaultProxy, seconds: float) -> None:
        """Hold every request arriving in the next STALL_WINDOW_SECONDS for `seconds`."""
        proxy.configure(delay_fraction=1.0, delay_seconds=seconds)
        time.sleep(STALL_WINDOW_SECONDS)
        if self.services is not None and proxy is self.services.s3_proxy:
            self._storage_faults()
        else:
            proxy.configure()

    def _storage_faults(self) -> None:
        """The background S3 fault plan of the whole run."""
        config = self.config
        assert self.services is not None, "services start before faults"
        self.services.s3_proxy.configure(
            fail_fraction=config.storage_fail_fraction,
            delay_fraction=config.storage_delay_fraction,
            delay_seconds=config.storage_delay_seconds,
        )

    def _audit(
        self, app: App, services: Services, ids: dict[str, str], expected: dict[str, str]
    ) -> None:
        report = self.report
        store: ObjectStore = (
            LocalStore(config_root_store(self.config))
            if self.config.store == "local"
            else S3Store(services.bucket, "out", client=services.client)
        )
        report.audit = invariants.check(app, store, ids.values())
        report.items = sum(app.leases.group(bid).total for bid in ids.values())
        report.batches = {name: app.batches.status(bid) for name, bid in ids.items()}
        counts = services.s3_proxy.counts()
        report.storage_requests = counts.get("requests", 0)
        for kind in (*FAULT_KINDS, "delay", "refused"):
            report.faults[f"s3_{kind}"] += counts.get(kind, 0)
        report.faults["pg_connections_reset"] += services.pg_proxy.counts().get("reset_all", 0)
        if report.overdue_samples:
            report.audit.violate(
                f"{report.overdue_samples} samples saw items in_progress past lease + reaper"
            )
        main = invariants.all_items(app, ids["main"])
        report.failed_by_outage = sum(
            1
            for item in main
            if item.state is State.FAILED and item.error_category in OUTAGE_FAILURES
        )
        if report.failed_by_outage:
            report.audit.violate(f"{report.failed_by_outage} main items failed by an outage")
        for violation in report.stranded_checks:
            report.audit.violate(violation)
        self._expect(app, ids, expected)

    def _recovery(self, app: App, ids: dict[str, str], kills: list[tuple[int, datetime]]) -> None:
        """Time-to-recovery of each SIGKILLed worker's items; a violation past the bounds.

        Released: the lease (renewed every lease/3) runs out within `lease_seconds`, the worker
        is absent after `worker_timeout_seconds` and released by the next refresh (timeout/6)
        or reaper pass (jittered, at most 1.2 intervals): the first of the two, plus slack.
        Claimed again (when released to `retryable`): after the first retry backoff and a
        slot's idle sleep. Kills near a database fault are reported but not bounded."""
        config, report = self.config, self.report
        reaper = config.reaper_interval_seconds * 1.2
        timeout = config.worker_timeout_seconds
        report.release_bound = (
            min(config.lease_seconds, timeout + timeout / 6) + reaper + RECOVERY_SLACK_SECONDS
        )
        report.reclaim_bound = (
            report.release_bound + RETRY_BACKOFF_SECONDS + RECOVERY_CLAIM_SLACK_SECONDS
        )
        events = [e for bid in ids.values() for e in invariants.all_events(app, bid)]
        report.recoveries = recoveries([Kill(pid, at) for pid, at in kills], events)
        margin = timedelta(seconds=RECOVERY_FAULT_MARGIN_SECONDS)
        window = timedelta(seconds=report.reclaim_bound)
        kill_at = dict(kills)
        for recovery in report.recoveries:
            at = kill_at[recovery.pid]
            if any(at - margin <= fault <= at + window for fault in self.database_faults):
                continue
            report.recoveries_bounded += 1
            where = f"item {recovery.item_id} of SIGKILLed pid {recovery.pid}"
            if recovery.released is None or recovery.released > report.release_bound:
                report.audit.violate(
                    f"{where}: released after {recovery.released} s, "
                    f"bound {report.release_bound:.1f} s"
                )
                continue
            if recovery.released_to != State.RETRYABLE:
                continue  # abandoned (cancelled, past its deadline) or failed: no next claim
            if recovery.reclaimed is None or recovery.reclaimed > report.reclaim_bound:
                report.audit.violate(
                    f"{where}: claimed again after {recovery.reclaimed} s, "
                    f"bound {report.reclaim_bound:.1f} s"
                )

    def _expect(self, app: App, ids: dict[str, str], expected: dict[str, str]) -> None:
        """The batches whose outcome is known: hostile items, the cancelled and late batches."""
        audit = self.report.audit
        docs = invariants.all_items(app, ids["hostile"])
        for item in docs:
            name = str(item.payload["source"]).rsplit("/", 1)[1]
            got = f"{item.state.value}:{item.error_category or '-'}"
            want = expected.get(name, "succeeded:-")
            if got != want:
                audit.violate(f"hostile {name}: ended {got}, expected {want}")
        cancel = self.report.batches["cancel"]
        if self.cancel_after_end:
            pass  # not cancelled: nothing was left to cancel (noted)
        elif cancel["state"] != "abandoned" or set(cancel["failures"]) - {"cancelled"}:
            audit.violate(f"cancelled batch ended {cancel['state']} {cancel['failures']}")
        late = self.report.batches["deadline"]
        if late["state"] not in ("succeeded", "abandoned") or (
            set(late["failures"]) - {"deadline_exceeded"}
        ):
            audit.violate(f"late batch ended {late['state']} {late['failures']}")


def run(config: ChaosConfig) -> Report:
    """Run the harness once with `config`; see the module docstring."""
    return Run(config).execute()
