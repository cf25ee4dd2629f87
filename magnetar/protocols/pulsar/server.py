"""The Pulsar binary protocol server: one :class:`Connection` per TCP connection.

Frames are decoded as they arrive (pure codec in ``frames``); each command is handled by a
method of :class:`Connection` (``_on_<command>``). Commands that touch storage run as tasks
created in arrival order, so a producer's entries are appended in the order it sent them
and their receipts go back in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping

from magnetar import __version__
from magnetar.broker import Broker, Consumer, Delivery, SubType
from magnetar.broker.authorization import ANONYMOUS, Authorizer
from magnetar.broker.formats import KAFKA
from magnetar.core.authentication import AuthenticationError, Authenticator, Identity
from magnetar.core.connections import (
    ConnectionGate,
    ConnectionLimits,
    PendingLimit,
    peer_ip,
)
from magnetar.core.entries import Entry
from magnetar.core.errors import MagnetarError
from magnetar.core.ids import MessageId
from magnetar.core.names import TopicName
from magnetar.core.tls import peer_common_name
from magnetar.protocols.kafka.conversion import kafka_to_pulsar
from magnetar.protocols.pulsar import entry_format, responses
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.commands import Commands
from magnetar.protocols.pulsar.errors import ChecksumError, ProtocolError
from magnetar.protocols.pulsar.errors_map import discovery_error, server_error
from magnetar.protocols.pulsar.frames import (
    FRAME_PADDING,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
)
from magnetar.protocols.pulsar.handles import (
    AnyConsumerHandle,
    ProducerHandle,
    TransientConsumerHandle,
)
from magnetar.protocols.pulsar.keepalive import KeepAlive, refuse_before_connect
from magnetar.protocols.pulsar.message_ids import to_wire

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type
# Outbound bytes a connection may hold unsent before its consumers get nothing more: dispatch
# stops at the high mark and resumes when the client has read down to the low one. A round of
# dispatch reads at most a few MiB, so a client that never reads costs about this much.
WRITE_BUFFER_HIGH = 8 * 1024 * 1024
WRITE_BUFFER_LOW = 2 * 1024 * 1024
_request_ids = itertools.count(1 << 40)
NO_REQUEST = (1 << 64) - 1  # request id of an ERROR answering CONNECT (Pulsar's -1)
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"  # Pulsar's AuthData.REFRESH_AUTH_DATA
_ = entry_format  # registers the PULSAR entry format with the broker


class PulsarServer:
    """Listens on ``host:port`` and serves ``broker`` to Pulsar clients, within ``limits``
    (see :mod:`magnetar.core.connections`)."""

    def __init__(
        self,
        broker: Broker,
        *,
        host: str,
        port: int,
        advertised_host: str,
        max_message_size: int,
        listeners: Mapping[str, Mapping[str, str]] | None = None,
        limits: ConnectionLimits | None = None,
        tls_port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: Authenticator | None = None,
        anonymous_role: str = "",
        refresh_interval: float = 60.0,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.broker = broker
        self.authorizer = authorizer  # None: an authenticated client may do anything
        # who clients are (None: anyone who connects is served, as before authentication)
        self.authenticator = authenticator
        self.anonymous_role = anonymous_role  # a client sending no credential gets this
        self.refresh_interval = refresh_interval  # seconds between expiry checks
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.max_message_size = max_message_size
        # listener name → {"pulsar": url, "pulsar+ssl": url}: what a LOOKUP naming it answers
        self.listeners = dict(listeners or {})
        self.limits = limits or ConnectionLimits()
        self.gate = ConnectionGate("Pulsar", self.limits)
        # the pulsar+ssl:// listener (Pulsar's brokerServicePortTls), with ``ssl_context``
        self.tls_port = tls_port if ssl_context is not None else None
        self.ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._tls_server: asyncio.Server | None = None
        self.connections: set[Connection] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def start_tls(self) -> None:
        """Open the pulsar+ssl:// listener (after :meth:`start`); nothing without TLS."""
        if self.ssl_context is None or self.tls_port is None:
            return
        loop = asyncio.get_running_loop()
        self._tls_server = await loop.create_server(
            lambda: Connection(self), self.host, self.tls_port, ssl=self.ssl_context
        )
        self.tls_port = self._tls_server.sockets[0].getsockname()[1]

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_host}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        """``pulsar+ssl://host:port`` when the TLS listener is on, else None."""
        if self.tls_port is None:
            return None
        return f"pulsar+ssl://{self.advertised_host}:{self.tls_port}"

    async def aclose(self) -> None:
        servers = [s for s in (self._server, self._tls_server) if s is not None]
        for server in servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in servers:
            await server.wait_closed()
        self._server = self._tls_server = None


class Connection(asyncio.Protocol):
    """One client connection: its producers and consumers, and the command handlers."""

    def __init__(self, server: PulsarServer) -> None:
        self.server = server
        self.broker = server.broker
        self.decoder = FrameDecoder(server.max_message_size + FRAME_PADDING)
        self.transport: asyncio.Transport | None = None
        self.producers: dict[int, ProducerHandle] = {}
        self.consumers: dict[int, AnyConsumerHandle] = {}
        self._by_consumer: dict[int, AnyConsumerHandle] = {}  # id(Consumer) → handle
        self._opening: dict[int, asyncio.Task[object]] = {}  # producer id → PRODUCER task
        self._tasks: set[asyncio.Task[None]] = set()
        self.ack_tasks: set[asyncio.Task[None]] = set()
        self.paused = False  # the transport's buffer is above WRITE_BUFFER_HIGH
        limits = server.limits
        # SENDs being stored: reading stops at the cap (Pulsar's
        # maxPendingPublishRequestsPerConnection); their receipts still go out
        self.pending = PendingLimit(limits.max_pending_requests, limits.max_pending_bytes)
        self.keepalive = KeepAlive(self, limits.keep_alive_interval)  # started by CONNECT
        self.ip = "?"
        self.admitted = False  # counted by the server's gate (released when lost)
        self._handshake: asyncio.TimerHandle | None = None  # closes it unless CONNECT comes
        self.identity: Identity | None = None  # who authenticated (with authentication on)
        self.client_protocol = PROTOCOL_VERSION
        self._refresh: asyncio.TimerHandle | None = None  # next credential expiry check
        self._challenged = False  # an AUTH_CHALLENGE is unanswered
        self._handlers: dict[int, Callable[[Frame], Awaitable[None] | None]] = Commands(
            self
        ).table()

    # -- transport ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.ip = peer_ip(transport)
        if not self.server.gate.admit(self.ip):
            transport.close()  # over a connection cap: the gate logs it
            return
        self.admitted = True
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        self.transport = transport
        self.pending.transport = transport
        self.server.connections.add(self)
        timeout = self.server.limits.handshake_timeout
        self._handshake = asyncio.get_running_loop().call_later(timeout, self._no_handshake)

    def handshake_done(self) -> None:
        """CONNECT arrived: the connection stays open as long as the client wants."""
        if self._handshake is not None:
            self._handshake.cancel()
            self._handshake = None
        self.keepalive.start()

    def _no_handshake(self) -> None:
        # Pulsar closes a connection whose CONNECT did not come within keepAliveIntervalSeconds
        self._handshake = None
        log.info("closing Pulsar connection %s: no CONNECT within the handshake timeout", self.peer)
        self.close()

    def pause_writing(self) -> None:
        """The client reads slower than it is sent to: dispatch no more to its consumers."""
        self.paused = True
        for handle in self.consumers.values():
            handle.consumer.paused = True

    def resume_writing(self) -> None:
        """The client has caught up: its consumers get messages again."""
        self.paused = False
        for handle in list(self.consumers.values()):
            handle.consumer.paused = False
            handle.subscription.kick()

    def data_received(self, data: bytes) -> None:
        self.keepalive.heard()
        while True:
            try:
                if data:
                    self.decoder.feed(data)
                    data = b""
                frame = self.decoder.next_frame()
            except ChecksumError as e:
                self._on_bad_checksum(e)
                continue
            except ProtocolError as e:
                log.warning("closing Pulsar connection %s: %s", self.peer, e)
                self.close()
                return
            if frame is None:
                return
            if self._handshake is not None and frame.type != T.CONNECT:
                refuse_before_connect(self, frame)
                return
            self.dispatch(frame)

    def dispatch(self, frame: Frame) -> None:
        unknown = self.server.authenticator is not None and self.identity is None
        if unknown and frame.type != T.CONNECT:  # nothing is served before authentication
            log.info("closing Pulsar connection %s: %s before CONNECT", self.peer,
                     T.Name(frame.type))  # fmt: skip
            self.close()
            return
        handler = self._handlers.get(frame.type)
        if handler is None:
            log.info("ignoring unsupported Pulsar command %s", T.Name(frame.type))
            return
        result = handler(frame)
        if result is not None:
            task = asyncio.get_running_loop().create_task(self.guard(result, frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if frame.type == T.SEND:
                self._count_pending(task, frame.payload.raw.nbytes if frame.payload else 0)

    def _count_pending(self, task: asyncio.Task[None], size: int) -> None:
        self.pending.add(size)
        task.add_done_callback(lambda _: self.pending.done(size))

    async def guard(self, work: Awaitable[None], frame: Frame) -> None:
        """Run a command's work; answer the frame with its error if it fails."""
        try:
            await work
        except MagnetarError as e:
            self.fail(frame, e)
        except Exception as e:
            log.exception("Pulsar command %s failed", T.Name(frame.type))
            self.fail(frame, e)

    def fail(self, frame: Frame, error: BaseException) -> None:
        """Answer ``frame`` with the error its command type expects."""
        code, text = server_error(error), str(error)
        cmd = frame.command
        if frame.type == T.SEND:
            self.write(responses.send_error(cmd.send.producer_id, cmd.send.sequence_id, code, text))
        elif frame.type == T.PARTITIONED_METADATA:
            rid = cmd.partition_metadata.request_id
            self.write(responses.partitioned_metadata_error(rid, discovery_error(error), text))
        elif frame.type == T.LOOKUP:
            rid = cmd.lookup_topic.request_id
            self.write(responses.lookup_error(rid, discovery_error(error), text))
        elif frame.type == T.GET_SCHEMA:
            self.write(responses.get_schema_error(cmd.get_schema.request_id, code, text))
        elif frame.type == T.GET_OR_CREATE_SCHEMA:
            rid = cmd.get_or_create_schema.request_id
            self.write(responses.get_or_create_schema_error(rid, code, text))
        else:
            body = getattr(cmd, T.Name(frame.type).lower(), None)
            request_id: int | None = getattr(body, "request_id", None)
            if request_id is not None:
                self.write(responses.error(request_id, code, text))

    def _on_bad_checksum(self, e: ChecksumError) -> None:
        cmd = e.command
        if cmd is not None and cmd.type == T.SEND:
            self.write(
                responses.send_error(
                    cmd.send.producer_id,
                    cmd.send.sequence_id,
                    pb.ServerError.ChecksumError,
                    "checksum mismatch: the message was corrupted in transit and not stored",
                )
            )

    @property
    def peer(self) -> str:
        return str(self.transport.get_extra_info("peername")) if self.transport else "?"

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- authentication ------------------------------------------------------------------

    @property
    def peer_cn(self) -> str | None:
        """CN of the client's verified TLS certificate, None without one."""
        if self.transport is None:
            return None
        return peer_common_name(self.transport.get_extra_info("ssl_object"))

    def authenticate(self, method: str, data: bytes) -> Identity:
        """Who the client is; AuthenticationError if the credential does not prove it."""
        auth = self.server.authenticator
        assert auth is not None
        if not method and self.peer_cn and "tls" in auth.providers:
            method = "tls"
        anonymous = self.server.anonymous_role
        if anonymous and ((not method and not data) or method not in auth.providers):
            # no credential, or a method no provider serves: Pulsar takes the client as
            # anonymousUserRole (what that role may do is then up to authorization)
            return Identity(anonymous, "anonymous")
        return auth.authenticate(method, data, self.peer_cn)

    async def authorize(self, name: TopicName, action: str, *, subscription: str = "") -> None:
        """AuthorizationError unless the client's role may ``action`` on ``name`` (and use
        ``subscription``); nothing to check without authorization."""
        auth = self.server.authorizer
        if auth is None:
            return
        # no identity: authentication is off (authorization then runs only with
        # allow_everyone_if_no_acl_found) and the client is ANONYMOUS
        role = self.identity.role if self.identity is not None else ANONYMOUS
        if subscription:
            await auth.require_subscription(role, name, subscription)
        else:
            await auth.require(role, name, action)

    def authenticated(self, identity: Identity) -> None:
        """The client proved ``identity``: check its expiry every refresh interval."""
        self.identity = identity
        self._challenged = False
        if self._refresh is None and identity.expires_at is not None:
            loop = asyncio.get_running_loop()
            self._refresh = loop.call_later(self.server.refresh_interval, self._check_expiry)

    def refuse(self, error: AuthenticationError) -> None:
        """Pulsar's refusal: an ERROR AuthenticationError, then the connection closes."""
        log.warning("refusing Pulsar connection %s: %s", self.peer, error)
        self.write(responses.error(NO_REQUEST, pb.ServerError.AuthenticationError, str(error)))
        self.close()

    def _check_expiry(self) -> None:
        self._refresh = None
        identity = self.identity
        if identity is None or self.transport is None or identity.expires_at is None:
            return
        loop = asyncio.get_running_loop()
        if time.time() >= identity.expires_at:
            if self._challenged:  # asked once, no valid answer since: Pulsar closes
                self.refuse(AuthenticationError("the credential expired and was not renewed"))
                return
            self._challenged = True
            self.write(
                responses.auth_challenge(
                    identity.method, REFRESH_AUTH_DATA, f"Magnetar-{__version__}",
                    self.client_protocol,
                )
            )  # fmt: skip
        self._refresh = loop.call_later(self.server.refresh_interval, self._check_expiry)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None
        if not self.admitted:
            return
        self.admitted = False
        self.server.gate.release(self.ip)
        self.handshake_done()
        self.keepalive.stop()
        self.server.connections.discard(self)
        self.transport = None
        self.pending.transport = None
        task = asyncio.get_running_loop().create_task(self._release_all())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release_all(self) -> None:
        for producer_id in list(self._opening):
            self.cancel_opening_producer(producer_id)
        for handle in list(self.producers.values()):
            handle.topic.remove_producer(handle.producer)
        self.producers.clear()
        for cid in list(self.consumers):
            await self.release_consumer(cid)

    async def release_consumer(self, consumer_id: int) -> None:
        handle = self.consumers.pop(consumer_id, None)
        if handle is None:
            return
        self._by_consumer.pop(id(handle.consumer), None)
        if isinstance(handle, TransientConsumerHandle):
            handle.subscription.remove_consumer(handle.consumer)
            await handle.topic.drop_if_unused(handle.subscription)
        else:
            handle.subscription.remove_consumer(handle.consumer)
            await handle.topic.drop_if_unused(handle.subscription)

    @contextlib.contextmanager
    def opening_producer(self, producer_id: int) -> Iterator[None]:
        """Mark the running PRODUCER command as in progress, so that CLOSE_PRODUCER or a
        lost connection can cancel it while it waits (WaitForExclusive)."""
        task = asyncio.current_task()
        assert task is not None
        self._opening[producer_id] = task
        try:
            yield
        finally:
            if self._opening.get(producer_id) is task:
                del self._opening[producer_id]

    def cancel_opening_producer(self, producer_id: int) -> None:
        task = self._opening.pop(producer_id, None)
        if task is not None:
            task.cancel()

    # -- ConsumerSink: the broker reaches consumers through these --------------------------

    def deliver(self, consumer: Consumer, deliveries: list[Delivery]) -> None:
        handle = self._by_consumer.get(id(consumer))
        partition = handle.partition if handle else -1
        frames = []
        for d in deliveries:
            mid = MessageId(d.message_id.ledger_id, d.message_id.entry_id, -1, partition)
            ack_set = _ack_set(d.entry.count, d.acked_indexes) if d.acked_indexes else ()
            frames.append(
                responses.message(
                    consumer.consumer_id,
                    mid,
                    _pulsar_payload(d.entry),
                    redelivery_count=d.redelivery_count,
                    ack_set=ack_set,
                )
            )
        self.write(b"".join(frames))

    def closed_by_broker(self, consumer: Consumer) -> None:
        """The broker dropped ``consumer`` (seek, reset, delete): tell the client, forget it."""
        handle = self._by_consumer.pop(id(consumer), None)
        if handle is not None and self.consumers.get(consumer.consumer_id) is handle:
            del self.consumers[consumer.consumer_id]
        self.write(responses.close_consumer(consumer.consumer_id, next(_request_ids)))

    def close_producer_by_broker(self, producer_id: int) -> None:
        """The broker dropped the producer (fenced): tell the client, forget it."""
        if self.producers.pop(producer_id, None) is not None:
            self.write(responses.close_producer(producer_id, next(_request_ids)))

    # -- helpers shared by the command handlers ------------------------------------------

    def register_consumer(self, handle: AnyConsumerHandle) -> None:
        handle.consumer.paused = self.paused
        self.consumers[handle.consumer.consumer_id] = handle
        self._by_consumer[id(handle.consumer)] = handle

    def connected_reply(self, client_protocol: int) -> bytes:
        return responses.connected(
            f"Magnetar-{__version__}",
            protocol_version=min(client_protocol or PROTOCOL_VERSION, PROTOCOL_VERSION),
            max_message_size=self.server.max_message_size,
        )

    @staticmethod
    def topic_name(text: str | bytes) -> TopicName:
        """The topic a command names; InvalidNameError for an illegal name, and for a name
        that is not UTF-8 (protobuf then hands the field over as bytes)."""
        return TopicName.parse(text)

    @staticmethod
    def sub_type(value: int) -> SubType:
        return SubType(value)

    @staticmethod
    def wire_id(mid: MessageId) -> pb.MessageIdData:
        return to_wire(mid)


def _pulsar_payload(entry: Entry) -> bytes:
    """The entry as a Pulsar client expects it: KAFKA entries (record batches written by
    Kafka producers) are converted; this is the Pulsar handler's one hook into Kafka."""
    return kafka_to_pulsar(entry) if entry.format == KAFKA else entry.payload


def _ack_set(count: int, acked: list[int]) -> list[int]:
    """Pulsar's ack set: a bit set over the batch where a set bit means *not yet acked*."""
    words = [0] * ((count + 63) // 64)
    done = set(acked)
    for i in range(count):
        if i not in done:
            words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]
