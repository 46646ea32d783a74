"""Cheap structural checks that refuse known CPU bombs before a pixel is decoded.

A valid progressive JPEG may carry any number of scans, and libjpeg decodes every one of them
over the whole picture: a 2.6 MB file whose tiny AC scan repeats 20,000 times costs minutes of
CPU. No encoder writes more than a few dozen scans (libjpeg's progressive script has 10,
mozjpeg's search some 60), so a scan count above `MAX_JPEG_SCANS` is refused as
`invalid_image` by walking the file's markers, at memchr speed (about 4 ms for a 10 MB JPEG).
"""

from __future__ import annotations

import re

from batchcrop.crop.errors import InvalidImage

MAX_JPEG_SCANS = 500
"""The most start-of-scan (SOS) markers a JPEG may carry; the limit libjpeg-turbo's own
fuzzers decode with."""

# A marker: 0xFF then a code that is not a stuffed zero, a restart marker (entropy data goes on
# after both) or another fill byte. Entropy-coded data never holds one, so a search from the end
# of a segment header lands on the next segment, skipping a scan's data in C.
_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_SOS = 0xDA
_EOI = 0xD9
_TEM = 0x01  # a marker without a length


def refuse_scan_bombs(data: bytes, *, max_scans: int = MAX_JPEG_SCANS) -> None:
    """Raise `InvalidImage` when the JPEG `data` has more than `max_scans` scans. Segments are
    skipped by their lengths, so an EXIF thumbnail or a profile's bytes are never counted."""
    scans = 0
    position = 2  # after SOI
    while (found := _MARKER.search(data, position)) is not None:
        start = found.start()
        code = data[start + 1]
        if code == _EOI:
            return
        if code == _TEM:
            position = start + 2
            continue
        if code == _SOS:
            scans += 1
            if scans > max_scans:
                raise InvalidImage(
                    f"progressive JPEG with more than {max_scans} scans: refused before "
                    "decoding (no encoder writes that many; decoding would take minutes)"
                )
        position = start + 2 + int.from_bytes(data[start + 2 : start + 4], "big")
