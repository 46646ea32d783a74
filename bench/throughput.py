"""Benchmark: `batchcrop run` on all cores beside the plain libvips script a user would write.

Generates `--images` 12 MP JPEGs (bench/crop.py's scenes), then in one run, `--rounds` times in
turn (each system's fastest round is kept, which lessens other load on a shared machine):

- **vips script**: the script a user would write instead, `--processes` worker processes (one
  per core, `VIPS_CONCURRENCY=1` each); per image: decode once with shrink-on-load (the
  largest JPEG shrink that still covers every output, as bench/crop.py's libvips engine), then
  per ratio (1:1, 4:3, 16:9, 3:4 at 1200 px) attention `smartcrop`, Lanczos-3 resize and a JPEG
  at quality 85 saved into a folder; the pool's start-up is inside the time;
- **engine, threads**: `batchcrop.crop.render` alone (no queue, no store) over the same files
  in `--processes` threads of one process, each output written to a folder, so that the next
  line's difference is the queue, store and bookkeeping;
- **batchcrop run**: `batchcrop run --workers N DIR --out OUT` as a user starts it (its own
  process: start-up, a fresh SQLite database, submission, leases, put-if-absent into a folder,
  manifests, no progress bar; from bytecode, as an installed package), and the same with
  `--workers 1`, for the scaling of a second slot; with `--threads-too`, also
  `--workers N --render-processes 0` (renders in the slots' threads, as before render
  processes);
- **engine, N processes** and **engine, 1 process**: what render children do
  (`render_in_process`, the stored preview included) over the same files split between fresh
  processes with no queue, start-up inside as in the vips script: the scaling the machine
  itself gives N processes, against which `run`'s is read;
- **engine, one thread**: the per-image render time, for the per-item overhead;
- **batchcrop run, one tiny image**: the fixed cost of a `run` (imports, database creation and
  migration, submission, the worker's start and stop), for the per-item overhead; and the same
  on a database at head (a user's second `run` on the default database: no migration).

Printed: wall seconds, images/s, and each system's time over the vips script's; the scaling of
`run` from one worker to N (throughput ratio); then the per-item overhead of `run` over the
engine in threads, start-up taken out, as a share of one render.

    .venv/bin/python bench/throughput.py [--images 32] [--processes 2] [--rounds 2] [--threads-too]

Needs the `bench` extra (pyvips for the script is a dependency of batchcrop itself).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from crop import SOURCE_QUALITY, make_photo, shrink_for  # bench/crop.py's scenes and shrink

RATIOS = ((1, 1), (4, 3), (16, 9), (3, 4))
MAX_SIDE_PX = 1200
QUALITY = 85


def generate(directory: Path, count: int) -> list[Path]:
    """`count` 12 MP JPEGs (odd ones progressive), as bench/crop.py writes them."""
    paths = []
    for index in range(count):
        photo, _subject = make_photo(index)
        path = directory / f"photo-{index:02d}.jpg"
        photo.save(path, "JPEG", quality=SOURCE_QUALITY, progressive=index % 2 == 1)
        paths.append(path)
    return paths


def output_size(ratio: tuple[int, int]) -> tuple[int, int]:
    """The output size of `ratio` with its longer side at MAX_SIDE_PX."""
    width, height = ratio
    if width >= height:
        return MAX_SIDE_PX, round(MAX_SIDE_PX * height / width)
    return round(MAX_SIDE_PX * width / height), MAX_SIDE_PX


def _vips_init() -> None:
    os.environ["VIPS_CONCURRENCY"] = "1"


def _vips_one(job: tuple[Path, Path]) -> None:
    import pyvips  # noqa: PLC0415 - in the pool's processes only

    path, out = job
    probe = pyvips.Image.new_from_file(str(path))
    shrink = shrink_for(probe.width, probe.height)
    image = pyvips.Image.new_from_file(str(path), shrink=shrink).autorot().copy_memory()
    for ratio in RATIOS:
        width, _height = output_size(ratio)
        # The largest window of the ratio inside the picture, cropped where attention says.
        fit = min(image.width / ratio[0], image.height / ratio[1])
        window = (max(1, round(fit * ratio[0])), max(1, round(fit * ratio[1])))
        crop = image.smartcrop(*window, interesting="attention")
        resized = crop.resize(width / window[0], kernel="lanczos3")
        resized.jpegsave(
            str(out / f"{path.stem}-{ratio[0]}x{ratio[1]}.jpg"),
            Q=QUALITY,
            optimize_coding=True,
            interlace=False,
        )


def vips_script(paths: list[Path], out: Path, processes: int) -> float:
    """Wall seconds of the vips script over `paths`, its pool's start-up included."""
    started = time.perf_counter()
    with get_context("spawn").Pool(processes, initializer=_vips_init) as pool:
        pool.map(_vips_one, [(path, out) for path in paths], chunksize=1)
    return time.perf_counter() - started


def _engine_init() -> None:
    # What a render child runs with (renders.spawn), so that the lines compare like with like.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _engine_share(job: tuple[list[Path], Path]) -> None:
    from batchcrop.renders.job import RenderJob, render_in_process  # noqa: PLC0415 (in the pool)

    paths, out = job
    spec = _spec()
    for path in paths:
        for rendition in render_in_process(RenderJob(path.read_bytes(), spec)).renditions:
            name = f"{path.stem}-{rendition.ratio.w}x{rendition.ratio.h}.jpg"
            (out / name).write_bytes(rendition.data)


def _spec():  # type: ignore[no-untyped-def]
    from batchcrop.crop import RATIOS_DEFAULT, Ratio, RenderSpec  # noqa: PLC0415

    return RenderSpec(
        tuple(Ratio.parse(text) for text in RATIOS_DEFAULT), max_side=MAX_SIDE_PX, quality=QUALITY
    )


def engine_processes(paths: list[Path], out: Path, processes: int) -> float:
    """Wall seconds of the render children's own work (`render_in_process`, the preview
    included) over `paths` split between `processes` fresh processes, their start-up inside as
    in the vips script: what the machine gives N processes of the engine, with no queue."""
    shares = [(paths[n::processes], out) for n in range(processes)]
    started = time.perf_counter()
    with get_context("spawn").Pool(processes, initializer=_engine_init) as pool:
        pool.map(_engine_share, shares, chunksize=1)
    return time.perf_counter() - started


def engine(paths: list[Path], out: Path, threads: int) -> float:
    """Wall seconds of `render` alone over `paths` in `threads` threads, outputs written."""
    from batchcrop.crop import RATIOS_DEFAULT, Ratio, RenderSpec, render  # noqa: PLC0415

    spec = RenderSpec(
        tuple(Ratio.parse(text) for text in RATIOS_DEFAULT), max_side=MAX_SIDE_PX, quality=QUALITY
    )

    def one(path: Path) -> None:
        for rendition in render(path.read_bytes(), spec):
            name = f"{path.stem}-{rendition.ratio.w}x{rendition.ratio.h}.jpg"
            (out / name).write_bytes(rendition.data)

    render(paths[0].read_bytes(), spec)  # libraries loaded, as in a running worker
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, paths))
    return time.perf_counter() - started


def batchcrop_run(
    source: Path, out: Path, workers: int, *flags: str, database: Path | None = None
) -> float:
    """Wall seconds of `batchcrop run` (with `flags`) as a user starts it, in its own
    process; on a new database in `out` unless `database` is given."""
    out.mkdir(parents=True, exist_ok=True)
    database = database or out / "batchcrop.db"
    command = [
        sys.executable,
        "-m",
        "batchcrop",
        "run",
        "--workers",
        str(workers),
        "--no-progress",
        "--database-url",
        f"sqlite:///{database}",
        "--out",
        str(out / "derivatives"),
        *flags,
        str(source),
    ]
    # As an installed package runs: from bytecode (pip compiles it), whatever this shell says.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"batchcrop run failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def _copied(folder: Path, to: Path) -> Path:
    """A copy of `folder` at `to` (other source paths: another batch)."""
    shutil.copytree(folder, to)
    return to


def main() -> None:
    """Generate the images, run every system `--rounds` times in turn, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--threads-too",
        action="store_true",
        help="also time `run --render-processes 0` (a checkout with render processes)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as temp:
        root = Path(temp)
        source = root / "sources"
        source.mkdir()
        print(f"generating {args.images} 4000x3000 JPEGs ...", flush=True)
        paths = generate(source, args.images)
        best: dict[str, float] = {}

        def timed(name: str, run: object) -> None:
            out = root / "out"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            seconds = run(out)  # type: ignore[operator]
            best[name] = min(best.get(name, seconds), seconds)
            print(f"  {name:<24} {seconds:7.2f} s", flush=True)

        for round_number in range(args.rounds):
            print(f"round {round_number + 1}", flush=True)
            timed("vips script", lambda out: vips_script(paths, out, args.processes))
            timed("engine, threads", lambda out: engine(paths, out, args.processes))
            timed(
                f"engine, {args.processes} processes",
                lambda out: engine_processes(paths, out, args.processes),
            )
            timed("engine, 1 process", lambda out: engine_processes(paths, out, 1))
            timed("batchcrop run", lambda out: batchcrop_run(source, out, args.processes))
            timed("batchcrop run, 1 worker", lambda out: batchcrop_run(source, out, 1))
            if args.threads_too:
                timed(
                    "batchcrop run, threads",
                    lambda out: batchcrop_run(
                        source, out, args.processes, "--render-processes", "0"
                    ),
                )
        single = engine(paths, root / "out", 1) / len(paths)
        tiny = root / "tiny"
        tiny.mkdir()
        make_photo(0)[0].resize((64, 48)).save(tiny / "tiny.jpg", "JPEG")
        fixed = min(batchcrop_run(tiny, root / f"tiny-out-{n}", 1) for n in range(args.rounds))
        # The same on the database the first of those runs left (at head: no migration), as a
        # user's second `run` with the default database: another folder (a new batch) into
        # another store (rendered again).
        again = min(
            batchcrop_run(
                _copied(tiny, root / f"tiny-{n}"),
                root / f"tiny-again-{n}",
                1,
                database=root / "tiny-out-0" / "batchcrop.db",
            )
            for n in range(args.rounds)
        )
        base = best["vips script"]
        print(
            f"\n{args.images} images, 4 ratios at {MAX_SIDE_PX} px, quality {QUALITY}, "
            f"{args.processes} processes/threads/workers, fastest of {args.rounds} rounds"
        )
        print(f"{'system':<24} {'wall s':>8} {'images/s':>9} {'vs vips script':>15}")
        for name, seconds in best.items():
            print(f"{name:<24} {seconds:8.2f} {args.images / seconds:9.2f} {seconds / base:14.2f}x")
        scaling = best["batchcrop run, 1 worker"] / best["batchcrop run"]
        ceiling = best["engine, 1 process"] / best[f"engine, {args.processes} processes"]
        print(
            f"\n`run --workers {args.processes}` over `run --workers 1`: {scaling:.2f}x the "
            f"throughput (the engine alone, {args.processes} processes over 1: {ceiling:.2f}x); "
            f"over the vips script: {best['batchcrop run'] / base:.2f}x the time"
        )
        spent = best["batchcrop run"] - fixed - best["engine, threads"]
        overhead = spent * args.processes / args.images
        print(
            f"\none render, one thread: {single * 1000:.0f} ms; a run's fixed cost (one tiny "
            f"image): {fixed:.2f} s on a new database, {again:.2f} s on one at head; `run` "
            "over the engine in threads, fixed cost taken out: "
            f"{overhead * 1000:+.0f} ms per item per worker ({overhead / single:+.1%} of a render)"
        )


if __name__ == "__main__":
    main()
