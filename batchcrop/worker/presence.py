"""A worker's presence in the registry (docs/design.md §3, worker registry; ADR 0011).

`Presence` writes the worker's registry row at start, refreshes it every `interval` (the
timeout / 6: 5 s by default) and, after each refresh, releases the leases of workers no longer
seen (G'), so a killed worker's items come back within seconds rather than at the next reaper
pass. A database outage is logged once and its end once; the refresh goes on trying.

Each refresh reads the leases held under the worker's id and lists, in the registry row, those
the process works on (`working`: its slots' claims in flight, and its callback deliveries); the
others (a slot that gave up on an ending, a thread that died) are released (G''): one found at
two refreshes in a row, under the same token, goes back to `queued`, so a claim that a slot has
not yet registered is never taken from it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from batchcrop import __version__
from batchcrop.logs import log_event
from leases import NOT_IN_FLIGHT, DatabaseUnavailable, HeldItem, LeaseManager, ReapResult

REFRESHES_PER_TIMEOUT = 6


def worker_info(
    *,
    concurrency: int,
    batch_ids: Sequence[str] | None,
    store: str,
    store_max_concurrent: int | None = None,
) -> dict[str, Any]:
    """What the registry shows about this process (with `machine_identity`'s boot and pid
    namespace, by which a later process on this machine tells that it has ended)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        **machine_identity(),
        "version": __version__,
        "concurrency": concurrency,
        "batch_ids": None if batch_ids is None else list(batch_ids),
        "store": store,
        "store_max_concurrent": store_max_concurrent,
    }


def machine_identity() -> dict[str, Any]:
    """This boot of this machine and this process's pid namespace (Linux: the kernel's boot id
    and the namespace's inode; empty elsewhere): two processes with the same host, boot and
    namespace see each other's pids."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return {}
    return {"boot_id": boot_id, "pid_ns": namespace}


def ended_here(info: Mapping[str, Any], here: Mapping[str, Any]) -> bool:
    """Whether the registered process described by `info` ran on this machine, in this boot and
    pid namespace (`here`, this process's `worker_info`), and has ended: its pid is gone. A
    pid taken again by another process reads as alive (the timeout then decides)."""
    same = ("host", "boot_id", "pid_ns")
    if not here.get("boot_id") or any(info.get(key) != here.get(key) for key in same):
        return False
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # another user's process: alive
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether `pid` has ended but is not reaped yet (its parent, or an init that reaps late,
    has not waited for it): a SIGKILLed process stays so for a second or two."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("Z", "X")


ABSENT_NAMED = 5
"""Absent workers named in one `worker_lost` log line."""


class Presence(threading.Thread):
    """Keeps `worker_id`'s registry row fresh until `stop()`; releases absent holders' leases."""

    def __init__(
        self,
        leases: LeaseManager,
        worker_id: str,
        info: Mapping[str, Any],
        *,
        on_released: Callable[[ReapResult], None] | None = None,
        working: Callable[[Sequence[HeldItem]], Collection[str]] | None = None,
        on_not_in_flight: Callable[[int], None] = lambda held: None,
    ) -> None:
        super().__init__(name="presence", daemon=True)
        self.leases = leases
        self.worker_id = worker_id
        self.info = dict(info)
        self.interval_seconds = leases.worker_timeout_seconds / REFRESHES_PER_TIMEOUT
        self._on_released = on_released
        self._working = working
        self._on_not_in_flight = on_not_in_flight
        # Leases seen held but not in flight at the last refresh (tokens).
        self._suspects: set[str] = set()
        self._stopping = threading.Event()
        self._down = False

    def beat(self) -> None:
        """One refresh, one release of absent holders and of this worker's leases no slot
        works on; outages are logged, not raised. Each first marks absent the registered workers
        that ran on this machine and have ended (`ended_here`: a `run` killed with SIGKILL and
        run again, a worker beside it killed for memory), so their items come back now rather
        than after the worker timeout."""
        try:
            ended = self._mark_ended_here()
            if self._working is None:
                self.leases.worker_seen(self.worker_id, self.info)
            else:
                held = self.leases.held(worker_id=self.worker_id)
                working = set(self._working(held))
                in_flight = [h.item_id for h in held if h.lease_token in working]
                self.leases.worker_seen(self.worker_id, self.info, in_flight=in_flight)
            released = self.leases.release_absent()
            if self._working is not None:
                self._release_not_in_flight(held, working)
        except DatabaseUnavailable as exc:
            if not self._down:
                self._down = True
                log_event(
                    "database_unavailable",
                    level=logging.WARNING,
                    worker=self.worker_id,
                    during="presence",
                    error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
            return
        if self._down:
            self._down = False
            log_event("database_recovered", worker=self.worker_id, during="presence")
        if released.released:
            log_event(
                "worker_lost",
                level=logging.WARNING,
                worker=self.worker_id,
                retried=released.retried,
                failed=released.failed,
                absent=self._absent() or ",".join(ended) or None,
            )
            if self._on_released is not None:
                self._on_released(released)

    def _mark_ended_here(self) -> list[str]:
        """Mark absent the registered workers that ended on this machine; their ids."""
        ended = sorted(
            worker_id
            for worker_id, info in self.leases.registered_workers().items()
            if worker_id != self.worker_id and ended_here(info, self.info)
        )
        self.leases.mark_absent(ended)
        if ended:
            log_event("workers_ended_here", worker=self.worker_id, ended=",".join(ended))
        return ended

    def _release_not_in_flight(self, held: Sequence[HeldItem], working: set[str]) -> None:
        """Release the leases of `held` (read before the process was asked what it works on:
        a claim committed after the read is not seen held yet) that it did not work on at this
        refresh nor at the last one."""
        orphans = {h.lease_token: h for h in held if h.lease_token not in working}
        self._on_not_in_flight(len(orphans))
        for token in sorted(self._suspects & orphans.keys()):
            lease = orphans.pop(token)
            if self.leases.release(
                lease, reason=NOT_IN_FLIGHT, message="no slot of its worker works on it"
            ):
                log_event(
                    "released_not_in_flight",
                    level=logging.WARNING,
                    worker=self.worker_id,
                    item=lease.item_id,
                    batch=lease.group_id,
                )
        self._suspects = set(orphans)

    def _absent(self) -> str | None:
        """The registered workers not seen for the timeout (the ones whose leases were just
        released among them), most recently seen first, at most `ABSENT_NAMED`, for the log
        line; None if unreadable."""
        try:
            rows = [w for w in self.leases.workers() if w.status == "absent"]
        except DatabaseUnavailable:
            return None
        # Registered rows always have a last_seen_at; seconds since is the same order, reversed.
        absent = [w.id for w in sorted(rows, key=lambda w: w.seen_seconds_ago or 0.0)]
        more = len(absent) - ABSENT_NAMED
        return ",".join(absent[:ABSENT_NAMED]) + (f" (+{more})" if more > 0 else "")

    def run(self) -> None:
        while not self._stopping.wait(self.interval_seconds):
            self.beat()

    def stop(self, *, forget: bool) -> None:
        """Stop refreshing; with `forget` (nothing is held any more) delete the row, else leave
        it to go stale so that whatever this process still holds is released."""
        self._stopping.set()
        if self.is_alive():
            self.join()
        if forget:
            try:
                self.leases.forget_worker(self.worker_id)
            except DatabaseUnavailable:
                log_event("worker_not_forgotten", level=logging.WARNING, worker=self.worker_id)
