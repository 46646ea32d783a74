"""Finding items by ref or source reads the payload expression indexes of app migration 0009:
PostgreSQL query plans of the batch search and the item page's `from_ref`, on batches large
enough that a scan would be chosen if it were cheaper; the indexes exist on both databases and
go away on a downgrade."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from batchcrop.app import App
from batchcrop.batches.items import ItemRequest
from batchcrop.batches.submission import BatchRequest
from batchcrop.crop import Ratio, RenderSpec
from batchcrop.db import migrations, queries
from leases import State, make_engine
from tests.apps import app_factory

BATCHES = 12
ITEMS_PER_BATCH = 2_500
SEARCH_INDEXES = {"batchcrop_items_ref", "batchcrop_items_source"}


def _request(batch: int, items: int) -> BatchRequest:
    return BatchRequest(
        items=tuple(
            ItemRequest(source=f"/srv/catalogue/b{batch}/p{n}.jpg", ref=f"sku-{n}")
            for n in range(items)
        ),
        spec=RenderSpec(ratios=(Ratio(1, 1),), max_side=64, quality=80),
        deadline_seconds=3600,
        max_attempts=3,
    )


@pytest.fixture
def loaded(postgres_url: str) -> Iterator[tuple[App, list[str]]]:
    """An app on PostgreSQL holding `BATCHES` batches of `ITEMS_PER_BATCH` items, analyzed."""
    with app_factory(database_url=postgres_url) as make:
        app = make()
        ids = [app.batches.submit(_request(b, ITEMS_PER_BATCH))[0]["id"] for b in range(BATCHES)]
        with app.leases.reading() as conn:
            conn.exec_driver_sql("ANALYZE")
        yield app, ids


def _plan(app: App, stmt: sa.Select[Any]) -> str:
    engine = app.engine
    compiled = stmt.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
    with engine.connect() as conn:
        return "\n".join(conn.exec_driver_sql(f"EXPLAIN {compiled}").scalars().all())


@pytest.mark.postgres
def test_batch_search_probes_the_item_indexes(loaded: tuple[App, list[str]]) -> None:
    """The search reads items only through the ref and source indexes, and batch rows only
    between the cursor and the window floor (a dozen rows here: the planner may scan them)."""
    app, _ = loaded
    stmt = queries.batch_page(
        before_seq=BATCHES + 1, limit=25, search="/srv/catalogue/b3/p7.jpg", floor_seq=1
    )
    plan = _plan(app, stmt)
    assert "batchcrop_items_ref" in plan, plan
    assert "batchcrop_items_source" in plan, plan
    assert "Seq Scan on lease_items" not in plan, plan
    assert "seq >= 1" in plan, plan


@pytest.mark.postgres
def test_from_ref_probes_the_ref_index(loaded: tuple[App, list[str]]) -> None:
    """Finding the first item with a ref in a batch never scans the batch's items."""
    app, ids = loaded
    for states in (None, [State.FAILED, State.ABANDONED]):
        plan = _plan(app, queries.first_item_with_ref(ids[0], "sku-2400", states))
        assert "Seq Scan on lease_items" not in plan, plan
        assert "batchcrop_items_ref" in plan, plan
        assert "Sort" not in plan, plan


def _index_names(engine: sa.Engine) -> set[str]:
    catalogue = (
        "SELECT indexname FROM pg_indexes WHERE tablename = 'lease_items'"
        if engine.dialect.name == "postgresql"
        else "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'lease_items'"
    )
    with engine.connect() as conn:
        return set(conn.exec_driver_sql(catalogue).scalars())


def test_0009_creates_and_drops_the_search_indexes(database_url: str) -> None:
    """Upgrading creates both indexes on the lease items; downgrading to 0006 drops them and
    leaves the lease engine's own indexes alone."""
    with app_factory(database_url=database_url) as make:
        app = make()
        assert _index_names(app.engine) >= SEARCH_INDEXES
        before = _index_names(app.engine) - SEARCH_INDEXES
        engine = make_engine(database_url)
        try:
            migrations.downgrade(engine, "0006")
            assert before == _index_names(engine)
            migrations.upgrade(engine)
            assert _index_names(engine) >= SEARCH_INDEXES
        finally:
            engine.dispose()


def test_sqlite_search_uses_the_item_indexes(sqlite_url: str) -> None:
    """SQLite, too, finds items by ref and source through the expression indexes."""
    with app_factory(database_url=sqlite_url) as make:
        app = make()
        app.batches.submit(_request(0, 50))
        stmt = queries.batch_page(before_seq=None, limit=25, search="sku-3")
        compiled = stmt.compile(dialect=app.engine.dialect, compile_kwargs={"literal_binds": True})
        with app.engine.connect() as conn:
            plan = " ".join(
                str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")
            )
        assert "batchcrop_items_ref" in plan, plan
        assert "batchcrop_items_source" in plan, plan
