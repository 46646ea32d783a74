"""The person prior: people without a visible face are found on real photographs and kept by the
windows like faces, weighing less than any face (docs/design.md §6, ADR 0038)."""

from __future__ import annotations

import cv2
from PIL import Image

from batchcrop.crop import Ratio, RenderSpec, render
from batchcrop.crop.decode import decode_rgb, open_image
from batchcrop.crop.faces import Face, find_faces
from batchcrop.crop.keep import keep_box
from batchcrop.crop.people import Person, find_people, searched
from tests.crop.images import contains
from tests.crop.real_photos import RealPhoto, by_name
from tests.threads import from_threads


def _upright(photo: RealPhoto) -> Image.Image:
    return decode_rgb(open_image(photo.data, 10**8), 1)


def _share_inside(box: tuple[int, int, int, int], mark: tuple[int, int, int, int]) -> float:
    width = min(box[2], mark[2]) - max(box[0], mark[0])
    height = min(box[3], mark[3]) - max(box[1], mark[1])
    if width <= 0 or height <= 0:
        return 0.0
    return width * height / ((box[2] - box[0]) * (box[3] - box[1]))


def test_a_man_seen_from_behind_is_found() -> None:
    """On the ascent stair (no face visible) the man with the backpack is found: the person's
    box lies mostly on the one marked by hand."""
    photo = by_name("ascent")
    picture = _upright(photo)
    assert find_faces(picture, photo.size) == ()
    people = find_people(picture, photo.size)
    backpack = photo.people[0]
    assert [p for p in people if _share_inside(p.box, backpack) > 0.7], people


def test_the_window_keeps_the_man_seen_from_behind() -> None:
    """The ascent's 3:4 window, which the saliency alone put left of him, keeps the man with the
    backpack whole."""
    photo = by_name("ascent")
    (tall,) = render(photo.data, RenderSpec((Ratio(3, 4),), max_side=400))
    assert contains(tall.crop_box, photo.people[0]), tall.crop_box


def test_a_person_holding_a_face_is_the_faces() -> None:
    """A person whose box holds a face found is dropped: the face keeps that person already."""
    photo = by_name("ascent")
    picture = _upright(photo)
    (person, *_) = find_people(picture, photo.size)
    left, top = person.box[:2]
    face = Face((left + 5, top + 5, left + 25, top + 25), 80)
    held = find_people(picture, photo.size, [face])
    assert person not in held


def test_a_product_shot_and_a_tiny_picture_have_no_people() -> None:
    """A colour picture without skin tones is not searched; one smaller than the detector's
    window cannot hold a person."""
    product = Image.new("RGB", (640, 480), (40, 90, 200))
    assert find_people(product, product.size) == ()
    tiny = Image.new("RGB", (60, 40), (200, 150, 120))
    assert find_people(tiny, tiny.size) == ()


def test_people_found_are_the_same_from_every_thread() -> None:
    """Results do not depend on which thread asks, nor on how many ask at once."""
    photo = by_name("ascent")
    picture = _upright(photo)
    alone = find_people(picture, photo.size)
    results = from_threads(lambda: find_people(picture, photo.size))
    assert all(result == alone for result in results)


def test_a_face_outweighs_a_person_and_two_people_a_doubtful_face() -> None:
    """A window that holds only one of a face and a person keeps the face; two people side by
    side outweigh a face at the least confidence kept."""
    size, window = (3000, 1000), (800, 1000)
    person = Person((300, 100, 500, 900), 1.2)
    face = Face((2200, 300, 2400, 500), 70)
    kept = keep_box([face], window, size, [person])
    assert kept is not None
    assert contains(kept, face.box)
    assert not contains(kept, person.box)
    pair = [person, Person((520, 100, 700, 900), 0.9)]
    kept = keep_box([Face(face.box, 50)], window, size, pair)
    assert kept == (300, 100, 700, 900)


def test_people_alone_are_kept() -> None:
    """Without any face, a person found is the box the window keeps."""
    person = Person((2300, 100, 2500, 900), 0.8)
    assert keep_box([], (800, 1000), (3000, 1000), [person]) == person.box
    assert keep_box([], (800, 1000), (3000, 1000)) is None


def test_a_picture_with_a_face_to_keep_is_not_searched() -> None:
    """The astronaut's helmet passes for a person when her picture is searched on its own; with
    her face found, the picture is not searched and nothing competes with the face."""
    photo = by_name("astronaut")
    picture = _upright(photo)
    faces = find_faces(picture, photo.size)
    assert not searched(faces)
    assert find_people(picture, photo.size) != ()
    assert find_people(picture, photo.size, faces) == ()
    assert searched([Face((0, 0, 10, 10), 45)])


def test_people_found_do_not_depend_on_opencvs_threads() -> None:
    """OpenCV searches the pyramid's levels on its own threads: one thread or eight, the
    people found are the same."""
    photo = by_name("ascent")
    picture = _upright(photo)
    threads = cv2.getNumThreads()
    try:
        found = []
        for count in (1, 8):
            cv2.setNumThreads(count)
            found.append(find_people(picture, photo.size))
    finally:
        cv2.setNumThreads(threads)
    assert found[0] == found[1] != ()
