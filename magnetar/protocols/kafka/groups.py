"""Consumer-group requests: coordinator discovery, membership, committed offsets, listing.

A group's committed offset for a partition is the durable subscription named after the group
on that partition: OffsetCommit moves its cursor (everything below the offset counts as
consumed) and returns once the cursor is in the metadata store, so admin stats, backlog and
retention all see the group's progress, and a restart keeps it. The metadata text of a commit
is stored in the same cursor write (at most ``MAX_COMMIT_METADATA`` UTF-8 bytes, Kafka's
``offset.metadata.max.bytes``; more is refused with OFFSET_METADATA_TOO_LARGE) and OffsetFetch
answers it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from magnetar.broker import SubType
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka.coordinator import Group
from magnetar.protocols.kafka.errors import ErrorCode, GroupError, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

NO_OFFSET = -1
MAX_COMMIT_METADATA = 4096  # bytes; Kafka's offset.metadata.max.bytes default
Response = dict[str, Any]


async def find_coordinator(svc: Service, session: Session, req: Request) -> Response:
    s = svc.settings
    if req.api_version >= 1 and req.body.key_type != 0:
        return {
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "error_message": "transactions are not supported",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    return {"error_code": 0, "node_id": s.node_id, "host": s.advertised_host, "port": s.port}


async def join_group(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    rebalance_ms = b.rebalance_timeout_ms if req.api_version >= 1 else b.session_timeout_ms
    try:
        result = await svc.groups.join(
            b.group_id,
            b.member_id,
            client_id=req.client_id,
            client_host=session.peer,
            session_timeout_ms=b.session_timeout_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=b.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in b.protocols],
        )
    except GroupError as e:
        return {
            "error_code": e.wire_code,
            "generation_id": -1,
            "protocol_name": "",
            "leader": "",
            "member_id": b.member_id,
            "members": [],
        }
    return {
        "error_code": 0,
        "generation_id": result.generation,
        "protocol_name": result.protocol,
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [{"member_id": m, "metadata": md} for m, md in result.members],
    }


async def sync_group(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    assignments = {a.member_id: bytes(a.assignment) for a in b.assignments or []}
    try:
        mine = await svc.groups.sync(b.group_id, b.generation_id, b.member_id, assignments)
    except GroupError as e:
        return {"error_code": e.wire_code, "assignment": b""}
    return {"error_code": 0, "assignment": mine}


async def heartbeat(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    try:
        svc.groups.heartbeat(b.group_id, b.generation_id, b.member_id)
    except GroupError as e:
        return {"error_code": e.wire_code}
    return {"error_code": 0}


async def leave_group(svc: Service, session: Session, req: Request) -> Response:
    try:
        svc.groups.leave(req.body.group_id, req.body.member_id)
    except GroupError as e:
        return {"error_code": e.wire_code}
    return {"error_code": 0}


# -- committed offsets ---------------------------------------------------------------------


async def offset_commit(svc: Service, session: Session, req: Request) -> Response:
    """Durable when answered: every partition answered NONE has its cursor stored."""
    b = req.body
    group_error = ErrorCode.NONE
    try:
        svc.groups.check_commit(b.group_id, b.generation_id_or_member_epoch, b.member_id)
    except GroupError as e:
        group_error = e.wire_code
    topics = []
    for t in b.topics:
        jobs = [_commit(svc, b.group_id, t.name, p, group_error) for p in t.partitions]
        codes = await asyncio.gather(*jobs)
        parts = [
            {"partition_index": p.partition_index, "error_code": code}
            for p, code in zip(t.partitions, codes, strict=True)
        ]
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}


async def _commit(svc: Service, group: str, topic: str, p: Any, refused: ErrorCode) -> ErrorCode:
    """Move the group's cursor on partition ``p`` to its committed offset, with the commit's
    metadata; both are durable once this answers NONE. A refusal or failure leaves the
    previous commit (position and metadata) in force."""
    if refused:
        return refused
    metadata, offset = p.committed_metadata, p.committed_offset
    if metadata is not None and len(metadata.encode()) > MAX_COMMIT_METADATA:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    try:
        part = await svc.topics.partition(topic, p.partition_index)
        sub = await part.subscription(group, SubType.FAILOVER, durable=True, start=offset)
        if sub.store is not None:
            sub.store.metadata = metadata  # written by the seek's flush, with the position
        await sub.seek(max(offset, 0))
    except MagnetarError as e:
        return error_code_of(e)
    return ErrorCode.NONE


async def offset_fetch(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    wanted = b.topics
    if wanted is None:
        pairs = await _committed_partitions(svc, b.group_id)
    else:
        pairs = [(t.name, list(t.partition_indexes)) for t in wanted]
    topics = []
    for name, indexes in pairs:
        parts = []
        for index in indexes:
            offset, metadata, code = await _committed(svc, b.group_id, name, index)
            parts.append(
                {
                    "partition_index": index,
                    "committed_offset": offset,
                    "metadata": metadata,
                    "error_code": code,
                }
            )
        topics.append({"name": name, "partitions": parts})
    return {"topics": topics, "error_code": 0}


async def _committed(
    svc: Service, group: str, topic: str, index: int
) -> tuple[int, str, ErrorCode]:
    """(offset, metadata, error) of the group's commit on one partition."""
    try:
        part = await svc.topics.partition(topic, index)
    except MagnetarError as e:
        code = error_code_of(e)
        unknown = code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return NO_OFFSET, "", ErrorCode.NONE if unknown else code
    sub = part.subscriptions.get(group)
    if sub is None or not sub.durable:
        return NO_OFFSET, "", ErrorCode.NONE
    metadata = sub.store.metadata if sub.store is not None else None
    return sub.cursor.mark_delete, metadata or "", ErrorCode.NONE


async def _committed_partitions(svc: Service, group: str) -> list[tuple[str, list[int]]]:
    """Every (topic, partitions) of the Kafka namespace where ``group`` has a cursor."""
    out = []
    for topic in await svc.topics.list():
        name = svc.topics.name(topic)
        n = await svc.broker.partitions(name)
        parts = [name.partition_name(i) for i in range(n)] if n else [name]
        found = [
            i
            for i, part in enumerate(parts)
            if await svc.broker.meta.exists(f"/cursors/{part.path}/{group}")
        ]
        if found:
            out.append((topic, found))
    return out


# -- listing -------------------------------------------------------------------------------


async def list_groups(svc: Service, session: Session, req: Request) -> Response:
    groups = [
        {"group_id": g.group_id, "protocol_type": g.protocol_type or "consumer"}
        for g in svc.groups.groups.values()
    ]
    return {"error_code": 0, "groups": groups}


async def describe_groups(svc: Service, session: Session, req: Request) -> Response:
    return {
        "groups": [_describe(group_id, svc.groups.group(group_id)) for group_id in req.body.groups]
    }


def _describe(group_id: str, group: Group | None) -> Response:
    if group is None:
        return {
            "error_code": 0,
            "group_id": group_id,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata(group.protocol),
            "member_assignment": m.assignment,
        }
        for m in group.members.values()
    ]
    return {
        "error_code": 0,
        "group_id": group_id,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type,
        "protocol_data": group.protocol or "",
        "members": members,
    }
