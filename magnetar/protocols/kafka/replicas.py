"""Replica administration on a store where every partition has one replica, on the broker
that owns it: AlterReplicaLogDirs, AlterPartitionReassignments, ListPartitionReassignments.

Nothing ever moves, so each call is answered as Kafka answers a no-op: moving a replica to
the one log directory it is in, or reassigning a partition to the node that holds it,
succeeds; any other directory (LOG_DIR_NOT_FOUND) or replica set
(INVALID_REPLICA_ASSIGNMENT) is refused; cancelling answers NO_REASSIGNMENT_IN_PROGRESS;
no reassignment is ever listed. Unknown partitions get UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka.errors import ErrorCode, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.topic_admin import LOG_DIR
from magnetar.protocols.kafka.wire import Request

Response = dict[str, Any]


async def _exists(svc: Service, topic: str, index: int) -> ErrorCode:
    try:
        await svc.topics.partition(topic, index)
    except MagnetarError as e:
        return error_code_of(e)
    return ErrorCode.NONE


async def alter_replica_log_dirs(svc: Service, session: Session, req: Request) -> Response:
    results = []
    for d in req.body.dirs:
        for t in d.topics:
            parts = []
            for index in t.partitions:
                code = await _exists(svc, t.name, index)
                if not code and d.path != LOG_DIR:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                parts.append({"partition_index": index, "error_code": code})
            results.append({"topic_name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "results": results}


async def alter_partition_reassignments(svc: Service, session: Session, req: Request) -> Response:
    node = svc.settings.node_id
    responses = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            code, why = await _exists(svc, t.name, p.partition_index), None
            if code:
                why = f"no partition {t.name}-{p.partition_index}"
            elif p.replicas is None:
                code, why = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "nothing is being reassigned"
            elif list(p.replicas) != [node]:
                code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                why = f"replicas {list(p.replicas)}: every partition has one replica; use [{node}]"
            parts.append(
                {"partition_index": p.partition_index, "error_code": code, "error_message": why}
            )
        responses.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "responses": responses}  # fmt: skip


async def list_partition_reassignments(svc: Service, session: Session, req: Request) -> Response:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": []}
