"""Starting render children, and starting them early: what needs no engine in the parent.

A child is a fresh interpreter, `python -m batchcrop.renders CONN LIFE` (`child` says why never
a fork), with its end of a socket (`CONN`) and the read end of a life pipe (`LIFE`) inherited.
It loads the engine and warms up by itself, then waits for its first message, the memory limit,
before it says it is ready: so it can be started before the parent knows its settings.

`prestart` is how the long-running commands use that: they start their children first thing,
before importing the database layer, migrating and submitting, and the children warm up on the
other cores meanwhile; the first `RenderPool` to need a child adopts one of them (`adopt`). On 2
cores this takes the children's start (about 0.2 s) out of a `run`'s fixed cost.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

OPENMP_THREADS_PER_CHILD = 1
"""OpenMP and OpenBLAS threads of a child (`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, unless
set). NumPy's OpenBLAS starts a thread per core as it loads (0.1 CPU-s of a child's warm-up on
2 cores, for a library the engine barely calls); the face detector's library runs
its network on an OpenMP team, whose threads spin while they wait for work. One child per slot
is the parallelism, so a team per child only spins against the other children: on 2 cores,
`run --workers 2` over 32 12 MP JPEGs took 10.4 CPU-s and 5.9 s with teams of two, 6.9 CPU-s and
4.3 s with one thread each (docs/benchmarks.md, render processes)."""
CHILD_EXIT_SECONDS = 5.0
"""How long a child is waited for once told to exit, or killed (`end`)."""
MALLOC_ARENAS_PER_CHILD = 2
"""glibc malloc arenas of a child (`MALLOC_ARENA_MAX`, unless set). glibc reserves 64 MiB of
address space per arena, up to 8 per core, as threads first allocate: counted against a child's
memory limit, they could refuse a job on a machine of many cores that its pixels would fit. A
child runs one job at a time."""


@dataclass
class Started:
    """A child process as started: its socket and the write end of its life pipe (closing it,
    or this process dying, tells the child to exit)."""

    process: subprocess.Popen[bytes]
    conn: Connection
    life: int
    pid: int
    started: float = field(default_factory=time.monotonic)


def end(child: Started) -> None:
    """SIGKILL `child` if it still runs, reap it and close its socket and life pipe
    (idempotent)."""
    if child.process.poll() is None:
        child.process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.process.wait(CHILD_EXIT_SECONDS)
    child.conn.close()
    # Taken before closing: a descriptor number closed twice may be another file's by then.
    life, child.life = child.life, -1
    if life >= 0:
        os.close(life)


def spawn() -> Started:
    """Start one render child (it warms up, then waits for its memory limit)."""
    ours, theirs = socket.socketpair()
    life_read, life_write = os.pipe()
    # The child finds the engine where this process does (a test's or a bench's path too).
    path = os.pathsep.join(entry for entry in sys.path if entry)
    env = {**os.environ, "PYTHONPATH": path}
    env.setdefault("OMP_NUM_THREADS", str(OPENMP_THREADS_PER_CHILD))
    env.setdefault("OPENBLAS_NUM_THREADS", str(OPENMP_THREADS_PER_CHILD))
    env.setdefault("MALLOC_ARENA_MAX", str(MALLOC_ARENAS_PER_CHILD))
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "batchcrop.renders", str(theirs.fileno()), str(life_read)],
            pass_fds=(theirs.fileno(), life_read),
            stdin=subprocess.DEVNULL,
            env=env,
        )
    finally:
        # The child's ends are the child's alone: each side sees EOF when the other ends.
        theirs.close()
        os.close(life_read)
    return Started(process, Connection(ours.detach()), life_write, process.pid)


_prestarted: list[Started] = []
_lock = threading.Lock()


def prestart(count: int) -> None:
    """Start `count` children now for the pools this process will make (none while some are
    still waiting). Children never adopted end with this process."""
    with _lock:
        if _prestarted:
            return
        _prestarted.extend(spawn() for _ in range(count))


def discard_prestarted() -> None:
    """End the prestarted children no pool adopted (a command that failed before it rendered,
    or had nothing to render): killed, reaped, their descriptors closed."""
    with _lock:
        children, _prestarted[:] = list(_prestarted), []
    for child in children:
        end(child)


def adopt() -> Started | None:
    """A prestarted child still alive, for a pool's own (None: none left)."""
    with _lock:
        while _prestarted:
            child = _prestarted.pop(0)
            if child.process.poll() is None:
                return child
            end(child)
    return None
