"""``/console``: the web console, static files shipped in the package (``console/``).

Plain HTML, CSS and JavaScript with no build step and nothing fetched from elsewhere (the
machines it runs on may have no internet). The page uses the same REST API as every other
client (``/admin/v2``, ``/views``, ``/magnetar/v1``) and polls it for updates.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from magnetar.http.routes import Route

ASSETS = Path(__file__).parent / "console"
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}


def console_routes() -> list[Route]:
    """The page at ``/console`` (and ``/console/``) and its files at ``/console/NAME``; only
    the files shipped are served, read once at start."""
    files = {
        p.name: (p.read_bytes(), _TYPES[p.suffix])
        for p in sorted(ASSETS.iterdir())
        if p.suffix in _TYPES
    }

    def serve(name: str) -> web.Response:
        body, content_type = files[name]
        return web.Response(body=body, content_type=content_type, headers=_NO_STORE)

    async def index(_request: web.Request) -> web.Response:
        return serve("index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files:
            raise web.HTTPNotFound(reason=f"no console file {name!r}")
        return serve(name)

    return [
        Route("GET", "/console", index, "The web console"),
        Route("GET", "/console/", index, "The web console"),
        Route("GET", "/console/{name}", asset, "A file of the web console"),
    ]


# a new server version's console must not run the old script from a browser's cache
_NO_STORE = {"Cache-Control": "no-cache"}
