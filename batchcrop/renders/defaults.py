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
