"""Progressive JPEGs whose scans repeat: a CPU bomb in miniature, and a slow render to stop.

libjpeg decodes every scan over the whole picture, so repeating a scan multiplies the decode's
cost without changing its pixels much: `repeated_scans` builds such a file from a real encode.
"""

from __future__ import annotations

import io
import re
from functools import cache

import numpy as np
from PIL import Image

_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_SOS = 0xDA
_EOI = 0xD9


def scans(data: bytes) -> list[tuple[int, int]]:
    """The (start, end) of each scan of the JPEG `data`: its SOS segment and entropy data."""
    found: list[tuple[int, int]] = []
    position = 2
    while (marker := _MARKER.search(data, position)) is not None:
        start, code = marker.start(), data[marker.start() + 1]
        if code == _EOI:
            break
        end = start + 2 + int.from_bytes(data[start + 2 : start + 4], "big")
        if code == _SOS:
            following = _MARKER.search(data, end)
            end = len(data) if following is None else following.start()
            found.append((start, end))
        position = end
    return found


def repeated_scans(side: int, repeats: int) -> bytes:
    """A `side`² grey progressive JPEG whose smallest scan comes `repeats` more times."""
    blocks = np.random.default_rng(1).integers(0, 256, (side // 8, side // 8), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(blocks).resize((side, side)).save(
        buffer, format="JPEG", quality=90, progressive=True
    )
    data = buffer.getvalue()
    start, end = min(scans(data), key=lambda scan: scan[1] - scan[0])
    return data[:end] + data[start:end] * repeats + data[end:]


@cache
def slow_jpeg() -> bytes:
    """A valid JPEG under the scan limit whose render takes seconds (450 extra scans of a
    3000² picture): a render that something must stop."""
    return repeated_scans(3000, 450)
