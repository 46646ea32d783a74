"""Calling one function from several threads at once, for the tests of what must not depend on
the thread that asks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def from_threads(call: Callable[[], T], *, threads: int = 4, rounds: int = 3) -> list[T]:
    """What `call` returned, `rounds` times in each of `threads` threads started together."""
    results: list[T] = []

    def run() -> None:
        for _ in range(rounds):
            results.append(call())  # list.append is atomic under the GIL

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    assert len(results) == threads * rounds
    return results
