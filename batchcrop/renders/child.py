"""A render child's life: warm up, then render one job at a time until told to stop.

The child is a fresh interpreter (`python -m batchcrop.renders CONN LIFE`, never a fork:
libvips, OpenCV and the parent's threads do not survive one; and not `multiprocessing`'s spawn,
which re-runs the parent's main script) that talks to its parent over one socket (`CONN`): the
parent sends a `RenderJob` (or None: exit), the child answers with `Answer`. It exits by itself
when its parent dies, even in the middle of a render: a thread reads `LIFE`, a pipe whose other
end only the parent holds, and ends the process at its end of file, so no child goes on
decoding for a parent that is gone.
"""

from __future__ import annotations

import io
import os
import resource
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

from batchcrop.errors import Category, ItemError, PermanentItemError
from batchcrop.renders.job import Rendered, RenderJob, render_in_process

PARENT_GONE_EXIT_CODE = 70
"""A child's exit status when its parent died (EX_SOFTWARE)."""
WARM_UP_SIDE_PX = 64


@dataclass(frozen=True)
class Ready:
    """Sent once, when the child has loaded the engine and rendered a first picture."""

    pid: int


@dataclass(frozen=True)
class Answer:
    """One job's end: `rendered`, or the error's family (`permanent`), category and detail;
    with the child's resident memory after it (bytes)."""

    rendered: Rendered | None
    permanent: bool = False
    category: str = ""
    detail: str = ""
    rss_bytes: int = 0


def main(conn_fd: int, life_fd: int) -> None:
    """The child's entry point: `conn_fd` is its end of the socket to the parent, `life_fd` the
    read end of the parent's life pipe."""
    _exit_with_parent(life_fd)
    from batchcrop.crop.budget import return_freed_pixels_promptly  # noqa: PLC0415 (in the child)

    return_freed_pixels_promptly()
    conn = Connection(conn_fd)
    _warm_up()
    conn.send(Ready(os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the parent closed its end
        if job is None:
            return
        conn.send(answer(job))


def answer(job: RenderJob) -> Answer:
    """Run `job` here and say how it went (no exception escapes)."""
    try:
        rendered = render_in_process(job)
    except ItemError as exc:
        return Answer(
            None,
            permanent=isinstance(exc, PermanentItemError),
            category=exc.category.value,
            detail=exc.detail,
            rss_bytes=rss_bytes(),
        )
    except Exception as exc:  # noqa: BLE001 (any surprise is the item's internal error)
        said = str(exc)
        detail = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
        return Answer(None, category=Category.INTERNAL_ERROR.value, detail=detail)
    return Answer(rendered, rss_bytes=rss_bytes())


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
