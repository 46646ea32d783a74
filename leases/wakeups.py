"""Wake-ups instead of polling on PostgreSQL (docs/design.md §3, wake-ups; ADR 0028).

Every move that makes work claimable (a sealed group, a requeue, a redo, a give-back, a retry,
a released or expired lease) also sends `NOTIFY leases_work` (`leases.pgqueries`), in its own
transaction where it has one, so a notification never announces work that was rolled back. A
process keeps ONE listening connection (`Wakeups`) and wakes its waiters (`Signal`) when a
notification arrives, or, for retryable work, when it is due (the payload says in how many
milliseconds). Waiters still poll, at a long fallback interval: a notification is a hint, lost
with a listening connection, and the work is always found by the next claim.

SQLite has no notifications: there `Wakeups.listening` is False and waiters poll as before.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from typing import Any

import sqlalchemy as sa

from leases import pgqueries
from leases.errors import LeaseError
from leases.executor import Executor

LISTEN_TICK_SECONDS = 1.0
"""How long the listener waits on its socket before looking at its stop flag and its timers
(no statement is sent: waiting costs the server nothing)."""
STOP_JOIN_SECONDS = 10.0
"""How long `stop()` waits for the listener to close its connection (a tick, or a connection
attempt under way, which the engine's connect timeout bounds)."""
RECONNECT_MIN_SECONDS = 0.5
RECONNECT_MAX_SECONDS = 30.0
DUE_MARGIN_SECONDS = 0.02
"""A retry is woken for this long after its due time, so the claim finds it due."""
DUE_MERGE_SECONDS = 0.1
"""Timers closer than this to one already set are merged into it."""
DUE_TIMERS_MAX = 1000

log = logging.getLogger("leases")


class Signal:
    """What one waiter (a slot, a deliverer) waits on: woken by notifications, by its owner
    (`wake`, on stop) or by its timeout. Thread-safe.

    A waiter takes a `mark()` BEFORE it looks for work and waits with it afterwards: a wake-up
    between the two is then not lost (the wait returns at once).
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0

    def mark(self) -> int:
        """The current generation, to pass to `wait`."""
        with self._condition:
            return self._generation

    def wake(self) -> None:
        """Wake every waiter now."""
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, mark: int, timeout_seconds: float) -> bool:
        """Wait until woken since `mark` or for `timeout_seconds`; True when woken."""
        with self._condition:
            return self._condition.wait_for(
                lambda: self._generation != mark, timeout=max(0.0, timeout_seconds)
            )


class Wakeups:
    """One process's listening connection, and the signals it wakes (on PostgreSQL with
    psycopg; elsewhere nothing listens and `listening` is False).

    `start()` runs the listener in a daemon thread until `stop()`. After (re)connecting, every
    signal is woken once: notifications sent while the connection was down are lost, so the
    waiters look for themselves.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._db = Executor(engine)
        self.listening = engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
        self._signals: list[Signal] = []
        self._lock = threading.Lock()
        self._due: list[float] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._connected = threading.Event()
        self._driver_error: type[Exception] = (
            engine.dialect.loaded_dbapi.Error if self.listening else OSError
        )
        self.received = 0
        """Notifications received (for tests and benchmarks)."""

    def signal(self) -> Signal:
        """A new signal this listener wakes."""
        signal = Signal()
        with self._lock:
            self._signals.append(signal)
        return signal

    def start(self) -> None:
        """Start listening (once; nothing where `listening` is False)."""
        if not self.listening or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="wakeups", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = STOP_JOIN_SECONDS) -> bool:
        """Stop listening and wait (up to `timeout_seconds`) for the thread to end, its
        connection closed: within `LISTEN_TICK_SECONDS` unless a connection attempt is under
        way. True when it ended (or never ran). Once it returns True the listener holds no
        connection, so the engine can be disposed without leaving one to the garbage collector."""
        self._stopping.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout_seconds)
        return not thread.is_alive()

    @property
    def connected(self) -> bool:
        """Whether notifications can arrive now (the listener is connected)."""
        return self._connected.is_set()

    def wait_connected(self, timeout_seconds: float) -> bool:
        """Whether the listener is connected within `timeout_seconds` (tests, benchmarks)."""
        return self._connected.wait(timeout_seconds)

    def _wake_all(self) -> None:
        with self._lock:
            signals = list(self._signals)
        for signal in signals:
            signal.wake()

    def _run(self) -> None:
        delay = RECONNECT_MIN_SECONDS
        while not self._stopping.is_set():
            try:
                with self._db.listening(pgqueries.listen_work()) as conn:
                    self._connected.set()
                    delay = RECONNECT_MIN_SECONDS
                    self._wake_all()  # whatever was announced while not listening
                    self._due_meanwhile()
                    self._listen(conn)
            except (LeaseError, sa.exc.SQLAlchemyError, OSError, self._driver_error) as exc:
                # The connection is gone (or never came): try again, ever more slowly.
                log.debug("wake-up listener lost its connection: %s", exc)
            self._connected.clear()
            if not self._stopping.is_set():
                self._stopping.wait(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)

    def _due_meanwhile(self) -> None:
        """Set the timer an announcement lost while not listening would have set: the wake-up
        of the earliest retryable item not yet due (a worker's first registry refresh can
        release a killed worker's item before its listener connects)."""
        with self._db.read() as c:
            wait_ms = int(self._db.scalar(c, pgqueries.work_due_wait()) or 0)
        if wait_ms > 0:
            self._announced(str(wait_ms))

    def _listen(self, conn: Any) -> None:
        while not self._stopping.is_set():
            now = time.monotonic()
            woke = False
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
                woke = True
            if woke:
                self._wake_all()
            tick = LISTEN_TICK_SECONDS
            if self._due:
                tick = min(tick, max(0.0, self._due[0] - now))
            for notification in conn.notifies(timeout=tick):
                self.received += 1
                self._announced(notification.payload)
                break  # back to the timers: `notifies` would wait out the whole tick

    def _announced(self, payload: str) -> None:
        """Wake now, or set a timer when the announced work is due later."""
        try:
            wait_seconds = max(0, int(payload)) / 1000
        except ValueError:
            wait_seconds = 0.0
        if wait_seconds <= 0:
            self._wake_all()
            return
        due = time.monotonic() + wait_seconds + DUE_MARGIN_SECONDS
        if len(self._due) < DUE_TIMERS_MAX and not any(
            abs(t - due) < DUE_MERGE_SECONDS for t in self._due
        ):
            heapq.heappush(self._due, due)


def announce(db: Executor, conn: sa.Connection | None = None, *, due: bool = False) -> None:
    """Send the wake-up of claimable work (`due`: of retryable work, due later) on PostgreSQL,
    in `conn`'s transaction (delivered at its commit), else in a statement of its own; nothing
    on SQLite, whose waiters poll."""
    if db.dialect_name != "postgresql":
        return
    stmt = pgqueries.notify_work_due() if due else pgqueries.notify_work_now()
    with db.single(conn) as c:
        db.execute(c, stmt)
