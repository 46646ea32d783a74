"""A process's image memory stays within its decode budget (docs/design.md §6, memory), measured
as the peak RSS of a real `batchcrop run`, and opening an image never decodes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from batchcrop.crop.decode import open_image

BUDGET_MIB = 700
# Runs the CLI in a fresh interpreter and prints how much its peak RSS (VmHWM) grew during the
# command, in MiB (ru_maxrss would carry the parent's high-water mark over the exec).
_RUN = """
import sys
from pathlib import Path
from batchcrop.cli.main import main
def high_water():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
before = high_water()
code = main(sys.argv[1:])
print(code, (high_water() - before) >> 20)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_two_slots_rendering_big_pngs_stay_within_the_budget(tmp_path: Path) -> None:
    """Four 30 MP RGBA PNGs (about 410 MiB each to decode, estimated) with two slots and a
    700 MiB budget: one decode at a time, and the process grows by less than the budget (its
    libraries, loaded during the run, and the freed memory glibc keeps per thread, up to its
    64 MiB trim threshold, included; a second decode at once would add about 400 MiB more).
    Without freed blocks going back to the system at once, the second thread's arena kept its
    own copy and the process grew by about 770 MiB."""
    src = tmp_path / "src"
    src.mkdir()
    for n in range(4):
        Image.new("RGBA", (6000, 5000), (30, 60, 90 + n, 200)).save(src / f"big{n}.png")
    args = ["run", str(src), "--out", str(tmp_path / "out"), "--no-progress", "--workers", "2"]
    args += ["--database-url", f"sqlite:///{tmp_path / 'b.db'}"]
    args += ["--decode-memory-mib", str(BUDGET_MIB)]
    out = subprocess.run(
        [sys.executable, "-c", _RUN, *args], capture_output=True, text=True, check=True
    ).stdout
    code, grew_mib = (int(n) for n in out.split()[-2:])
    assert code == 0
    assert grew_mib < BUDGET_MIB


def test_opening_a_png_with_exif_after_its_pixels_decodes_nothing(tmp_path: Path) -> None:
    """Pillow's `getexif()` on a PNG decodes the whole image to find an eXIf chunk after the
    pixel data; the engine reads orientation without it, so the pixel cap and the memory budget
    are checked before any decode. (Such a late chunk is not honoured; writers put it first.)"""
    path = tmp_path / "late-exif.png"
    image = Image.new("RGB", (300, 200), (10, 20, 30))
    exif = image.getexif()
    exif[0x0112] = 6
    image.save(path, exif=exif.tobytes())
    data = path.read_bytes()
    # Move the eXIf chunk behind the IDAT chunk (PNG chunks: length, type, data, CRC).
    start = data.index(b"eXIf") - 4
    length = int.from_bytes(data[start : start + 4], "big")
    chunk = data[start : start + 12 + length]
    rest = data[:start] + data[start + 12 + length :]
    end = rest.index(b"IEND") - 4
    moved = rest[:end] + chunk + rest[end:]
    opened = open_image(moved, 80_000_000)
    assert opened.image.tile, "the pixels are still undecoded"
    assert (opened.orientation, opened.size) == (1, (300, 200))
