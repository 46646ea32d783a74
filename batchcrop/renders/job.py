"""One render job, its result, and the in-process way to run it.

A job is what a child needs and nothing more: the source bytes, the spec and the focus box. Its
result is the renditions (`crop.render`) and the source's stored preview (`crop.PreviewTaker`),
exactly what the worker stored before render processes existed: `render_in_process` is the one
function both a child and the in-process path call, so the bytes cannot differ between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

# Through the package: importing the submodule `crop.render` directly would leave the package's
# `render` naming the module, not the function (`batchcrop.crop` resolves names on first use).
from batchcrop.crop import render
from batchcrop.crop.budget import MemoryBudget
from batchcrop.crop.decode import decode_cost, open_image
from batchcrop.crop.geometry import Box
from batchcrop.crop.limits import MAX_SOURCE_PIXELS
from batchcrop.crop.planning import plan
from batchcrop.crop.spec import RenderSpec, Rendition
from batchcrop.crop.thumbnails import PreviewTaker, Thumbnail, preview_reduction

T_co = TypeVar("T_co", covariant=True)


class Job(Protocol[T_co]):
    """Work a render child can run: picklable, importable without the API or the worker (a
    child unpickles it), and priced from the headers before any child takes it."""

    def cost_bytes(self) -> int:
        """The most decode memory `run` holds at once, read from the headers (the parent
        reserves it); raises the `CropError` that `run` would raise before decoding."""
        ...

    def run(self) -> T_co:
        """Do the work in this process (no budget: the parent reserved it)."""
        ...


@dataclass(frozen=True)
class RenderJob:
    """A source's bytes, the batch's spec and the item's focus box (None: none)."""

    data: bytes
    spec: RenderSpec
    focus: Box | None = None

    def cost_bytes(self) -> int:
        """`job_cost_bytes(self)`."""
        return job_cost_bytes(self)

    def run(self) -> Rendered:
        """`render_in_process(self)`."""
        return render_in_process(self)


@dataclass(frozen=True)
class Rendered:
    """A job's outputs: every rendition in `render`'s order, and the source's preview; with
    the size of the source's colour profile when the engine ignored it as too large (0: not
    ignored; `crop.colour.MAX_PROFILE_BYTES`)."""

    renditions: list[Rendition]
    preview: Thumbnail
    ignored_profile_bytes: int = 0


class RenderStopped(Exception):
    """The caller's `should_stop` said so: the render's child was killed before it ended.

    Not an item error: the caller asks its own checkpoint why (lease lost, cancelled, shutdown).
    """


class Renderer(Protocol):
    """Runs a `RenderJob`: `RenderPool.render` or `render_in_process`.

    `budget` is the process's decode memory, reserved for the job's estimated peak while it
    runs; `should_stop` is asked now and then while the job runs, and a True ends it with
    `RenderStopped` where the renderer can stop it (a child process; never a thread).
    Raises what `crop.render` raises, as the same families and categories.
    """

    def __call__(
        self,
        job: RenderJob,
        *,
        budget: MemoryBudget | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Rendered: ...


def render_in_process(
    job: RenderJob,
    *,
    budget: MemoryBudget | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Rendered:
    """Render `job` in the calling thread (`should_stop` is not asked: a thread cannot be
    stopped mid-decode). The preview comes from the render's own decode when it can."""
    taker = PreviewTaker(job.data)
    renditions = render(job.data, job.spec, focus=job.focus, budget=budget, on_decode=taker)
    return Rendered(renditions, taker.preview(job.data, budget=budget), taker.ignored_profile_bytes)


def job_cost_bytes(job: RenderJob, *, max_pixels: int = MAX_SOURCE_PIXELS) -> int:
    """The most decode memory `render_in_process(job)` holds at once: its render's plan or its
    preview's own decode, whichever is larger (they run one after the other). Reads headers
    only; raises the `CropError` that `render` would raise before decoding."""
    opened = open_image(job.data, max_pixels)
    try:
        return max(
            plan(opened, job.spec).cost_bytes, decode_cost(opened, preview_reduction(opened))
        )
    finally:
        opened.image.close()
