"""Property-based fuzzing from the served OpenAPI document (schemathesis): valid and invalid
requests to every operation of a live server never produce a 5xx, and the answers match the
documented schemas and media types."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)

from tests.api.conftest import batch_body
from tests.api.live import LiveServer

FUZZ_EXAMPLES = 30
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
OPERATIONS = [
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/v1/meta"),
    ("POST", "/v1/batches"),
    ("GET", "/v1/batches"),
    ("GET", "/v1/batches/{batch_id}"),
    ("GET", "/v1/batches/{batch_id}/items"),
    ("GET", "/v1/batches/{batch_id}/items/{item_id}"),
    ("GET", "/v1/batches/{batch_id}/events"),
    ("POST", "/v1/batches/{batch_id}/cancel"),
    ("POST", "/v1/batches/{batch_id}/requeue"),
    ("POST", "/v1/batches/{batch_id}/redeliver"),
    ("POST", "/v1/batches/{batch_id}/pause"),
    ("POST", "/v1/batches/{batch_id}/resume"),
    ("POST", "/v1/batches/{batch_id}/priority"),
    ("GET", "/v1/workers"),
    ("GET", "/v1/batches/{batch_id}/items/{item_id}/source-thumbnail"),
    ("GET", "/v1/batches/{batch_id}/items/{item_id}/derivatives/{ratio}"),
    ("GET", "/v1/batches/{batch_id}/items/{item_id}/windows"),
    ("POST", "/v1/batches/{batch_id}/items/{item_id}/recrop"),
]


def test_every_operation_is_fuzzed(api: LiveServer) -> None:
    """The list fuzzed below is exactly the set of operations the server documents."""
    paths = api.client.get("/openapi.json").json()["paths"]
    documented = {(m.upper(), p) for p, ops in paths.items() for m in ops}
    assert documented == set(OPERATIONS)


# Operations without any input have no invalid variant to generate.
NO_INPUT = {"/healthz", "/metrics", "/v1/meta"}
CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path in OPERATIONS
    for mode in GenerationMode
    if mode is GenerationMode.POSITIVE or path not in NO_INPUT
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_no_server_errors(
    serve: Callable[..., LiveServer],
    sources: list[str],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    """Whatever the input (schema-valid or deliberately invalid), the answer is documented,
    well-typed and never a 5xx; some cases aim at a real batch and item, so more than the 404
    path is exercised."""
    live = serve()
    batch = live.client.post("/v1/batches", json=batch_body(sources)).json()
    item = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"][0]
    schema = schemathesis.openapi.from_dict(live.client.get("/openapi.json").json())
    operation = schema[path][method]

    @given(case=operation.as_strategy(mode), aim_at_real_ids=st.booleans())
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        database=None,
    )
    def check(case: schemathesis.Case, aim_at_real_ids: bool) -> None:
        if case.path_parameters and aim_at_real_ids:
            case.path_parameters.update(
                {
                    k: v
                    for k, v in (("batch_id", batch["id"]), ("item_id", item["id"]))
                    if k in case.path_parameters
                }
            )
        case.call_and_validate(base_url=live.url, checks=CHECKS)

    check()
