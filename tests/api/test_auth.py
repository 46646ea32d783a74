"""Bearer-token authentication through a live server."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import httpx
import pytest

from tests.api.conftest import TOKEN, assert_problem, batch_body
from tests.api.live import LiveServer

ENDPOINTS = [
    ("GET", "/v1/batches"),
    ("POST", "/v1/batches"),
    ("GET", "/v1/batches/{id}"),
    ("GET", "/v1/batches/{id}/items"),
    ("GET", "/v1/batches/{id}/items/{id}"),
    ("GET", "/v1/batches/{id}/events"),
    ("POST", "/v1/batches/{id}/cancel"),
    ("POST", "/v1/batches/{id}/requeue"),
    ("POST", "/v1/batches/{id}/redeliver"),
    ("POST", "/v1/batches/{id}/pause"),
    ("POST", "/v1/batches/{id}/resume"),
    ("POST", "/v1/batches/{id}/priority"),
    ("GET", "/v1/batches/{id}/items/{id}/source-thumbnail"),
    ("GET", "/v1/batches/{id}/items/{id}/derivatives/1x1"),
    ("GET", "/v1/batches/{id}/items/{id}/windows"),
    ("POST", "/v1/batches/{id}/items/{id}/recrop"),
    ("GET", "/metrics"),
    ("GET", "/v1/meta"),
    ("GET", "/v1/workers"),
    ("GET", "/openapi.json"),
]


@pytest.fixture
def secured(serve: Callable[..., LiveServer]) -> LiveServer:
    """A live server with a token; its client sends no Authorization header."""
    return serve(api_token=TOKEN, client_token="")


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer wrong",
        f"Basic {TOKEN}",
        f"Bearer {TOKEN}x",
        "Bearer ünïcode".encode(),
    ],
)
def test_every_endpoint_but_healthz_needs_the_token(
    secured: LiveServer, authorization: str | bytes | None
) -> None:
    """Without the right bearer token every endpoint is a 401 problem with WWW-Authenticate."""
    headers = {} if authorization is None else {"Authorization": authorization}
    some_id = str(uuid.uuid4())
    for method, path in ENDPOINTS:
        response = secured.client.request(
            method, path.format(id=some_id), headers=headers, json=batch_body(["/x.jpg"])
        )
        assert_problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in response.text
    assert secured.client.get("/healthz", headers=headers).status_code == 200


def test_the_list_above_is_every_documented_endpoint(secured: LiveServer) -> None:
    """Every operation the OpenAPI document lists (but `/healthz`) is in `ENDPOINTS`, so a new
    route cannot escape the token check unnoticed."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    paths = secured.client.get("/openapi.json", headers=auth).json()["paths"]
    documented = {
        (method.upper(), re.sub(r"\{(batch_id|item_id)\}", "{id}", path).replace("{ratio}", "1x1"))
        for path, operations in paths.items()
        for method in operations
    }
    assert documented - {("GET", "/healthz")} == set(ENDPOINTS) - {("GET", "/openapi.json")}


def test_right_token_opens_every_endpoint(secured: LiveServer, sources: list[str]) -> None:
    """With `Authorization: Bearer <token>` the API behaves as without a token."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    created = secured.client.post("/v1/batches", json=batch_body(sources), headers=auth)
    assert created.status_code == 201, created.text
    batch_id = created.json()["id"]
    assert secured.client.get(f"/v1/batches/{batch_id}", headers=auth).status_code == 200
    assert secured.client.get("/metrics", headers=auth).status_code == 200
    assert "paths" in secured.client.get("/openapi.json", headers=auth).json()
    lower = {"Authorization": f"bearer {TOKEN}"}
    assert secured.client.get("/v1/batches", headers=lower).status_code == 200


def test_head_answers_every_get_route_as_get_without_the_body(
    secured: LiveServer, sources: list[str]
) -> None:
    """`HEAD` on a GET route is the GET's status and headers with no body: a 401 without the
    token, and with it the same type, length and ETag as the GET (it was a 405)."""
    some_id = str(uuid.uuid4())
    for method, path in ENDPOINTS:
        if method == "GET":
            refused = secured.client.head(path.format(id=some_id))
            assert (refused.status_code, refused.content) == (401, b""), path
    auth = {"Authorization": f"Bearer {TOKEN}"}
    batch_id = secured.client.post("/v1/batches", json=batch_body(sources), headers=auth).json()[
        "id"
    ]
    item_id = secured.client.get(f"/v1/batches/{batch_id}/items", headers=auth).json()["items"][0][
        "id"
    ]
    for path in (
        "/v1/batches",
        f"/v1/batches/{batch_id}",
        f"/v1/batches/{batch_id}/items/{item_id}",
        f"/v1/batches/{batch_id}/items/{item_id}/source-thumbnail",
        "/v1/meta",
        "/healthz",
        "/",
    ):
        got, head = (secured.client.request(m, path, headers=auth) for m in ("GET", "HEAD"))
        assert (head.status_code, head.content) == (200, b""), path
        for header in ("content-type", "content-length", "etag"):
            assert got.headers.get(header) == head.headers.get(header), (path, header)
    not_get = secured.client.head(f"/v1/batches/{batch_id}/cancel", headers=auth)
    assert (not_get.status_code, not_get.headers["allow"], not_get.content) == (405, "POST", b"")


def test_without_a_token_the_api_is_open(api: LiveServer) -> None:
    """No BATCHCROP_API_TOKEN (loopback only) means no authentication."""
    assert api.client.get("/v1/batches").status_code == 200
    assert api.client.get("/openapi.json").status_code == 200


def test_problem_for_unknown_routes_and_methods(api: LiveServer) -> None:
    """Unknown paths are 404 and wrong methods 405 (with Allow), both as problems."""
    assert_problem(api.client.get("/v2/anything"), 404)
    response = api.client.delete("/healthz")
    assert_problem(response, 405)
    assert "GET" in response.headers["allow"]


def test_healthz_needs_no_token(secured: LiveServer) -> None:
    """The health check answers without credentials and says nothing but ok."""
    response = httpx.get(secured.url + "/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})
