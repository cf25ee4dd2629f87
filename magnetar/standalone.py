"""``magnetar standalone``: every part of Magnetar in one process.

Opens the metadata store and the storage engine (recovering them), starts the broker and the
protocol listeners, reports where its data lives and which ports it serves, and runs until
SIGINT/SIGTERM, then shuts down cleanly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from aiohttp import web

from magnetar.broker import Broker, BrokerSettings
from magnetar.broker.authorization import Authorizer, Permissions
from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.offload import OffloadService
from magnetar.broker.ownership import BrokerInfo, Ownership, parse_range
from magnetar.broker.peers import Peers
from magnetar.broker.records import RecordKind
from magnetar.broker.retention import RetentionService
from magnetar.broker.scram import ScramCredentials
from magnetar.broker.shedding import ClusterLeader, Shedder
from magnetar.cluster.orphans import OrphanAuditor
from magnetar.cluster.replicated import ReplicatedStorage
from magnetar.core.config import Settings, parse_listeners
from magnetar.core.connections import ConnectionLimits
from magnetar.core.errors import ConfigError, MagnetarError
from magnetar.core.grants import ReadGrants
from magnetar.core.names import TopicName
from magnetar.core.ports import check_free, listening
from magnetar.core.tokens import client_token
from magnetar.http import bodies
from magnetar.http.cluster_metrics import cluster_metrics
from magnetar.http.metrics import MetricSource, storage_metrics
from magnetar.http.permissions import routes as permission_routes
from magnetar.http.permissions import scram_routes
from magnetar.http.routes import Route, ok
from magnetar.http.server import HttpServer, base_url
from magnetar.ledger import LedgerFactory
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.meta.counters import reserve_block
from magnetar.protocols.flight.server import BulkReadServer
from magnetar.protocols.kafka.groups import offsets_here
from magnetar.protocols.kafka.metrics import kafka_metrics
from magnetar.protocols.kafka.server import KafkaServer
from magnetar.protocols.kafka.service import KafkaSettings
from magnetar.protocols.kafka.txn_apis import markers_here
from magnetar.protocols.pulsar.server import PulsarServer
from magnetar.tier import IcebergTables, Tier, open_object_store
from magnetar.views.http import view_routes
from magnetar.views.metrics import view_metrics
from magnetar.views.service import ViewService

log = logging.getLogger(__name__)

NodeStorage = LocalStorage | ReplicatedStorage  # the ledgers' storage


@dataclass
class Standalone:
    """The assembled node; open with :meth:`start`, release with :meth:`aclose`."""

    settings: Settings
    meta: MetadataStore
    storage: NodeStorage
    tier: Tier
    broker: Broker
    pulsar: PulsarServer | None = None
    kafka: KafkaServer | None = None
    http: HttpServer | None = None
    retention: RetentionService | None = None
    offload: OffloadService | None = None
    flight: BulkReadServer | None = None
    views: ViewService | None = None
    shedder: Shedder | None = None
    orphans: OrphanAuditor | None = None

    @classmethod
    async def start(cls, settings: Settings, *, replicated: bool = False) -> Standalone:
        """One process with local storage; with ``replicated``, a broker writing its ledgers
        to the storage nodes registered in the (ZooKeeper) metadata store."""
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        meta = open_metadata_store(settings.metadata)
        storage: NodeStorage
        try:
            if replicated:
                storage = await ReplicatedStorage.open(settings, meta)
            else:
                storage = await LocalStorage.open(settings, meta)
        except BaseException:
            await meta.aclose()
            raise
        tier = _tier(settings, replicated)
        broker = Broker(meta, LedgerFactory(storage, tier), _broker_settings(settings))
        broker.peers = _peers(settings)
        if isinstance(storage, ReplicatedStorage):
            storage.persistence = partial(_persistence, broker)
        node = cls(settings, meta, storage, tier, broker)
        try:
            await broker.start()
            kafka_node = 0
            if isinstance(storage, ReplicatedStorage):  # several brokers may serve the cluster
                kafka_node = await _kafka_node_id(settings, meta)
                me = _me(settings, kafka_node)
                broker.ownership = Ownership(
                    meta, me, on_lost=broker.ownership_lost, load=partial(_load, broker)
                )
                await broker.ownership.start()
                leader = ClusterLeader(broker.ownership)  # shedding and the auditor's lead
                if settings.load_balancer_shedding_enabled:
                    node.shedder = Shedder(
                        leader,
                        partial(_unload_bundle, broker.peers),
                        interval_s=settings.load_balancer_shedding_interval_s,
                        grace_s=settings.load_balancer_shedding_grace_s,
                    )
                    node.shedder.start()
                node.orphans = OrphanAuditor(
                    storage,
                    leader.check,
                    partial(_unowned, broker.ownership),
                    partial(_load_partition, broker),
                    interval=min(max(settings.rereplication_grace_s / 4, 0.5), 10.0),
                )
                node.orphans.start()
            node.offload = OffloadService(
                broker,
                interval=settings.offload_check_interval,
                snapshot_max_age_ms=settings.iceberg_snapshot_max_age_ms,
                min_snapshots=settings.iceberg_min_snapshots,
            )
            await node.offload.start()
            tls = settings.tls_files
            ssl_context = tls.server_context() if tls is not None else None
            authenticator = settings.authenticator()
            permissions = Permissions(meta, broker.namespaces)
            authorizer = _authorizer(settings, permissions)
            grants = ReadGrants(secrets.token_bytes(32)) if authorizer is not None else None
            node.pulsar = PulsarServer(
                broker,
                host=settings.bind_address,
                port=settings.pulsar_port,
                advertised_host=settings.advertised_address or settings.bind_address,
                max_message_size=settings.max_message_size,
                listeners=parse_listeners(settings.advertised_listeners),
                limits=_connection_limits(settings),
                tls_port=settings.pulsar_tls_port,
                ssl_context=ssl_context,
                authenticator=authenticator,
                anonymous_role=settings.anonymous_user_role,
                refresh_interval=settings.authentication_refresh_check_seconds,
                authorizer=authorizer,
            )
            host = settings.bind_address
            await listening("pulsar_port", host, settings.pulsar_port, node.pulsar.start())
            tls_port = settings.pulsar_tls_port
            await listening("pulsar_tls_port", host, tls_port, node.pulsar.start_tls())
            node.kafka = KafkaServer(
                broker,
                _kafka_settings(settings, kafka_node),
                _connection_limits(settings),
                ssl_context=ssl_context,
                authenticator=authenticator,
                authorizer=authorizer,
                scram=ScramCredentials(meta),  # SCRAM is offered only with authentication
            )
            await listening("kafka_port", host, settings.kafka_port, node.kafka.start())
            ssl_port = settings.kafka_ssl_port
            await listening("kafka_ssl_port", host, ssl_port, node.kafka.start_tls())
            advertised = settings.advertised_address or settings.bind_address
            check_free("flight_port", host, settings.flight_port)  # gRPC would not say why
            node.flight = BulkReadServer(
                broker,
                asyncio.get_running_loop(),
                f"grpc://{settings.bind_address}:{settings.flight_port}",
                grants,
            )
            node.flight.start()
            node.http = HttpServer(
                broker,
                host=settings.bind_address,
                port=settings.http_port,
                advertised=settings.advertised_address or settings.bind_address,
                service_url=node.pulsar.service_url,
                offload=node.offload,
                flight_url=f"grpc://{advertised}:{node.flight.port}",
                topic_level_metrics=settings.expose_topic_level_metrics,
                idle_timeout=settings.http_idle_timeout_ms / 1000,
                https_port=settings.https_port,
                ssl_context=ssl_context,
                service_url_tls=node.pulsar.service_url_tls,
                authenticator=authenticator,
                anonymous_role=settings.anonymous_user_role,
                authorizer=authorizer,
                read_grants=grants,
            )
            node.http.extra_routes += permission_routes(permissions)
            node.http.extra_routes += scram_routes(ScramCredentials(meta))
            node.http.connection_limits = _connection_limits(settings)
            node.views = ViewService(settings, broker.records(RecordKind.VIEWS), broker)
            node.http.extra_routes += view_routes(node.views)
            node.http.metric_sources += _metric_sources(node)
            node.http.extra_routes += _storage_node_routes(storage)
            node.http.extra_routes += _broker_routes(broker)
            node.http.extra_routes += _kafka_offset_routes(node.kafka)
            await listening("http_port", host, settings.http_port, node.http.start())
            await listening("https_port", host, settings.https_port, node.http.start_tls())
            await node.views.start(f"http://{_local(settings.bind_address)}:{node.http.port}")
            node.retention = RetentionService(broker, interval=settings.retention_check_interval)
            node.retention.start()
        except BaseException:
            await node.aclose()
            raise
        return node

    def describe(self) -> str:
        s = self.settings
        pulsar = self.pulsar.service_url if self.pulsar else "off"
        http = self.http.url if self.http else "off"
        kafka = self.kafka.bootstrap if self.kafka else "off"
        flight = f"grpc://{s.bind_address}:{self.flight.port}" if self.flight else "off"
        role = "broker" if isinstance(self.storage, ReplicatedStorage) else "standalone"
        tls = ""
        if self.pulsar and self.pulsar.service_url_tls:
            tls = f"{self.pulsar.service_url_tls}; "
        if self.kafka and self.kafka.bootstrap_ssl:
            tls += f"kafka SSL {self.kafka.bootstrap_ssl}; "
        if self.http and self.http.https_url:
            tls += f"{self.http.https_url}; "
        return (
            f"magnetar {role} ready: data in {s.data_dir.resolve()} "
            f"(journal {s.journal_path}, ledgers {s.ledger_path}, metadata {s.metadata}, "
            f"fsync {s.fsync}, tier {s.tier}); pulsar {pulsar}; kafka {kafka}; http {http}; "
            f"flight {flight}; {tls}"
            f"{len(self.storage.partitions())} partition(s); {self._security()}"
        )

    def _security(self) -> str:
        """What protects the ports, said at start: an open node says so."""
        s = self.settings
        if s.authentication_enabled:
            granted = "on" if s.authorization_enabled else "off (any role may do anything)"
            return f"authentication on ({s.authentication_providers}), authorization {granted}"
        who = (
            f"listening on {s.bind_address} only: anyone on this machine"
            if s.bind_address in ("127.0.0.1", "localhost", "::1")
            else f"listening on {s.bind_address or 'every address'}: anyone who reaches it"
        )
        return (
            f"security: none, authentication off, {who} can read, write and administer "
            "everything (docs/security.md)"
        )

    async def aclose(self) -> None:
        try:
            if self.shedder is not None:
                await self.shedder.aclose()
            if self.orphans is not None:
                await self.orphans.aclose()
            if self.retention is not None:
                await self.retention.aclose()
            if self.offload is not None:
                await self.offload.aclose()
            if self.views is not None:
                await self.views.aclose()
            if self.http is not None:
                await self.http.aclose()
            if self.flight is not None:
                await asyncio.to_thread(self.flight.stop)
            if self.kafka is not None:
                await self.kafka.aclose()
            if self.pulsar is not None:
                await self.pulsar.aclose()
            await self.broker.aclose()
            self.tier.close()
            await self.storage.aclose()  # ledgers CLOSED: their next owner needs no recovery
            if self.broker.ownership is not None:
                await self.broker.ownership.release_all()
                self.broker.ownership.close()
        finally:
            await self.meta.aclose()


def _me(s: Settings, kafka_node: int) -> BrokerInfo:
    """This broker as other brokers and clients reach it."""
    host = s.advertised_address or _local(s.bind_address)
    tls = s.tls_enabled
    return BrokerInfo(
        f"{host}:{s.pulsar_port}",
        f"pulsar://{host}:{s.pulsar_port}",
        f"http://{host}:{s.http_port}",
        f"{host}:{s.kafka_port}",
        kafka_node,
        parse_listeners(s.advertised_listeners),
        pulsar_tls=f"pulsar+ssl://{host}:{s.pulsar_tls_port}" if tls else "",
        https=f"https://{host}:{s.https_port}" if tls else "",
        kafka_tls=f"{host}:{s.kafka_ssl_port}" if tls else "",
    )


async def _unowned(ownership: Ownership, partition: str) -> bool:
    return await ownership.owner(TopicName.parse(f"persistent://{partition}")) is None


async def _load_partition(broker: Broker, partition: str) -> None:
    await broker.get_topic(TopicName.parse(f"persistent://{partition}"), create=False)


async def _unload_bundle(
    peers: Peers, owner: BrokerInfo, tenant: str, namespace: str, bundle: str
) -> None:
    """Ask ``owner`` to unload one of its bundles (load shedding, a namespace unload), over
    its admin REST with this node's credential; a refusal raises saying why."""
    url = f"{peers.base_url(owner)}/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload"
    async with peers.session() as http, http.put(url) as answer:
        if answer.status >= 300:
            raise web.HTTPBadGateway(
                reason=f"broker {owner.id} refused to unload {tenant}/{namespace}/{bundle}: "
                f"{answer.status} {' '.join((await answer.text())[:300].split())}"
            )


async def _kafka_node_id(s: Settings, meta: MetadataStore) -> int:
    """This broker's Kafka node id: taken once from a cluster-wide counter, then kept in
    its data directory (stable across restarts, as Kafka's broker.id)."""
    path = s.data_dir / "kafka-node-id"
    if path.exists():
        return int(path.read_text().strip())
    node = await reserve_block(meta, "/counters/kafka-node-id", 1)
    path.write_text(f"{node}\n")
    return node


def _kafka_offset_routes(kafka: KafkaServer) -> list[Route]:
    """``POST /magnetar/v1/kafka/offsets``: a group coordinator on another broker commits
    or fetches a group's offset on a partition this broker serves."""

    async def offsets(request: web.Request) -> web.Response:
        body = _offsets_request(await bodies.json_body(request))
        return ok(await offsets_here(kafka.service, body))

    async def markers(request: web.Request) -> web.Response:
        body = _markers_request(await bodies.json_body(request))
        return ok(await markers_here(kafka.service, body))

    return [
        Route("POST", "/magnetar/v1/kafka/offsets", offsets, "Group offsets (brokers)"),
        Route("POST", "/magnetar/v1/kafka/txn-markers", markers, "Transaction markers (brokers)"),
    ]


def _markers_request(body: object) -> dict[str, object]:
    """The body a transaction coordinator sends (txn_apis ``write_marker``), checked."""
    request = bodies.obj(body, "a transaction marker request")
    return {
        "topic": bodies.text(request.get("topic"), "topic", max_chars=1024),
        "partition": bodies.integer(
            request.get("partition"), "partition", minimum=0, maximum=bodies.JAVA_INT
        ),
        "producerId": bodies.integer(
            request.get("producerId"), "producerId", minimum=0, maximum=2**63 - 1
        ),
        "epoch": bodies.integer(request.get("epoch"), "epoch", minimum=0, maximum=2**15 - 1),
        "commit": bodies.boolean(request.get("commit"), "commit"),
    }


def _offsets_request(body: object) -> dict[str, object]:
    """The body a group coordinator sends (groups.py ``_at_owner``), checked: a malformed
    one is a 400, never a KeyError in the handler."""
    request = bodies.obj(body, "an offsets request")
    op = bodies.choice(request.get("op"), "op", ("commit", "fetch"))
    checked: dict[str, object] = {
        "op": op,
        "group": bodies.text(request.get("group"), "group", max_chars=1024),
        "topic": bodies.text(request.get("topic"), "topic", max_chars=1024),
        "partition": bodies.integer(
            request.get("partition"), "partition", minimum=0, maximum=bodies.JAVA_INT
        ),
    }
    if op == "commit":
        checked["offset"] = bodies.integer(
            request.get("offset"), "offset", minimum=-1, maximum=bodies.JAVA_LONG
        )
        metadata = request.get("metadata")
        checked["metadata"] = None if metadata is None else bodies.text(metadata, "metadata")
    return checked


def _load(broker: Broker) -> tuple[int, int]:
    """What this broker handles, for its load report: (topics loaded, messages in + out)."""
    topics = list(broker.topics.values())
    return len(topics), sum(t.counters.msgs_in + t.counters.msgs_out for t in topics)


def _broker_routes(broker: Broker) -> list[Route]:
    """Pulsar's ``brokers list``: the live brokers of the cluster (this one alone when it
    runs without ZooKeeper ownership)."""

    async def listing(request: web.Request) -> web.Response:
        if broker.ownership is None:
            return ok([f"{request.host}"])
        return ok(sorted(b.id for b in await broker.ownership.brokers()))

    async def owned(_request: web.Request) -> web.Response:
        return ok(broker.ownership.describe() if broker.ownership else {"bundles": []})

    async def load_report(_request: web.Request) -> web.Response:
        if broker.ownership is None:
            topics, _ = _load(broker)
            return ok({"topics": topics, "msgRate": None, "bundles": 1})
        report = broker.ownership.load.to_json()
        return ok({**report, "bundles": len(broker.ownership.owned)})

    async def bundles(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        await broker.namespaces.policies(t, n)  # 404 for an unknown namespace
        if broker.ownership is None:
            return ok({"numBundles": 1, "bundles": {"0x00000000_0xffffffff": request.host}})
        owners = {}
        for b in await broker.ownership.bundles(t, n):
            node = await broker.meta.get(f"/bundles/{t}/{n}/{b}")
            owners[b] = BrokerInfo.from_bytes(node.value).id if node and node.value else None
        return ok({"numBundles": len(owners), "bundles": owners})

    async def unload(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        await broker.namespaces.policies(t, n)
        bundle = request.match_info.get("bundle")
        if broker.ownership is not None and bundle is None:  # the others unload theirs
            for b in await broker.ownership.bundles(t, n):
                node = await broker.meta.get(f"/bundles/{t}/{n}/{b}")
                owner = BrokerInfo.from_bytes(node.value) if node and node.value else None
                if owner is not None and owner.id != broker.ownership.me.id:
                    await _unload_bundle(broker.peers, owner, t, n, b)
        elif broker.ownership is not None and bundle is not None:
            node = await broker.meta.get(f"/bundles/{t}/{n}/{bundle}")
            owner = BrokerInfo.from_bytes(node.value) if node and node.value else None
            if owner is not None and owner.id != broker.ownership.me.id:
                raise web.HTTPTemporaryRedirect(f"{base_url(owner, request)}{request.path_qs}")
        await broker.unload_namespace(t, n, bundle)
        return web.Response(status=204)

    async def split(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        await broker.namespaces.policies(t, n)
        bundle = request.match_info["bundle"]
        if broker.ownership is None:
            raise InvalidRequestError(
                "this standalone serves each namespace as one bundle: bundles are split on "
                "the brokers of a cluster (magnetar broker)"
            )
        try:
            parse_range(bundle)
        except ValueError as e:
            raise InvalidRequestError(str(e)) from None
        node = await broker.meta.get(f"/bundles/{t}/{n}/{bundle}")
        owner = BrokerInfo.from_bytes(node.value) if node and node.value else None
        if owner is not None and owner.id != broker.ownership.me.id:
            raise web.HTTPTemporaryRedirect(f"{base_url(owner, request)}{request.path_qs}")
        halves = await broker.ownership.split(t, n, bundle)
        return ok({"bundles": halves})

    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    return [
        Route("GET", ns + "/bundles", bundles, "Bundles and their owners"),
        Route("PUT", ns + "/unload", unload, "Hand every bundle to the next lookup"),
        Route("PUT", ns + "/{bundle}/unload", unload, "Hand one bundle to the next lookup"),
        Route("PUT", ns + "/{bundle}/split", split, "Split a bundle in two equal halves"),
        Route("GET", "/admin/v2/brokers", listing, "Live brokers"),
        Route("GET", "/admin/v2/brokers/{cluster}", listing, "Live brokers of a cluster"),
        Route("GET", "/admin/v2/broker-stats/ownership", owned, "Bundles this broker owns"),
        Route(
            "GET", "/admin/v2/broker-stats/load-report", load_report, "This broker's load report"
        ),
    ]


def _storage_node_routes(storage: NodeStorage) -> list[Route]:
    """``GET /admin/v2/storage-nodes`` (Pulsar's ``bookies list``): the registered nodes with
    free space and mode; a standalone's one embedded engine is listed as ``embedded``."""

    async def listing(_request: web.Request) -> web.Response:
        if isinstance(storage, ReplicatedStorage):
            await storage.nodes.refresh()
            return ok([dataclasses.asdict(n) for n in storage.nodes.nodes.values()])
        free = shutil.disk_usage(storage.ledger_dir).free
        mode = "read-only" if storage.stats.disk_full else "read-write"
        return ok([{"node_id": "embedded", "free_bytes": free, "mode": mode}])

    async def under_replicated(_request: web.Request) -> web.Response:
        if not isinstance(storage, ReplicatedStorage):
            return ok({"ledgers": {}, "fragmentsCopied": 0, "entriesCopied": 0})
        return ok(
            {
                "ledgers": {str(k): v for k, v in storage.under_replicated.items()},
                "fragmentsCopied": storage.stats["rereplicated_fragments"],
                "entriesCopied": storage.stats["rereplicated_entries"],
            }
        )

    return [
        Route("GET", "/admin/v2/storage-nodes", listing, "Storage nodes: free space, mode"),
        Route(
            "GET",
            "/admin/v2/storage-nodes/under-replicated",
            under_replicated,
            "Ledgers naming a lost storage node, and re-replication progress",
        ),
    ]


def _metric_sources(node: Standalone) -> list[MetricSource]:
    """What /metrics adds to the broker's series: storage, Kafka and views."""
    cluster = node.broker.settings.cluster_name
    sources = []
    if isinstance(node.storage, ReplicatedStorage):
        sources.append(cluster_metrics(node.storage, cluster))
    else:
        sources.append(storage_metrics(node.storage, cluster))
    if node.kafka is not None:
        sources.append(kafka_metrics(node.kafka))
    if node.views is not None:
        sources.append(view_metrics(node.views, cluster))
    return sources


async def _persistence(broker: Broker, partition: str) -> tuple[int, int, int] | None:
    """The `persistence` policy (E, Qw, Qa) of the namespace a partition belongs to."""
    tenant, namespace, _ = partition.split("/", 2)
    try:
        chosen = (await broker.namespaces.policies(tenant, namespace)).persistence
    except MagnetarError:  # namespace gone meanwhile: the settings decide
        return None
    if not chosen:
        return None
    return (
        chosen["bookkeeperEnsemble"],
        chosen["bookkeeperWriteQuorum"],
        chosen["bookkeeperAckQuorum"],
    )


def _local(bind: str) -> str:
    """An address this process reaches its own listeners on."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def _tier(settings: Settings, replicated: bool) -> Tier:
    """The object store, and the Iceberg catalog its offloaded segments are registered in.
    Brokers of a cluster share one catalog: the embedded SQLite file of one broker's data
    directory is not that, so a cluster gets tables only from an explicit catalog URL."""
    store = open_object_store(settings.tier)
    iceberg = None
    kind = settings.iceberg_catalog
    if kind == "sqlite" and replicated and not settings.iceberg_catalog_url:
        log.warning(
            "no Iceberg tables: brokers of a cluster need a shared catalog "
            "(--iceberg-catalog rest, or sqlite with --iceberg-catalog-url on shared storage)"
        )
    elif kind != "none":
        iceberg = IcebergTables.open(store, kind, settings.iceberg_url)
    return Tier(store, row_group_rows=settings.offload_row_group_rows, iceberg=iceberg)


def _peers(s: Settings) -> Peers:
    """How this broker's calls to the others authenticate (and travel, over TLS or not)."""
    return Peers(
        client_token(s.broker_client_auth_token),
        s.peer_tls_context() if s.broker_client_tls_enabled else None,
    )


def _authorizer(s: Settings, permissions: Permissions) -> Authorizer | None:
    """The node's authorizer when authorization is on (it needs authentication, unless
    ungranted resources are open to everyone: then clients without credentials are
    ANONYMOUS)."""
    if not s.authorization_enabled:
        return None
    if not s.authentication_enabled and not s.allow_everyone_if_no_acl_found:
        raise ConfigError(
            "authorization_enabled", "authorization needs authentication_enabled: roles come "
            "from credentials (or allow_everyone_if_no_acl_found, Kafka's way)"
        )  # fmt: skip
    roles = frozenset(r.strip() for r in s.superuser_roles.split(",") if r.strip())
    return Authorizer(
        permissions, roles, allow_everyone_if_no_acl_found=s.allow_everyone_if_no_acl_found
    )


def _broker_settings(s: Settings) -> BrokerSettings:
    return BrokerSettings(
        deduplication_enabled=s.deduplication_enabled,
        schema_compatibility_strategy=s.schema_compatibility_strategy,
        allow_auto_topic_creation=s.allow_auto_topic_creation,
        max_message_size=s.max_message_size,
        offload_deletion_lag_ms=s.offload_deletion_lag_ms,
        max_unacked_messages_per_consumer=s.max_unacked_messages_per_consumer,
        max_unacked_messages_per_subscription=s.max_unacked_messages_per_subscription,
        max_num_partitions_per_partitioned_topic=s.max_num_partitions_per_partitioned_topic,
        max_topics_per_namespace=s.max_topics_per_namespace,
        auto_skip_non_recoverable_data=s.auto_skip_non_recoverable_data,
    )


def _connection_limits(s: Settings) -> ConnectionLimits:
    return ConnectionLimits(
        max_connections=s.max_connections,
        max_connections_per_ip=s.max_connections_per_ip,
        handshake_timeout=s.handshake_timeout_ms / 1000,
        keep_alive_interval=s.keep_alive_interval_seconds,
        idle_timeout=s.connections_max_idle_ms / 1000,
        max_pending_requests=s.max_pending_publish_requests_per_connection,
        max_pending_bytes=s.max_pending_publish_bytes_per_connection,
    )


def _kafka_settings(s: Settings, node_id: int = 0) -> KafkaSettings:
    return KafkaSettings(
        node_id=node_id,
        namespace=s.kafka_namespace,
        host=s.bind_address,
        port=s.kafka_port,
        ssl_port=s.kafka_ssl_port if s.tls_enabled else None,
        advertised_host=s.advertised_address or s.bind_address,
        max_message_size=s.max_message_size,
        fetch_max_bytes=s.fetch_max_bytes,
        min_session_timeout_ms=s.group_min_session_timeout_ms,
        max_session_timeout_ms=s.group_max_session_timeout_ms,
        consumer_heartbeat_interval_ms=s.group_consumer_heartbeat_interval_ms,
        consumer_session_timeout_ms=s.group_consumer_session_timeout_ms,
    )


async def serve(
    settings: Settings,
    *,
    announce: Callable[[str], None] | None = None,
    replicated: bool = False,
) -> None:
    """Run until SIGINT or SIGTERM."""
    node = await Standalone.start(settings, replicated=replicated)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        (announce or _print)(node.describe())
        await stop.wait()
    finally:
        await node.aclose()


def _print(line: str) -> None:
    print(line, flush=True)
