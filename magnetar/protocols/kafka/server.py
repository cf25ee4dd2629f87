"""The Kafka protocol server (Kafka-on-Pulsar): one :class:`Connection` per TCP connection.

Requests are decoded as they arrive and each runs as its own task, created in arrival order
(so a producer's appends queue in the order it sent them); responses go back strictly in
request order, as Kafka clients require. A request that does not decode closes the
connection, as Kafka does. One naming an API or version this server does not serve is
answered UNSUPPORTED_VERSION in that API's response format where the format has an error code
(an ApiVersions request the KIP-511 way), so the client fails fast; otherwise the connection
closes. Other connections are never affected.

Limits (:mod:`magnetar.core.connections`): connections over ``max.connections`` or
``max.connections.per.ip`` are closed when accepted; one whose first request is not complete
within the handshake timeout, or that sends nothing for ``connections.max.idle.ms`` with
nothing pending, is closed; reading pauses while too many requests or bytes are pending.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.broker import Broker
from magnetar.broker.authorization import Authorizer
from magnetar.broker.scram import ScramCredentials
from magnetar.core.authentication import AuthenticationError, Authenticator
from magnetar.core.connections import (
    ConnectionGate,
    ConnectionLimits,
    PendingLimit,
    peer_ip,
)
from magnetar.core.errors import MagnetarError
from magnetar.core.metrics import Histogram
from magnetar.core.tls import peer_common_name
from magnetar.protocols.kafka import (
    acls,
    admin,
    alter_configs,
    authorize,
    fetch,
    group_admin,
    groups,
    leader_epochs,
    produce,
    quorum,
    replicas,
    sasl,
    scram_apis,
    topic_admin,
    txn_apis,
    wire,
)
from magnetar.protocols.kafka.errors import (
    ErrorCode,
    KafkaProtocolError,
    UnsupportedVersionError,
    error_code_of,
)
from magnetar.protocols.kafka.service import KafkaSettings, Service, Session

log = logging.getLogger(__name__)
Handler = Callable[[Service, Session, wire.Request], Awaitable[dict[str, Any] | None]]
HANDLERS: dict[int, Handler] = {
    wire.API_VERSIONS: admin.api_versions,
    wire.METADATA: admin.metadata,
    wire.INIT_PRODUCER_ID: admin.init_producer_id,
    wire.CREATE_TOPICS: admin.create_topics,
    wire.DELETE_TOPICS: admin.delete_topics,
    wire.DESCRIBE_CONFIGS: admin.describe_configs,
    wire.PRODUCE: produce.produce,
    wire.FETCH: fetch.fetch,
    wire.LIST_OFFSETS: fetch.list_offsets,
    wire.FIND_COORDINATOR: groups.find_coordinator,
    wire.JOIN_GROUP: groups.join_group,
    wire.SYNC_GROUP: groups.sync_group,
    wire.HEARTBEAT: groups.heartbeat,
    wire.LEAVE_GROUP: groups.leave_group,
    wire.OFFSET_COMMIT: groups.offset_commit,
    wire.OFFSET_FETCH: groups.offset_fetch,
    wire.LIST_GROUPS: groups.list_groups,
    wire.DESCRIBE_GROUPS: groups.describe_groups,
    wire.CONSUMER_GROUP_HEARTBEAT: groups.consumer_group_heartbeat,
    wire.CONSUMER_GROUP_DESCRIBE: groups.consumer_group_describe,
    wire.CREATE_PARTITIONS: topic_admin.create_partitions,
    wire.DELETE_RECORDS: topic_admin.delete_records,
    wire.DESCRIBE_LOG_DIRS: topic_admin.describe_log_dirs,
    wire.ELECT_LEADERS: topic_admin.elect_leaders,
    wire.OFFSET_FOR_LEADER_EPOCH: leader_epochs.offset_for_leader_epoch,
    wire.DESCRIBE_QUORUM: quorum.describe_quorum,
    wire.DESCRIBE_TOPIC_PARTITIONS: topic_admin.describe_topic_partitions,
    wire.ALTER_CONFIGS: alter_configs.alter_configs,
    wire.INCREMENTAL_ALTER_CONFIGS: alter_configs.incremental_alter_configs,
    wire.DELETE_GROUPS: group_admin.delete_groups,
    wire.OFFSET_DELETE: group_admin.offset_delete,
    wire.ADD_PARTITIONS_TO_TXN: txn_apis.add_partitions_to_txn,
    wire.ADD_OFFSETS_TO_TXN: txn_apis.add_offsets_to_txn,
    wire.END_TXN: txn_apis.end_txn,
    wire.TXN_OFFSET_COMMIT: txn_apis.txn_offset_commit,
    wire.ALTER_REPLICA_LOG_DIRS: replicas.alter_replica_log_dirs,
    wire.ALTER_PARTITION_REASSIGNMENTS: replicas.alter_partition_reassignments,
    wire.LIST_PARTITION_REASSIGNMENTS: replicas.list_partition_reassignments,
    wire.SASL_HANDSHAKE: sasl.sasl_handshake,
    wire.SASL_AUTHENTICATE: sasl.sasl_authenticate,
    wire.CREATE_ACLS: acls.create_acls,
    wire.DESCRIBE_ACLS: acls.describe_acls,
    wire.DELETE_ACLS: acls.delete_acls,
    wire.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_apis.describe_user_scram_credentials,
    wire.ALTER_USER_SCRAM_CREDENTIALS: scram_apis.alter_user_scram_credentials,
}
# what a connection may ask before it has authenticated (with authentication on)
_BEFORE_AUTHENTICATION = {wire.API_VERSIONS, wire.SASL_HANDSHAKE, wire.SASL_AUTHENTICATE}
MAX_IN_FLIGHT = 64  # requests per connection before reading pauses (or pending bytes cap)


class KafkaServer:
    """Listens on ``settings.host:settings.port`` and serves ``broker`` to Kafka clients."""

    def __init__(
        self,
        broker: Broker,
        settings: KafkaSettings,
        limits: ConnectionLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: Authenticator | None = None,
        authorizer: Authorizer | None = None,
        scram: ScramCredentials | None = None,
    ) -> None:
        if ssl_context is None:  # no SSL listener without a context
            settings = dataclasses.replace(settings, ssl_port=None)
        self.service = Service(broker, settings, authenticator, authorizer, scram)
        self.limits = limits or ConnectionLimits()
        self.gate = ConnectionGate("Kafka", self.limits)
        self.ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._ssl_server: asyncio.Server | None = None
        self.connections: set[Connection] = set()

    @property
    def port(self) -> int:
        return self.service.settings.port

    @property
    def bootstrap(self) -> str:
        return f"{self.service.settings.advertised_host}:{self.port}"

    async def start(self) -> None:
        await txn_apis.coordinator(self.service).start()  # stored transactions, timeouts
        s = self.service.settings
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), s.host, s.port)
        port = self._server.sockets[0].getsockname()[1]
        self.service.settings = dataclasses.replace(s, port=port)

    async def start_tls(self) -> None:
        """Open the SSL listener (after :meth:`start`); nothing without a context."""
        s = self.service.settings
        if self.ssl_context is None or s.ssl_port is None:
            return
        loop = asyncio.get_running_loop()
        self._ssl_server = await loop.create_server(
            lambda: Connection(self, tls=True), s.host, s.ssl_port, ssl=self.ssl_context
        )
        port = self._ssl_server.sockets[0].getsockname()[1]
        self.service.settings = dataclasses.replace(s, ssl_port=port)

    @property
    def bootstrap_ssl(self) -> str | None:
        port = self.service.settings.ssl_port
        return None if port is None else f"{self.service.settings.advertised_host}:{port}"

    async def aclose(self) -> None:
        servers = [s for s in (self._server, self._ssl_server) if s is not None]
        for server in servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in servers:
            await server.wait_closed()
        self._server = self._ssl_server = None
        await txn_apis.coordinator(self.service).aclose()
        await self.service.aclose()


class Connection(asyncio.BufferedProtocol):
    """One client connection: decodes requests, runs them, answers in order. The transport
    reads into the frame reader's buffer (on the SSL listener, decrypts into it): no bytes
    object per read, no join of TLS records."""

    def __init__(self, server: KafkaServer, *, tls: bool = False) -> None:
        self.server = server
        self.service = server.service
        self.reader = wire.FrameReader(server.service.settings.max_request_size)
        self.session = Session(tls=tls)
        self.transport: asyncio.Transport | None = None
        # answers owed, in request order, each with the size of its request
        self._pending: deque[tuple[asyncio.Future[bytes | None], int]] = deque()
        self._tasks: set[asyncio.Task[bytes | None]] = set()
        # requests not yet answered (acks=0 produces: not yet done) and their bytes
        self.load = PendingLimit(MAX_IN_FLIGHT, server.limits.max_pending_bytes)
        self.admitted = False  # counted by the server's gate (released when lost)
        self._greeted = False  # a whole request arrived (the handshake, as far as Kafka has one)
        self._last_active = 0.0  # loop time of the last bytes received or answer sent
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.session.peer = peer_ip(transport)
        if not self.server.gate.admit(self.session.peer):
            transport.close()  # over a connection cap, as Kafka does: the gate logs it
            return
        self.admitted = True
        self.transport = transport
        self.load.transport = transport
        self.server.connections.add(self)
        self._authenticate_by_certificate(transport)
        loop = asyncio.get_running_loop()
        self._last_active = loop.time()
        self._timer = loop.call_later(self.server.limits.handshake_timeout, self._check_idle)

    def _authenticate_by_certificate(self, transport: asyncio.Transport) -> None:
        """On the SSL listener, a trusted client certificate is the connection's identity
        when the tls provider is on (Kafka's SSL listener with ssl.client.auth)."""
        auth = self.service.authenticator
        cn = peer_common_name(transport.get_extra_info("ssl_object"))
        if auth is None or cn is None or "tls" not in auth.providers:
            return
        try:
            self.session.identity = auth.authenticate("tls", b"", cn)
        except AuthenticationError:
            return

    def _check_idle(self) -> None:
        """Close the connection if it missed its handshake, or sat idle too long (no bytes
        either way and nothing pending for connections.max.idle.ms); else look again later."""
        self._timer = None
        limits, loop = self.server.limits, asyncio.get_running_loop()
        if not self._greeted:
            log.info(
                "closing Kafka connection from %s: no request within the handshake timeout",
                self.session.peer,
            )
            self.close()
            return
        if not limits.idle_timeout:
            return
        now, due = loop.time(), self._last_active + limits.idle_timeout
        if now >= due and self.load.requests == 0:
            log.info(
                "closing Kafka connection from %s: idle for connections.max.idle.ms",
                self.session.peer,
            )
            self.close()
            return
        self._timer = loop.call_at(
            due if due > now else now + limits.idle_timeout, self._check_idle
        )

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = asyncio.get_running_loop().time()
        self.reader.buffer_updated(nbytes)
        while self.transport is not None:
            try:
                frame = self.reader.next_frame()
            except KafkaProtocolError as e:
                self._refuse(e)
                return
            if frame is None:
                return
            if not self._greeted:
                self._greeted = True
                self._greet_done()
            self._on_frame(frame)

    def _greet_done(self) -> None:
        """The first request arrived: from now on only idleness closes the connection."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        idle = self.server.limits.idle_timeout
        if idle:
            self._timer = asyncio.get_running_loop().call_later(idle, self._check_idle)

    def _on_frame(self, frame: bytes) -> None:
        try:
            request = wire.decode_request(frame)
        except UnsupportedVersionError as e:
            self._answer_unsupported(frame, e)
            return
        except KafkaProtocolError as e:
            self._refuse(e)
            return
        self.session.client_id = request.client_id
        if (
            self.service.authenticator is not None
            and self.session.identity is None
            and request.api_key not in _BEFORE_AUTHENTICATION
        ):  # Kafka: "Unexpected Kafka request ... during SASL handshake", and closes
            log.info(
                "closing Kafka connection from %s: API %d before SASL authentication",
                self.session.peer,
                request.api_key,
            )
            self.close()
            return
        expires = self.session.identity.expires_at if self.session.identity else None
        if (
            expires is not None
            and time.time() > expires
            and request.api_key not in _BEFORE_AUTHENTICATION
        ):  # KIP-368: the session ended without re-authentication
            log.info(
                "closing Kafka connection from %s: its credential expired (role %r)",
                self.session.peer,
                self.session.identity.role if self.session.identity else None,
            )
            self.close()
            return
        task = asyncio.get_running_loop().create_task(self._handle(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        size = len(frame)
        self.load.add(size)
        if request.api_key == wire.PRODUCE and request.body.acks == 0:
            # no answer expected: none is queued; it counts until it is done
            task.add_done_callback(lambda _: self.load.done(size))
            return
        self._pending.append((task, size))
        task.add_done_callback(self._flush)

    async def _handle(self, request: wire.Request) -> bytes | None:
        handler = HANDLERS[request.api_key]
        started = time.perf_counter()
        try:
            values = await authorize.run(handler, self.service, self.session, request)
            answer = None if values is None else wire.encode_response(request, values)
            self._observe(request.api_key, time.perf_counter() - started)
            return answer
        except produce.AcksZeroFailure:
            self.close()
            return None
        except authorize.Denied:
            log.warning(
                "closing Kafka connection from %s: API %d is not allowed to role %r",
                self.session.peer,
                request.api_key,
                self.session.identity.role if self.session.identity else None,
            )
            self.close()
            return None
        except Exception as e:
            return self._answer_failure(request, e)

    def _answer_failure(self, request: wire.Request, error: Exception) -> bytes | None:
        """A handler failed as a whole: answer every topic and partition it asked about with
        the error's code, as Kafka does, so a transient refusal (a bundle changing hands) is
        retried by the client on the same connection. Only an acks=0 produce, which has no
        answer to carry the error, closes the connection (Kafka's way to tell it)."""
        code = error_code_of(error) if isinstance(error, MagnetarError) else None
        if code is None:
            log.exception(
                "Kafka API %d v%d from %s failed; answered UNKNOWN_SERVER_ERROR",
                request.api_key,
                request.api_version,
                self.session.peer,
            )
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        else:
            log.warning(
                "Kafka API %d v%d from %s refused as a whole (%s): %s",
                request.api_key,
                request.api_version,
                self.session.peer,
                code.name,
                error,
            )
        if request.api_key == wire.PRODUCE and request.body.acks == 0:
            self.close()
            return None
        return wire.error_response(request, code, str(error) or type(error).__name__)

    def _observe(self, api_key: int, seconds: float) -> None:
        latency = self.service.request_latency.get(api_key)
        if latency is None:
            latency = self.service.request_latency[api_key] = Histogram()
        latency.observe(seconds)

    def _answer_unsupported(self, frame: bytes, error: UnsupportedVersionError) -> None:
        """UNSUPPORTED_VERSION in the API's own format where it has one; else close."""
        key, _, correlation_id = wire.peek(frame)
        if key == wire.API_VERSIONS:
            self._queue_ready(wire.api_versions_error(correlation_id))
            return
        answer = wire.unsupported_response(frame)
        if answer is None:
            self._refuse(error)
            return
        log.info("answered %s from %s with UNSUPPORTED_VERSION", error, self.session.peer)
        self._queue_ready(answer)

    def _queue_ready(self, data: bytes) -> None:
        done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        done.set_result(data)
        self.load.add(0)
        self._pending.append((done, 0))
        self._flush()

    def _flush(self, _: object = None) -> None:
        """Write every answer at the head of the queue that is ready, in request order."""
        while self._pending and self._pending[0][0].done():
            answer, size = self._pending.popleft()
            data = None if answer.cancelled() or answer.exception() else answer.result()
            if data and self.transport is not None and not self.transport.is_closing():
                self.transport.write(data)
                self._last_active = asyncio.get_running_loop().time()
            self.load.done(size)
        if self.session.close_after_answer and not self._pending:
            self.close()  # a refused authentication was answered: Kafka closes

    def _refuse(self, error: KafkaProtocolError) -> None:
        log.warning("closing Kafka connection from %s: %s", self.session.peer, error)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.admitted:
            return
        self.admitted = False
        self.server.gate.release(self.session.peer)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.server.connections.discard(self)
        self.transport = None
        self.load.transport = None
        for task in list(self._tasks):
            task.cancel()
        self._pending.clear()
        self.session.release()
