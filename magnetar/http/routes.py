"""A small route table shared by the HTTP modules; the OpenAPI description is built from it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    body: str = ""  # a short description of the expected JSON body, if any


def no_content() -> web.Response:
    return web.Response(status=204)


def ok(body: Any) -> web.Response:
    return web.json_response(body)


def openapi(routes: list[Route], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        op: dict[str, Any] = {
            "summary": r.summary,
            "responses": {
                "200": {"description": "OK"},
                "204": {"description": "Done"},
                "4XX": {"description": 'Refused: {"reason": "..."}'},
            },
        }
        params = [seg[1:-1] for seg in r.path.split("/") if seg.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
        if r.body:
            op["requestBody"] = {
                "description": r.body,
                "content": {"application/json": {"schema": {}}},
            }
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {"title": "Magnetar admin API (Pulsar /admin/v2 compatible)", "version": version},
        "paths": paths,
    }
