"""The server's decodes run in its decode children: a source that takes too long to decode is
killed at the deadline and answered 422 while other image requests are served, and a decode
whose client has gone is killed at once (docs/design.md §5, previews)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.api.live import LiveServer
from tests.scans import repeated_scans
from tests.web.conftest import TOKEN, submit

DEADLINE_SECONDS = 1.0
SLOW_SIDE_PX = 4800
"""The slow sources' side: 450 extra scans of a 4800² picture take a thumbnail's reduced decode
about 2.3 s on one quiet core here (`tests.scans.slow_jpeg`'s 3000² took 0.86 s, inside the
deadline on a quiet machine)."""


def _thumbnail_urls(live: LiveServer, source_root: Path) -> dict[str, str]:
    """Thumbnail URLs (none has a stored preview) by ref: two slow sources and a good one."""
    (source_root / "slow-0.jpg").write_bytes(repeated_scans(SLOW_SIDE_PX, 450))
    shutil.copy(source_root / "slow-0.jpg", source_root / "slow-1.jpg")
    names = ["slow-0.jpg", "slow-1.jpg", "img0.jpg"]
    batch = submit(live, [str(source_root / name) for name in names])
    items = live.client.get(f"/v1/batches/{batch['id']}/items").json()["items"]
    base = f"/v1/batches/{batch['id']}/items"
    return {item["ref"]: f"{base}/{item['id']}/source-thumbnail" for item in items}


def test_slow_sources_are_stopped_at_the_deadline_while_other_images_are_served(
    live: LiveServer, source_root: Path
) -> None:
    """Two slow decodes at once end 422 `render_timeout` at the decode deadline, and a good
    source's thumbnail asked meanwhile is served, not answered 503."""
    live.app.decode_deadline_seconds = DEADLINE_SECONDS
    urls = _thumbnail_urls(live, source_root)
    assert live.client.get(urls["sku-2"]).status_code == 200  # the children are warm
    answers: dict[str, tuple[int, str, float]] = {}

    def ask(ref: str) -> None:
        started = time.monotonic()
        with httpx.Client(base_url=live.url, headers=live.client.headers, timeout=60) as client:
            response = client.get(urls[ref])
        answers[ref] = (response.status_code, response.text, time.monotonic() - started)

    hostile = [threading.Thread(target=ask, args=(ref,)) for ref in ("sku-0", "sku-1")]
    for thread in hostile:
        thread.start()
    time.sleep(0.3)
    ask("sku-2")
    for thread in hostile:
        thread.join()

    for ref in ("sku-0", "sku-1"):
        status, text, seconds = answers[ref]
        assert (status, "render_timeout" in text) == (422, True), text
        assert seconds < DEADLINE_SECONDS + 4
    assert answers["sku-2"][0] == 200, answers["sku-2"][1]
    assert live.app.decodes.replaced == 2


def _ask_and_hang_up(url: str, path: str) -> None:
    """Send a GET for `path` on a raw connection, then close it before the answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80)) as conn:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        )
        conn.sendall(request.encode())
        time.sleep(0.5)


def test_a_decode_whose_client_has_gone_is_killed(live: LiveServer, source_root: Path) -> None:
    """A client that hangs up while its slow source decodes has its decode child killed long
    before the decode could end or reach its deadline; the next thumbnail is served."""
    urls = _thumbnail_urls(live, source_root)
    assert live.client.get(urls["sku-2"]).status_code == 200  # the children are warm
    pool: Any = live.app.decodes
    assert pool.replaced == 0

    _ask_and_hang_up(live.url, urls["sku-0"])
    gone = time.monotonic()
    while pool.replaced == 0 and time.monotonic() - gone < 10:
        time.sleep(0.05)

    assert pool.replaced == 1
    assert time.monotonic() - gone < pool.deadline_seconds
    assert live.client.get(urls["sku-2"]).status_code == 200
