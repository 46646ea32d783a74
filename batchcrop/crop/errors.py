"""Errors the crop engine raises: each is permanent, because the same bytes fail the same way.

Callers catch `batchcrop.errors.PermanentItemError` to end an item `failed`; the class sets the
public category. Messages name the problem, never the source's path or contents.
"""

from __future__ import annotations

from batchcrop.errors import Category, PermanentItemError


class CropError(PermanentItemError):
    """Base of the crop engine's errors."""


class InvalidImage(CropError):
    """The bytes are not a whole image: empty, text, truncated or corrupt."""

    category = Category.INVALID_IMAGE


class ImageTooLarge(CropError):
    """The image's pixel count exceeds the limit; refused before any pixel was decoded."""

    category = Category.IMAGE_TOO_LARGE


class InvalidFocus(CropError):
    """The item's focus box lies outside the picture (after EXIF orientation)."""

    category = Category.INVALID_FOCUS


class UnsupportedImage(CropError):
    """A real image in a format or mode the engine does not take (SVG, PDF, PSD, HEIC, ...)."""

    category = Category.UNSUPPORTED_IMAGE
