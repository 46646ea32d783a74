"""The wheel ships all three packages with their type markers and migration scripts."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The file names inside a freshly built wheel of this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("batchcrop-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


@pytest.mark.parametrize("package", ["batchcrop", "leases", "storage"])
def test_each_package_ships_with_its_py_typed_marker(wheel_names: set[str], package: str) -> None:
    """`batchcrop`, `leases` and `storage` are all in the wheel, typed."""
    assert f"{package}/__init__.py" in wheel_names
    assert f"{package}/py.typed" in wheel_names


def test_both_migration_histories_ship(wheel_names: set[str]) -> None:
    """The Alembic environments and revisions of the app and of the lease engine are packaged."""
    for home in ("batchcrop/db", "leases"):
        scripts = [n for n in wheel_names if n.startswith(f"{home}/migrations/versions/")]
        assert any(n.endswith(".py") for n in scripts), home
        assert f"{home}/migrations/env.py" in wheel_names
        assert f"{home}/migrations/script.py.mako" in wheel_names


def test_every_subsystem_package_ships(wheel_names: set[str]) -> None:
    """Each package of `batchcrop/` (docs/design.md §2) is in the wheel, not only the top level."""
    here = Path(__file__).resolve().parents[1] / "batchcrop"
    packages = sorted(p.parent.name for p in here.glob("*/__init__.py"))
    assert len(packages) >= 8
    for package in packages:
        assert f"batchcrop/{package}/__init__.py" in wheel_names, package


def test_tests_and_tooling_stay_out_of_the_wheel(wheel_names: set[str]) -> None:
    """Only the three packages (and metadata) are installed."""
    tops = {n.split("/", 1)[0] for n in wheel_names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"batchcrop", "leases", "storage"}
