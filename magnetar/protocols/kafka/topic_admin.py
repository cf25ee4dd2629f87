"""Partition administration: CreatePartitions, DeleteRecords, DescribeLogDirs, ElectLeaders,
DescribeTopicPartitions.

- CreatePartitions grows a partitioned topic as Pulsar's REST update-partitions does (the
  new count must be larger, at most ``max_num_partitions_per_partitioned_topic``, and the
  namespace must have room); a non-partitioned topic (one Kafka auto-created) cannot grow.
- DeleteRecords moves a partition's start offset (Kafka's log start offset): durable when
  answered, reads below it fail OFFSET_OUT_OF_RANGE, and the segments below it are deleted
  (see ``Broker.delete_records``).
- Every partition has one replica, on the broker that owns it: DescribeLogDirs reports one
  directory with each partition's stored bytes, ElectLeaders answers ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

from typing import Any

from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import admin
from magnetar.protocols.kafka.errors import ErrorCode, UnknownTopicError, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

Response = dict[str, Any]
LOG_DIR = "magnetar-ledgers"  # the one log directory reported: the node's ledger storage


async def create_partitions(svc: Service, session: Session, req: Request) -> Response:
    results = []
    for t in req.body.topics:
        error, message = ErrorCode.NONE, None
        try:
            await _grow(svc, t, bool(req.body.validate_only))
        except _Refused as e:
            error, message = e.wire_code, str(e)
        except MagnetarError as e:
            error, message = error_code_of(e), str(e)
        results.append({"name": t.name, "error_code": error, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}


class _Refused(Exception):
    def __init__(self, wire_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.wire_code = wire_code


async def _grow(svc: Service, t: Any, validate_only: bool) -> None:
    """Give topic ``t.name`` ``t.count`` partitions (durable when this returns)."""
    current = await svc.topics.partition_count(t.name)
    if current is None:
        raise UnknownTopicError(f"topic {t.name!r} does not exist")
    name = svc.topics.name(t.name)
    if not await svc.broker.partitions(name):
        raise _Refused(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {t.name!r} is not partitioned (Kafka auto-created it, or a Pulsar client "
            "did): it stays one partition; create topics that must grow with CreateTopics",
        )
    if t.count <= current:
        raise _Refused(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {t.name!r} has {current} partitions; the new count must be larger "
            f"(got {t.count})",
        )
    _check_assignments(svc, t, current)
    if validate_only:
        svc.broker.limits.check_partitions(name, t.count)
        await svc.broker.limits.check_room(name, t.count - current)
        return
    await svc.topics.admin.grow_partitions(name, t.count)


def _check_assignments(svc: Service, t: Any, current: int) -> None:
    """Manual replica assignments are accepted when they name this node alone, once per
    new partition (every partition has one replica, on the broker that owns it)."""
    if t.assignments is None:
        return
    if len(t.assignments) != t.count - current:
        raise _Refused(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{len(t.assignments)} assignments for {t.count - current} new partitions",
        )
    node = svc.settings.node_id
    for a in t.assignments:
        if list(a.broker_ids) != [node]:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replicas {list(a.broker_ids)}: every partition has one replica; use [{node}]",
            )


async def delete_records(svc: Service, session: Session, req: Request) -> Response:
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            error, low = ErrorCode.NONE, -1
            try:
                topic = await svc.topics.partition(t.name, p.partition_index)
                low = await svc.broker.delete_records(topic, p.offset)
            except MagnetarError as e:
                error = error_code_of(e)
            parts.append(
                {"partition_index": p.partition_index, "low_watermark": low, "error_code": error}
            )
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def describe_log_dirs(svc: Service, session: Session, req: Request) -> Response:
    """One log directory holding every requested partition this node has (null: all)."""
    wanted = req.body.topics
    if wanted is None:
        pairs = []
        for name in await svc.topics.list():
            n = await svc.topics.partition_count(name) or 0
            pairs.append((name, list(range(n))))
    else:
        pairs = [(t.topic, list(t.partitions)) for t in wanted]
    topics = []
    for name, indexes in pairs:
        parts = []
        for index in indexes:
            try:
                topic = await svc.topics.partition(name, index)
            except MagnetarError:  # not here: Kafka leaves it out
                continue
            size = sum(s.size for s in topic.segments())
            parts.append({"partition_index": index, "partition_size": size, "offset_lag": 0,
                          "is_future_key": False})  # fmt: skip
        if parts:
            topics.append({"name": name, "partitions": parts})
    result = {"error_code": 0, "log_dir": LOG_DIR, "topics": topics, "total_bytes": -1,
              "usable_bytes": -1}  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": 0, "results": [result]}


async def elect_leaders(svc: Service, session: Session, req: Request) -> Response:
    """Each partition's one replica already leads: ELECTION_NOT_NEEDED for those that exist
    (Kafka's answer when the preferred leader leads), none listed for "all partitions"."""
    results = []
    for t in req.body.topic_partitions or []:
        n = await _partitions_or_none(svc, t.topic)
        parts = []
        for index in t.partitions:
            if n is None or not 0 <= index < n:
                code, why = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {t.topic}-{index}"
            else:
                code, why = ErrorCode.ELECTION_NOT_NEEDED, "its only replica is the leader"
            parts.append({"partition_id": index, "error_code": code, "error_message": why})
        results.append({"topic": t.topic, "partition_result": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results}


async def _partitions_or_none(svc: Service, topic: str) -> int | None:
    try:
        return await svc.topics.partition_count(topic)
    except MagnetarError:
        return None


async def describe_topic_partitions(svc: Service, session: Session, req: Request) -> Response:
    """Metadata's topic answers in KIP-966's format: topics in name order from the cursor on,
    at most ``response_partition_limit`` partitions, and the cursor where the rest begin."""
    b = req.body
    names = sorted(t.name for t in b.topics) if b.topics else await svc.topics.list()
    start = (b.cursor.topic_name, b.cursor.partition_index) if b.cursor is not None else ("", 0)
    budget = max(b.response_partition_limit, 1)
    topics: list[Response] = []
    for name in (n for n in names if n >= start[0]):
        if budget == 0:
            return _described(topics, {"topic_name": name, "partition_index": 0})
        found = await admin.topic_metadata(svc, name, False)
        first = start[1] if name == start[0] else 0
        parts = [p for p in found["partitions"] if p["partition_index"] >= first]
        rest = parts[budget:]
        parts = parts[:budget]
        budget -= len(parts)
        topics.append(
            {
                "error_code": found["error_code"],
                "name": name,
                "topic_id": found["topic_id"],
                "is_internal": False,
                "partitions": [_partition(p) for p in parts],
            }
        )
        if rest:
            return _described(
                topics, {"topic_name": name, "partition_index": rest[0]["partition_index"]}
            )
    return _described(topics, None)


def _described(topics: list[Response], next_cursor: Response | None) -> Response:
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _partition(p: Response) -> Response:
    return {
        "error_code": p["error_code"],
        "partition_index": p["partition_index"],
        "leader_id": p["leader_id"],
        "leader_epoch": 0,
        "replica_nodes": p["replica_nodes"],
        "isr_nodes": p["isr_nodes"],
        "eligible_leader_replicas": [],
        "last_known_elr": [],
        "offline_replicas": [],
    }
