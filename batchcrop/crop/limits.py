"""The crop engine's input limits, in a module that imports nothing."""

from __future__ import annotations

IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".gif", ".webp", ".tif", ".tiff", ".bmp"}
)
"""File name suffixes (lower case; matched in any case) a source folder or prefix expands to."""
MAX_SOURCE_PIXELS = 80_000_000
"""Default pixel-count limit. It stays below Pillow's own bomb warning threshold (89.5 MP), so the
limit callers see is ours; Pillow's hard DecompressionBombError (179 MP) is mapped as well.
Memory: a JPEG decodes DCT-scaled (an 80 MP photo into 1200 px outputs at 1/4), but PNG, TIFF,
WebP and the like decode whole at 4 bytes per pixel, so callers running many renders at once
may want a lower `max_pixels`."""
