"""Pulsar's schema admin API: ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema``.

``POST`` registers a schema the way ``pulsar-admin schemas upload`` does (body
``{"type": "INT32", "schema": "<definition as text>", "properties": {}}``), checked against
the topic's earlier versions with its compatibility strategy; it answers the version.
``GET`` answers the newest version, ``GET .../schema/{version}`` a given one: ``{"version",
"type", "timestamp", "data", "properties"}`` with ``data`` the definition as text.

This is how a topic gets one of Pulsar's primitive schemas (INT8 … DOUBLE, BOOLEAN, DATE …)
when its producers use a client that does not send them (the C++ and Python clients send
only STRING, JSON, AVRO and PROTOBUF schemas).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.errors import InvalidRequestError, SchemaNotFoundError
from magnetar.broker.schemas import SchemaInfo
from magnetar.http.bodies import json_body, obj, text
from magnetar.http.routes import Route, ok
from magnetar.http.topics import topic_of

PATH = "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema"
TYPES = [
    "NONE",
    "STRING",
    "JSON",
    "PROTOBUF",
    "AVRO",
    "BOOLEAN",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FLOAT",
    "DOUBLE",
    "DATE",
    "TIME",
    "TIMESTAMP",
    "KEY_VALUE",
    "INSTANT",
    "LOCAL_DATE",
    "LOCAL_TIME",
    "LOCAL_DATE_TIME",
    "PROTOBUF_NATIVE",
    "BYTES",
]


def routes(broker: Broker) -> list[Route]:
    async def post(request: web.Request) -> web.Response:
        name = topic_of(request)
        schema = _payload(await json_body(request))
        strategy = await broker.schema_strategy(name)
        version = await broker.schemas.add(name.base.path, schema, strategy)
        return ok({"version": {"version": version}})

    async def get(request: web.Request) -> web.Response:
        name = topic_of(request)
        raw = request.match_info.get("version")
        version = None if raw is None else _version(raw)
        found = await broker.schemas.get(name.base.path, version)
        if found is None:
            which = "" if version is None else f" version {version}"
            raise SchemaNotFoundError(f"topic {name} has no schema{which}")
        n, info = found
        return ok(
            {
                "version": n,
                "type": info.type,
                "timestamp": 0,
                "data": info.data.decode(errors="replace"),
                "properties": info.properties,
            }
        )

    return [
        Route("POST", PATH, post, "Register a schema (pulsar-admin schemas upload)", _BODY),
        Route("GET", PATH, get, "The topic's newest schema"),
        Route("GET", PATH + "/{version}", get, "The topic's schema at a version"),
    ]


MAX_SCHEMA_CHARS = 512 * 1024  # a definition as text; the body as a whole is bounded too
_BODY = '{"type": "AVRO" | "INT32" | ..., "schema": "definition as text", "properties": {}}'


def _payload(body: Any) -> SchemaInfo:
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise InvalidRequestError(f"a schema is a JSON object like {_BODY}")
    kind = body["type"].upper()
    if kind not in TYPES:
        raise InvalidRequestError(f"unknown schema type {body['type']!r:.60}: one of {TYPES}")
    definition = text(body.get("schema") or "", '"schema"', max_chars=MAX_SCHEMA_CHARS)
    properties = obj(body.get("properties") or {}, '"properties"')
    return SchemaInfo(kind, definition.encode(), {str(k): str(v) for k, v in properties.items()})


def _version(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequestError(f"a schema version is an integer, got {raw!r}") from None
