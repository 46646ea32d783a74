"""Exit codes of the `batchcrop` command (contract: docs/design.md §7)."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """Exit codes (contract)."""

    OK = 0
    BATCH_NOT_SUCCEEDED = 1
    USAGE = 2
    DATABASE_UNREACHABLE = 3
    STORE_UNREACHABLE = 4
    NO_SUCH_BATCH = 5
    INTERRUPTED = 130
