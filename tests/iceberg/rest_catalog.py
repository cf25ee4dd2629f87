"""A small Iceberg REST catalog server for tests: the REST catalog API's table and namespace
routes (the ones pyiceberg's RestCatalog calls), served by aiohttp on a free port in its own
thread, storing its tables in a pyiceberg SQL catalog on SQLite. No REST catalog server is
installed on this machine; this one speaks the protocol from the client's own models (the
request and response bodies of pyiceberg.catalog.rest), which is what the test checks:
that Magnetar's ``--iceberg-catalog rest`` path works against the REST API."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from magnetar.testing.server import free_port

SEPARATOR = "\x1f"


class RestCatalogServer:
    """``with RestCatalogServer(root) as server: server.url``."""

    def __init__(self, root: Path, warehouse: str) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.catalog = SqlCatalog(
            "backing", uri=f"sqlite:///{root / 'rest-backing.db'}", warehouse=warehouse
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[str] = []  # "METHOD path" of every call, for the test to check
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> RestCatalogServer:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the REST catalog server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(middlewares=[self._errors])
        t = "/v1/namespaces/{namespace}/tables/{table}"
        app.router.add_get("/v1/config", self._config)
        app.router.add_post("/v1/namespaces", self._create_namespace)
        app.router.add_get("/v1/namespaces/{namespace}", self._load_namespace)
        app.router.add_get("/v1/namespaces/{namespace}/tables", self._list_tables)
        app.router.add_post("/v1/namespaces/{namespace}/tables", self._create_table)
        app.router.add_get(t, self._load_table)
        app.router.add_post(t, self._commit)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        from pyiceberg.exceptions import (
            CommitFailedException,
            NamespaceAlreadyExistsError,
            NoSuchNamespaceError,
            NoSuchTableError,
            TableAlreadyExistsError,
        )

        self.requests.append(f"{request.method} {request.path}")
        codes = {
            NoSuchTableError: (404, "NoSuchTableException"),
            NoSuchNamespaceError: (404, "NoSuchNamespaceException"),
            NamespaceAlreadyExistsError: (409, "AlreadyExistsException"),
            TableAlreadyExistsError: (409, "AlreadyExistsException"),
            CommitFailedException: (409, "CommitFailedException"),
        }
        try:
            return await handler(request)
        except tuple(codes) as e:
            code, kind = codes[type(e)]
            body = {"error": {"message": str(e), "type": kind, "code": code}}
            return web.json_response(body, status=code)

    @staticmethod
    def _namespace(request: web.Request) -> tuple[str, ...]:
        return tuple(unquote(p) for p in request.match_info["namespace"].split(SEPARATOR))

    def _ident(self, request: web.Request) -> tuple[str, ...]:
        return (*self._namespace(request), unquote(request.match_info["table"]))

    async def _config(self, request: web.Request) -> web.Response:
        return web.json_response({"defaults": {}, "overrides": {}})

    async def _create_namespace(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.catalog.create_namespace(tuple(body["namespace"]), body.get("properties") or {})
        return web.json_response({"namespace": body["namespace"], "properties": {}})

    async def _load_namespace(self, request: web.Request) -> web.Response:
        namespace = self._namespace(request)
        props = self.catalog.load_namespace_properties(namespace)
        return web.json_response({"namespace": list(namespace), "properties": props})

    async def _list_tables(self, request: web.Request) -> web.Response:
        namespace = self._namespace(request)
        names = [
            {"namespace": list(i[:-1]), "name": i[-1]} for i in self.catalog.list_tables(namespace)
        ]
        return web.json_response({"identifiers": names})

    async def _create_table(self, request: web.Request) -> web.Response:
        from pyiceberg.catalog.rest import CreateTableRequest
        from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
        from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

        req = CreateTableRequest.model_validate_json(await request.text())
        table = self.catalog.create_table(
            (*self._namespace(request), req.name),
            schema=req.table_schema,
            location=req.location,
            partition_spec=req.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=req.write_order or UNSORTED_SORT_ORDER,
            properties=req.properties,
        )
        return self._table(table.metadata_location, table.metadata)

    async def _load_table(self, request: web.Request) -> web.Response:
        table = self.catalog.load_table(self._ident(request))
        return self._table(table.metadata_location, table.metadata)

    async def _commit(self, request: web.Request) -> web.Response:
        from pyiceberg.table import CommitTableRequest

        req = CommitTableRequest.model_validate_json(await request.text())
        table = self.catalog.load_table(self._ident(request))
        done = self.catalog.commit_table(table, tuple(req.requirements), tuple(req.updates))
        return self._table(done.metadata_location, done.metadata)

    @staticmethod
    def _table(location: str, metadata: Any) -> web.Response:
        body = {"metadata-location": location, "metadata": json.loads(metadata.model_dump_json())}
        return web.json_response(body)
