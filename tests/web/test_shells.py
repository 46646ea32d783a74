"""The page shells and static files over plain HTTP: served without the token, holding no batch
data, locked down by a Content-Security-Policy, and shipped inside the installed package."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest

from batchcrop.web.pages import CONTENT_SECURITY_POLICY
from tests.api.live import LiveServer
from tests.web.conftest import ProcessedBatch

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

STATIC_FILES = ("common.js", "batches.js", "batch.js", "item.js", "sheet.js", "style.css")


def test_shells_need_no_token_and_hold_no_batch_data(processed: ProcessedBatch) -> None:
    """Without a token every shell loads (200, HTML, CSP) yet names no item, ref or source:
    all of that comes from the API, which answers 401 to the same anonymous client."""
    item = processed.items[0]
    with httpx.Client(base_url=processed.live.url) as anonymous:
        for path in (
            "/",
            f"/batches/{processed.id}",
            f"/batches/{processed.id}/items/{item['id']}",
        ):
            response = anonymous.get(path)
            assert response.status_code == 200, path
            assert response.headers["content-type"].startswith("text/html")
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert response.headers["x-content-type-options"] == "nosniff"
            for secret in ("sku-", "sources", "img0", "derivatives/"):
                assert secret not in response.text, (path, secret)
        assert anonymous.get(f"/v1/batches/{processed.id}").status_code == 401


def test_shell_ids_are_canonical_and_escaped(live: LiveServer) -> None:
    """Ids in page addresses are parsed as UUIDs: upper case is canonicalised, anything else is
    a 404 page that echoes nothing of the request."""
    batch_id = str(uuid.uuid4())
    upper = batch_id.upper()
    with httpx.Client(base_url=live.url) as anonymous:
        page = anonymous.get(f"/batches/{upper}")
        assert f'data-batch-id="{batch_id}"' in page.text
        for path in ("/batches/<img src=x onerror=alert(1)>", f"/batches/{upper}/items/nope"):
            response = anonymous.get(path)
            assert response.status_code == 404
            assert response.headers["content-type"].startswith("text/html")
            assert "<img src=x" not in response.text
            assert "nope" not in response.text


def test_static_files_are_the_packaged_ones(live: LiveServer) -> None:
    """Every script and the style sheet are served with their types; other names are 404."""
    with httpx.Client(base_url=live.url) as anonymous:
        for name in STATIC_FILES:
            response = anonymous.get(f"/static/{name}")
            assert response.status_code == 200, name
            kind = "text/css" if name.endswith(".css") else "text/javascript"
            assert response.headers["content-type"].startswith(kind)
        for name in ("missing.js", "..%2Fpages.py", "pages.py", "__init__.py"):
            assert anonymous.get(f"/static/{name}").status_code == 404, name


def test_every_script_a_shell_loads_is_served(live: LiveServer) -> None:
    """The scripts and style sheets the shells reference, and the modules those import, exist."""
    with httpx.Client(base_url=live.url) as anonymous:
        shells = [anonymous.get(p).text for p in ("/", f"/batches/{uuid.uuid4()}")]
        referenced = {n for text in shells for n in re.findall(r'/static/([\w.]+)"', text)}
        for name in list(referenced):
            script = anonymous.get(f"/static/{name}").text
            referenced |= set(re.findall(r'from "\./([\w.]+)"', script))
        assert {"style.css", "batches.js", "batch.js", "common.js", "sheet.js"} <= referenced
        for name in referenced:
            assert anonymous.get(f"/static/{name}").status_code == 200, name
