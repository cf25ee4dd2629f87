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
import ssl
from typing import Any

from aiohttp import web

from magnetar import __version__
from magnetar.broker import Broker
from magnetar.broker.admin import TopicAdmin
from magnetar.broker.authorization import Authorizer
from magnetar.broker.offload import OffloadService
from magnetar.broker.ownership import BrokerInfo
from magnetar.core.authentication import AuthenticationError, Authenticator, Identity
from magnetar.core.connections import ConnectionGate, ConnectionLimits
from magnetar.core.errors import MagnetarError
from magnetar.core.grants import ReadGrants
from magnetar.core.names import TopicName, check_namespace, check_tenant, check_topic
from magnetar.core.tls import peer_common_name
from magnetar.http import messages, reading, schemas, tenants, topics
from magnetar.http.bodies import MAX_BODY_BYTES
from magnetar.http.broker_metrics import BrokerMetrics
from magnetar.http.compaction import compaction_routes
from magnetar.http.connection_caps import gate_connections
from magnetar.http.console import console_routes
from magnetar.http.errors import error_response
from magnetar.http.iceberg import iceberg_routes
from magnetar.http.metrics import MetricsEndpoint, MetricSource
from magnetar.http.non_persistent import non_persistent_routes
from magnetar.http.offload import offload_routes
from magnetar.http.permissions import authorize
from magnetar.http.routes import Handler, Route, ok, openapi
from magnetar.http.stats import stats_routes

log = logging.getLogger(__name__)

MAX_REQUEST_LINE = 64 * 1024


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except MagnetarError as e:
        if e.retriable:
            log.warning("%s %s: %s (retriable: answered 503)", request.method, request.path, e)
        elif e.http_status >= 500:
            log.error("%s %s failed: %s", request.method, request.path, e, exc_info=e)
        return error_response(e)
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


# open without a credential, as Pulsar leaves them (authenticateMetricsEndpoint=false): the
# metrics, the API description and the console's own files (its API calls authenticate)
_OPEN_PATHS = ("/metrics", "/docs", "/openapi.json")


def authenticate(authenticator: Authenticator, anonymous_role: str) -> Any:
    """Every request proves who it is (Authorization: Bearer / Basic, or a client
    certificate over HTTPS); a missing or bad credential is a 401 with the reason, and the
    request is not handled. The identity is left in ``request["identity"]``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path in _OPEN_PATHS or (request.method == "GET" and path.startswith("/console")):
            return await handler(request)
        header = request.headers.get("Authorization")
        cn = peer_common_name(request.transport.get_extra_info("ssl_object")) if (
            request.transport is not None) else None  # fmt: skip
        if not header and not cn and anonymous_role:
            request["identity"] = Identity(anonymous_role, "anonymous")
            return await handler(request)
        try:
            request["identity"] = authenticator.from_http_header(header, cn)
        except AuthenticationError as e:
            return web.json_response(
                {"reason": str(e)},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="magnetar"'},
            )
        return await handler(request)

    return middleware


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
        raise web.HTTPTemporaryRedirect(f"{base_url(owner, request)}{request.path_qs}")

    return middleware


def base_url(owner: BrokerInfo, request: web.Request) -> str:
    """Where a redirect to ``owner`` points: its https:// address for a request that came
    over TLS (when it has one), else its http:// address."""
    return owner.https if request.secure and owner.https else owner.http


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
        https_port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        service_url_tls: str | None = None,
        authenticator: Authenticator | None = None,
        anonymous_role: str = "",
        authorizer: Authorizer | None = None,
        read_grants: ReadGrants | None = None,
    ):
        self.authorizer = authorizer  # None: an authenticated request may do anything
        self.read_grants = read_grants  # plans carry Flight read grants (authorization on)
        self.authenticator = authenticator  # None: every request is served, as before
        self.anonymous_role = anonymous_role
        self.broker = broker
        self.host = host
        self.port = port
        self.advertised = advertised
        self.service_url = service_url
        self.service_url_tls = service_url_tls
        # the https:// listener (Pulsar's webServicePortTls), with ``ssl_context``
        self.https_port = https_port if ssl_context is not None else None
        self.ssl_context = ssl_context
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
        # caps on open connections, as the Pulsar and Kafka listeners' (set before start)
        self.connection_limits = ConnectionLimits()
        self.gate = ConnectionGate("HTTP", self.connection_limits)

    @property
    def url(self) -> str:
        return f"http://{self.advertised}:{self.port}"

    @property
    def https_url(self) -> str | None:
        if self.https_port is None:
            return None
        return f"https://{self.advertised}:{self.https_port}"

    def routes(self) -> list[Route]:
        table = tenants.routes(self.broker)
        table += topics.routes(
            self.broker, self.admin, self.service_url, self.service_url_tls, lambda: self.https_url
        )
        table += stats_routes(self.broker, self.admin)
        table += compaction_routes(self.broker, self.admin)
        table += non_persistent_routes(self.broker)
        if self.offload is not None:
            table += offload_routes(self.admin, self.offload)
        table += iceberg_routes(self.broker, self.admin)
        table += reading.routes(self.broker, self.flight_url, self.read_grants)
        table.append(MetricsEndpoint(self.metric_sources).route())
        table += schemas.routes(self.broker)
        table += messages.routes(self.broker) + console_routes()
        return table + self.extra_routes

    def build_app(self) -> web.Application:
        middlewares = [errors_as_json, valid_names, redirect_to_owner(self.broker)]
        if self.authenticator is not None:
            middlewares.insert(1, authenticate(self.authenticator, self.anonymous_role))
        if self.authorizer is not None:  # without authentication: every request ANONYMOUS
            unproven = self.authenticator is None
            middlewares.insert(1 if unproven else 2, authorize(self.authorizer, unproven))
        app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
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
        self.gate = ConnectionGate("HTTP", self.connection_limits)
        assert self._runner.server is not None
        gate_connections(self._runner.server, self.gate)
        await web.TCPSite(self._runner, self.host, self.port).start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]

    async def start_tls(self) -> None:
        """Open the https:// listener (after :meth:`start`); nothing without TLS."""
        if self._runner is None or self.ssl_context is None or self.https_port is None:
            return
        site = web.TCPSite(self._runner, self.host, self.https_port, ssl_context=self.ssl_context)
        await site.start()
        if self.https_port == 0:
            self.https_port = self._runner.addresses[-1][1]

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
