"""People first: the faces in a picture, and the box each ratio's window keeps for them.

The detector is OpenCV's frontal-face Haar cascade (`alt2`), shipped inside the
`opencv-python-headless` wheel: nothing is downloaded, it runs on the CPU on a copy of at most
`FACE_SEARCH_SIDE_PX` (about 25 ms on this project's 2-core benchmark machine for a whole
copy, two thirds of the time at 320 px, with the same faces found on the real-photo set; colour
pictures search only around their skin-toned pixels, and skip it without them), and it is
deterministic
(one OpenCV thread; each caller thread has its own classifier, which is not safe to share).
Profile faces are left to the saliency's skin term: the profile cascade tripled the cost and
found no more faces on the real-photo set. ADR 0003 says why this detector.

A face found is kept with room around it (`HEADROOM`, `CHIN_ROOM`, `SIDE_ROOM`, in face heights
and widths), so a window that holds it does not put the head against its top edge; the window
keeps as many faces as it can hold, largest first (`keep_box`). Pure functions but for the
per-thread classifiers.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from batchcrop.crop.geometry import Box
from batchcrop.crop.saliency import skin_mask

FACE_SEARCH_SIDE_PX = 256
"""Faces are searched in a grey copy of at most this many pixels on its longer side."""

MIN_FACE_PX = 16
"""Smallest face asked for in that copy; the cascade's own 20 px window is the real floor (8 %
of the copy's longer side: a face smaller than that in the whole picture is left to saliency)."""

SCALE_STEP = 1.2
FRONTAL_NEIGHBOURS = 4
"""Detections a face needs around it (OpenCV's minNeighbors): higher refuses more textures."""

MIN_SKIN_FRACTION = 0.002
"""A colour picture with less skin-toned area than this has no face to look for: most catalogue
pictures (products on a plain ground) skip the detector's cost."""

SKIN_REACH = 0.5
"""The search area reaches this fraction of the skin-toned extent (and at least two smallest
faces) beyond it on every side: hair, a shaded cheek, a beard."""

HEADROOM = 0.5
CHIN_ROOM = 0.3
SIDE_ROOM = 0.2
"""Room kept around a face: above it, below it and on each side, in face heights or widths."""

ROOM_STEPS = (1.0, 0.5, 0.25)
"""Fractions of that room tried in turn when a window cannot hold a face with all of it."""

BARE_CHIN = 0.12
"""Below a face with no room left, this much of its height is still kept: Haar cascades' boxes
end at the mouth or just under it, above the chin."""

DETECTION_BYTES = 8 << 20
"""Memory a detection adds at its peak: the copies, OpenCV's pyramid and integral images (6 MiB
measured on a busy picture). The code pages a process's first detection maps in (about 14 MiB)
count as start-up size, like the libraries' own."""

_MERGE_OVERLAP = 0.3  # two detections sharing this much of the smaller one are one face
_CASCADE = "haarcascade_frontalface_alt2.xml"

cv2.setNumThreads(1)  # deterministic, and the worker's threads already fill the cores
_local = threading.local()


def _classifier() -> cv2.CascadeClassifier:
    found: cv2.CascadeClassifier | None = getattr(_local, "classifier", None)
    if found is None:
        folder = Path(cv2.__file__).parent / "data"  # the wheel's cascades (`cv2.data`)
        found = cv2.CascadeClassifier(str(folder / _CASCADE))
        if found.empty():
            raise RuntimeError("OpenCV's Haar cascades are missing from its installation")
        _local.classifier = found
    return found


def find_faces(picture: Image.Image, size: tuple[int, int]) -> tuple[Box, ...]:
    """The faces in `picture` (an upright RGB decode of a `size` source), in source pixels.

    Sorted by position; overlapping detections of one face (nested boxes the cascade's own
    grouping leaves) are merged.
    """
    scale = min(1.0, FACE_SEARCH_SIDE_PX / max(picture.size))
    small = picture
    if scale < 1.0:
        small = picture.resize(
            (max(1, round(picture.width * scale)), max(1, round(picture.height * scale))),
            Image.Resampling.BOX,
        )
    area = _search_area(small) if min(small.size) >= MIN_FACE_PX else None
    if area is None:
        return ()
    grey = cv2.equalizeHist(np.asarray(small.convert("L")))
    left, top, right, bottom = area
    found = [
        (x0 + left, y0 + top, x1 + left, y1 + top)
        for x0, y0, x1, y1 in _detect(
            _classifier(), grey[top:bottom, left:right], MIN_FACE_PX, FRONTAL_NEIGHBOURS
        )
    ]
    to_source = (size[0] / grey.shape[1], size[1] / grey.shape[0])
    faces = [
        (
            int(left * to_source[0]),
            int(top * to_source[1]),
            min(size[0], int(np.ceil(right * to_source[0]))),
            min(size[1], int(np.ceil(bottom * to_source[1]))),
        )
        for left, top, right, bottom in _merged(found)
    ]
    return tuple(sorted(faces))


def _search_area(small: Image.Image) -> Box | None:
    """Where faces can be in the detection copy: around its skin-toned pixels (a face's box
    reaches past its skin by less than `SKIN_REACH` of the skin's extent), the whole copy for a
    grey picture (which says nothing about skin), or None for a colour picture with too little
    skin to hold a face. The search costs in proportion to the area."""
    ycc = np.asarray(small.convert("YCbCr"))
    luma, cb, cr = ycc[..., 0], ycc[..., 1], ycc[..., 2]
    if (
        int(np.abs(cb.astype(np.int16) - 128).max())
        <= 2
        >= int(np.abs(cr.astype(np.int16) - 128).max())
    ):
        return (0, 0, small.width, small.height)  # grey
    skin = skin_mask(luma, cb, cr)
    if float(skin.mean()) < MIN_SKIN_FRACTION:
        return None
    rows = np.flatnonzero(skin.any(axis=1))
    cols = np.flatnonzero(skin.any(axis=0))
    top, bottom, left, right = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    reach = max(2 * MIN_FACE_PX, round(SKIN_REACH * max(right - left, bottom - top)))
    return (
        max(0, left - reach),
        max(0, top - reach),
        min(small.width, right + reach),
        min(small.height, bottom + reach),
    )


def _detect(
    classifier: cv2.CascadeClassifier, grey: np.ndarray, side: int, neighbours: int
) -> list[Box]:
    boxes = classifier.detectMultiScale(
        grey, scaleFactor=SCALE_STEP, minNeighbors=neighbours, minSize=(side, side)
    )
    return [(int(x), int(y), int(x + w), int(y + h)) for x, y, w, h in boxes]


def _merged(boxes: Sequence[Box]) -> list[Box]:
    """Union of detections that overlap by `_MERGE_OVERLAP` of the smaller, until none do."""
    merged = sorted(boxes)
    changed = True
    while changed:
        changed = False
        for i in range(len(merged)):
            for j in range(i + 1, len(merged)):
                if _overlap(merged[i], merged[j]) >= _MERGE_OVERLAP:
                    a, b = merged[i], merged[j]
                    merged[i] = (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
                    del merged[j]
                    changed = True
                    break
            if changed:
                break
    return merged


def _overlap(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return width * height / smaller


def with_room(face: Box, size: tuple[int, int], share: float = 1.0) -> Box:
    """The face with `share` of its headroom, chin room and side room, within the picture
    (share 0: the bare face and `BARE_CHIN`)."""
    left, top, right, bottom = face
    width, height = right - left, bottom - top
    chin = max(BARE_CHIN, share * CHIN_ROOM)
    return (
        max(0, left - round(share * SIDE_ROOM * width)),
        max(0, top - round(share * HEADROOM * height)),
        min(size[0], right + round(share * SIDE_ROOM * width)),
        min(size[1], bottom + round(chin * height)),
    )


def keep_box(faces: Sequence[Box], window: tuple[int, int], size: tuple[int, int]) -> Box | None:
    """The box a `window` of a `size` picture keeps for `faces`, or None if there are none.

    Faces are taken largest first while the union of them with their room still fits the
    window along its free axis; when even the largest does not fit with its room, less room is
    tried (`ROOM_STEPS`, then none), and a face that does not fit bare is returned anyway (the
    window centres on it).
    """
    if not faces:
        return None
    axis = 0 if window[0] < size[0] else 1
    length = window[axis]
    by_size = sorted(faces, key=lambda f: (-(f[2] - f[0]) * (f[3] - f[1]), f))
    for share in (*ROOM_STEPS, 0.0):
        kept: Box | None = None
        for face in by_size:
            roomy = with_room(face, size, share)
            union = roomy if kept is None else _union(kept, roomy)
            if union[axis + 2] - union[axis] <= length:
                kept = union
        if kept is not None:
            return kept
    return by_size[0]


def _union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
