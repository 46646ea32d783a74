"""Output formats: JPEG, WebP and AVIF encoders, their settings and one quality scale for all three.

A batch asks for one or more formats; each (ratio, format) is one derivative. The crop box and the
resampled pixels are shared: the render resamples once and encodes once per format (a source with
transparency is the exception, see `render`). `quality` is one number on the JPEG scale (1-100,
default 85) that means the same visual quality in every format. How WebP's and AVIF's own
settings are found is the request's `quality_match` (docs/design.md §6, ADR 0039): by default
(`table`) they are read from `CALIBRATION`, one table per output size class (`SIZE_CLASSES_PX`:
the same setting looks different on a 256 px thumbnail and a 1200 px page image), measured with
SSIMULACRA2 on real photographs (the former `bench/formats.py --calibrate`, docs/benchmarks.md,
ADR 0009), one encode per output (`encode`); with `jpeg`, `matching` searches each output's
setting from `MATCH_STARTS`, at a higher effort per size class (`encode_at`).

Every encoder is deterministic (same pixels, same settings, same libraries ⇒ same bytes) across
runs and threads: AVIF is encoded with one encoder thread because libaom's multi-threaded encoder
gives other bytes for other thread counts. Pure functions. WebP and AVIF encode with the GIL
released; a JPEG saved into a BytesIO is compressed in pieces holding it (into a real file it
would not be), yet two threads rendering at once took the same time either way (a try with an
in-memory file: 2.02-2.14 s against 2.09-2.14 s for 32 renders), so the simpler path stays.
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from functools import cache

from PIL import Image, features

JPEG_SUBSAMPLING = "4:2:0"
JPEG_OPTIMIZE = True
"""Optimised Huffman tables: ~12 % smaller files for ~2 ms per 1200 px output; deterministic."""
WEBP_METHOD = 1
"""libwebp's effort (0-6) for a calibrated output: on the 12 MP benchmark's 1200 px outputs,
method 1 encodes in 28 ms per output against 74 ms for the default 4, with 5 % fewer bytes at
the same setting."""
WEBP_METHODS = (6, 6, 4)
"""libwebp's effort (0-6) per size class for a matched output: at the JPEG's SSIMULACRA2 on
the real photographs, method 4 takes 12 % fewer bytes than method 1 and method 6 another 1-4 %,
each at two to three times the encode time; the small classes, cheap to encode, take 6
(docs/benchmarks.md)."""
WEBP_SHARP = (True, True, False)
"""Per size class, whether a matched WebP output is encoded through libvips with libwebp's
sharp RGB-to-YUV conversion and its smart deblocking (`smart_subsample`, `smart_deblock`, which
Pillow does not reach) rather than by Pillow: at the JPEG's SSIMULACRA2 on the real
photographs, 62 % of the JPEG's bytes against 70 % at 256 px and 79 % against 84 % at 512 px,
at two to three times the encode time; at 1024 px no fewer bytes (100 % either way), so the
largest class keeps Pillow's encoder (docs/benchmarks.md)."""
AVIF_CODEC = "aom"
AVIF_SPEED = 9
"""libaom's speed (0-10) for a calibrated output: 9 is its fastest setting that still searches
(10 gives the same bytes here); 8 saves about 7 % of AVIF's bytes at four times the encode time.
Even at 9 all three formats cost 2.5-3.2 times a JPEG-only render (docs/benchmarks.md)."""
AVIF_SPEEDS = (6, 6, 8)
"""libaom's speed (0-10) per size class for a matched output: at the JPEG's SSIMULACRA2 on
the real photographs, speed 8 takes 10 % fewer bytes than 9 and speed 6 another 8 %, at
about four and ten times the encode time of 9; the small classes take 6, the largest 8
(docs/benchmarks.md)."""
AVIF_THREADS = 1
"""libaom's bytes depend on its thread count at speeds below 9: one thread keeps them fixed."""
AVIF_SUBSAMPLING = "4:2:0"
AVIF_SUBSAMPLINGS = ("4:2:0", "4:4:4", "4:4:4")
"""AVIF's chroma subsampling per size class for a matched output: at the JPEG's SSIMULACRA2
on the real photographs, full-resolution chroma takes fewer bytes than 4:2:0 in the 640 px
class (63 % of the JPEG's against 66 %) and the largest (78 % against 81 % at speed 8): the
score weighs colour edges that halved chroma blurs, and the encoder then spends on luma what
4:2:0 lost. The smallest class keeps 4:2:0 (59 % against 57 %). docs/benchmarks.md."""
AVIF_ALPHA_OPTIONS = {"a:end-usage": "q", "a:cq-level": "0"}
"""libaom's options for a matched output's alpha plane alone: quantizer 0, so its alpha is
exact, as WebP's is (its alpha quality is 100 by default). Otherwise the alpha plane follows the
colour setting, which a flat logo matches to its JPEG's score at AVIF's lowest settings, and its
edges then moved by up to half of full opacity."""
AVIF_MAX_SETTING = 99
"""libavif's 100 is lossless, which the search never needs (and its tuning refuses)."""


@dataclass(frozen=True)
class OutputFormat:
    """One output format: its name in requests, key extension, media type and whether a source's
    transparency is kept (else it is flattened onto white)."""

    name: str
    extension: str
    media_type: str
    keeps_alpha: bool


JPEG = OutputFormat("jpeg", "jpg", "image/jpeg", keeps_alpha=False)
WEBP = OutputFormat("webp", "webp", "image/webp", keeps_alpha=True)
AVIF = OutputFormat("avif", "avif", "image/avif", keeps_alpha=True)
FORMATS: dict[str, OutputFormat] = {f.name: f for f in (JPEG, WEBP, AVIF)}
"""Every output format by name, in the order the documents list them."""

SIZE_CLASSES_PX = (320, 640)
"""Outputs whose longer side is at most 320 px are size class 0, at most 640 px class 1, larger
ones class 2; each class has its own calibration, and for a matched output its own encoder
effort and starting settings."""

CALIBRATION: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((1, 1, 1), (50, 49, 50), (70, 70, 65), (85, 85, 75), (95, 95, 90), (100, 100, 100)),
    ((1, 1, 1), (50, 49, 50), (70, 75, 65), (85, 85, 75), (95, 95, 90), (100, 100, 100)),
    ((1, 1, 1), (50, 49, 50), (70, 90, 75), (85, 95, 85), (95, 95, 90), (100, 100, 100)),
)
"""Per size class, rows of (JPEG quality, WebP quality, AVIF quality), the settings of the
default `quality_match` (`table`): at 70, 85 and 95, the settings whose outputs were, on the
most real photographs of that class, no larger than the JPEG and within 1 SSIMULACRA2 point of
it or better; where none was, the nearest in score, then the fewest bytes (the former
`bench/formats.py --calibrate`, docs/benchmarks.md). The 50 row is the earlier single
table's. Qualities between two rows are interpolated linearly (`encoder_quality`)."""

MATCH_STARTS: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((1, 1, 1), (50, 49, 45), (70, 70, 55), (85, 81, 63), (95, 93, 80), (100, 100, 99)),
    ((1, 1, 1), (50, 49, 50), (70, 78, 62), (85, 86, 72), (95, 95, 85), (100, 100, 99)),
    ((1, 1, 1), (50, 49, 50), (70, 82, 68), (85, 91, 78), (95, 97, 88), (100, 100, 99)),
)
"""Per size class, rows of (JPEG quality, WebP setting, AVIF setting): where the search for a
matched output's setting starts (`matching`, `quality_match` `jpeg`), not the setting
itself. The 85 row is the median of the settings the search chose on the real photographs
of that class (docs/benchmarks.md); the others are set between it and the earlier tables'
rows. Qualities between two rows are interpolated linearly (`encoder_quality`). A start nearer
the answer saves encodes; it changes the bytes only where a score is not monotonic in the
setting."""


def size_class(long_side: int) -> int:
    """The size class of an output whose longer side is `long_side` pixels."""
    return sum(long_side > bound for bound in SIZE_CLASSES_PX)


def encoder_quality(
    name: str,
    quality: int,
    long_side: int = 0,
    table: tuple[tuple[tuple[int, int, int], ...], ...] = CALIBRATION,
) -> int:
    """The encoder's own setting in `table` (`CALIBRATION`, or `MATCH_STARTS` where the search
    starts) for `quality` on the JPEG scale (1-100), for an output whose longer side is
    `long_side` pixels (0: the smallest class)."""
    column = {"jpeg": 0, "webp": 1, "avif": 2}[name]
    if column == 0:
        return quality
    for low, high in itertools.pairwise(table[size_class(long_side)]):
        if low[0] <= quality <= high[0]:
            span = high[0] - low[0]
            step = (quality - low[0]) * (high[column] - low[column])
            # Rounded half up in integers: the same setting on every machine.
            return low[column] + (2 * step + span) // (2 * span)
    raise ValueError(f"quality must be in 1..100, got {quality}")


def encoder_settings(name: str, quality: int) -> str:
    """Everything besides the pixels that decides the bytes of a calibrated `name` output at
    `quality`, as text for the variant (`variant_of`): the encoder's settings (one quality per
    size class, `q85/85/88`) and its libraries' versions."""
    setting = "/".join(
        str(encoder_quality(name, quality, bound + 1)) for bound in (0, *SIZE_CLASSES_PX)
    )
    if name == "webp":
        return f"webp-lossy-q{setting}-m{WEBP_METHOD}-alpha;webp={features.version('webp')}"
    if name == "avif":
        return (
            f"avif-{AVIF_CODEC}-q{setting}-s{AVIF_SPEED}-t{AVIF_THREADS}-{AVIF_SUBSAMPLING}-alpha;"
            f"{avif_versions()}"
        )
    raise ValueError(f"no encoder settings text for {name!r}: JPEG's is the variant's own")


@cache
def avif_versions() -> str:
    from PIL import _avif  # noqa: PLC0415 - Pillow's private module: only when AVIF is asked for

    return f"libavif={_avif.libavif_version};codecs={_avif.codec_versions()}"


def encode(image: Image.Image, name: str, quality: int) -> bytes:
    """`image` (L, RGB or, for WebP and AVIF, RGBA) encoded as `name` at `quality` on the JPEG
    scale with the calibrated setting (`CALIBRATION`): one encode, without metadata; the same
    pixels always give the same bytes."""
    if name == "jpeg":
        return encode_jpeg(image, quality)
    buffer = io.BytesIO()
    setting = encoder_quality(name, quality, max(image.size))
    if name == "webp":
        image.save(buffer, format="WEBP", quality=setting, method=WEBP_METHOD, lossless=False)
    elif name == "avif":
        image.save(
            buffer,
            format="AVIF",
            quality=setting,
            speed=AVIF_SPEED,
            codec=AVIF_CODEC,
            max_threads=AVIF_THREADS,
            subsampling=AVIF_SUBSAMPLING,
        )
    else:
        raise ValueError(f"unknown output format {name!r}")
    return buffer.getvalue()


def encode_at(image: Image.Image, name: str, setting: int) -> bytes:
    """`image` (L, RGB or RGBA) encoded as WebP or AVIF with the encoder's own quality
    `setting`, at its size class's effort for a matched output, without metadata; the same
    pixels always give the same bytes."""
    klass = size_class(max(image.size))
    buffer = io.BytesIO()
    if name == "webp" and WEBP_SHARP[klass]:
        return _sharp_webp(image, setting, WEBP_METHODS[klass])
    if name == "webp":
        image.save(
            buffer, format="WEBP", quality=setting, method=WEBP_METHODS[klass], lossless=False
        )
    elif name == "avif":
        image.save(
            buffer,
            format="AVIF",
            quality=min(setting, AVIF_MAX_SETTING),
            speed=AVIF_SPEEDS[klass],
            codec=AVIF_CODEC,
            max_threads=AVIF_THREADS,
            subsampling=AVIF_SUBSAMPLINGS[klass],
            advanced=AVIF_ALPHA_OPTIONS if image.mode == "RGBA" else None,
        )
    else:
        raise ValueError(f"no encoder setting for {name!r}: JPEG takes the quality as it is")
    return buffer.getvalue()


def _sharp_webp(image: Image.Image, setting: int, effort: int) -> bytes:
    """`image` (L, RGB or RGBA) as lossy WebP by libvips' libwebp, with sharp YUV and smart
    deblocking, alpha lossless (as Pillow's default alpha quality 100), without metadata."""
    from batchcrop.crop.resample import pyvips_module  # noqa: PLC0415 - loads libvips

    bands = len(image.getbands())
    pixels = pyvips_module().Image.new_from_memory(
        image.tobytes(), image.width, image.height, bands, "uchar"
    )
    if bands == 1:
        pixels = pixels.copy(interpretation="b-w")
    data: bytes = pixels.webpsave_buffer(
        Q=setting,
        effort=effort,
        smart_subsample=True,
        smart_deblock=True,
        alpha_q=100,
        lossless=False,
        keep="none",
    )
    return data


def encode_jpeg(image: Image.Image, quality: int) -> bytes:
    """Baseline (non-progressive) JPEG, no metadata; the same pixels always give the same bytes."""
    buffer = io.BytesIO()
    image.save(
        buffer,
        format="JPEG",
        quality=quality,
        optimize=JPEG_OPTIMIZE,
        progressive=False,
        subsampling=JPEG_SUBSAMPLING,
    )
    return buffer.getvalue()
