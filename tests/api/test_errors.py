"""Failures inside the server: a 500 or 503 problem, never a stack trace, SQL or a path."""

from __future__ import annotations

import logging
import uuid

import pytest
import sqlalchemy as sa

from batchcrop.app import build
from batchcrop.settings import Settings
from tests.api.conftest import assert_problem, batch_body
from tests.api.live import LiveServer, running

LEAKS = ("Traceback", "sqlalchemy", "SELECT", "lease_", "batchcrop_", 'File "', ".py", "psycopg")


def test_internal_errors_are_bare_500_problems(
    api: LiveServer, sources: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A broken schema yields a 500 problem with no detail leaked; the log has the details."""
    created = api.client.post("/v1/batches", json=batch_body(sources)).json()
    with api.app.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE batchcrop_derivatives"))
    with caplog.at_level(logging.ERROR, logger="batchcrop.api"):
        response = api.client.get(f"/v1/batches/{created['id']}/items")
    problem = assert_problem(response, 500)
    for leak in LEAKS:
        assert leak not in response.text, problem
    assert "unhandled error answering GET" in caplog.text
    assert api.client.get(f"/v1/batches/{created['id']}").status_code == 200


def test_healthz_is_503_without_a_database() -> None:
    """With the database unreachable, /healthz is a 503 problem that leaks no URL or error, and
    the other endpoints answer 503 problems too."""
    app = build(Settings(database_url="postgresql+psycopg://nobody:pw@127.0.0.1:9/none"))
    try:
        with running(app) as live:
            for path in ("/healthz", f"/v1/batches/{uuid.uuid4()}", "/v1/batches"):
                response = live.client.get(path)
                problem = assert_problem(response, 503)
                for leak in (*LEAKS, "nobody", "127.0.0.1:9", "pw"):
                    assert leak not in response.text, problem
    finally:
        app.close()
