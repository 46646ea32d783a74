"""What a window keeps for the faces found: the people as a group, with room around them.

A face is kept with room (`HEADROOM`, `CHIN_ROOM`, `SIDE_ROOM` in face heights and widths), so a
window that holds it does not put the head against its edge nor cut the ear a turned face's box
leaves out: the side behind a turned face (away from where it looks, `Face.turn`) keeps
`EAR_ROOM` for the ear down to the bare room, the side it looks into gives its room up first.
The window keeps the faces as a group: all of them when they fit together along its free axis;
otherwise the group that fits with the most weight, a face weighing its confidence squared (a
real face at 90 outweighs two doubtful ones at 55, three people at 65-80 outweigh one at 92),
ties going to the group nearest the picture's centre. Room is given up in `ROOM_STEPS` (down to
`BARE_ROOM`, then the detector's box alone, a profile's with part of its ear) only where that
keeps more weight, and otherwise as little as the window needs. Only faces at least
`faces.FACE_CONFIDENCE` confident are kept; the weaker ones are only not cut
(`window.place_window`'s `whole`). The people found without a face (`batchcrop/crop/people.py`)
join the group as their boxes, each weighing less than any face kept. Pure functions (ADRs
0031, 0038, 0046).
"""

from __future__ import annotations

from collections.abc import Sequence

from batchcrop.crop.faces import FACE_CONFIDENCE, Face
from batchcrop.crop.geometry import Box
from batchcrop.crop.people import PERSON_CONFIDENCE, Person

HEADROOM = 0.5
CHIN_ROOM = 0.3
SIDE_ROOM = 0.35
"""Room kept around a face: above it, below it and on each side, in face heights or widths.
On each side it holds the ear a turned face's box ends before, or the room it looks into."""

EAR_ROOM = 0.3
"""Room kept behind a fully turned face (`Face.turn` ±1) even with no room left, in face widths:
the hand-marked faces of the real-photo set reach 0.27-0.34 of the detector's box width past it
on that side (the ear and the back of the head), 0.0-0.12 on the side the face looks into."""

PROFILE_ROOM = 0.6
"""The full room behind a fully turned face, in face widths (`SIDE_ROOM` for a frontal one,
between them as it turns), given up first as a window tightens, down to `EAR_ROOM`: a bald
head in profile reaches 0.55 of the detector's box width behind it (the touchline photo), the
other profiles of the real-photo set 0.17-0.38."""

ROOM_STEPS = tuple(step / 10 for step in range(10, -1, -1))
"""Shares of that room tried in turn (1.0, 0.9, ... 0.0) when a window cannot hold the faces
with all of it: between `BARE_ROOM` (share 0) and the full room, linearly."""

_PLAIN = -1.0  # a share meaning the detector's box, without even the bare room (`plain_box`)

PROFILE_TURN = 0.5
"""A face turned further than this (`Face.turn`) is a profile: its box ends at the cheek, so even
its plain box keeps part of `EAR_ROOM` behind it (all of it fully turned). A window that can hold
a profile only by cutting through its ear holds fewer faces instead: the touchline's 3:4 kept
the bald man's face against its edge, the back of his head sliced off (the poker table's
three-quarter faces, turned 0.2-0.4, keep their plain boxes)."""

BARE_ROOM = (0.12, 0.05, 0.05)
"""Room still kept around a face with no room left (each side, above, below, in face widths and
heights): the detector's boxes end inside the ears and at the chin."""


def with_room(face: Face, size: tuple[int, int], share: float = 1.0) -> Box:
    """The face's box with `share` of its room, within a picture of `size` (share 0: the bare
    face with `BARE_ROOM`; behind a turned face, up to `EAR_ROOM` as it turns)."""
    left, top, right, bottom = face.box
    width, height = right - left, bottom - top
    bare_side, bare_above, bare_below = BARE_ROOM
    turned = abs(face.turn)
    behind = bare_side + turned * (EAR_ROOM - bare_side)
    ahead = bare_side * (1.0 - turned)
    bare_left, bare_right = (ahead, behind) if face.turn < 0 else (behind, ahead)
    full_behind = SIDE_ROOM + turned * (PROFILE_ROOM - SIDE_ROOM)
    full_left, full_right = (SIDE_ROOM, full_behind) if face.turn < 0 else (full_behind, SIDE_ROOM)
    room_left, room_right, above, below = (
        bare + share * (max(full, bare) - bare)
        for bare, full in (
            (bare_left, full_left),
            (bare_right, full_right),
            (bare_above, HEADROOM),
            (bare_below, CHIN_ROOM),
        )
    )
    return (
        max(0, left - round(room_left * width)),
        max(0, top - round(above * height)),
        min(size[0], right + round(room_right * width)),
        min(size[1], bottom + round(below * height)),
    )


def plain_box(face: Face, size: tuple[int, int]) -> Box:
    """The face's box as the detector gave it, with a profile's ear (`PROFILE_TURN`)."""
    left, top, right, bottom = face.box
    profile = max(0.0, (abs(face.turn) - PROFILE_TURN) / (1.0 - PROFILE_TURN))
    ear = round(profile * EAR_ROOM * (right - left))
    if face.turn < 0:
        return left, top, min(size[0], right + ear), bottom
    return max(0, left - ear), top, right, bottom


def keep_box(
    faces: Sequence[Face],
    window: tuple[int, int],
    size: tuple[int, int],
    people: Sequence[Person] = (),
) -> Box | None:
    """The box a `window` of a `size` picture keeps for `faces` and `people`, or None if there
    is neither a face to keep (at least `FACE_CONFIDENCE`) nor a person.

    The heaviest group that fits along the window's free axis, with the most room that keeps
    that weight (the detector's box alone, last); a person is its box, without room, weighing as
    a face of `people.PERSON_CONFIDENCE`. When nothing fits even so, the heaviest one's box (the
    window centres on it).
    """
    kept = [face for face in faces if face.confidence >= FACE_CONFIDENCE]
    if not kept and not people:
        return None
    axis = 0 if window[0] < size[0] else 1
    persons = [(PERSON_CONFIDENCE * PERSON_CONFIDENCE, person.box) for person in people]
    best: tuple[tuple[int, float], Box] | None = None
    for share in (*ROOM_STEPS, _PLAIN):
        members = [
            (
                _weight(face),
                plain_box(face, size) if share == _PLAIN else with_room(face, size, share),
            )
            for face in kept
        ]
        group = _heaviest_group([*members, *persons], axis, window[axis], size)
        if group is not None and (best is None or group[0][0] > best[0][0]):
            best = group
    if best is not None:
        return best[1]
    plain = [(_weight(face), face.box) for face in kept] + persons
    return max(plain, key=lambda member: (member[0], _centrality(member[1], axis, size)))[1]


def _weight(face: Face) -> int:
    return face.confidence * face.confidence


def _centrality(box: Box, axis: int, size: tuple[int, int]) -> float:
    """Minus the distance of the box's centre from the picture's along `axis`."""
    return -abs((box[axis] + box[axis + 2]) / 2 - size[axis] / 2)


def _heaviest_group(
    members: Sequence[tuple[int, Box]], axis: int, length: int, size: tuple[int, int]
) -> tuple[tuple[int, float], Box] | None:
    """The members (weight, box) that fit together in `length` along `axis`, with the most
    weight (then nearest the centre): (its weight and centrality, the union of their boxes), or
    None when none fits alone. Each group tried is the members inside a span of `length`
    starting where one member's box does."""
    best: tuple[tuple[int, float], Box] | None = None
    for _, first in members:
        start = first[axis]
        inside = [
            (weight, box)
            for weight, box in members
            if box[axis] >= start and box[axis + 2] <= start + length
        ]
        if not inside:
            continue
        union = _union([box for _, box in inside])
        score = (sum(weight for weight, _ in inside), _centrality(union, axis, size))
        if best is None or score > best[0]:
            best = (score, union)
    return best


def _union(boxes: Sequence[Box]) -> Box:
    return (
        min(box[0] for box in boxes),
        min(box[1] for box in boxes),
        max(box[2] for box in boxes),
        max(box[3] for box in boxes),
    )
