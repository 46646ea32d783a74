"""The DNS-rebinding guard: which `Host` the API answers, and which `Origin` may change state."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from batchcrop.api.hosts import host_name
from tests.api.conftest import TOKEN, assert_problem
from tests.api.live import LiveServer


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("[::1]:8000", "[::1]"),
        ("[::1]", "[::1]"),
        ("evil.example:80", "evil.example"),
        ("evil.example:x", "evil.example:x"),
    ],
)
def test_host_name_drops_the_port(value: str, name: str) -> None:
    """A Host header or an origin's authority reduces to its lower-case name."""
    assert name == host_name(value)


def test_without_a_token_only_loopback_names_are_answered(api: LiveServer) -> None:
    """A rebound name pointing at 127.0.0.1 gets a 400 problem, whatever the route; loopback
    names and addresses are answered."""
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.nip.example", "0.0.0.0"):
        for path in ("/v1/batches", "/healthz", "/", "/openapi.json"):
            response = api.client.get(path, headers={"Host": host})
            problem = assert_problem(response, 400)
            assert problem["type"].endswith("bad-host")
    port = api.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "127.0.0.2"):
        assert api.client.get("/v1/batches", headers={"Host": host}).status_code == 200


def test_allowed_hosts_add_names(serve: Callable[..., LiveServer]) -> None:
    """`BATCHCROP_ALLOWED_HOSTS` names a proxy's host: answered besides loopback."""
    live = serve(allowed_hosts=("batchcrop.internal",))
    assert live.client.get("/v1/batches", headers={"Host": "batchcrop.internal"}).status_code == 200
    assert live.client.get("/v1/batches").status_code == 200
    assert_problem(live.client.get("/v1/batches", headers={"Host": "other.example"}), 400)


def test_with_a_token_any_host_unless_a_list_is_set(serve: Callable[..., LiveServer]) -> None:
    """With a token the token protects every host; with a list as well, only its names."""
    open_hosts = serve(api_token=TOKEN)
    assert open_hosts.client.get("/v1/batches", headers={"Host": "api.example"}).status_code == 200
    listed = serve(api_token=TOKEN, allowed_hosts=("api.example",))
    assert listed.client.get("/v1/batches", headers={"Host": "api.example"}).status_code == 200
    assert_problem(listed.client.get("/v1/batches", headers={"Host": "127.0.0.1"}), 400)


def test_a_foreign_origin_cannot_change_state(api: LiveServer, sources: list[str]) -> None:
    """A state-changing request from another site's page is a 403 problem and changes nothing;
    the same request from this origin (the operator page) or without `Origin` (curl) passes,
    and reads are not refused (browsers keep foreign pages from reading them)."""
    batch = api.client.post("/v1/batches", json={"items": [{"source": sources[0]}]}).json()
    path = f"/v1/batches/{batch['id']}/cancel"
    foreign = api.client.post(path, headers={"Origin": "http://evil.example"})
    problem = assert_problem(foreign, 403)
    assert problem["type"].endswith("cross-origin")
    assert api.client.get(f"/v1/batches/{batch['id']}").json()["cancel_requested"] is False
    submit = api.client.post(
        "/v1/batches",
        json={"items": [{"source": sources[0]}]},
        headers={"Origin": "http://evil.example"},
    )
    assert_problem(submit, 403)
    same = api.client.post(path, headers={"Origin": api.url})
    assert same.status_code == 202
    assert (
        api.client.get("/v1/batches", headers={"Origin": "http://evil.example"}).status_code == 200
    )
    unknown = api.client.post(f"/v1/batches/{uuid.uuid4()}/cancel")
    assert_problem(unknown, 404)


def test_every_answer_says_nosniff(api: LiveServer) -> None:
    """Documents, problems, pages, metrics and refusals all carry `nosniff`, exactly once."""
    for response in (
        api.client.get("/v1/batches"),
        api.client.get("/v1/nothing"),
        api.client.get("/"),
        api.client.get("/metrics"),
        api.client.get("/healthz"),
        api.client.get("/v1/batches", headers={"Host": "evil.example"}),
    ):
        assert response.headers.get_list("x-content-type-options") == ["nosniff"]


def test_a_trailing_slash_is_not_redirected_to_the_host_header(
    serve: Callable[..., LiveServer],
) -> None:
    """`/v1/batches/` with a foreign `Host` and no token is a 404 problem, not a redirect to
    `http://evil.example/v1/batches` answered before authentication."""
    live = serve(api_token=TOKEN, client_token="")
    for path in ("/v1/batches/", "/v1/meta/", "/healthz/"):
        response = live.client.get(path, headers={"Host": "evil.example"})
        assert "location" not in response.headers
        assert_problem(response, 404)


def test_405_lists_every_method_of_the_path(api: LiveServer) -> None:
    """`Allow` names the methods of every route on the path, not only the first one's."""
    response = api.client.delete("/v1/batches")
    assert_problem(response, 405)
    assert [m.strip() for m in response.headers["allow"].split(",")] == ["GET", "POST"]


def test_an_oversized_if_none_match_is_ignored(api: LiveServer, sources: list[str]) -> None:
    """An `If-None-Match` longer than any real client sends matches nothing: a 200 with the
    document, never a 422."""
    batch = api.client.post("/v1/batches", json={"items": [{"source": sources[0]}]}).json()
    etag = api.client.get(f"/v1/batches/{batch['id']}").headers["etag"]
    huge = ", ".join([etag] + ['"' + "0" * 30 + '"'] * 200)
    response = api.client.get(f"/v1/batches/{batch['id']}", headers={"If-None-Match": huge})
    assert (200, etag) == (response.status_code, response.headers["etag"])
