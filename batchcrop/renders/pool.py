"""`RenderPool`: child processes that render, each one job at a time, killed when they must stop.

Children are fresh interpreters (never forks: libvips, OpenCV and the parent's threads do not
survive one; `spawn` starts them, `child` is their side), warmed before they take a job, and
reused. A child is replaced after `max_renders` jobs, when its resident memory after a job is above
`max_rss_bytes`, when it died, and at once — killed with SIGKILL — when its job passed
`deadline_seconds` or the caller's `should_stop` said so: nothing goes on decoding for an item
nobody holds. The replacement starts in the background; a job waits for the next warm child.

The job's decode memory is reserved from the caller's budget in the parent for the whole job
(`job.job_cost_bytes`, from the headers), so a process's budget still bounds every render of
its slots, whichever child runs them (docs/design.md §6, memory).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import TypeVar

from batchcrop.crop.budget import MIB, BudgetBusy, MemoryBudget, reserved
from batchcrop.crop.errors import ImageTooLarge
from batchcrop.errors import Category, PermanentItemError, TransientItemError
from batchcrop.logs import log_event
from batchcrop.renders.child import OVER_MEMORY_EXIT_CODE, Answer, Ready
from batchcrop.renders.defaults import (
    MAX_RENDERS_PER_CHILD,
    MAX_RSS_BYTES_PER_CHILD,
    RENDER_DEADLINE_SECONDS,
)
from batchcrop.renders.job import Job, Rendered, RenderJob, RenderStopped
from batchcrop.renders.spawn import CHILD_EXIT_SECONDS, Started, adopt, end, spawn

T = TypeVar("T")

CHILD_START_SECONDS = 120.0
"""How long a starting child may take to import the engine and warm up."""
STOP_POLL_SECONDS = 0.1
"""How often a running job asks its caller's `should_stop` (and notices its deadline)."""
_START_RETRY_SECONDS = 1.0


class RenderTimeout(PermanentItemError):
    """The job ran past the pool's deadline: its child was killed. Permanent, since the same
    bytes would take as long again."""

    category = Category.RENDER_TIMEOUT


@dataclass
class _Child(Started):
    """A pool's child: as started, and the jobs it has run."""

    renders: int = 0


class RenderPool:
    """`processes` render children; call it as a `job.Renderer`. Thread-safe: each call takes
    one idle child for its job, so up to `processes` jobs run at once and others wait."""

    def __init__(
        self,
        processes: int,
        *,
        deadline_seconds: float = RENDER_DEADLINE_SECONDS,
        max_renders: int = MAX_RENDERS_PER_CHILD,
        max_rss_bytes: int = MAX_RSS_BYTES_PER_CHILD,
        memory_limit_bytes: int | None = None,
    ) -> None:
        """`memory_limit_bytes`: the most memory a child may map beyond what it holds once
        warm (its address-space limit, `RLIMIT_AS`, is set to that sum); a job that needs more
        fails `image_too_large`. None: no limit."""
        if processes < 1:
            raise ValueError("a render pool needs at least one process")
        if deadline_seconds <= 0:
            raise ValueError("the render deadline must be positive")
        self.processes = processes
        self.deadline_seconds = deadline_seconds
        self.max_renders = max_renders
        self.max_rss_bytes = max_rss_bytes
        self.memory_limit_bytes = memory_limit_bytes
        self._idle: queue.SimpleQueue[_Child] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._children: dict[int, _Child] = {}
        self._started = False
        self._closed = threading.Event()
        self.replaced = 0
        """Children replaced so far, whatever the reason (read by tests and the bench)."""

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start every child and wait until each is warm (idempotent): call before the first
        claim, so that the first item pays no start-up."""
        with self._lock:
            if self._started:
                return
            self._started = True
        starting = [self._spawn() for _ in range(self.processes)]
        for child in starting:
            self._await_ready(child)

    def close(self) -> None:
        """Stop every child: idle ones are told to exit, busy or stuck ones killed."""
        self._closed.set()
        with self._lock:
            children = list(self._children.values())
            self._children.clear()
        for child in children:
            with contextlib.suppress(OSError):
                child.conn.send(None)
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(CHILD_EXIT_SECONDS)
            end(child)

    @property
    def pids(self) -> list[int]:
        """The process ids of the children alive now."""
        with self._lock:
            return sorted(self._children)

    # -- one job ---------------------------------------------------------------------------

    def __call__(
        self,
        job: RenderJob,
        *,
        budget: MemoryBudget | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Rendered:
        """Render `job` in a child (see `job.Renderer` and `run`)."""
        return self.run(job, budget=budget, should_stop=should_stop)

    def run(
        self,
        job: Job[T],
        *,
        budget: MemoryBudget | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        timeout: float | None = None,
    ) -> T:
        """Run `job` in a child and return what its `run` returned. Its `cost_bytes` is
        reserved from `budget` first. With a `timeout`, waiting for the memory and then for an
        idle child takes at most that many seconds in all (`BudgetBusy`); None: as long as it
        takes. Raises `RenderStopped`, `RenderTimeout`, the engine's errors as their family and
        category (`image_too_large` when the child went over its memory limit), and
        `TransientItemError` (`internal_error`) when the child died under the job."""
        if self._closed.is_set():
            raise RuntimeError("the render pool is closed")
        self.start()
        waits_until = None if timeout is None else time.monotonic() + timeout
        # Header errors (and the CPU-bomb checks) are found here, before any child is used.
        with reserved(budget, job.cost_bytes(), timeout=timeout):
            answer = self._run(self._take(should_stop, waits_until), job, should_stop)
        if answer.failed:
            family = PermanentItemError if answer.permanent else TransientItemError
            raise family(answer.detail, category=Category(answer.category))
        result: T = answer.result  # type: ignore[assignment]  # what this job's `run` returns
        return result

    def _take(self, should_stop: Callable[[], bool], waits_until: float | None) -> _Child:
        """The next idle child, once one is warm (`RenderStopped` if told to stop first,
        `BudgetBusy` when none is idle by `waits_until`)."""
        while True:
            try:
                return self._idle.get(timeout=STOP_POLL_SECONDS)
            except queue.Empty:
                if should_stop():
                    raise RenderStopped from None
                if self._closed.is_set():
                    raise RuntimeError("the render pool is closed") from None
                if waits_until is not None and time.monotonic() > waits_until:
                    raise BudgetBusy("no render process was free in time") from None

    def _run(self, child: _Child, job: Job[object], should_stop: Callable[[], bool]) -> Answer:
        deadline = time.monotonic() + self.deadline_seconds
        try:
            child.conn.send(job)
            # A child that dies closes its socket: `wait` then returns and `recv` raises.
            while not wait([child.conn], STOP_POLL_SECONDS):
                if should_stop():
                    self._replace(child, "stopped")
                    raise RenderStopped
                if time.monotonic() > deadline:
                    self._replace(child, "deadline")
                    raise RenderTimeout(
                        f"rendering took longer than {self.deadline_seconds:g} s: stopped"
                    )
            answer = child.conn.recv()
        except (EOFError, OSError) as exc:
            self._replace(child, "died")
            code = child.process.returncode
            if code == OVER_MEMORY_EXIT_CODE:
                raise self._over_memory() from exc
            raise TransientItemError(
                f"the render process ended during the render (exit {code})",
                category=Category.INTERNAL_ERROR,
            ) from exc
        assert isinstance(answer, Answer), "a render child answers with an Answer"
        child.renders += 1
        if answer.over_memory:
            # Its allocator may hold the failed job's pages or a half-built library state.
            self._replace(child, "memory", rss_mib=answer.rss_bytes // MIB)
            raise self._over_memory()
        if child.renders >= self.max_renders:
            self._replace(child, "renders")
        elif answer.rss_bytes > self.max_rss_bytes:
            self._replace(child, "memory", rss_mib=answer.rss_bytes // MIB)
        else:
            self._idle.put(child)
        return answer

    def _over_memory(self) -> ImageTooLarge:
        limit = self.memory_limit_bytes or 0
        return ImageTooLarge(
            f"rendering needed more than the render process's memory limit "
            f"({limit // MIB} MiB beyond its start-up): stopped"
        )

    # -- children --------------------------------------------------------------------------

    def _spawn(self) -> _Child:
        started = adopt() or spawn()
        # Its start-up time counts from now: a prestarted child may have waited long.
        child = _Child(started.process, started.conn, started.life, started.pid)
        with contextlib.suppress(OSError):
            # Its first message; a child that died meanwhile is found by `_await_ready`.
            child.conn.send(self.memory_limit_bytes or 0)
        with self._lock:
            self._children[child.pid] = child
        return child

    def _await_ready(self, child: _Child) -> None:
        """Wait for `child`'s Ready, then make it idle; a child that fails to start is
        replaced."""
        try:
            ready = wait([child.conn], CHILD_START_SECONDS)
            said = child.conn.recv() if child.conn in ready else None
        except (EOFError, OSError, ValueError):
            # ValueError: `close` closed this child's socket meanwhile.
            said = None
        if self._closed.is_set():
            end(child)
            return
        if not isinstance(said, Ready):
            self._forget(child)
            end(child)
            log_event("render_child_failed_to_start", level=logging.WARNING)
            if not self._closed.wait(_START_RETRY_SECONDS):
                self._start_replacement()
            return
        log_event(
            "render_child_started",
            level=logging.DEBUG,
            pid=said.pid,
            ms=round((time.monotonic() - child.started) * 1000),
        )
        self._idle.put(child)

    def _replace(self, child: _Child, reason: str, **fields: object) -> None:
        """Kill `child` (it may be mid-job) and start another in the background."""
        self._forget(child)
        end(child)
        self.replaced += 1
        log_event(
            "render_child_replaced",
            level=logging.DEBUG if reason in ("renders", "memory") else logging.WARNING,
            pid=child.pid,
            reason=reason,
            renders=child.renders,
            **fields,
        )
        if not self._closed.is_set():
            self._start_replacement()

    def _start_replacement(self) -> None:
        def start() -> None:
            if not self._closed.is_set():
                self._await_ready(self._spawn())

        threading.Thread(target=start, name="render-start", daemon=True).start()

    def _forget(self, child: _Child) -> None:
        with self._lock:
            self._children.pop(child.pid, None)
