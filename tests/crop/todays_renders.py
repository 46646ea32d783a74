"""The renders whose bytes are pinned from the release before fit, trim and widths existed.

Each case is a generated source and the request of today's fields it was rendered with; the
digests in `tests/crop/test_fit.py` are those that release's engine gave, with the library
versions pinned beside them (other libraries give other bytes and other variants anyway).
"""

from __future__ import annotations

from typing import Any

from PIL import Image

from tests.crop.images import encode, scene

Case = tuple[str, bytes, dict[str, Any], tuple[int, int, int, int] | None]


def cases() -> list[Case]:
    """(name, source bytes, request fields, focus box) of every pinned render."""
    wide = encode(scene(1600, 1000, (1000, 300, 1400, 700), seed=1), "JPEG", quality=92)
    tall = encode(scene(900, 1500, (200, 900, 600, 1300), seed=2), "JPEG", quality=92)
    alpha = scene(700, 500, (100, 100, 400, 300), seed=3).convert("RGBA")
    alpha.putalpha(Image.new("L", alpha.size, 255).point(lambda v: v))
    alpha.paste((0, 0, 0, 0), (500, 0, 700, 500))
    transparent = encode(alpha, "PNG")
    everything = {"formats": ["jpeg", "webp"]}
    return [
        ("wide", wide, {}, None),
        ("wide-640-q70", wide, {"max_side": 640, "quality": 70, **everything}, None),
        ("wide-focus", wide, {"ratios": ["1:1", "9:16"]}, (100, 100, 500, 500)),
        ("tall", tall, {"ratios": ["16:9", "1:1", "2:3"]}, None),
        ("transparent", transparent, everything, None),
    ]
