"""People first: the faces in a picture, and the box each ratio's window keeps for them.

The detector is OpenCV's Haar cascades (frontal faces, and profiles facing either way), shipped
inside the `opencv-python-headless` wheel: nothing is downloaded, it runs on the CPU in a few
milliseconds on the small copy it reads, and it is deterministic (one OpenCV thread; each caller
thread has its own classifiers, which are not safe to share). ADR 0003 says why this detector.

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

from batchcrop.crop.window import Box

DETECT_SIDE_PX = 400
"""Faces are searched in a grey copy of at most this many pixels on its longer side."""

MIN_FACE_FRACTION = 0.08
"""Smallest face searched, as a fraction of the copy's shorter side (and never under 20 px)."""

SCALE_STEP = 1.15
FRONTAL_NEIGHBOURS = 5
PROFILE_NEIGHBOURS = 6
"""Detections a face needs around it (OpenCV's minNeighbors): higher refuses more textures."""

HEADROOM = 0.5
CHIN_ROOM = 0.3
SIDE_ROOM = 0.2
"""Room kept around a face: above it, below it and on each side, in face heights or widths."""

DETECTION_BYTES = 8 << 20
"""Memory a detection adds at its peak: the copies, OpenCV's pyramid and integral images (6 MiB
measured on a busy picture). The code pages a process's first detection maps in (about 14 MiB)
count as start-up size, like the libraries' own."""

_MIN_FACE_PX = 20
_MERGE_OVERLAP = 0.3  # two detections sharing this much of the smaller one are one face
_CASCADES = ("haarcascade_frontalface_alt2.xml", "haarcascade_profileface.xml")

cv2.setNumThreads(1)  # deterministic, and the worker's threads already fill the cores
_local = threading.local()


def _classifiers() -> tuple[cv2.CascadeClassifier, cv2.CascadeClassifier]:
    found: tuple[cv2.CascadeClassifier, cv2.CascadeClassifier] | None = getattr(
        _local, "classifiers", None
    )
    if found is None:
        folder = Path(cv2.__file__).parent / "data"  # the wheel's cascades (`cv2.data`)
        loaded = [cv2.CascadeClassifier(str(folder / name)) for name in _CASCADES]
        if any(classifier.empty() for classifier in loaded):
            raise RuntimeError("OpenCV's Haar cascades are missing from its installation")
        found = (loaded[0], loaded[1])
        _local.classifiers = found
    return found


def find_faces(picture: Image.Image, size: tuple[int, int]) -> tuple[Box, ...]:
    """The faces in `picture` (an upright RGB decode of a `size` source), in source pixels.

    Sorted by position; overlapping detections (frontal and profile of one face) are merged.
    """
    scale = min(1.0, DETECT_SIDE_PX / max(picture.size))
    small = picture.convert("L")
    if scale < 1.0:
        small = small.resize(
            (max(1, round(picture.width * scale)), max(1, round(picture.height * scale))),
            Image.Resampling.BOX,
        )
    grey = cv2.equalizeHist(np.asarray(small))
    side = max(_MIN_FACE_PX, round(MIN_FACE_FRACTION * min(grey.shape)))
    if min(grey.shape) < side:
        return ()
    frontal, profile = _classifiers()
    found = [
        *_detect(frontal, grey, side, FRONTAL_NEIGHBOURS),
        *_detect(profile, grey, side, PROFILE_NEIGHBOURS),
    ]
    mirrored = np.ascontiguousarray(grey[:, ::-1])
    width = grey.shape[1]
    for left, top, right, bottom in _detect(profile, mirrored, side, PROFILE_NEIGHBOURS):
        found.append((width - right, top, width - left, bottom))
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


def with_room(face: Box, size: tuple[int, int]) -> Box:
    """The face with headroom, chin room and side room, within the picture."""
    left, top, right, bottom = face
    width, height = right - left, bottom - top
    return (
        max(0, left - round(SIDE_ROOM * width)),
        max(0, top - round(HEADROOM * height)),
        min(size[0], right + round(SIDE_ROOM * width)),
        min(size[1], bottom + round(CHIN_ROOM * height)),
    )


def keep_box(faces: Sequence[Box], window: tuple[int, int], size: tuple[int, int]) -> Box | None:
    """The box a `window` of a `size` picture keeps for `faces`, or None if there are none.

    Faces are taken largest first while the union of them with their room still fits the
    window along its free axis; when even the largest does not fit with its room, the bare
    face is kept if it fits, and otherwise returned anyway (the window centres on it).
    """
    if not faces:
        return None
    axis = 0 if window[0] < size[0] else 1
    length = window[axis]
    by_size = sorted(faces, key=lambda f: (-(f[2] - f[0]) * (f[3] - f[1]), f))
    kept: Box | None = None
    for face in by_size:
        roomy = with_room(face, size)
        union = roomy if kept is None else _union(kept, roomy)
        if union[axis + 2] - union[axis] <= length:
            kept = union
    if kept is not None:
        return kept
    return by_size[0]


def _union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
