"""Boxes a window must keep (faces with their room, a focus box) and boxes it must not cut."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchcrop.crop.faces import Face
from batchcrop.crop.geometry import place_window
from batchcrop.crop.keep import (
    BARE_ROOM,
    EAR_ROOM,
    HEADROOM,
    PROFILE_ROOM,
    SIDE_ROOM,
    keep_box,
    with_room,
)
from tests.crop.images import contains

Box = tuple[int, int, int, int]


def _salient_left(size: tuple[int, int]) -> np.ndarray:
    """A saliency map whose mass sits in the left eighth: windows go left on their own."""
    saliency = np.zeros((48, 64), dtype=np.float32)
    saliency[:, :8] = 1.0
    return saliency


def test_a_kept_box_overrides_the_saliency() -> None:
    size, window = (1600, 900), (900, 900)
    alone = place_window(window, size, _salient_left(size))
    assert alone[0] == 0
    kept = (1300, 100, 1500, 300)
    box = place_window(window, size, _salient_left(size), keep=kept)
    assert box[0] <= kept[0]
    assert box[2] >= kept[2]


def test_a_box_longer_than_the_window_is_centred_on() -> None:
    size, window = (1600, 400), (400, 400)
    kept = (600, 0, 1200, 400)
    box = place_window(window, size, _salient_left(size), keep=kept)
    assert box == (700, 0, 1100, 400)


def test_a_kept_box_on_the_vertical_axis() -> None:
    size, window = (900, 1600), (900, 506)
    saliency = np.zeros((64, 36), dtype=np.float32)
    saliency[:6, :] = 1.0  # mass at the top
    kept = (300, 1200, 500, 1400)
    box = place_window(window, size, saliency, keep=kept)
    assert box[1] <= kept[1]
    assert box[3] >= kept[3]


def test_whole_boxes_are_left_inside_or_outside() -> None:
    """The saliency alone would put the window's right edge through the face at 860..980."""
    size, window = (1600, 900), (900, 900)
    face = (860, 200, 980, 340)
    cut = place_window(window, size, _salient_left(size))
    assert cut[2] > face[0]
    assert cut[2] < face[2]
    box = place_window(window, size, _salient_left(size), whole=[face])
    inside = box[0] <= face[0] and box[2] >= face[2]
    outside = box[2] <= face[0] or box[0] >= face[2]
    assert inside or outside


def test_where_every_position_cuts_a_face_the_lightest_is_cut() -> None:
    """Two overlapping faces, a 500 px window that must hold a kept box between them: every
    position cuts one of them. The window cuts the doubtful one (weight 40²) and holds the
    confident one (90²), whichever it is and whichever side the saliency favours."""
    size, window = (1600, 900), (500, 900)
    left, right = (300, 200, 700, 400), (600, 200, 1000, 400)
    kept = (640, 300, 660, 320)
    for saliency in (_salient_left(size), _salient_left(size)[:, ::-1].copy()):
        for sure, doubtful in ((left, right), (right, left)):
            box = place_window(
                window,
                size,
                saliency,
                keep=kept,
                whole=[sure, doubtful],
                whole_weights=[90.0 * 90, 40.0 * 40],
            )
            assert box[0] <= sure[0]
            assert box[2] >= sure[2]
    with pytest.raises(ValueError, match="one weight per box"):
        place_window(window, size, _salient_left(size), whole=[left], whole_weights=[1.0, 2.0])


def _face(box: Box, confidence: int = 90) -> Face:
    return Face(box, confidence)


def test_keep_box_gives_headroom() -> None:
    """A window with room keeps half a face height above the face."""
    size = (1000, 1500)
    face = _face((400, 100, 600, 300))
    kept = keep_box([face], (1000, 562), size)
    assert kept is not None
    assert kept[1] == 100 - round(HEADROOM * 200)
    assert kept == with_room(face, size)


def test_keep_box_keeps_every_face_when_they_fit_together() -> None:
    """Three faces across a wide picture that one window can hold are all kept."""
    size, window = (3000, 1000), (1400, 1000)
    faces = [
        _face((300, 300, 400, 400)),
        _face((800, 300, 900, 400)),
        _face((1300, 300, 1400, 400)),
    ]
    kept = keep_box(faces, window, size)
    assert kept is not None
    assert all(contains(kept, face.box) for face in faces)


def test_keep_box_takes_the_heaviest_group_that_fits() -> None:
    """Two faces side by side outweigh one far away; the far one is left out."""
    size, window = (3000, 1000), (1000, 1000)
    big, small, far = (100, 300, 400, 600), (450, 350, 550, 450), (2600, 300, 2700, 400)
    kept = keep_box([_face(far), _face(small), _face(big)], window, size)
    assert kept is not None
    assert kept[0] <= big[0]
    assert kept[2] >= small[2]
    assert kept[2] < far[0]


def test_a_doubtful_large_box_does_not_win_over_a_real_face() -> None:
    """The back of a head scoring 55 is larger than the real face at 92 beside it, and the
    window holds only one of them: the real face is kept; a box under the face confidence is
    never kept at all."""
    size, window = (3000, 1000), (800, 1000)
    head, face = (300, 200, 700, 700), (2200, 300, 2400, 500)
    kept = keep_box([_face(head, 55), _face(face, 92)], window, size)
    assert kept is not None
    assert contains(kept, face)
    assert not contains(kept, head)
    assert keep_box([_face(head, 40)], window, size) is None


def test_room_shrinks_only_as_far_as_the_window_needs() -> None:
    """Two faces that fit with nine tenths of their room, not all of it, keep nine tenths."""
    size = (3000, 1000)
    faces = [_face((400, 300, 600, 500)), _face((1200, 300, 1400, 500))]
    full = _union_of([with_room(face, size) for face in faces])
    window = (full[2] - full[0] - 10, 1000)
    assert keep_box(faces, window, size) == _union_of([with_room(f, size, 0.9) for f in faces])


def test_side_room_holds_an_ear_a_third_of_the_box_beyond_it() -> None:
    """The detector's box of a three-quarter face ends before the ear: full room reaches it."""
    box = (1000, 300, 1300, 700)
    roomy = with_room(_face(box), (3000, 1000))
    assert roomy[2] - box[2] >= 100
    assert box[0] - roomy[0] == round(SIDE_ROOM * 300)


@pytest.mark.parametrize("turn", [-1.0, 1.0])
def test_the_bare_room_of_a_turned_face_is_behind_it(turn: float) -> None:
    """A profile's bare room is its ear's (`EAR_ROOM`) on the side away from where it looks and
    none on the side it looks into; a frontal face's is `BARE_ROOM` on both. Its full room is
    `PROFILE_ROOM` behind (the back of the head) and `SIDE_ROOM` ahead, a frontal face's
    `SIDE_ROOM` on both."""
    box, size = (1000, 300, 1300, 700), (3000, 1000)
    bare = with_room(Face(box, 90, turn), size, 0.0)
    behind, ahead = (bare[2] - box[2], box[0] - bare[0])[:: 1 if turn < 0 else -1]
    assert (behind, ahead) == (round(EAR_ROOM * 300), 0)
    frontal = with_room(Face(box, 90), size, 0.0)
    assert box[0] - frontal[0] == frontal[2] - box[2] == round(BARE_ROOM[0] * 300)
    full = with_room(Face(box, 90, turn), size)
    behind, ahead = (full[2] - box[2], box[0] - full[0])[:: 1 if turn < 0 else -1]
    assert (behind, ahead) == (round(PROFILE_ROOM * 300), round(SIDE_ROOM * 300))
    frontal = with_room(Face(box, 90), size)
    assert box[0] - frontal[0] == frontal[2] - box[2] == round(SIDE_ROOM * 300)


def test_a_tight_window_keeps_the_ear_behind_a_face_that_looks_away() -> None:
    """Two faces looking left fit a window only with the room ahead of them given up: the
    window keeps the ear behind the right one, which symmetric bare room would cut."""
    size = (3000, 1000)
    faces = [Face((600, 200, 800, 500), 90, -1.0), Face((1200, 200, 1500, 500), 90, -1.0)]
    window = (900 + round(EAR_ROOM * 300) + 5, 1000)
    kept = keep_box(faces, window, size)
    assert kept is not None
    assert kept[2] >= 1500 + round(EAR_ROOM * 300)
    symmetric = keep_box([Face(face.box, 90) for face in faces], window, size)
    assert symmetric is not None
    assert symmetric[2] < 1500 + round(EAR_ROOM * 300)


def _union_of(boxes: list[Box]) -> Box:
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def test_keep_box_falls_back_to_the_bare_face() -> None:
    """A face whose room does not fit gets less of it, then none; one that does not fit at all
    is returned to be centred on."""
    size = (2000, 1000)
    face = _face((500, 50, 1300, 950))
    half = with_room(face, size, 0.5)
    assert keep_box([face], (half[2] - half[0], 1000), size) == half
    bare = with_room(face, size, 0.0)
    assert keep_box([face], (bare[2] - bare[0], 1000), size) == bare
    assert keep_box([face], (810, 1000), size) == face.box
    assert keep_box([face], (700, 1000), size) == face.box
    assert keep_box([], (700, 1000), size) is None


@settings(max_examples=200, deadline=None)
@given(
    width=st.integers(200, 3000),
    window_fraction=st.floats(0.2, 0.95),
    face_left=st.floats(0.0, 0.95),
    face_fraction=st.floats(0.01, 0.5),
    salient_cell=st.integers(0, 63),
)
def test_a_face_that_fits_is_always_inside(
    width: int, window_fraction: float, face_left: float, face_fraction: float, salient_cell: int
) -> None:
    """Wherever the saliency is, a face the window can hold ends up inside it."""
    height = 400
    size = (width, height)
    window = (max(1, int(width * window_fraction)), height)
    left = int(face_left * width)
    right = min(width, left + max(1, int(face_fraction * width)))
    face = (left, 100, right, 200)
    saliency = np.zeros((32, 64), dtype=np.float32)
    saliency[:, salient_cell] = 1.0
    kept = keep_box([_face(face)], window, size)
    box = place_window(window, size, saliency, keep=kept, whole=[face])
    assert box[2] - box[0] == window[0]
    if right - left <= window[0]:
        assert contains(box, face), (box, face)
    else:
        centre = (left + right) / 2
        assert abs((box[0] + box[2]) / 2 - centre) <= 1 or box[0] == 0 or box[2] == width


@pytest.mark.parametrize("axis", [0, 1])
def test_nothing_salient_and_nothing_kept_stays_centred(axis: int) -> None:
    size = (1600, 900) if axis == 0 else (900, 1600)
    window = (900, 900)
    box = place_window(window, size, np.zeros((30, 30), dtype=np.float32))
    assert box[axis] == 350


def test_whole_weights_must_be_positive() -> None:
    """A weight of 0 would let a window cut a face as freely as leave it whole."""
    size, window = (1600, 900), (500, 900)
    with pytest.raises(ValueError, match="must be positive"):
        place_window(
            window, size, _salient_left(size), whole=[(400, 0, 700, 300)], whole_weights=[0.0]
        )
