"""People without a visible face: a person prior from OpenCV's HOG people detector.

The detector is OpenCV's `HOGDescriptor` with its default people detector (Dalal and Triggs'
linear SVM over histograms of oriented gradients, trained on upright pedestrians; its weights are
compiled into `opencv-python-headless`: nothing is downloaded or read from disk), run on CPU on a
grey copy of at most `PEOPLE_SEARCH_SIDE_PX` (ADR 0038 says why these settings and not another
detector). It finds whole or half figures at least 128 px tall in that copy (about 30 % of the
picture's long side): a person from behind, someone standing beside a product; not small figures
in a crowd, which stay the saliency's.

Only pictures without a face to keep (none at least `faces.FACE_CONFIDENCE` confident) are
searched: where a face is found the windows keep it, and the search would cost a portrait about
as much again as the face search (ADR 0038). A person holding a doubtful face (at least
`faces.AVOID_CUT_CONFIDENCE`) is that face's and dropped. The same pictures the face search skips
(colour without skin tones) skip this search. Deterministic: the detections are grouped and sorted,
so neither thread scheduling inside OpenCV nor the caller's thread changes them; thread-safe.

What a window keeps for them is `batchcrop/crop/keep.py`: a person weighs as a face of
`PERSON_CONFIDENCE`, below any face kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import cv2
import numpy as np
from PIL import Image

from batchcrop.crop.faces import AVOID_CUT_CONFIDENCE, FACE_CONFIDENCE, Face, SearchCopies
from batchcrop.crop.geometry import Box

PEOPLE_SEARCH_SIDE_PX = 448
"""People are searched in a grey copy of at most this many pixels on its longer side: the face
search's size. HOG's cost grows with the pixels (on the real set, one thread: 14 ms at 384 px,
20 ms at 448 px, 28 ms at 512 px); at 384 px the man on the ascent stair is missed."""

PEOPLE_SCALE_STEP = 1.1
"""Each level of the search's pyramid is this much smaller than the one before. At 1.05 the
search costs 36 ms (twice as many levels) and finds the same two figures in the real set."""

PERSON_SCORE = 0.5
"""The least SVM score (its distance from the decision boundary) a person must reach: the real
set's man from behind scores 0.68 at these settings; under 0.5 the detections are railings,
chair backs and coats on hooks."""

PERSON_CONFIDENCE = 45
"""A person weighs as a face this confident (0-100) in `keep.keep_box`: under every face kept
(`faces.FACE_CONFIDENCE`), so a real face wins a window that cannot hold both, and two people
outweigh one doubtful face but not one at 70."""

PEOPLE_DETECTION_BYTES = 4 << 20
"""Memory the person search adds at its peak: the grey copy and HOG's gradient histograms of one
pyramid level (a few MiB at 448 px)."""

_WINDOW_PADDING_PX = (8, 8)  # OpenCV's defaults for the 64x128 people window
_WINDOW_STRIDE_PX = (8, 8)
_GROUP_THRESHOLD = 2  # OpenCV's default: a person is at least two overlapping raw detections


@dataclass(frozen=True, order=True)
class Person:
    """A person found: the box in source pixels and the detector's score."""

    box: Box
    score: float


@cache
def _detector() -> Any:
    hog = cv2.HOGDescriptor()
    hog.setSVMDetector(np.asarray(cv2.HOGDescriptor.getDefaultPeopleDetector(), np.float32))
    return hog


def person_detector() -> str:
    """The person prior's identity in the variant: detector and settings (OpenCV's version is
    in the variant already)."""
    return f"hog-people@{PEOPLE_SEARCH_SIDE_PX}/{PEOPLE_SCALE_STEP}/{PERSON_SCORE}"


def find_people(
    picture: Image.Image,
    size: tuple[int, int],
    faces: Sequence[Face] = (),
    *,
    copies: SearchCopies | None = None,
) -> tuple[Person, ...]:
    """The people in `picture` (an upright RGB decode of a `size` source) at least
    `PERSON_SCORE` sure, in source pixels, sorted by box, less those holding one of `faces`
    (the faces found in it); none without a search where one of `faces` is a face to keep.
    `copies`: the picture's `SearchCopies`, shared with the face search."""
    if not searched(faces):
        return ()
    small = (copies or SearchCopies(picture)).at(PEOPLE_SEARCH_SIDE_PX)
    if small is None:
        return ()
    grey = np.ascontiguousarray(np.asarray(small.convert("L")))
    window_w, window_h = _detector().winSize
    if grey.shape[0] < window_h or grey.shape[1] < window_w:
        return ()
    rects, scores = _detector().detectMultiScale(
        grey,
        winStride=_WINDOW_STRIDE_PX,
        padding=_WINDOW_PADDING_PX,
        scale=PEOPLE_SCALE_STEP,
        groupThreshold=_GROUP_THRESHOLD,
    )
    to_source = (size[0] / small.width, size[1] / small.height)
    found = []
    for (x, y, w, h), score in zip(np.asarray(rects).reshape(-1, 4), np.ravel(scores), strict=True):
        if float(score) < PERSON_SCORE:
            continue
        box = (
            max(0, int(x * to_source[0])),
            max(0, int(y * to_source[1])),
            min(size[0], int(np.ceil((x + w) * to_source[0]))),
            min(size[1], int(np.ceil((y + h) * to_source[1]))),
        )
        if not any(
            _holds(box, face.box) for face in faces if face.confidence >= AVOID_CUT_CONFIDENCE
        ):
            found.append(Person(box, round(float(score), 2)))
    return tuple(sorted(found))


def searched(faces: Sequence[Face]) -> bool:
    """Whether a picture with these faces found is searched for people: none is a face to keep."""
    return all(face.confidence < FACE_CONFIDENCE for face in faces)


def _holds(person: Box, face: Box) -> bool:
    """Whether the face's centre lies inside the person's box."""
    x, y = (face[0] + face[2]) / 2, (face[1] + face[3]) / 2
    return person[0] <= x < person[2] and person[1] <= y < person[3]
