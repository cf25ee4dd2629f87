"""The HTTP server: Pulsar-compatible admin REST API (``/admin/v2``), lookup, ``/docs``,
``/metrics`` and the web console (``/console``).

Every refusal is a 4xx with a JSON body ``{"reason": "..."}`` saying what is wrong, as
Pulsar's admin API does; a refused call changes nothing. Bodies are read by
:mod:`magnetar.http.bodies` (bounded size and depth, typed). A 500 means a fault of the
server, never of the request: it is logged with its traceback and answered
``{"reason": "internal error ..."}``.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from magnetar import __version__
from magnetar.broker import Broker
from magnetar.broker import errors as be
from magnetar.broker.admin import PreconditionFailedError, TopicAdmin
from magnetar.broker.offload import OffloadService
from magnetar.core.errors import InvalidNameError, MagnetarError
from magnetar.core.names import TopicName, check_namespace, check_tenant, check_topic
from magnetar.http import messages, reading, schemas, tenants, topics
from magnetar.http.bodies import MAX_BODY_BYTES, BodyTooLargeError
from magnetar.http.broker_metrics import BrokerMetrics
from magnetar.http.console import console_routes
from magnetar.http.metrics import MetricsEndpoint, MetricSource
from magnetar.http.offload import offload_routes
from magnetar.http.routes import Handler, Route, ok, openapi
from magnetar.http.stats import stats_routes

log = logging.getLogger(__name__)

MAX_REQUEST_LINE = 64 * 1024

_STATUS: list[tuple[type[MagnetarError], int]] = [
    (PreconditionFailedError, 412),
    (be.TooManyTopicsError, 412),  # Pulsar: "Exceed maximum number of topics in namespace"
    (be.PartitionCountError, 406),  # Pulsar: "Number of partitions should be ..."
    (BodyTooLargeError, 413),
    (be.NotFoundError, 404),
    (be.AlreadyExistsError, 409),
    (be.NotEmptyError, 409),
    (be.IncompatibleSchemaError, 409),
    (InvalidNameError, 412),
    (be.InvalidRequestError, 400),
]


def status_of(error: MagnetarError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except MagnetarError as e:
        status = status_of(e)
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.path, e, exc_info=e)
        return web.json_response({"reason": str(e)}, status=status)
    except web.HTTPException as e:
        if e.status >= 400:
            return web.json_response({"reason": e.reason}, status=e.status)
        raise
    except Exception as e:  # a fault of the server: say so, and keep the cause in the log
        log.exception("%s %s failed", request.method, request.path)
        return web.json_response(
            {"reason": f"internal error ({type(e).__name__}: {e}); the server log has the cause"},
            status=500,
        )


# path parameters that are names: each is checked before any handler builds a path from it
_NAME_PARAMETERS = {"tenant": check_tenant, "namespace": check_namespace, "topic": check_topic}


@web.middleware
async def valid_names(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a request whose path names an illegal tenant, namespace or topic (``..``, a
    decoded ``%2F`` or NUL, 10,000 characters ...) with 412 and the reason, Pulsar's answer,
    before its handler reads or writes anything under that name."""
    for key, check in _NAME_PARAMETERS.items():
        value = request.match_info.get(key)
        if value is not None:
            check(value)
    return await handler(request)


def redirect_to_owner(broker: Broker) -> Any:
    """Admin calls on a topic another broker owns answer 307 to that broker (Pulsar's
    behaviour with several brokers); a topic nobody owns is served, and so taken, here."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        ownership = broker.ownership
        parts = request.path.split("/")
        # /admin/v2/persistent/{tenant}/{namespace}/{topic}[/...]
        if ownership is None or len(parts) < 7 or parts[1:4] != ["admin", "v2", "persistent"]:
            return await handler(request)
        try:
            name = TopicName.parse(f"persistent://{parts[4]}/{parts[5]}/{parts[6]}")
        except MagnetarError:
            return await handler(request)
        owner = await ownership.owner(name)
        if owner is None or owner.id == ownership.me.id:
            return await handler(request)
        raise web.HTTPTemporaryRedirect(f"{owner.http}{request.path_qs}")

    return middleware


class HttpServer:
    """Serves the admin API for ``broker`` on ``host:port``."""

    def __init__(
        self,
        broker: Broker,
        *,
        host: str,
        port: int,
        advertised: str,
        service_url: str,
        offload: OffloadService | None = None,
        flight_url: str | None = None,
        topic_level_metrics: bool = True,
        idle_timeout: float = 30.0,
    ):
        self.broker = broker
        self.host = host
        self.port = port
        self.advertised = advertised
        self.service_url = service_url
        self.admin = TopicAdmin(broker)
        self.offload = offload
        self.flight_url = flight_url
        # seconds a connection may go without a whole request header, from its opening or
        # its last answer: bounds slowloris clients and idle keep-alive connections
        self.idle_timeout = idle_timeout
        self.extra_routes: list[Route] = []
        # what GET /metrics renders; the standalone adds the sources of higher tiers
        self.metric_sources: list[MetricSource] = [
            BrokerMetrics(broker, topic_level=topic_level_metrics, offload=offload).source()
        ]
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.advertised}:{self.port}"

    def routes(self) -> list[Route]:
        table = tenants.routes(self.broker)
        table += topics.routes(self.broker, self.admin, self.service_url)
        table += stats_routes(self.broker, self.admin)
        if self.offload is not None:
            table += offload_routes(self.admin, self.offload)
        table += reading.routes(self.broker, self.flight_url)
        table.append(MetricsEndpoint(self.metric_sources).route())
        table += schemas.routes(self.broker)
        table += messages.routes(self.broker) + console_routes()
        return table + self.extra_routes

    def build_app(self) -> web.Application:
        app = web.Application(
            middlewares=[errors_as_json, valid_names, redirect_to_owner(self.broker)],
            client_max_size=MAX_BODY_BYTES,
        )
        table = self.routes()
        spec = openapi(table, __version__)

        async def docs(request: web.Request) -> web.Response:
            return ok(spec)

        for route in table:
            app.router.add_route(route.method, route.path, route.handler)
        app.router.add_get("/docs", docs)
        app.router.add_get("/openapi.json", docs)
        return app

    async def start(self) -> None:
        # request lines up to 64 KiB (aiohttp's default is 8 KiB): a path naming a topic of
        # 10,000 characters gets the JSON refusal saying why, not a bare "line too long"
        self._runner = web.AppRunner(
            self.build_app(),
            access_log=None,
            max_line_size=MAX_REQUEST_LINE,
            keepalive_timeout=self.idle_timeout,
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
