"""This checkout's PostgreSQL cluster: a port of its own, never another checkout's server, and
`down` stops only what it should (real clusters, driven through the real command line)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.services import postgres
from tests.services.checkouts import Checkout
from tests.services.ports import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
PG = "tests.services.postgres"


def _require_binaries() -> None:
    try:
        postgres._bin_dir()
    except postgres.PostgresUnavailableError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required under CI: {exc}")
        pytest.skip(f"PostgreSQL not available: {exc}")


def _port(url: str) -> int:
    port = sa.make_url(url).port
    assert port is not None
    return port


def _data_directory(url: str) -> Path:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return Path(str(conn.execute(sa.text("SHOW data_directory")).scalar_one()))
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def template() -> Iterator[Checkout]:
    """A checkout whose cluster was initialised (by `up`) and stopped, to copy from."""
    _require_binaries()
    checkout = Checkout()
    checkout.ok(PG, "up")
    checkout.ok(PG, "down")
    yield checkout
    checkout.remove()


@pytest.fixture(scope="module")
def other(template: Checkout) -> Iterator[Checkout]:
    """Another checkout whose cluster, started by hand (no run id), runs for the whole module."""
    checkout = Checkout()
    checkout.seed_postgres(template)
    checkout.ok(PG, "up")
    yield checkout
    checkout.remove()


@pytest.fixture
def checkout(template: Checkout) -> Iterator[Checkout]:
    """A fresh checkout with an initialised, stopped cluster; removed afterwards."""
    made = Checkout()
    made.seed_postgres(template)
    yield made
    made.remove()


def test_two_checkouts_get_different_ports(other: Checkout, checkout: Checkout) -> None:
    """Two checkouts' clusters listen on different ports, each served from its own data folder."""
    mine, theirs = checkout.ok(PG, "up"), other.ok(PG, "status")
    assert _port(mine) != _port(theirs)
    assert checkout.tmp / "postgres" / "data" == _data_directory(mine)
    assert other.tmp / "postgres" / "data" == _data_directory(theirs)


def test_a_recorded_port_now_serving_another_checkout_is_not_used(
    other: Checkout, checkout: Checkout
) -> None:
    """When this checkout's recorded port answers for another checkout, `up` starts its own
    cluster on a free port instead of handing out the other one's server."""
    their_port = _port(other.ok(PG, "status"))
    (checkout.tmp / "postgres" / "port").write_text(f"{their_port}\n")
    mine = checkout.ok(PG, "up")
    assert their_port != _port(mine)
    assert checkout.tmp / "postgres" / "data" == _data_directory(mine)


def test_a_pinned_port_held_by_another_checkout_is_refused(
    other: Checkout, checkout: Checkout
) -> None:
    """`BATCHCROP_TEST_PG_PORT` naming another checkout's port makes `up` fail with a message
    naming the variable, printing no URL."""
    their_port = _port(other.ok(PG, "status"))
    done = checkout.run(PG, "up", BATCHCROP_TEST_PG_PORT=str(their_port))
    assert (done.returncode, done.stdout) == (1, "")
    assert f"port {their_port} (BATCHCROP_TEST_PG_PORT) is held by another process" in done.stderr


def test_a_free_pinned_port_is_used_and_kept_across_restarts(checkout: Checkout) -> None:
    """A free port pinned by `BATCHCROP_TEST_PG_PORT` is the one served on, and without the
    variable a restart comes back on the recorded port."""
    pinned = free_port()
    assert pinned == _port(checkout.ok(PG, "up", BATCHCROP_TEST_PG_PORT=str(pinned)))
    checkout.ok(PG, "down")
    assert pinned == _port(checkout.ok(PG, "up"))


def test_down_stops_only_its_own_cluster(other: Checkout, checkout: Checkout) -> None:
    """`down` in one checkout stops its cluster and leaves the other checkout's running."""
    checkout.ok(PG, "up")
    assert "stopped PostgreSQL" in checkout.ok(PG, "down")
    assert checkout.run(PG, "status").returncode == 1
    assert other.run(PG, "status").returncode == 0


def test_down_run_stops_only_what_that_run_started(other: Checkout, checkout: Checkout) -> None:
    """`python -m tests.services down --run ID` stops the cluster run ID started, and keeps one
    started by another run or by hand."""
    checkout.ok(PG, "up", BATCHCROP_TEST_SERVICES_RUN="run-a")
    assert "postgres" not in checkout.ok("tests.services", "down", "--run", "run-b")
    assert checkout.run(PG, "status").returncode == 0
    assert "postgres" not in other.ok("tests.services", "down", "--run", "run-a")
    assert other.run(PG, "status").returncode == 0
    assert "postgres: stopped" in checkout.ok("tests.services", "down", "--run", "run-a")
    assert checkout.run(PG, "status").returncode == 1
