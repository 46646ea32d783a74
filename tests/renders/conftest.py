"""Every test here starts with no prestarted render child left over by another
(`renders.spawn` keeps them in one list per process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from batchcrop.renders.spawn import discard_prestarted


@pytest.fixture(autouse=True)
def _no_prestarted_children() -> Iterator[None]:
    discard_prestarted()
    yield
    discard_prestarted()
