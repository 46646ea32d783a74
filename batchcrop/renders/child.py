"""A render child's life: warm up, then render one job at a time until told to stop.

The child is a fresh interpreter (`python -m batchcrop.renders CONN LIFE`, never a fork:
libvips, OpenCV and the parent's threads do not survive one; and not `multiprocessing`'s spawn,
which re-runs the parent's main script; `spawn` starts it) that talks to its parent over one
socket (`CONN`): once warm it reads its memory limit (bytes; 0: none), answers `Ready`, then
the parent sends a `job.Job` (or None: exit) and the child answers with `Answer`. It exits by
itself when its parent dies, even in the middle of a render: a thread reads `LIFE`, a pipe whose
other end only the parent holds, and ends the process at its end of file, so no child goes on
decoding for a parent that is gone.

With a memory limit the child caps its own address space, once warm,
at what it maps then plus that limit (`RLIMIT_AS`): an allocation past it fails inside the job
(Python's `MemoryError`, libvips' and OpenCV's own errors) and the job's answer says
`over_memory`, rather than the kernel killing a process that grew past its budget — or a
worker's whole machine swapping. Address space, not RSS: the kernel enforces it at the
allocation, where the job can still fail cleanly. The child's mapped-but-untouched memory
(thread stacks, allocator arenas, the libraries' images: about 650 MiB beside 70 MiB resident
once warm) is measured when the limit is set, so it is not counted against the job.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import NoReturn

from batchcrop.errors import Category, ItemError, PermanentItemError
from batchcrop.renders.job import Job, RenderJob, render_in_process

PARENT_GONE_EXIT_CODE = 70
"""A child's exit status when its parent died (EX_SOFTWARE)."""
OVER_MEMORY_EXIT_CODE = 71
"""A child's exit status when it could not even answer within its memory limit."""
WARM_UP_SIDE_PX = 64
LIMIT_MARGIN_BYTES = 64 * 1024 * 1024
"""A failed job whose peak mapping came this close to the limit failed for want of memory
(libraries report a refused allocation in their own words)."""


@dataclass(frozen=True)
class Ready:
    """Sent once, when the child has loaded the engine and rendered a first picture."""

    pid: int


@dataclass(frozen=True)
class Answer:
    """One job's end: its `result`, or (`failed`) the error's family (`permanent`), category
    and detail, or `over_memory`; with the child's resident memory after it (bytes)."""

    result: object
    failed: bool = False
    permanent: bool = False
    category: str = ""
    detail: str = ""
    over_memory: bool = False
    rss_bytes: int = 0


def main(conn_fd: int, life_fd: int) -> None:
    """The child's entry point: `conn_fd` is its end of the socket to the parent, `life_fd` the
    read end of the parent's life pipe."""
    _exit_with_parent(life_fd)
    # Ctrl-C reaches the whole process group: the parent gives its items back and ends its
    # children itself (None, or SIGKILL mid-render), so a child takes no part in it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from batchcrop.crop.budget import return_freed_pixels_promptly  # noqa: PLC0415 (in the child)

    return_freed_pixels_promptly()
    conn = Connection(conn_fd)
    _warm_up()
    try:
        limit_bytes: int = conn.recv()  # what a job may map beyond the warm child's (0: none)
    except (EOFError, OSError):
        return
    limit = _limit_address_space(limit_bytes) if limit_bytes > 0 else None
    conn.send(Ready(os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            _exit()  # the parent closed its end
        except MemoryError:
            os._exit(OVER_MEMORY_EXIT_CODE)  # a job too large even to receive
        if job is None:
            _exit()
        try:
            conn.send(answer(job, limit=limit))
        except MemoryError:
            os._exit(OVER_MEMORY_EXIT_CODE)  # a result too large to send back


def _exit() -> NoReturn:
    """End now: a child holds nothing to save, and the interpreter's own teardown of the
    engine's libraries costs tens of milliseconds of a run's end."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def answer(job: Job[object], *, limit: int | None = None) -> Answer:
    """Run `job` here and say how it went (no exception escapes). `limit`: this process's
    address-space limit, by which a failure is told to be for want of memory."""
    peak_before = _mapped_peak_bytes()
    try:
        result = job.run()
    except MemoryError:
        return Answer(None, failed=True, over_memory=True, rss_bytes=rss_bytes())
    except Exception as exc:  # noqa: BLE001 (any surprise is the item's internal error)
        if limit is not None and _reached(limit, peak_before):
            return Answer(None, failed=True, over_memory=True, rss_bytes=rss_bytes())
        if isinstance(exc, ItemError):
            return Answer(
                None,
                failed=True,
                permanent=isinstance(exc, PermanentItemError),
                category=exc.category.value,
                detail=exc.detail,
                rss_bytes=rss_bytes(),
            )
        said = str(exc)
        detail = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
        return Answer(None, failed=True, category=Category.INTERNAL_ERROR.value, detail=detail)
    return Answer(result, rss_bytes=rss_bytes())


def _limit_address_space(limit_bytes: int) -> int:
    """Cap this process's address space at what it maps now plus `limit_bytes`; the cap."""
    cap = _mapped_bytes() + limit_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return cap


def _reached(limit: int, peak_before: int) -> bool:
    """Whether this job's mappings grew to within `LIMIT_MARGIN_BYTES` of `limit`."""
    peak = _mapped_peak_bytes()
    return peak > peak_before and peak >= limit - LIMIT_MARGIN_BYTES


def _mapped_bytes() -> int:
    """This process's address space now (bytes)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _mapped_peak_bytes() -> int:
    """The largest address space this process has had (bytes; 0 where /proc says nothing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def rss_bytes() -> int:
    """This process's resident memory now (its peak where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _exit_with_parent(life_fd: int) -> None:
    """End this process as soon as the parent is gone (its life pipe reads end of file)."""

    def watch() -> None:
        while os.read(life_fd, 1):
            pass
        os._exit(PARENT_GONE_EXIT_CODE)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _warm_up() -> None:
    """Load every library a render uses and run one small render, so the first real job pays
    no import or codec start-up."""
    from PIL import Image  # noqa: PLC0415 (in the child)

    from batchcrop.crop.spec import RenderSpec  # noqa: PLC0415

    buffer = io.BytesIO()
    Image.new("RGB", (WARM_UP_SIDE_PX, WARM_UP_SIDE_PX // 4 * 3), (120, 90, 60)).save(
        buffer, format="JPEG"
    )
    render_in_process(RenderJob(buffer.getvalue(), RenderSpec()))
