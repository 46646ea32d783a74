"""Re-running an unchanged catalogue: every item rendered again (as before, and as `--force`
still does) versus succeeding from the stored outputs' facts (known outputs).

Writes `--items` distinct photos, runs one batch over them (the first run, which renders and
stores everything), then two more batches over the same sources in one in-process worker of
`--workers` slots: one forced (each item read, decoded and rendered; each write finds the same
bytes under its key) and one as a re-run now goes (each item read and hashed, one listing and
the heads of its outputs, no decode). Prints wall time, the process's CPU time (every thread:
slots, writes, the SQLite database), and what a 100,000-item catalogue would take at the same
per-item cost (the work per item does not depend on the batch's size: claims and commits are
index probes).

    .venv/bin/python bench/rerun.py [--items 2000] [--size 1600x1200] [--workers 2]
        [--database-url URL] [--store URL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchcrop.app import App, build
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RATIOS_DEFAULT, Ratio, RenderSpec
from batchcrop.settings import Settings
from batchcrop.worker.worker import WorkerOptions
from leases import TERMINAL
from storage import ObjectStore
from tests.images import photo

CATALOGUE_ITEMS = 100_000
POLL_SECONDS = 0.2
GRID = 50


@dataclass(frozen=True)
class Run:
    name: str
    items: int
    wall_seconds: float
    cpu_seconds: float
    renders: float
    known: float

    def line(self) -> str:
        per_item_ms = self.cpu_seconds / self.items * 1000
        scaled_minutes = per_item_ms * CATALOGUE_ITEMS / 1000 / 60
        return (
            f"{self.name:<22} {self.wall_seconds:>8.1f} s {self.items / self.wall_seconds:>8.1f}/s "
            f"{self.cpu_seconds:>8.1f} s {per_item_ms:>8.1f} ms "
            f"{int(self.renders):>8} {int(self.known):>8}   {scaled_minutes:>8.1f} min CPU, "
            f"{CATALOGUE_ITEMS / (self.items / self.wall_seconds) / 60:.1f} min wall"
        )


def write_catalogue(folder: Path, count: int, size: tuple[int, int]) -> list[Path]:
    """`count` photos with distinct bytes: the subject moves over a grid, its colour cycles."""
    folder.mkdir(parents=True, exist_ok=True)
    w, h = size
    paths = []
    for n in range(count):
        x = w // 8 + (n % GRID) * (w * 3 // 4) // GRID
        y = h // 8 + (n // GRID % GRID) * (h * 3 // 4) // GRID
        path = folder / f"photo-{n:06d}.jpg"
        path.write_bytes(photo(w, h, subject=(x, y), seed=n // (GRID * GRID)))
        paths.append(path)
    return paths


def _counter(app: App, name: str) -> float:
    return app.metrics.registry.get_sample_value(f"batchcrop_{name}_total") or 0.0


def run(
    app: App, store: ObjectStore, name: str, sources: list[Path], *, force: bool, workers: int
) -> Run:
    """Submit a batch over `sources` and process it in this process; its figures."""
    request = BatchRequest(
        items=tuple(ItemRequest(source=str(p), ref=p.stem) for p in sources),
        spec=RenderSpec(ratios=tuple(Ratio.parse(r) for r in RATIOS_DEFAULT)),
        deadline_seconds=24 * 3600,
        max_attempts=3,
        label=name,
    )
    status, _ = app.batches.submit(request)
    renders, known = _counter(app, "renders"), _counter(app, "known_outputs")
    worker = app.worker(
        store,
        WorkerOptions(concurrency=workers, batch_ids=[status["id"]], force_render=force),
        trusted_sources=True,
        deliver=False,
    )
    cpu, wall = time.process_time(), time.monotonic()
    worker.start()
    try:
        while app.batches.status(status["id"])["state"] not in TERMINAL:
            time.sleep(POLL_SECONDS)
    finally:
        worker.stop()
        worker.join(60)
    final = app.batches.status(status["id"])
    if final["state"] != "succeeded":
        raise SystemExit(f"{name}: the batch ended {final['state']}: {final['failures']}")
    return Run(
        name,
        len(sources),
        time.monotonic() - wall,
        time.process_time() - cpu,
        _counter(app, "renders") - renders,
        _counter(app, "known_outputs") - known,
    )


def main() -> int:
    """The first run, the forced re-run and the re-run from known outputs, side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--size", default="1600x1200", help="source pixels, WxH")
    parser.add_argument("--workers", type=int, default=2, help="slots of the worker")
    parser.add_argument("--database-url")
    parser.add_argument("--store", help="a store URL (default: a temporary folder)")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sources = write_catalogue(root / "src", args.items, (width, height))
        settings = Settings(
            database_url=args.database_url or f"sqlite:///{root / 'bench.db'}",
            store=args.store or f"file://{root / 'store'}",
        )
        app = build(settings)
        app.upgrade()
        store = app.open_store()
        try:
            print(
                f"{args.items} items of {width}x{height}, ratios {len(RATIOS_DEFAULT)}, "
                f"{args.workers} slots; last columns: {CATALOGUE_ITEMS:,} items at this cost"
            )
            print(
                f"{'run':<22} {'wall':>10} {'items':>10} {'CPU':>10} {'CPU/item':>11} "
                f"{'renders':>8} {'known':>8}   extrapolated"
            )
            print(run(app, store, "first run", sources, force=False, workers=args.workers).line())
            forced = run(app, store, "re-run, rendered", sources, force=True, workers=args.workers)
            print(forced.line())
            known = run(
                app, store, "re-run, known outputs", sources, force=False, workers=args.workers
            )
            print(known.line())
            ratio = forced.cpu_seconds / max(known.cpu_seconds, 1e-9)
            print(f"known outputs: {ratio:.0f}x less CPU than rendering the re-run again")
        finally:
            app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
