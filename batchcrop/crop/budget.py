"""A process's budget of decoded-pixel memory, shared by every render and thumbnail in it.

A pixel cap alone does not bound memory: an 80 MP JPEG decodes DCT-scaled into a few tens of
MiB, while a PNG of the same size decodes whole at 4 bytes per pixel, plus its conversion. Each
decode reserves its estimated peak (`decode.decode_cost`) before touching a pixel and gives it
back when its render ends; a decode that cannot fit even alone fails `image_too_large`, and one
that does not fit now waits for others to finish. So a process's image memory stays under the
budget whatever its concurrency.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from batchcrop.crop.errors import ImageTooLarge

MIB = 1 << 20
MMAP_THRESHOLD_BYTES = 8 * MIB
TRIM_THRESHOLD_BYTES = 64 * MIB
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers
_M_TRIM_THRESHOLD = -1


class BudgetBusy(Exception):
    """The reservation did not fit within the caller's timeout (other decodes hold the memory)."""


class MemoryBudget:
    """Up to `capacity_bytes` reserved at once; thread-safe."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise ValueError("the decode memory budget must be positive")
        self.capacity_bytes = capacity_bytes
        self._used = 0
        self._changed = threading.Condition()

    @property
    def used_bytes(self) -> int:
        """Bytes reserved right now."""
        with self._changed:
            return self._used

    @contextmanager
    def reserve(self, nbytes: int, *, timeout: float | None = None) -> Iterator[None]:
        """Hold `nbytes` of the budget for the block.

        Raises `ImageTooLarge` when `nbytes` exceeds the whole budget (it could never fit), and
        `BudgetBusy` when it does not fit within `timeout` seconds (None: wait as long as it
        takes; every holder gives its share back, so it does fit eventually).
        """
        if nbytes > self.capacity_bytes:
            raise ImageTooLarge(
                f"decoding needs about {_mib(nbytes)} MiB, more than the decode memory budget "
                f"of {_mib(self.capacity_bytes)} MiB"
            )
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._used + nbytes <= self.capacity_bytes, timeout
            ):
                raise BudgetBusy(f"{_mib(nbytes)} MiB of decode memory not free in time")
            self._used += nbytes
        try:
            yield
        finally:
            with self._changed:
                self._used -= nbytes
                self._changed.notify_all()


def reserved(
    budget: MemoryBudget | None, nbytes: int, *, timeout: float | None = None
) -> AbstractContextManager[None]:
    """`budget.reserve(nbytes, timeout=timeout)`, or nothing to hold when there is no budget."""
    return nullcontext() if budget is None else budget.reserve(nbytes, timeout=timeout)


def return_freed_pixels_promptly() -> bool:
    """Make glibc's malloc hand large freed blocks straight back to the system; True if set.

    By default glibc raises its mmap threshold after the first large free, so later image blocks
    come from per-thread arenas that keep their pages after the image is gone: with two render
    threads a process's RSS grew to about twice the budget (`bench/memory.py`). A fixed
    threshold keeps every block of `MMAP_THRESHOLD_BYTES` or more mapped on its own and unmapped
    when freed, so RSS follows the budget (a big picture's pixels are Pillow blocks of 16 MiB).

    Fixing it also stops glibc from raising its trim threshold, so without a fixed one as well,
    free memory at the top of an arena went back to the system at every free and came back as
    fresh pages at the next allocation: a 12 MP render took 25,000 page faults and 25 % more CPU.
    With 8 MiB and a 64 MiB trim threshold it takes about 600, as with glibc's own defaults.
    A no-op where there is no glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
        )
    except (OSError, AttributeError):
        return False


def _mib(nbytes: int) -> int:
    return -(-nbytes // MIB)
