"""Memory, not only pixels: each decode's estimated peak (checked against the peak RSS a real
render reaches) is reserved from a process-wide budget before a pixel is decoded."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from batchcrop.crop import MIB, BudgetBusy, ImageTooLarge, MemoryBudget, RenderSpec, render
from batchcrop.crop.decode import open_image
from batchcrop.crop.render import plan
from batchcrop.crop.resample import packed_rgb
from tests.crop.images import encode

SPEC = RenderSpec.from_input({})
WIDTH, HEIGHT = 4000, 3000

# Renders one file in a fresh interpreter and prints its estimated cost and the peak RSS the
# render added: the process's high-water mark (VmHWM; not ru_maxrss, which keeps the parent's
# across fork and exec) after the render, less the one before it, taken after a warm-up render.
_MEASURE = """
import sys
from pathlib import Path
from PIL import Image
from batchcrop.crop import RenderSpec, render
from batchcrop.crop.decode import open_image
from batchcrop.crop.render import plan
import json
spec = RenderSpec.from_input(json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
tiny = Path(sys.argv[2]).read_bytes()
render(tiny, spec)
data = Path(sys.argv[1]).read_bytes()
cost = plan(open_image(data, 80_000_000), spec).cost_bytes
def high_water():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
before = high_water()
render(data, spec)
print(cost, high_water() - before)
"""


def _noise(mode: str) -> Image.Image:
    """A busy picture (so every encoder works for its bytes) in `mode`, WIDTH x HEIGHT."""
    grey = Image.effect_noise((WIDTH, HEIGHT), 64)
    return Image.merge("RGB", (grey, grey.transpose(Image.Transpose.ROTATE_180), grey)).convert(
        mode
    )


def _oriented(image: Image.Image, orientation: int) -> Image.Image:
    exif = image.getexif()
    exif[0x0112] = orientation
    image.info["exif"] = exif.tobytes()
    return image


@pytest.mark.parametrize(
    ("name", "mode", "fmt", "orientation"),
    [
        ("rgb.jpg", "RGB", "JPEG", 1),
        ("turned.jpg", "RGB", "JPEG", 6),
        ("rgb.png", "RGB", "PNG", 1),
        ("rgba.png", "RGBA", "PNG", 1),
        ("turned-rgba.png", "RGBA", "PNG", 6),
        ("grey.png", "L", "PNG", 1),
        ("palette.png", "P", "PNG", 1),
        ("cmyk.tif", "CMYK", "TIFF", 1),
        ("progressive-444.jpg", "RGB", "JPEG-progressive", 1),
        ("progressive-cmyk.jpg", "CMYK", "JPEG-progressive", 1),
        ("rgb.webp", "RGB", "WEBP", 1),
        ("rgba.webp", "RGBA", "WEBP", 1),
    ],
)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_the_estimate_covers_the_peak_a_real_render_reaches(
    tmp_path: Path, name: str, mode: str, fmt: str, orientation: int
) -> None:
    """For each decoded layout, the reserved estimate is at least what the render added to the
    process's peak RSS, and not more than 1.5 times it plus the fixed overhead."""
    image = _oriented(_noise(mode), orientation)
    path = tmp_path / name
    options: dict[str, object] = {"exif": image.info["exif"]}
    if fmt == "JPEG-progressive":
        fmt, options = "JPEG", {**options, "progressive": True, "subsampling": 0}
    path.write_bytes(encode(image, fmt, **options))
    tiny = tmp_path / "tiny.png"
    Image.new("RGB", (40, 30)).save(tiny)
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), str(tiny)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cost, peak = (int(n) for n in out.split())
    assert peak <= cost <= 1.5 * peak + 32 * MIB, (peak // MIB, cost // MIB)


def test_a_decode_larger_than_the_whole_budget_fails_before_decoding(tmp_path: Path) -> None:
    """A 12 MP RGBA PNG needs about 150 MiB decoded: with 96 MiB it is `image_too_large`, named
    in MiB; the same picture as a JPEG decodes DCT-scaled and fits."""
    picture = Image.new("RGBA", (WIDTH, HEIGHT), (200, 30, 30, 255))
    budget = MemoryBudget(96 * MIB)
    with pytest.raises(ImageTooLarge, match=r"needs about \d+ MiB, more than .* 96 MiB"):
        render(encode(picture, "PNG"), SPEC, budget=budget)
    renditions = render(encode(picture.convert("RGB"), "JPEG"), SPEC, budget=budget)
    assert len(renditions) == len(SPEC.ratios)
    assert budget.used_bytes == 0


def test_renders_that_do_not_fit_together_take_turns(tmp_path: Path) -> None:
    """With room for one decode, a second render waits until the first gives its share back,
    and both succeed."""
    data = encode(Image.new("RGB", (WIDTH, HEIGHT), (10, 120, 30)), "PNG")
    cost = plan(open_image(data, 80_000_000), SPEC).cost_bytes
    budget = MemoryBudget(cost + cost // 2)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with budget.reserve(cost):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    finished: list[float] = []

    def second() -> None:
        render(data, SPEC, budget=budget)
        finished.append(time.monotonic())

    waiter = threading.Thread(target=second)
    waiter.start()
    time.sleep(0.3)
    assert finished == [], "the second render waited for memory"
    released_at = time.monotonic()
    release.set()
    holder.join(10)
    waiter.join(30)
    assert len(finished) == 1
    assert finished[0] >= released_at
    assert budget.used_bytes == 0


def test_a_reservation_that_cannot_fit_in_time_is_busy() -> None:
    """A caller that sets a timeout (the API's thumbnails) gets BudgetBusy, not a hang."""
    budget = MemoryBudget(100 * MIB)
    with budget.reserve(80 * MIB):
        started = time.monotonic()
        with pytest.raises(BudgetBusy), budget.reserve(30 * MIB, timeout=0.2):
            pass
        assert 0.2 <= time.monotonic() - started < 2
    with budget.reserve(100 * MIB):
        assert budget.used_bytes == 100 * MIB


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_the_estimate_covers_many_large_outputs(tmp_path: Path) -> None:
    """With outputs as large as the source (eight ratios at max_side 10000), the canvases and
    outputs alive beside the decode are in the estimate too."""
    path = tmp_path / "big.png"
    path.write_bytes(encode(_noise("RGB"), "PNG"))
    tiny = tmp_path / "tiny.png"
    Image.new("RGB", (40, 30)).save(tiny)
    ratios = ["1:1", "4:3", "16:9", "3:4", "9:16", "2:1", "1:2", "5:4"]
    request = json.dumps({"ratios": ratios, "max_side": 10000})
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), str(tiny), request],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cost, peak = (int(n) for n in out.split())
    assert peak <= cost, (peak // MIB, cost // MIB)


@pytest.mark.parametrize("size", [(1, 1), (37, 255), (601, 257), (300, 1025)])
def test_pixels_packed_in_strips_for_libvips_are_pillows_own_bytes(size: tuple[int, int]) -> None:
    """The packed copy libvips resamples is filled strip by strip (one copy, not Pillow's
    chunks and their join): the bytes are `tobytes()`'s, whatever the rows left in the last
    strip."""
    picture = _noise("RGB").resize(size)
    assert bytes(packed_rgb(picture)) == picture.tobytes()


def test_only_rgb_pictures_are_packed_for_libvips() -> None:
    with pytest.raises(ValueError, match="RGB pictures, not RGBA"):
        packed_rgb(Image.new("RGBA", (4, 300)))
