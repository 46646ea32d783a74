"""Renders run apart from the process that holds the work: a pool of child processes.

A worker's slots are threads; a render inside one cannot be stopped and shares one interpreter.
`RenderPool` keeps child processes (fresh interpreters started once, warmed, reused and
replaced after `max_renders` renders or above an RSS ceiling) that take a source's bytes and a
spec and send back the renditions and the stored preview, or the error's family, category and
message. The parent keeps everything else: claims, heartbeats, fencing, writes and commits.
A render the caller must stop (its lease lost, its batch cancelled, a shutdown past its grace)
or that passes the pool's deadline has its child killed at once and replaced
(docs/design.md §6, render processes; ADR 0032). `render_in_process` is the same work in the
calling thread, for the library API and `--render-processes 0`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from batchcrop.renders.defaults import (
        MAX_RENDERS_PER_CHILD,
        MAX_RSS_BYTES_PER_CHILD,
        RENDER_DEADLINE_SECONDS,
    )
    from batchcrop.renders.job import (
        Rendered,
        Renderer,
        RenderJob,
        RenderStopped,
        render_in_process,
    )
    from batchcrop.renders.pool import RenderPool, RenderTimeout

# Names are imported from their submodules on first use (as `batchcrop.crop` does): the CLI
# reads the defaults without loading the engine.
_HOMES = {
    "MAX_RENDERS_PER_CHILD": "batchcrop.renders.defaults",
    "MAX_RSS_BYTES_PER_CHILD": "batchcrop.renders.defaults",
    "RENDER_DEADLINE_SECONDS": "batchcrop.renders.defaults",
    "RenderJob": "batchcrop.renders.job",
    "RenderPool": "batchcrop.renders.pool",
    "RenderStopped": "batchcrop.renders.job",
    "RenderTimeout": "batchcrop.renders.pool",
    "Rendered": "batchcrop.renders.job",
    "Renderer": "batchcrop.renders.job",
    "render_in_process": "batchcrop.renders.job",
}

__all__ = [
    "MAX_RENDERS_PER_CHILD",
    "MAX_RSS_BYTES_PER_CHILD",
    "RENDER_DEADLINE_SECONDS",
    "RenderJob",
    "RenderPool",
    "RenderStopped",
    "RenderTimeout",
    "Rendered",
    "Renderer",
    "render_in_process",
]


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
