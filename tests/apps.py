"""Building wired, migrated apps for tests, every one closed when the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from batchcrop.app import App, build
from batchcrop.settings import Settings


@contextmanager
def app_factory(**defaults: Any) -> Iterator[Callable[..., App]]:
    """Yield `make(**overrides)`: an upgraded App on Settings(**defaults, **overrides)."""
    apps: list[App] = []

    def make(**overrides: Any) -> App:
        app = build(Settings(**{**defaults, **overrides}))
        app.upgrade()
        apps.append(app)
        return app

    try:
        yield make
    finally:
        for app in apps:
            app.close()
