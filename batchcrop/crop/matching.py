"""WebP and AVIF quality by the request's `quality_match`: calibrated, or matched to the JPEG.

Under the default `table`, `encode_formats` encodes each output once per format, WebP and AVIF
at the calibrated setting (`encode.encode`, `CALIBRATION`). Under `jpeg` (opt-in: a 12 MP source
with four 1200 px ratios renders in 38 s with all three formats against 0.8 s for JPEG alone,
docs/benchmarks.md, ADR 0039), each WebP and AVIF output is matched to its JPEG: the JPEG's
SSIMULACRA2 score in fewer bytes, as follows.

For one output's pixels and the request's quality (the JPEG scale), `encode_formats` encodes the
JPEG at that quality and scores it against the pixels (`ssimulacra2`); then, per other format,
it searches the encoder's own setting (1-100; AVIF to `AVIF_MAX_SETTING`):

1. the smallest setting whose output scores at least the JPEG's, the score taken to rise with
   the setting (a galloping search from `encode.encoder_quality`'s start: one step, then 2, 4,
   … until the answer is bracketed, then halving); when even the top setting scores lower, the
   top setting;
2. if that output is larger than the JPEG, the largest setting whose output is no larger (the
   JPEG-sized bound: the nearest look the format gives within the JPEG's bytes), searched the
   same way, the bytes taken to rise with the setting; when even setting 1 is larger (a tiny
   output, whose container outweighs its pixels), step 1's output stays.

So an output is never larger than the JPEG of the same pixels but in that last case, and scores
at least the JPEG's but in the two bounded ones (docs/design.md §6, ADR 0039). The JPEG is
encoded whether or not it was asked for: the other formats' bytes depend on the pixels and the
quality only, never on the formats listed with them.

A picture with transparency is matched as it is seen on white, as its JPEG shows it, and on
black: its JPEG's score is taken on white, and a candidate's score is the lower of its score on
white and on black (each against the picture flattened onto the same), so that the alpha plane
is held to the same look as the colours (a page may be dark).

Deterministic: every step is a pure function of the pixels, the settings and the libraries, and
the search visits settings in a fixed order; the scores are float32 sums whose last bits could
differ on another CPU's vector unit, which would change a choice only if a candidate's score
equalled the JPEG's to about a millionth of a point. Safe from any thread.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from PIL import Image, features

from batchcrop.crop.colour import BACKGROUND_RGB
from batchcrop.crop.encode import (
    AVIF_CODEC,
    AVIF_MAX_SETTING,
    AVIF_SPEEDS,
    AVIF_SUBSAMPLINGS,
    AVIF_THREADS,
    MATCH_STARTS,
    SIZE_CLASSES_PX,
    WEBP_METHODS,
    WEBP_SHARP,
    avif_versions,
    encode,
    encode_at,
    encode_jpeg,
    encoder_quality,
)
from batchcrop.crop.encode import encoder_settings as calibrated_settings
from batchcrop.crop.resample import vips_version
from batchcrop.crop.spec import QUALITY_MATCH_DEFAULT
from batchcrop.crop.ssimulacra2 import Reference

MATCH_VERSION = "1"
"""Bump when the search or the score changes the settings it chooses."""
MATCH_TEXT = f"match{MATCH_VERSION}-ssimulacra2-ge-jpeg-le-jpeg-bytes"
"""The search as the variant names it (`encoder_settings`)."""
SETTING_MIN = 1
BLACK_RGB = (0, 0, 0)
SETTING_MAX = {"webp": 100, "avif": AVIF_MAX_SETTING}


@dataclass(frozen=True)
class Matched:
    """One format's output for one picture: its bytes, the encoder setting chosen, its score and
    the JPEG's, how many encodes the search made, and whether a bound decided (`bound`: the
    JPEG-sized bound, `top`: no setting reached the score, `larger`: no setting fits the bytes;
    empty when the smallest setting meeting the score was no larger than the JPEG)."""

    data: bytes
    setting: int
    score: float
    jpeg_score: float
    jpeg_bytes: int
    encodes: int
    bound: str


def encoder_settings(name: str, quality: int, match: str = QUALITY_MATCH_DEFAULT) -> str:
    """Everything besides the pixels that decides the bytes of `name` at `quality` under the
    `quality_match` `match`, as text for the variant (`variant_of`): under `table` the
    calibrated settings (`encode.encoder_settings`); under `jpeg` the search (`MATCH_TEXT`), its
    starting settings per size class (`start85/88/90`), the encoder's effort per class and its
    libraries' versions."""
    if match == QUALITY_MATCH_DEFAULT:
        return calibrated_settings(name, quality)
    start = "/".join(
        str(encoder_quality(name, quality, bound + 1, MATCH_STARTS))
        for bound in (0, *SIZE_CLASSES_PX)
    )
    if name == "webp":
        methods = "/".join(map(str, WEBP_METHODS))
        # The classes encoded by libvips' libwebp (sharp YUV, smart deblocking) and by Pillow's.
        sharp = "/".join("vips-sharp" if sharp else "pil" for sharp in WEBP_SHARP)
        return (
            f"webp-lossy-{MATCH_TEXT}-start{start}-m{methods}-{sharp}-alpha;"
            f"webp={features.version('webp')};vips={vips_version()}"
        )
    if name == "avif":
        speeds = "/".join(map(str, AVIF_SPEEDS))
        subsampling = "/".join(AVIF_SUBSAMPLINGS)
        return (
            f"avif-{AVIF_CODEC}-{MATCH_TEXT}-start{start}-s{speeds}-t{AVIF_THREADS}-"
            f"{subsampling}-alpha-cq0;{avif_versions()}"
        )
    raise ValueError(f"no encoder settings text for {name!r}: JPEG's is the variant's own")


def encode_formats(
    image: Image.Image, names: Iterable[str], quality: int, match: str = QUALITY_MATCH_DEFAULT
) -> dict[str, bytes]:
    """`image` (L, RGB, or RGBA for WebP and AVIF) encoded in each format of `names` at
    `quality` on the JPEG scale: under the `quality_match` `table`, once per format at the
    calibrated setting; under `jpeg`, each WebP and AVIF output matched to the JPEG (module
    doc)."""
    if match == QUALITY_MATCH_DEFAULT:
        return {name: encode(image, name, quality) for name in names}
    return {name: output.data for name, output in matched_formats(image, names, quality).items()}


def matched_formats(image: Image.Image, names: Iterable[str], quality: int) -> dict[str, Matched]:
    """`encode_formats` with what each search found (for the benchmark and the tests)."""
    names = tuple(names)
    if "jpeg" in names and image.mode == "RGBA":
        raise ValueError("a JPEG has no transparency: flatten the picture first")
    seen = _seen(image, BACKGROUND_RGB)
    jpeg = encode_jpeg(seen, quality)
    found: dict[str, Matched] = {}
    jpeg_score = float("nan")  # scored only when another format is matched to it
    if any(name != "jpeg" for name in names):
        references = [(BACKGROUND_RGB, Reference(np.asarray(seen)))]
        if image.mode == "RGBA":
            references.append((BLACK_RGB, Reference(np.asarray(_seen(image, BLACK_RGB)))))
        decoded = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))
        jpeg_score = references[0][1].score(decoded)
        for name in names:
            if name != "jpeg":
                found[name] = _matched(
                    image,
                    name,
                    quality,
                    references=references,
                    jpeg_score=jpeg_score,
                    jpeg_bytes=len(jpeg),
                )
    found["jpeg"] = Matched(jpeg, quality, jpeg_score, jpeg_score, len(jpeg), 1, "")
    return {name: found[name] for name in names}


def _seen(image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """The picture as shown on `background`: RGBA flattened, other modes as they are."""
    if image.mode != "RGBA":
        return image
    flat = Image.new("RGB", image.size, background)
    flat.paste(image.convert("RGB"), (0, 0), image.getchannel("A"))
    return flat


def _matched(
    image: Image.Image,
    name: str,
    quality: int,
    *,
    references: list[tuple[tuple[int, int, int], Reference]],
    jpeg_score: float,
    jpeg_bytes: int,
) -> Matched:
    probes: dict[int, tuple[bytes, float]] = {}

    def probe(setting: int) -> tuple[bytes, float]:
        if setting not in probes:
            data = encode_at(image, name, setting)
            decoded: Image.Image = Image.open(io.BytesIO(data))
            if image.mode == "RGBA":
                decoded = decoded.convert("RGBA")
            score = min(
                reference.score(np.asarray(_seen(decoded, background).convert("RGB")))
                for background, reference in references
            )
            probes[setting] = (data, score)
        return probes[setting]

    low, high = SETTING_MIN, SETTING_MAX[name]
    start = min(max(encoder_quality(name, quality, max(image.size), MATCH_STARTS), low), high)
    setting = _first_true(lambda q: probe(q)[1] >= jpeg_score, start, low, high)
    bound = ""
    if setting is None:
        setting, bound = high, "top"
    if len(probe(setting)[0]) > jpeg_bytes:
        too_large = _first_true(lambda q: len(probe(q)[0]) > jpeg_bytes, setting, low, setting)
        if too_large is not None and too_large > low:
            setting, bound = too_large - 1, "bound"
        else:
            bound = "larger"
    data, score = probe(setting)
    return Matched(data, setting, score, jpeg_score, jpeg_bytes, len(probes), bound)


def _first_true(test: Callable[[int], bool], start: int, low: int, high: int) -> int | None:
    """The smallest whole number in `low..high` for which `test` holds, `test` taken to be false
    then true as the number rises; None when it is false at `high`. Galloping from `start`
    (in `low..high`): steps of 1, 2, 4, … away from it until the answer is bracketed, then
    halving; each number is tested at most once if `test` remembers, and always in the same
    order."""
    if test(start):
        true, step = start, 1
        while true > low:
            candidate = max(low, true - step)
            if not test(candidate):
                return _halved(test, candidate, true)
            true, step = candidate, step * 2
        return true
    false, step = start, 1
    while false < high:
        candidate = min(high, false + step)
        if test(candidate):
            return _halved(test, false, candidate)
        false, step = candidate, step * 2
    return None


def _halved(test: Callable[[int], bool], false: int, true: int) -> int:
    """The smallest number in `false + 1..true` for which `test` holds, `test(false)` being
    false and `test(true)` true."""
    while true - false > 1:
        middle = (false + true) // 2
        if test(middle):
            true = middle
        else:
            false = middle
    return true
