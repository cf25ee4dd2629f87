"""What every Kafka request handler shares: the broker, the settings and per-node state.

:class:`Service` is one per listener; :class:`Session` is one per client connection (the
broker producers it opened). Handlers are plain coroutines ``(service, session, request) →
response dict`` registered in ``server.HANDLERS``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
import weakref
from dataclasses import dataclass, field

from magnetar.broker import AccessMode, Broker, Producer, Topic
from magnetar.broker.authorization import ANONYMOUS, Authorizer
from magnetar.broker.records import IdBlock
from magnetar.broker.scram import ScramCredentials, ScramExchange
from magnetar.core.authentication import Authenticator, Identity
from magnetar.core.errors import MagnetarError
from magnetar.core.metrics import Histogram
from magnetar.protocols.kafka import migration
from magnetar.protocols.kafka.consumer_groups import ConsumerGroups
from magnetar.protocols.kafka.coordinator import GroupCoordinator
from magnetar.protocols.kafka.idempotence import ProducerStates
from magnetar.protocols.kafka.topics import KafkaTopics

PRODUCER_ID_BLOCK = 1000


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    namespace: str = "public/default"  # Kafka topic NAME = persistent://<namespace>/NAME
    host: str = "127.0.0.1"
    port: int = 9092
    ssl_port: int | None = None  # the SSL listener's port; None: no SSL listener
    advertised_host: str = "127.0.0.1"
    node_id: int = 0
    cluster_id: str = "magnetar"
    max_message_size: int = 5 * 1024 * 1024
    max_request_size: int = 100 * 1024 * 1024
    fetch_max_bytes: int = 50 * 1024 * 1024  # largest fetch response, whatever the client asks
    min_session_timeout_ms: int = 6_000  # group members asking for less are refused
    max_session_timeout_ms: int = 30 * 60_000  # ... or more
    consumer_heartbeat_interval_ms: int = 5_000  # KIP-848 members (group.protocol=consumer)
    consumer_session_timeout_ms: int = 45_000


class Service:
    """Per-listener state shared by every connection."""

    def __init__(
        self,
        broker: Broker,
        settings: KafkaSettings,
        authenticator: Authenticator | None = None,
        authorizer: Authorizer | None = None,
        scram: ScramCredentials | None = None,
    ) -> None:
        self.scram = scram  # SCRAM credentials (offered as mechanisms with authentication)
        self.broker = broker
        self.settings = settings
        self.authenticator = authenticator  # None: no SASL, every connection is served
        self.authorizer = authorizer  # None: an authenticated client may do anything
        self.topics = KafkaTopics(broker, settings.namespace)
        self.groups = GroupCoordinator(
            settings.min_session_timeout_ms, settings.max_session_timeout_ms
        )
        self.consumer_groups = ConsumerGroups(
            self._resolve,
            self.topics.topic_id,
            heartbeat_interval_ms=settings.consumer_heartbeat_interval_ms,
            session_timeout_ms=settings.consumer_session_timeout_ms,
            downgrade=lambda group: migration.downgrade(self.groups, group),
        )
        self._states: weakref.WeakKeyDictionary[Topic, asyncio.Future[ProducerStates]] = (
            weakref.WeakKeyDictionary()
        )
        self._ids: list[int] = []
        self._id_lock = asyncio.Lock()
        # API key → seconds from a request decoded to its answer encoded (for /metrics)
        self.request_latency: dict[int, Histogram] = {}

    async def producer_states(self, topic: Topic) -> ProducerStates:
        """The idempotent-producer state of ``topic``, rebuilt from its tail on first use."""
        loading = self._states.get(topic)
        if loading is None:
            loading = asyncio.get_running_loop().create_future()
            self._states[topic] = loading
            states = ProducerStates()
            try:
                await states.load(topic)
            except BaseException as exc:
                del self._states[topic]
                loading.set_exception(exc)
                loading.exception()
                raise
            loading.set_result(states)
        if loading.done():
            return loading.result()
        return await asyncio.shield(loading)

    async def next_producer_id(self) -> int:
        """A producer id never handed out before, also across restarts (ids are reserved
        in blocks in the metadata store; a crash skips the rest of a block)."""
        async with self._id_lock:
            if not self._ids:
                start = await self.broker.reserve_ids(IdBlock.KAFKA_PRODUCER_IDS, PRODUCER_ID_BLOCK)
                self._ids = list(range(start + PRODUCER_ID_BLOCK - 1, start - 1, -1))
            return self._ids.pop()

    async def _resolve(self, names: set[str], regexes: list[re.Pattern[str]]) -> dict[str, int]:
        """{topic: partition count} of the existing topics named or matched (KIP-848)."""
        wanted = set(names)
        if regexes:
            wanted |= {t for t in await self.topics.list() if any(r.fullmatch(t) for r in regexes)}
        found = {}
        for topic in sorted(wanted):
            try:
                n = await self.topics.partition_count(topic)
            except MagnetarError:  # a name no topic can have: nothing to assign
                n = None
            if n:
                found[topic] = n
        return found

    async def aclose(self) -> None:
        await self.groups.aclose()
        await self.consumer_groups.aclose()


@dataclass(eq=False)
class Session:
    """One client connection: who it is and the broker producers it opened."""

    client_id: str = ""
    peer: str = "?"
    tls: bool = False  # arrived on the SSL listener: brokers are named by their SSL address
    identity: Identity | None = None  # who authenticated (with authentication on)
    sasl_mechanism: str | None = None  # chosen by SaslHandshake
    close_after_answer: bool = False  # a refused authentication: answer, then close
    scram: ScramExchange | None = None  # a SCRAM exchange between its two messages
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    producers: dict[int, Producer] = field(default_factory=dict)  # id(topic) → producer
    # (topic, partition) → whose turn it is to be admitted (see produce._produce_partition)
    turns: dict[tuple[str, int], asyncio.Lock] = field(default_factory=dict)

    @property
    def role(self) -> str:
        """The role authorization checks: ANONYMOUS when nothing was proven."""
        return self.identity.role if self.identity is not None else ANONYMOUS

    def listener_port(self, settings: KafkaSettings) -> int:
        """The port of the listener this connection came in on, as Metadata names it."""
        if self.tls and settings.ssl_port is not None:
            return settings.ssl_port
        return settings.port

    def broker_address(self, kafka: str, kafka_tls: str) -> tuple[str, int]:
        """Another broker's (host, port) on the listener this connection uses."""
        host, _, port = (kafka_tls if self.tls and kafka_tls else kafka).rpartition(":")
        return host, int(port)

    def turn(self, topic: str, index: int) -> asyncio.Lock:
        """The lock that admits this connection's batches for a partition in arrival order."""
        lock = self.turns.get((topic, index))
        if lock is None:
            lock = self.turns[(topic, index)] = asyncio.Lock()
        return lock

    async def producer(self, topic: Topic) -> Producer:
        """This connection's broker producer on ``topic`` (opened on first use)."""
        found = self.producers.get(id(topic))
        if found is not None and not found.closed:
            return found
        name = f"kafka-{self.client_id or 'client'}-{self.token}-{len(self.producers)}"
        producer = await topic.add_producer(name, AccessMode.SHARED)
        self.producers[id(topic)] = producer
        return producer

    def release(self) -> None:
        for producer in self.producers.values():
            producer.topic.remove_producer(producer)
        self.producers.clear()
