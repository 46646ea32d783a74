"""A worker that ran on this machine and ended (SIGKILL, a crash) is found by the next worker's
first refresh (`presence.ended_here`): its items come back at once, not after the worker
timeout. Real processes, SQLite and PostgreSQL."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from batchcrop.worker.presence import Presence, ended_here, machine_identity, worker_info
from leases import WORKER_LOST, LeaseManager, State, make_engine, upgrade
from tests.leases.conftest import new_group

pytestmark = pytest.mark.skipif(not machine_identity(), reason="needs Linux's /proc")


@pytest.fixture
def manager(database_url: str) -> Iterator[LeaseManager]:
    """A lease manager with a 900 s lease and the default 30 s worker timeout."""
    engine = make_engine(database_url)
    upgrade(engine)
    yield LeaseManager(engine, lease_seconds=900.0)
    engine.dispose()


def _process() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _info(pid: int, **changed: Any) -> dict[str, Any]:
    """The registry info a worker of `pid` on this machine writes (`changed` overriding)."""
    return {**worker_info(concurrency=1, batch_ids=None, store="file:///x"), "pid": pid, **changed}


def _here() -> dict[str, Any]:
    return worker_info(concurrency=1, batch_ids=None, store="file:///x")


def test_a_killed_worker_on_this_machine_is_found_reaped_or_not() -> None:
    """A SIGKILLed process is ended both while a zombie (not reaped yet) and once reaped; a live
    one, or one on another host, boot or pid namespace, is not (the timeout decides those)."""
    alive, killed = _process(), _process()
    try:
        assert not ended_here(_info(alive.pid), _here())
        killed.send_signal(signal.SIGKILL)
        while _zombie_pending(killed.pid):
            pass
        assert ended_here(_info(killed.pid), _here())  # a zombie: not waited for yet
        killed.wait(10)
        assert ended_here(_info(killed.pid), _here())
        for other in ({"host": "elsewhere"}, {"boot_id": "another-boot"}, {"pid_ns": 1}):
            assert not ended_here(_info(killed.pid, **other), _here())
        assert not ended_here({"host": _here()["host"], "pid": killed.pid}, _here())
    finally:
        alive.kill()
        alive.wait(10)


def _zombie_pending(pid: int) -> bool:
    """Whether the killed `pid` still runs (the signal not delivered yet)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_the_first_refresh_releases_the_items_of_a_worker_that_ended_here(
    manager: LeaseManager,
) -> None:
    """A new worker's first refresh marks a registered worker whose process ended on this
    machine absent, and its leases come back `worker_lost` at once; a live one keeps its own."""
    new_group(manager, 2)
    killed, alive = _process(), _process()
    try:
        manager.worker_seen("killed", _info(killed.pid))
        manager.worker_seen("alive", _info(alive.pid))
        (lost,) = manager.claim("killed", 1)
        (kept,) = manager.claim("alive", 1)
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        Presence(manager, "next", _here()).beat()
        item = manager.item(lost.item_id)
        assert item is not None
        assert (item.state, item.error_category) == (State.RETRYABLE, WORKER_LOST)
        other = manager.item(kept.item_id)
        assert other is not None
        assert other.state is State.IN_PROGRESS
    finally:
        alive.kill()
        alive.wait(10)
