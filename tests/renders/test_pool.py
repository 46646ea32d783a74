"""The render pool: children render exactly what the calling thread would, errors come back
with their family and category, and a child that must stop is killed at once and replaced."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from batchcrop.crop import BudgetBusy, ImageTooLarge, MemoryBudget, Ratio, RenderSpec
from batchcrop.errors import Category, ItemError, PermanentItemError, TransientItemError
from batchcrop.renders import RenderJob, RenderPool, RenderStopped, RenderTimeout, spawn
from batchcrop.renders.decodes import ThumbnailJob, WindowsJob
from batchcrop.renders.job import render_in_process
from batchcrop.renders.spawn import OPENMP_THREADS_PER_CHILD
from tests.renders.zoo import ZOO
from tests.scans import slow_jpeg

SPEC = RenderSpec(
    ratios=(Ratio(1, 1), Ratio(16, 9), Ratio(3, 4)), max_side=200, formats=("jpeg", "webp")
)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool() -> Iterator[RenderPool]:
    """One warm child, shared by the module's tests (each leaves it usable)."""
    renders = RenderPool(1)
    renders.start()
    yield renders
    renders.close()


def _small() -> RenderJob:
    buffer = io.BytesIO()
    Image.new("RGB", (120, 80), (200, 30, 60)).save(buffer, format="JPEG")
    return RenderJob(buffer.getvalue(), RenderSpec(ratios=(Ratio(1, 1),), max_side=32))


def _one_child(pool: RenderPool, *, other_than: int | None = None) -> int:
    """The pid of the pool's one child, once it is warm (and not `other_than`)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = pool.pids
        if len(pids) == 1 and pids[0] != other_than:
            return pids[0]
        time.sleep(0.05)
    raise AssertionError(f"no new child in time: {pool.pids}")


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.parametrize("name", sorted(ZOO))
def test_a_child_renders_the_same_bytes_as_the_calling_thread(pool: RenderPool, name: str) -> None:
    """Every derivative and the preview of each zoo source are byte-identical from a child."""
    job = RenderJob(ZOO[name](), SPEC, focus=(10, 10, 60, 60) if "jpeg" in name else None)

    here = render_in_process(job)
    there = pool(job)

    assert [(r.ratio, r.format, r.crop_box, r.sha256) for r in here.renditions] == [
        (r.ratio, r.format, r.crop_box, r.sha256) for r in there.renditions
    ]
    assert [r.data for r in here.renditions] == [r.data for r in there.renditions]
    assert here.preview == there.preview


@pytest.mark.parametrize("name", sorted(ZOO)[:4])
def test_a_child_renders_padded_trimmed_widths_as_the_calling_thread(
    pool: RenderPool, name: str
) -> None:
    """Fit, padding, trim and widths come back from a child as the calling thread makes them."""
    spec = RenderSpec(
        ratios=(Ratio(1, 1), Ratio(16, 9)),
        widths=(64, 160),
        fit="auto",
        trim=12,
        background="#203040",
        formats=("jpeg", "webp"),
    )
    job = RenderJob(ZOO[name](), spec)
    here, there = render_in_process(job), pool(job)
    assert here.renditions == there.renditions


def test_an_error_in_the_child_comes_back_with_its_family_and_category(pool: RenderPool) -> None:
    """A JPEG cut short after its headers fails in the child as it fails in the thread."""
    data = ZOO["jpeg"]()
    job = RenderJob(data[: len(data) // 2], SPEC)
    with pytest.raises(ItemError) as here:
        render_in_process(job)

    with pytest.raises(PermanentItemError) as there:
        pool(job)

    assert here.value.category is Category.INVALID_IMAGE
    assert (there.value.category, there.value.detail) == (here.value.category, here.value.detail)


def test_a_job_larger_than_the_budget_is_refused_in_the_parent(pool: RenderPool) -> None:
    """The decode budget is the parent's: a job that cannot fit never reaches a child."""
    child = _one_child(pool)
    replaced = pool.replaced

    with pytest.raises(ImageTooLarge):
        pool(_small(), budget=MemoryBudget(1024))

    assert (pool.pids, pool.replaced) == ([child], replaced)


def test_a_render_told_to_stop_has_its_child_killed_at_once(pool: RenderPool) -> None:
    """`should_stop` turning True kills the child within a poll; a new child takes the next job."""
    child = _one_child(pool)
    told = time.monotonic() + 0.3

    with pytest.raises(RenderStopped):
        pool(RenderJob(slow_jpeg(), SPEC), should_stop=lambda: time.monotonic() > told)

    assert time.monotonic() - told < 1.0
    assert not _alive(child)
    assert len(pool(_small()).renditions) == 1
    assert _one_child(pool) != child


def test_a_render_past_its_deadline_fails_render_timeout() -> None:
    """A render longer than the pool's deadline is killed and fails permanently, in its own
    category."""
    renders = RenderPool(1, deadline_seconds=0.5)
    try:
        renders.start()
        child = _one_child(renders)
        started = time.monotonic()

        with pytest.raises(RenderTimeout) as caught:
            renders(RenderJob(slow_jpeg(), SPEC))

        assert time.monotonic() - started < 2.0
        assert isinstance(caught.value, PermanentItemError)
        assert caught.value.category is Category.RENDER_TIMEOUT
        assert not _alive(child)
    finally:
        renders.close()


def test_a_child_killed_mid_render_is_a_transient_error_and_is_replaced(
    pool: RenderPool,
) -> None:
    """SIGKILL of the child under a job: the job fails `internal_error` (retried), the pool
    starts another child and renders with it."""
    child = _one_child(pool)
    threading.Timer(0.3, os.kill, (child, signal.SIGKILL)).start()

    with pytest.raises(TransientItemError) as caught:
        pool(RenderJob(slow_jpeg(), SPEC))

    assert caught.value.category is Category.INTERNAL_ERROR
    assert "render process ended" in caught.value.detail
    assert len(pool(_small()).renditions) == 1
    assert _one_child(pool, other_than=child) != child


@pytest.mark.parametrize(
    "limits", [{"max_renders": 2}, {"max_rss_bytes": 1}], ids=["renders", "memory"]
)
def test_children_are_replaced_after_their_renders_or_above_the_memory_ceiling(
    limits: dict[str, int],
) -> None:
    """A child is retired after `max_renders` jobs, or after a job that left it above
    `max_rss_bytes`; the next job runs in its replacement."""
    renders = RenderPool(1, **limits)
    try:
        renders.start()
        first = _one_child(renders)
        renders(_small())
        if "max_renders" in limits:
            assert _one_child(renders) == first
            renders(_small())
        second = _one_child(renders, other_than=first)
        assert len(renders(_small()).renditions) == 1
        assert renders.replaced >= 1
        assert not _alive(first)
        assert second != first
    finally:
        renders.close()


PARENT = """
import json, sys
from batchcrop.renders import RenderJob, RenderPool
from batchcrop.crop import RenderSpec
from tests.scans import slow_jpeg
data = slow_jpeg()
pool = RenderPool(2)
pool.start()
print(json.dumps(pool.pids), flush=True)
pool(RenderJob(data, RenderSpec()))
"""


def test_children_exit_when_their_parent_is_killed() -> None:
    """SIGKILL of the parent mid-render leaves no child behind, busy or idle."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert parent.stdout is not None
        children = [int(pid) for pid in parent.stdout.readline().strip(" []\n").split(",")]
        assert len(children) == 2
        assert all(_alive(pid) for pid in children)
        time.sleep(0.5)  # one child is rendering now

        parent.send_signal(signal.SIGKILL)
        parent.wait(10)

        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in children)
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


UNGUARDED = """
from batchcrop.crop import RenderSpec
from batchcrop.renders import RenderJob, RenderPool
from tests.renders.test_pool import _small
pool = RenderPool(1)
print(len(pool(_small()).renditions), flush=True)
pool.close()
"""


def test_children_never_run_the_parents_main_script() -> None:
    """A parent whose main script has no `__main__` guard (here: read from standard input)
    starts its children and renders: a child is not the parent's script run again."""
    done = subprocess.run(
        [sys.executable, "-"],
        input=UNGUARDED,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )

    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr


def _large_flat_jpeg() -> bytes:
    """A 48 MP JPEG of one colour: a few hundred KB that decode to about 140 MB of pixels."""
    buffer = io.BytesIO()
    Image.new("RGB", (8000, 6000), (90, 140, 200)).save(buffer, format="JPEG", quality=70)
    return buffer.getvalue()


def test_a_child_over_its_memory_limit_fails_image_too_large_and_is_replaced() -> None:
    """A job whose decode maps more than the child's memory limit fails permanently as
    `image_too_large`, with a message naming the limit; the child is replaced, the next job
    renders, and without a limit the same job renders."""
    limited = RenderPool(1, memory_limit_bytes=64 * 1024 * 1024)
    job = RenderJob(_large_flat_jpeg(), RenderSpec(ratios=(Ratio(1, 1),), max_side=4000))
    try:
        limited.start()
        child = _one_child(limited)

        with pytest.raises(ImageTooLarge) as caught:
            limited(job)

        assert caught.value.category is Category.IMAGE_TOO_LARGE
        assert "memory limit (64 MiB" in caught.value.detail
        assert len(limited(_small()).renditions) == 1
        assert _one_child(limited) != child
    finally:
        limited.close()
    assert len(render_in_process(job).renditions) == 1


def test_the_api_decodes_answer_in_a_child_as_in_the_calling_thread(pool: RenderPool) -> None:
    """A thumbnail and a focus box's windows come back from a child identical to the calling
    thread's; a focus box outside the picture is refused in the parent as `invalid_focus`."""
    data = ZOO["jpeg"]()
    thumbnail_job = ThumbnailJob(data, 48)
    windows_job = WindowsJob(data, SPEC, (10, 10, 60, 60))

    assert thumbnail_job.run() == pool.run(thumbnail_job)
    assert windows_job.run() == pool.run(windows_job)
    child, replaced = _one_child(pool), pool.replaced
    with pytest.raises(PermanentItemError) as caught:
        pool.run(WindowsJob(data, SPEC, (90000, 90000, 90001, 90001)))
    assert caught.value.category is Category.INVALID_FOCUS
    assert (pool.pids, pool.replaced) == ([child], replaced)


def test_a_job_waiting_past_its_timeout_for_a_child_is_busy(pool: RenderPool) -> None:
    """While the one child renders, a job with a timeout waits that long, then `BudgetBusy`;
    the busy job is untouched."""
    busy = threading.Thread(target=pool, args=(RenderJob(slow_jpeg(), SPEC),))
    _one_child(pool)
    busy.start()
    time.sleep(0.2)
    started = time.monotonic()

    with pytest.raises(BudgetBusy):
        pool.run(ThumbnailJob(ZOO["jpeg"](), 48), timeout=0.3)

    assert 0.3 <= time.monotonic() - started < 1.5
    replaced = pool.replaced
    busy.join()
    assert pool.replaced == replaced


@dataclass(frozen=True)
class _EnvironmentJob:
    """A job that answers with a variable of the environment the child runs in."""

    name: str

    def cost_bytes(self) -> int:
        return 0

    def run(self) -> str | None:
        return os.environ.get(self.name)


def test_a_child_runs_one_openmp_thread_unless_told_otherwise(
    pool: RenderPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child's OpenMP team is one thread (the face detector's would spin against the other
    children), unless the operator's environment sets its size."""
    assert pool.run(_EnvironmentJob("OMP_NUM_THREADS")) == str(OPENMP_THREADS_PER_CHILD)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    own = RenderPool(1)
    try:
        assert own.run(_EnvironmentJob("OMP_NUM_THREADS")) == "3"
    finally:
        own.close()


def test_a_prestarted_child_is_adopted_and_takes_its_memory_limit_then() -> None:
    """`spawn.prestart` starts children before any pool exists (the long-running commands do,
    before their own start-up); the first pool adopts them instead of starting its own, and
    sends the limit it has only then: over it, a job fails `image_too_large` as in a pool's
    own child."""
    spawn.prestart(1)
    prestarted = list(spawn._prestarted)
    assert len(prestarted) == 1
    pool = RenderPool(1, memory_limit_bytes=64 * 1024 * 1024)
    try:
        pool.start()
        assert pool.pids == [prestarted[0].pid]
        assert spawn.adopt() is None
        assert len(pool(_small()).renditions) == 1
        large = RenderJob(_large_flat_jpeg(), RenderSpec(ratios=(Ratio(1, 1),), max_side=4000))
        with pytest.raises(ImageTooLarge):
            pool(large)
    finally:
        pool.close()


def test_a_prestarted_child_that_died_is_not_adopted() -> None:
    spawn.prestart(1)
    dead = spawn._prestarted[0]
    dead.process.kill()
    dead.process.wait(10)
    assert spawn.adopt() is None
    assert spawn._prestarted == []


def test_prestarted_children_nobody_adopted_are_ended() -> None:
    """A command that ends before rendering leaves no warm child behind (`discard_prestarted`),
    and the next prestart starts fresh ones."""
    spawn.prestart(2)
    children = list(spawn._prestarted)
    spawn.discard_prestarted()
    assert spawn._prestarted == []
    assert all(child.process.returncode is not None for child in children)
    spawn.prestart(1)
    assert [child.pid for child in spawn._prestarted] != [children[0].pid]


def test_a_child_takes_no_part_in_ctrl_c() -> None:
    """Ctrl-C reaches the whole process group; the parent ends its children itself, so a
    child ignores SIGINT (no traceback, no exit mid-render) and still renders."""
    pool = RenderPool(1)
    try:
        pool.start()
        (pid,) = pool.pids
        os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        assert pool.pids == [pid]
        assert len(pool(_small()).renditions) == 1
    finally:
        pool.close()
