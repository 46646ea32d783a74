"""The render pool's defaults, importable without the crop engine (the CLI's help texts)."""

from __future__ import annotations

from batchcrop.crop.budget import MIB

RENDER_DEADLINE_SECONDS = 120.0
"""How long one job may run in a child before it is killed and its item fails `render_timeout`:
an 80 MP PNG, the largest source taken, renders in under 10 s on one core."""
MAX_RENDERS_PER_CHILD = 1000
"""Jobs a child runs before it is replaced (memory fragmentation, library caches)."""
MAX_RSS_BYTES_PER_CHILD = 768 * MIB
"""A child whose resident memory after a job is above this is replaced."""
RENDER_HEADROOM_BYTES = 128 * MIB
"""What a job maps beside its decoded pixels and its source's bytes: encoders' buffers, the
libraries' caches and temporaries."""
DECODE_DEADLINE_SECONDS = 30.0
"""How long one of the API's decodes (a thumbnail, a focus box's windows) may run in a child
before it is killed and answered 422: they decode at most once, at a reduced scale."""
DECODE_PROCESSES = 2
"""The API's decode children: at most this many sources are decoded for it at once (a source
may decode to hundreds of megabytes, and a contact sheet asks for dozens)."""


def child_memory_limit_bytes(decode_budget_bytes: int, max_source_bytes: int) -> int:
    """The memory a render child may map beyond its warm self (`RenderPool`'s
    `memory_limit_bytes`): the process's whole decode budget (a child's job never reserves
    more), the source twice (the bytes received and the bytes unpickled) and the headroom."""
    return decode_budget_bytes + 2 * max_source_bytes + RENDER_HEADROOM_BYTES
