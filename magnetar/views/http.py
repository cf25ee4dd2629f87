"""``/views`` on the standalone's HTTP port. The standalone adds these routes to
``HttpServer.extra_routes``, so ``magnetar.http`` never imports views.

Refusals are JSON ``{"reason": "...", "code": "views.invalid"}`` with the status of the
error class (400 bad definition, 404 unknown view, 409 conflict, 503 store down).
"""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from magnetar.http.bodies import json_body, obj, text
from magnetar.http.errors import error_response
from magnetar.http.routes import Handler, Route, no_content, ok
from magnetar.views.errors import InvalidViewError, ViewError, ViewMovedError
from magnetar.views.service import ViewService

V = "/views/{name}"


def _errors(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except ViewMovedError as e:  # another broker leads the view: the call goes there
            raise web.HTTPTemporaryRedirect(
                e.location_for(request.secure).rstrip("/") + request.path_qs
            ) from None
        except ViewError as e:
            return error_response(e)

    return wrapped


def view_routes(service: ViewService) -> list[Route]:
    async def put(request: web.Request) -> web.Response:
        body = await json_body(request)
        status, created = await service.put(request.match_info["name"], body)
        return web.json_response(status, status=201 if created else 200)

    async def list_views(request: web.Request) -> web.Response:
        return ok(await service.statuses())

    async def get(request: web.Request) -> web.Response:
        return ok(await service.status(request.match_info["name"]))

    async def rows(request: web.Request) -> web.Response:
        query = dict(request.query)
        limit = _limit(query.pop("limit", "100"))
        return ok({"rows": await service.rows(request.match_info["name"], query, limit)})

    async def delete(request: web.Request) -> web.Response:
        await service.delete(request.match_info["name"])
        return no_content()

    async def as_of(request: web.Request) -> web.Response:
        body = obj(await json_body(request), "an as-of point " + _AS_OF_BODY)
        if body.get("label") is not None:
            text(body["label"], '"label"', max_chars=32)
        return web.json_response(await service.as_of(request.match_info["name"], body), status=201)

    table: list[tuple[str, str, Any, str, str]] = [
        ("PUT", V, put, "Create a view or a new version of it", _PUT_BODY),
        ("GET", "/views", list_views, "Every view with its state", ""),
        ("GET", V, get, "A view: state, progress, lag, offsets, version, error", ""),
        ("GET", V + "/rows", rows, "Rows by key (?col=value) or the first ?limit=N", ""),
        ("DELETE", V, delete, "Stop and delete a view, its state and as-of views", ""),
        ("POST", V + "/as-of", as_of, "Materialize the view at a past point", _AS_OF_BODY),
    ]
    return [Route(m, p, _errors(h), summary, body) for m, p, h, summary, body in table]


def _limit(raw: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= 100_000:
        raise InvalidViewError(f"limit must be an integer in 1..100000, got {raw!r:.60}")
    return int(raw)


_PUT_BODY = (
    '{"source": "topic" | ["t1", "t2"], "sql": "SELECT ... FROM events GROUP BY ..." | '
    '"python": "module:function", "key": ["col"], "store": "sqlite" | "postgresql://..." | '
    '"redis://..."}'
)
_AS_OF_BODY = '{"timestamp": ms} | {"offsets": {"topic": {"0": 123}}}, optional "label"'
