"""Page routes: the HTML shells of the operator page and the static files they load.

A shell is a layout template filled with one page's main content; it names its script and
carries only ids taken from the URL (validated as UUIDs, HTML-escaped). The database is never
read here, so a shell reveals nothing, not even whether a batch exists: the scripts ask the API.
Files are read from the installed package once, when the router is built.
"""

from __future__ import annotations

import html
import uuid
from dataclasses import dataclass
from importlib import resources
from string import Template

from fastapi import APIRouter
from starlette.responses import Response

HTML_MEDIA_TYPE = "text/html; charset=utf-8"
STATIC_MEDIA_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""Only this server's own scripts, styles and API; images only from it or from object URLs."""
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate each time: an upgraded server must not run yesterday's script.
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Page:
    """One shell: its title, main-content template and script (a file under `static/`)."""

    title: str
    main: str
    script: str


def _package_files(folder: str) -> dict[str, bytes]:
    root = resources.files("batchcrop.web").joinpath(folder)
    return {entry.name: entry.read_bytes() for entry in root.iterdir() if entry.is_file()}


def _canonical_id(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


class Shells:
    """Renders the shells from the packaged templates; immutable after construction."""

    def __init__(self) -> None:
        templates = {name: data.decode() for name, data in _package_files("templates").items()}
        self._layout = Template(templates["layout.html"])
        self._templates = templates

    def render(self, page: Page, status: int = 200, **ids: str) -> Response:
        """The shell of `page`, with `ids` (already canonical) as `data-` attributes of body."""
        main = Template(self._templates[page.main]).substitute(
            {name: html.escape(value) for name, value in ids.items()}
        )
        data = " ".join(
            f'data-{name.replace("_", "-")}="{html.escape(v)}"' for name, v in ids.items()
        )
        body = self._layout.substitute(
            title=html.escape(page.title), main=main, script=page.script, data=data
        )
        return Response(body, status, headers=SECURITY_HEADERS, media_type=HTML_MEDIA_TYPE)


INDEX = Page("Batches", "index.html", "batches.js")
BATCH = Page("Batch", "batch.html", "batch.js")
ITEM = Page("Item timeline", "item.html", "item.js")
NOT_FOUND = Page("Not found", "not_found.html", "common.js")


def page_router() -> APIRouter:
    """The shells (`/`, `/batches/{id}`, `/batches/{id}/items/{item}`) and `/static/{name}`.

    Left out of the OpenAPI document: these are pages, not API. No authentication: see module.
    """
    router = APIRouter(include_in_schema=False)
    shells = Shells()
    static = _package_files("static")

    @router.get("/")
    def index() -> Response:
        return shells.render(INDEX)

    @router.get("/batches/{batch_id}")
    def batch(batch_id: str) -> Response:
        canonical = _canonical_id(batch_id)
        if canonical is None:
            return shells.render(NOT_FOUND, 404)
        return shells.render(BATCH, batch_id=canonical)

    @router.get("/batches/{batch_id}/items/{item_id}")
    def item(batch_id: str, item_id: str) -> Response:
        batch_canonical, item_canonical = _canonical_id(batch_id), _canonical_id(item_id)
        if batch_canonical is None or item_canonical is None:
            return shells.render(NOT_FOUND, 404)
        return shells.render(ITEM, batch_id=batch_canonical, item_id=item_canonical)

    @router.get("/static/{name}")
    def static_file(name: str) -> Response:
        # Only names shipped in the package, looked up in a dict: no path ever reaches the disk.
        data = static.get(name)
        media_type = STATIC_MEDIA_TYPES.get(name[name.rfind(".") :]) if "." in name else None
        if data is None or media_type is None:
            return shells.render(NOT_FOUND, 404)
        return Response(data, headers=SECURITY_HEADERS, media_type=media_type)

    return router
