"""Item error families: the class decides retry, the category is what users see.

`PermanentItemError` ends an item `failed` at once; `TransientItemError` makes it `retryable`
until the attempts cap. Categories are public and stable (docs/design.md §3) and never carry
secrets or stack traces; `detail` is for logs only.
"""

from __future__ import annotations

from enum import StrEnum

from leases import StopReason


class Category(StrEnum):
    """Public error categories written on items and events."""

    INVALID_IMAGE = "invalid_image"
    IMAGE_TOO_LARGE = "image_too_large"
    UNSUPPORTED_IMAGE = "unsupported_image"
    INVALID_FOCUS = "invalid_focus"
    SOURCE_NOT_FOUND = "source_not_found"
    SOURCE_TOO_LARGE = "source_too_large"
    DERIVATIVE_CONFLICT = "derivative_conflict"
    STORAGE_ACCESS_DENIED = "storage_access_denied"
    SOURCE_UNAVAILABLE = "source_unavailable"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    DEPENDENCY_TIMEOUT = "dependency_timeout"
    INTERNAL_ERROR = "internal_error"
    LEASE_EXPIRED = "lease_expired"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    INTERRUPTED = "interrupted"
    # The lease engine's stop reasons, written as the category of the item they abandon.
    DEADLINE_EXCEEDED = StopReason.DEADLINE_EXCEEDED.value
    CANCELLED = StopReason.CANCELLED.value


class BatchcropError(Exception):
    """Base of every error batchcrop raises on purpose."""


class ItemError(BatchcropError):
    """Processing one item failed; `category` says how, publicly."""

    category: Category = Category.INTERNAL_ERROR

    def __init__(self, detail: str = "", *, category: Category | None = None) -> None:
        super().__init__(detail or self.category.value)
        self.detail = detail
        if category is not None:
            self.category = category


class PermanentItemError(ItemError):
    """Retrying cannot help: the item ends `failed`."""


class TransientItemError(ItemError):
    """Retrying may help: the item becomes `retryable` until the attempts cap."""
