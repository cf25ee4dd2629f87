"""Discovery and administration: ApiVersions, Metadata, InitProducerId, CreateTopics,
DeleteTopics, DescribeConfigs.

This node is the only broker (node ``node_id``): it leads every partition and coordinates
every group. Topic creation and deletion go through the broker, so Pulsar clients and the
admin REST API see the same topics at once; both are durable in the metadata store (and,
for a deletion, the data removed) when they are answered. A producer id is reserved in the
metadata store before it is handed out, so no id is ever handed out twice.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from magnetar.broker.policies import TopicPolicies
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import records, txn_apis, wire
from magnetar.protocols.kafka.errors import ErrorCode, UnknownTopicError, error_code_of
from magnetar.protocols.kafka.service import KafkaSettings, Service, Session
from magnetar.protocols.kafka.wire import Request

log = logging.getLogger(__name__)
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
Response = dict[str, Any]
_NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's "no id"
MiB = 1024 * 1024
# Kafka's ConfigSource: a topic's own, a cluster-wide dynamic default (a namespace policy
# here), a broker's static setting, the built-in default
_TOPIC_CONFIG, _NAMESPACE_CONFIG, _STATIC_BROKER_CONFIG, _DEFAULT_CONFIG = 1, 3, 4, 5


async def api_versions(svc: Service, session: Session, req: Request) -> Response:
    keys = [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, (low, high) in sorted(wire.SUPPORTED.items())
    ]
    return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}


async def metadata(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    auto = bool(b.allow_auto_topic_creation) if req.api_version >= 4 else True
    names: list[str | uuid.UUID] | None = None
    if b.topics is not None:
        names = [await _requested_name(svc, t) for t in b.topics]
    if names is None or (req.api_version == 0 and not names):
        names, auto = list(await svc.topics.list()), False
    s = svc.settings
    brokers = await live_brokers(svc, session)
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": s.cluster_id,
        "controller_id": controller_id(svc, brokers),
        "topics": [await topic_metadata(svc, name, auto) for name in names],
    }


async def live_brokers(svc: Service, session: Session) -> list[dict[str, Any]]:
    """Every live broker as Metadata names it (node_id, host, port): this node alone in
    standalone mode; in a cluster every registered broker (a partition's leader is its
    owner)."""
    s = svc.settings
    ownership = svc.broker.ownership
    if ownership is None:
        return [{"node_id": s.node_id, "host": s.advertised_host,
                 "port": session.listener_port(s)}]  # fmt: skip
    brokers = []
    for b in await ownership.brokers():
        host, port = session.broker_address(b.kafka, b.kafka_tls)
        brokers.append({"node_id": b.kafka_node, "host": host, "port": port})
    return brokers


def controller_id(svc: Service, brokers: list[dict[str, Any]]) -> int:
    """The broker Metadata names as controller: the lowest live node id."""
    return min((int(b["node_id"]) for b in brokers), default=svc.settings.node_id)


async def _requested_name(svc: Service, topic: Any) -> str | uuid.UUID:
    """A Metadata request's topic: its name, or (v12+, name null) its topic id."""
    if topic.name is None and getattr(topic, "topic_id", None) is not None:
        return await svc.topics.by_id(topic.topic_id) or topic.topic_id
    return str(topic.name)


async def topic_metadata(svc: Service, name: str | uuid.UUID, auto: bool) -> Response:
    if isinstance(name, uuid.UUID):  # an id no topic has
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": name,
                "partitions": []}  # fmt: skip
    try:
        n = await svc.topics.partition_count(name, create=auto)
        topic_id = svc.topics.topic_id(name)
    except MagnetarError as e:
        n, error, topic_id = None, error_code_of(e), _NO_TOPIC_ID
    else:
        error = ErrorCode.NONE if n is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    partitions = []
    for i in range(n or 0):
        try:
            node = await _leader(svc, name, i)
        except MagnetarError as e:  # its bundle is changing hands: the client asks again
            log.info("Kafka metadata of %s partition %d: no leader yet (%s)", name, i, e)
            partitions.append({"error_code": ErrorCode.LEADER_NOT_AVAILABLE,
                               "partition_index": i, "leader_id": -1, "replica_nodes": [],
                               "isr_nodes": [], "offline_replicas": []})  # fmt: skip
            continue
        partitions.append(
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": node,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
        )
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic_id if n is not None else _NO_TOPIC_ID,
        "is_internal": False,
        "partitions": partitions,
    }


async def _leader(svc: Service, topic: str, index: int) -> int:
    """The Kafka node id of the broker serving partition ``index`` of ``topic``."""
    ownership = svc.broker.ownership
    if ownership is None:
        return svc.settings.node_id
    name = svc.topics.name(topic)
    if await svc.broker.partitions(name):
        name = name.partition_name(index)
    owner, _ = await ownership.lookup(name)
    return owner.kafka_node


async def init_producer_id(svc: Service, session: Session, req: Request) -> Response:
    """A fresh producer id (epoch 0); with a transactional id, that id's producer id and
    next epoch from the transaction coordinator."""
    if req.body.transactional_id is not None:
        return await txn_apis.init_producer_id(svc, req)
    return {"error_code": 0, "producer_id": await svc.next_producer_id(), "producer_epoch": 0}


async def create_topics(svc: Service, session: Session, req: Request) -> Response:
    results = []
    for t in req.body.topics:
        message: str | None
        try:
            policies = topic_policies(svc, t.configs or [])
        except ConfigError as e:
            error, message = ErrorCode.INVALID_CONFIG, str(e)
        else:
            error, message = await _create_topic(
                svc, t.name, t.num_partitions, t.replication_factor, req.body.validate_only,
                policies,
            )  # fmt: skip
        result = {"name": t.name, "error_code": error, "error_message": message}
        if req.api_version >= 5:  # what was created (v5+), its id (v7+)
            made = error == ErrorCode.NONE
            count = t.num_partitions if t.num_partitions > 0 else None
            if made and count is None:  # the broker's default: how many it made
                count = await svc.topics.partition_count(t.name)
            result["num_partitions"] = count if made and count else -1
            result["replication_factor"] = 1 if made else -1
            result["configs"] = None  # not returned: DescribeConfigs has them
            if req.api_version >= 7:
                result["topic_id"] = svc.topics.topic_id(t.name) if made else _NO_TOPIC_ID
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


class ConfigError(ValueError):
    """A topic config this server cannot apply (INVALID_CONFIG, naming it)."""


def topic_policies(svc: Service, configs: list[Any]) -> TopicPolicies:
    """The topic policies that carry Kafka topic ``configs`` given at creation. Every config
    is applied or refused (ConfigError), never accepted and dropped:

    - ``retention.ms`` / ``retention.bytes``: the topic's retention policy (Pulsar keeps
      whole minutes and MiB: other values are refused; -1 is unlimited; one given alone
      leaves the other unlimited, as Kafka's defaults are);
    - ``max.message.bytes``: the topic's maxMessageSize (1 .. the broker's limit);
    - ``cleanup.policy``: ``compact`` (alone or with ``delete``) is the topic's compaction
      threshold policy, :data:`COMPACTION_THRESHOLD` bytes (Pulsar's compaction, latest value
      per key); ``delete`` alone sets it to 0 (never compacted, whatever the namespace says).
      Retention (``retention.ms``/``.bytes``) applies either way, as with ``compact,delete``;
    - ``message.timestamp.type=CreateTime`` and ``compression.type=producer`` are what every
      topic does; other values are refused (no broker timestamps, batches are stored as
      produced).
    """
    retention: dict[str, int] = {}
    policies = TopicPolicies()
    for c in configs:
        name, value = c.name, c.value
        if name == "retention.ms":
            retention["retentionTimeInMinutes"] = _whole(name, value, 60_000, "minutes")
        elif name == "retention.bytes":
            retention["retentionSizeInMB"] = _whole(name, value, MiB, "MiB")
        elif name == "max.message.bytes":
            size = _number(name, value)
            limit = svc.settings.max_message_size + records.BATCH_PADDING
            if not 0 < size <= limit:
                raise ConfigError(f"max.message.bytes={value}: use 1..{limit} (the broker's limit)")
            policies.maxMessageSize = size
        elif name == "cleanup.policy":
            policies.compactionThreshold = COMPACTION_THRESHOLD if compacts(value) else 0
        elif name in FIXED_CONFIGS:
            if value != FIXED_CONFIGS[name][0]:
                raise ConfigError(f"{name}={value} is not supported: {FIXED_CONFIGS[name][1]}")
        else:
            raise ConfigError(f"topic config {name!r} is not supported")
    if retention:
        retention.setdefault("retentionTimeInMinutes", -1)
        retention.setdefault("retentionSizeInMB", -1)
        policies.retentionPolicies = retention
    return policies


COMPACTION_THRESHOLD = 100 * 1024 * 1024
"""Bytes published that start a compaction run of a ``cleanup.policy=compact`` topic (change
it with Pulsar's topic policy ``.../{topic}/compactionThreshold``)."""
CLEANUP_POLICIES = ("delete", "compact")


def cleanup_policies(value: str | None) -> list[str]:
    """The policies of a ``cleanup.policy`` list; ConfigError for anything else."""
    found = [v.strip() for v in (value or "").split(",") if v.strip()]
    if not found or any(v not in CLEANUP_POLICIES for v in found):
        raise ConfigError(
            f"cleanup.policy={value!r} is not supported: use delete, compact or compact,delete"
        )
    return found


def compacts(value: str | None) -> bool:
    return "compact" in cleanup_policies(value)


FIXED_CONFIGS = {  # configs every topic has one value of: (the value, why no other)
    "message.timestamp.type": ("CreateTime", "records keep the producer's timestamp"),
    "compression.type": ("producer", "batches are stored as the producer compressed them"),
}


def _number(name: str, value: str | None) -> int:
    try:
        return int(value or "")
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number") from None


def _whole(name: str, value: str | None, unit: int, unit_name: str) -> int:
    """``value`` in ``unit``s; -1 (unlimited) stays -1; refused unless a whole number."""
    number = _number(name, value)
    if number == -1:
        return -1
    if number <= 0 or number % unit:
        raise ConfigError(
            f"{name}={value}: use -1 or a positive whole number of {unit_name} "
            f"(a multiple of {unit}; retention is kept in {unit_name})"
        )
    return number // unit


async def _create_topic(
    svc: Service,
    name: str,
    partitions: int,
    replication: int,
    validate_only: bool,
    policies: TopicPolicies,
) -> tuple[ErrorCode, str | None]:
    partitions = 1 if partitions == -1 else partitions
    if partitions <= 0:
        return ErrorCode.INVALID_PARTITIONS, f"{partitions} partitions: use 1 or more"
    if replication > 1:
        return ErrorCode.INVALID_REPLICATION_FACTOR, "this node is the only broker: use 1"
    try:
        if await svc.topics.partition_count(name) is not None:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
        if not validate_only:
            await svc.topics.create(name, partitions, policies)
    except MagnetarError as e:
        return error_code_of(e), str(e)
    return ErrorCode.NONE, None


async def delete_topics(svc: Service, session: Session, req: Request) -> Response:
    """Delete topics named (v0-5) or named or identified (v6+: KIP-516 topic ids)."""
    b = req.body
    if req.api_version < 6:
        wanted: list[tuple[str | None, uuid.UUID | None]] = [(n, None) for n in b.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in b.topics]
    results = []
    for name, topic_id in wanted:
        error, message = ErrorCode.NONE, None
        if name is None and topic_id is not None:
            name = await svc.topics.by_id(topic_id)
            if name is None:
                error, message = ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}"
        if name is not None:
            try:
                await svc.topics.delete(name)
            except MagnetarError as e:
                error, message = error_code_of(e), str(e)
        result: Response = {"name": name, "error_code": error, "error_message": message}
        if req.api_version >= 6:
            result["topic_id"] = svc.topics.topic_id(name) if name else _NO_TOPIC_ID
        results.append(result)
    return {"throttle_time_ms": 0, "responses": results}


async def describe_configs(svc: Service, session: Session, req: Request) -> Response:
    results = []
    for r in req.body.resources:
        error, message, configs = ErrorCode.NONE, None, []
        try:
            configs = await _configs(svc, r.resource_type, r.resource_name, req.api_version)
        except MagnetarError as e:
            error, message = error_code_of(e), str(e)
        wanted = set(r.configuration_keys) if r.configuration_keys is not None else None
        results.append(
            {
                "error_code": error,
                "error_message": message,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
                "configs": [c for c in configs if wanted is None or c["name"] in wanted],
            }
        )
    return {"throttle_time_ms": 0, "results": results}


async def _topic_configs(svc: Service, name: str) -> list[Response]:
    """A topic's configs with their effective values and where each comes from: the
    topic's own policy (TOPIC_CONFIG), its namespace's policy (DYNAMIC_DEFAULT_BROKER_CONFIG)
    or the broker's settings and Magnetar's fixed behaviour (DEFAULT_CONFIG)."""
    topic = svc.topics.name(name)
    own_retention = await svc.broker.topic_policy(topic, "retentionPolicies")
    if isinstance(own_retention, dict):
        retention, retention_source = own_retention, _TOPIC_CONFIG
    else:
        retention = dict((await svc.broker.policies(topic)).retention_policies or {})
        retention_source = _NAMESPACE_CONFIG if retention else _DEFAULT_CONFIG
    minutes = int(retention.get("retentionTimeInMinutes", -1))
    size_mb = int(retention.get("retentionSizeInMB", -1))
    own_size = await svc.broker.topic_policy(topic, "maxMessageSize")
    size, size_source = (
        (own_size, _TOPIC_CONFIG)
        if isinstance(own_size, int)
        else (svc.settings.max_message_size + records.BATCH_PADDING, _DEFAULT_CONFIG)
    )
    own_threshold = await svc.broker.topic_policy(topic, "compactionThreshold")
    if isinstance(own_threshold, int):
        threshold, threshold_source = own_threshold, _TOPIC_CONFIG
    else:
        threshold = (await svc.broker.policies(topic)).compaction_threshold or 0
        threshold_source = _NAMESPACE_CONFIG if threshold else _DEFAULT_CONFIG
    values = [
        ("cleanup.policy", "compact" if threshold > 0 else "delete", threshold_source),
        ("retention.ms", str(minutes * 60_000 if minutes > 0 else -1), retention_source),
        ("retention.bytes", str(size_mb * MiB if size_mb > 0 else -1), retention_source),
        ("max.message.bytes", str(size), size_source),
        ("message.timestamp.type", "CreateTime", _DEFAULT_CONFIG),
        ("compression.type", "producer", _DEFAULT_CONFIG),
    ]
    return [_config(n, v, source) for n, v, source in values]


def _config(name: str, value: str, source: int) -> Response:
    return {
        "name": name,
        "value": value,
        # the topic-policy ones change over Pulsar's topic REST (AlterConfigs: not yet)
        "read_only": name not in _CHANGEABLE,
        "is_default": source == _DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": _TYPES.get(name, _STRING),
        "documentation": None,
    }


_CHANGEABLE = frozenset({"retention.ms", "retention.bytes", "max.message.bytes", "cleanup.policy"})
_BOOLEAN, _STRING, _INT, _LONG, _LIST = 1, 2, 3, 5, 7  # Kafka's ConfigType
_TYPES = {
    "retention.ms": _LONG,
    "retention.bytes": _LONG,
    "max.message.bytes": _INT,
    "message.max.bytes": _INT,
    "num.partitions": _INT,
    "cleanup.policy": _LIST,
    "advertised.listeners": _LIST,
    "auto.create.topics.enable": _BOOLEAN,
}


def _advertised_listeners(s: KafkaSettings) -> str:
    listeners = f"PLAINTEXT://{s.advertised_host}:{s.port}"
    if s.ssl_port is not None:
        listeners += f",SSL://{s.advertised_host}:{s.ssl_port}"
    return listeners


async def _configs(svc: Service, kind: int, name: str, version: int) -> list[Response]:
    if kind == TOPIC_RESOURCE:
        if await svc.topics.partition_count(name) is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return await _topic_configs(svc, name)
    if kind == BROKER_RESOURCE:
        s = svc.settings
        values = {
            "advertised.listeners": _advertised_listeners(s),
            "auto.create.topics.enable": str(svc.broker.settings.allow_auto_topic_creation).lower(),
            "num.partitions": "1",
            "message.max.bytes": str(svc.settings.max_message_size + records.BATCH_PADDING),
        }
        return [_config(k, v, _STATIC_BROKER_CONFIG) for k, v in values.items()]
    return []
