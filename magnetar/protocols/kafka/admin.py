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

from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import wire
from magnetar.protocols.kafka.errors import ErrorCode, UnknownTopicError, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

log = logging.getLogger(__name__)
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
Response = dict[str, Any]
_NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's "no id"


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
    brokers: list[dict[str, Any]] = [
        {"node_id": s.node_id, "host": s.advertised_host, "port": s.port}
    ]
    ownership = svc.broker.ownership
    if ownership is not None:  # every live broker; a partition's leader is its owner
        brokers = []
        for b in await ownership.brokers():
            host, _, port = b.kafka.rpartition(":")
            brokers.append({"node_id": b.kafka_node, "host": host, "port": int(port)})
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": s.cluster_id,
        "controller_id": min((int(b["node_id"]) for b in brokers), default=s.node_id),
        "topics": [await _topic_metadata(svc, name, auto) for name in names],
    }


async def _requested_name(svc: Service, topic: Any) -> str | uuid.UUID:
    """A Metadata request's topic: its name, or (v12+, name null) its topic id."""
    if topic.name is None and getattr(topic, "topic_id", None) is not None:
        return await svc.topics.by_id(topic.topic_id) or topic.topic_id
    return str(topic.name)


async def _topic_metadata(svc: Service, name: str | uuid.UUID, auto: bool) -> Response:
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
        node = await _leader(svc, name, i)
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
    """A fresh producer id (epoch 0); transactions are not supported."""
    if req.body.transactional_id is not None:
        log.info(
            "refusing transactional producer %r: transactions are not supported",
            req.body.transactional_id,
        )
        return {"error_code": ErrorCode.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": 0, "producer_id": await svc.next_producer_id(), "producer_epoch": 0}


async def create_topics(svc: Service, session: Session, req: Request) -> Response:
    results = []
    for t in req.body.topics:
        error, message = _unappliable_config(svc, t.configs or [])
        if not error:
            error, message = await _create_topic(
                svc, t.name, t.num_partitions, t.replication_factor, req.body.validate_only
            )
        results.append({"name": t.name, "error_code": error, "error_message": message})
    return {"throttle_time_ms": 0, "topics": results}


def _unappliable_config(svc: Service, configs: list[Any]) -> tuple[ErrorCode, str | None]:
    """INVALID_CONFIG naming the first config given at creation that this server cannot
    apply, so none is accepted and dropped. Per-topic configs are not stored yet: a config
    is accepted only when its value is what the topic gets anyway (what DescribeConfigs
    reports for a new topic)."""
    current = {c["name"]: c["value"] for c in _topic_values(svc, retention_minutes=None)}
    for c in configs:
        if c.name not in current:
            return ErrorCode.INVALID_CONFIG, f"topic config {c.name!r} is not supported"
        if c.value != current[c.name]:
            return ErrorCode.INVALID_CONFIG, (
                f"topic config {c.name}={c.value} cannot be applied: per-topic configs are not "
                f"supported yet (a new topic has {c.name}={current[c.name]}); create the topic "
                "without it (retention is set on the namespace's policies)"
            )
    return ErrorCode.NONE, None


async def _create_topic(
    svc: Service, name: str, partitions: int, replication: int, validate_only: bool
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
            await svc.topics.create(name, partitions)
    except MagnetarError as e:
        return error_code_of(e), str(e)
    return ErrorCode.NONE, None


async def delete_topics(svc: Service, session: Session, req: Request) -> Response:
    results = []
    for name in req.body.topic_names:
        error = ErrorCode.NONE
        try:
            await svc.topics.delete(name)
        except MagnetarError as e:
            error = error_code_of(e)
        results.append({"name": name, "error_code": error})
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


def _topic_values(svc: Service, retention_minutes: int | None) -> list[Response]:
    """A topic's configs (compaction is not performed: cleanup.policy is always delete).
    ``retention_minutes`` None leaves retention.ms out (it is the namespace's)."""
    values = [
        {"name": "cleanup.policy", "value": "delete"},
        {"name": "max.message.bytes", "value": str(svc.settings.max_message_size)},
        {"name": "message.timestamp.type", "value": "CreateTime"},
    ]
    if retention_minutes is not None:
        ms = retention_minutes * 60_000 if retention_minutes > 0 else -1
        values.insert(1, {"name": "retention.ms", "value": str(ms)})
    return values


async def _configs(svc: Service, kind: int, name: str, version: int) -> list[Response]:
    if kind == TOPIC_RESOURCE:
        if await svc.topics.partition_count(name) is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        policies = await svc.broker.policies(svc.topics.name(name))
        retention = (policies.retention_policies or {}).get("retentionTimeInMinutes", -1)
        values = {c["name"]: c["value"] for c in _topic_values(svc, retention)}
    elif kind == BROKER_RESOURCE:
        values = {
            "auto.create.topics.enable": str(svc.broker.settings.allow_auto_topic_creation).lower(),
            "num.partitions": "1",
            "message.max.bytes": str(svc.settings.max_message_size),
        }
    else:
        values = {}
    return [
        {
            "name": k,
            "value": v,
            "read_only": True,
            "is_default": True,
            "config_source": 5 if kind == BROKER_RESOURCE else 1,
            "is_sensitive": False,
            "synonyms": [],
        }
        for k, v in values.items()
    ]
