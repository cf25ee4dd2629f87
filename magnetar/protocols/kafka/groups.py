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
import hashlib
import logging
from types import SimpleNamespace
from typing import Any

import aiohttp

from magnetar.broker import SubType
from magnetar.broker.ownership import NotOwnerError
from magnetar.core.errors import MagnetarError
from magnetar.core.names import TopicName
from magnetar.protocols.kafka import migration
from magnetar.protocols.kafka.coordinator import Group
from magnetar.protocols.kafka.errors import ErrorCode, GroupError, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

log = logging.getLogger(__name__)
NO_OFFSET = -1
MAX_COMMIT_METADATA = 4096  # bytes; Kafka's offset.metadata.max.bytes default
Response = dict[str, Any]


async def find_coordinator(svc: Service, session: Session, req: Request) -> Response:
    """The broker coordinating a group (key type 0) or a transactional id (1): this node on
    its own, else the owner of the key's coordinator name (``coordinator_name``). From v4
    (KIP-699) a request names several keys and gets one answer each."""
    b = req.body
    key_type = b.key_type if req.api_version >= 1 else 0
    if req.api_version < 4:
        return await _coordinator_of(svc, session, b.key, key_type)
    answers = [
        {"key": key, **await _coordinator_of(svc, session, key, key_type)}
        for key in b.coordinator_keys or []
    ]
    return {"throttle_time_ms": 0, "coordinators": answers}


async def _coordinator_of(svc: Service, session: Session, key: str, key_type: int) -> Response:
    s = svc.settings
    if key_type not in (0, 1):
        return {
            "error_code": ErrorCode.INVALID_REQUEST,
            "error_message": f"unknown coordinator key type {key_type}",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    ownership = svc.broker.ownership
    if ownership is None:
        port = session.listener_port(s)
        return {"error_code": 0, "error_message": None, "node_id": s.node_id,
                "host": s.advertised_host, "port": port}  # fmt: skip
    try:
        owner, _ = await ownership.lookup(coordinator_name(svc, key))
    except MagnetarError as e:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": str(e),
                "node_id": -1, "host": "", "port": -1}  # fmt: skip
    host, port = session.broker_address(owner.kafka, owner.kafka_tls)
    return {"error_code": 0, "error_message": None, "node_id": owner.kafka_node, "host": host,
            "port": port}  # fmt: skip


def coordinator_name(svc: Service, group: str) -> TopicName:
    """The name whose bundle's owner coordinates ``group`` or a transactional id (key types
    0 and 1 of FindCoordinator; several brokers)."""
    digest = hashlib.sha1(group.encode()).hexdigest()[:20]
    return svc.topics.name(f"__group-{digest}")


async def not_coordinator(svc: Service, group: str) -> bool:
    """True when another broker coordinates ``group`` (answer NOT_COORDINATOR)."""
    ownership = svc.broker.ownership
    if ownership is None:
        return False
    try:
        await ownership.check(coordinator_name(svc, group))
    except MagnetarError:
        return True
    return False


async def join_group(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    rebalance_ms = b.rebalance_timeout_ms if req.api_version >= 1 else b.session_timeout_ms
    try:
        if await not_coordinator(svc, b.group_id):
            raise GroupError(ErrorCode.NOT_COORDINATOR, "another broker coordinates it")
        if svc.consumer_groups.active(b.group_id):  # a classic member of a consumer group
            join = svc.consumer_groups.classic_join
        else:
            svc.consumer_groups.forget(b.group_id)
            join = svc.groups.join
        result = await join(
            b.group_id,
            b.member_id,
            instance_id=_instance(b),
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
            "protocol_type": b.protocol_type,
            "protocol_name": "",
            "leader": "",
            "member_id": b.member_id,
            "members": [],
        }
    instances = _instances(svc, b.group_id)
    return {
        "error_code": 0,
        "generation_id": result.generation,
        "protocol_type": b.protocol_type,
        "protocol_name": result.protocol,
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [
            {"member_id": m, "group_instance_id": instances.get(m), "metadata": md}
            for m, md in result.members
        ],
    }


def _instance(body: Any) -> str | None:
    """A request's group.instance.id (static membership, JoinGroup v5+ and friends)."""
    return getattr(body, "group_instance_id", None) or None


def _instances(svc: Service, group_id: str) -> dict[str, str]:
    """member id → instance id of a classic group's static members."""
    group = svc.groups.group(group_id)
    return {} if group is None else {m: i for i, m in group.static.items()}


async def sync_group(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    assignments = {a.member_id: bytes(a.assignment) for a in b.assignments or []}
    if await not_coordinator(svc, b.group_id):
        return {"error_code": ErrorCode.NOT_COORDINATOR, "assignment": b""}
    try:
        if svc.consumer_groups.active(b.group_id):
            mine = svc.consumer_groups.classic_sync(b.group_id, b.generation_id, b.member_id)
            return {"error_code": 0, "assignment": mine}
        mine = await svc.groups.sync(
            b.group_id, b.generation_id, b.member_id, assignments, _instance(b)
        )
    except GroupError as e:
        return {"error_code": e.wire_code, "assignment": b""}
    group = svc.groups.group(b.group_id)
    protocol = group.protocol if group is not None else None
    return {"error_code": 0, "protocol_type": getattr(b, "protocol_type", None),
            "protocol_name": protocol, "assignment": mine}  # fmt: skip


async def heartbeat(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    if await not_coordinator(svc, b.group_id):
        return {"error_code": ErrorCode.NOT_COORDINATOR}
    try:
        if svc.consumer_groups.active(b.group_id):
            await svc.consumer_groups.classic_heartbeat(b.group_id, b.generation_id, b.member_id)
            return {"error_code": 0}
        svc.groups.heartbeat(b.group_id, b.generation_id, b.member_id, _instance(b))
    except GroupError as e:
        return {"error_code": e.wire_code}
    return {"error_code": 0}


async def leave_group(svc: Service, session: Session, req: Request) -> Response:
    """One member (v0-2), or a batch of members by member or instance id (v3+, KIP-345:
    the admin client removes static members by instance id), each answered on its own."""
    b = req.body
    if await not_coordinator(svc, b.group_id):
        return {"error_code": ErrorCode.NOT_COORDINATOR, "members": []}
    if req.api_version < 3:
        return {"error_code": _leave(svc, b.group_id, b.member_id, None)}
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "error_code": _leave(svc, b.group_id, m.member_id, m.group_instance_id),
        }
        for m in b.members
    ]
    return {"error_code": 0, "members": members}


def _leave(svc: Service, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
    try:
        if svc.consumer_groups.active(group_id):
            svc.consumer_groups.classic_leave(group_id, member_id)
        else:
            svc.groups.leave(group_id, member_id, instance_id)
    except GroupError as e:
        return e.wire_code
    return ErrorCode.NONE


# -- KIP-848 consumer groups (group.protocol=consumer) --------------------------------------


async def consumer_group_heartbeat(svc: Service, session: Session, req: Request) -> Response:
    """Join, heartbeat, revoke and leave in one request; the coordinator assigns (see
    ``consumer_groups``)."""
    b = req.body
    try:
        if await not_coordinator(svc, b.group_id):
            raise GroupError(ErrorCode.NOT_COORDINATOR, "another broker coordinates it")
        classic = svc.groups.group(b.group_id)
        if classic is not None and classic.members and b.member_epoch == 0:
            migration.upgrade(svc.groups, svc.consumer_groups, b.group_id)
        answer = await svc.consumer_groups.heartbeat(
            b, client_id=req.client_id, client_host=session.peer
        )
    except GroupError as e:
        return {
            "error_code": e.wire_code,
            "error_message": str(e),
            "member_id": None,
            "member_epoch": -1,
            "heartbeat_interval_ms": 0,
        }
    assignment = answer.assignment
    return {
        "error_code": 0,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval_ms": answer.heartbeat_interval_ms,
        "assignment": None if assignment is None else svc.consumer_groups.assignment(assignment),
    }


async def consumer_group_describe(svc: Service, session: Session, req: Request) -> Response:
    """Consumer-protocol groups; a classic or unknown one answers GROUP_ID_NOT_FOUND (the
    client then asks DescribeGroups, as with Kafka)."""
    described = []
    for group_id in req.body.group_ids:
        group = svc.consumer_groups.groups.get(group_id)
        if await not_coordinator(svc, group_id):
            code, why = ErrorCode.NOT_COORDINATOR, "another broker coordinates it"
        elif group is None:
            code, why = ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} is not a consumer group"
        else:
            described.append(svc.consumer_groups.describe(group))
            continue
        described.append(
            {
                "error_code": code,
                "error_message": why,
                "group_id": group_id,
                "group_state": "Dead",
                "group_epoch": -1,
                "assignment_epoch": -1,
                "assignor_name": "",
                "members": [],
            }
        )
    return {"throttle_time_ms": 0, "groups": described}


# -- committed offsets ---------------------------------------------------------------------


async def offset_commit(svc: Service, session: Session, req: Request) -> Response:
    """Durable when answered: every partition answered NONE has its cursor stored."""
    b = req.body
    group_error = ErrorCode.NONE
    epoch = b.generation_id_or_member_epoch
    try:
        if not svc.consumer_groups.check_commit(b.group_id, b.member_id, epoch):
            svc.groups.check_commit(b.group_id, epoch, b.member_id, _instance(b))
    except GroupError as e:
        group_error = e.wire_code
    if await not_coordinator(svc, b.group_id):
        group_error = ErrorCode.NOT_COORDINATOR
    topics = []
    for t in b.topics:
        jobs = [commit_offset(svc, b.group_id, t.name, p, group_error) for p in t.partitions]
        codes = await asyncio.gather(*jobs)
        parts = [
            {"partition_index": p.partition_index, "error_code": code}
            for p, code in zip(t.partitions, codes, strict=True)
        ]
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}


async def commit_offset(
    svc: Service, group: str, topic: str, p: Any, refused: ErrorCode
) -> ErrorCode:
    """Move the group's cursor on partition ``p`` to its committed offset, with the commit's
    metadata; both are durable once this answers NONE. A refusal or failure leaves the
    previous commit (position and metadata) in force."""
    if refused:
        return refused
    metadata, offset = p.committed_metadata, p.committed_offset
    if metadata is not None and len(metadata.encode()) > MAX_COMMIT_METADATA:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    try:
        try:
            part = await svc.topics.partition(topic, p.partition_index)
        except NotOwnerError:  # another broker serves the partition: it stores the commit
            code, _, _ = await _at_owner(svc, "commit", group, topic, p.partition_index,
                                         offset, metadata)  # fmt: skip
            return code
        sub = await part.subscription(group, SubType.FAILOVER, durable=True, start=offset)
        if sub.store is not None:  # written by the seek's flush, with the position
            sub.store.metadata = metadata
            epoch = getattr(p, "committed_leader_epoch", -1)  # OffsetCommit v6+
            sub.store.leader_epoch = epoch if epoch is not None and epoch >= 0 else None
        await sub.seek(max(offset, 0))
    except MagnetarError as e:
        return error_code_of(e)
    return ErrorCode.NONE


async def offset_fetch(svc: Service, session: Session, req: Request) -> Response:
    """A group's committed offsets; from v8 (KIP-709) several groups in one request."""
    b = req.body
    if req.api_version < 8:
        return {"topics": await _group_offsets(svc, b.group_id, b.topics), "error_code": 0}
    groups = [
        {
            "group_id": g.group_id,
            "topics": await _group_offsets(svc, g.group_id, g.topics),
            "error_code": 0,
        }
        for g in b.groups or []
    ]
    return {"throttle_time_ms": 0, "groups": groups}


async def _group_offsets(svc: Service, group: str, wanted: list[Any] | None) -> list[Response]:
    """The committed offsets of ``group`` on ``wanted`` topics (None: every topic it has
    committed on), as OffsetFetch's topic entries."""
    if wanted is None:
        pairs = await committed_partitions(svc, group)
    else:
        pairs = [(t.name, list(t.partition_indexes)) for t in wanted]
    topics = []
    for name, indexes in pairs:
        parts = []
        for index in indexes:
            offset, metadata, code, epoch = await _committed(svc, group, name, index)
            parts.append(
                {
                    "partition_index": index,
                    "committed_offset": offset,
                    "committed_leader_epoch": epoch,
                    "metadata": metadata,
                    "error_code": code,
                }
            )
        topics.append({"name": name, "partitions": parts})
    return topics


async def _committed(
    svc: Service, group: str, topic: str, index: int
) -> tuple[int, str, ErrorCode, int]:
    """(offset, metadata, error, leader epoch or -1) of the group's commit on one
    partition (a commit stored by another broker comes without its leader epoch)."""
    try:
        part = await svc.topics.partition(topic, index)
    except NotOwnerError:
        code, offset, metadata = await _at_owner(svc, "fetch", group, topic, index, -1, None)
        return offset, metadata or "", code, -1
    except MagnetarError as e:
        code = error_code_of(e)
        unknown = code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return NO_OFFSET, "", ErrorCode.NONE if unknown else code, -1
    sub = part.subscriptions.get(group)
    if sub is None or not sub.durable:
        return NO_OFFSET, "", ErrorCode.NONE, -1
    store = sub.store
    metadata = store.metadata if store is not None else None
    epoch = store.leader_epoch if store is not None and store.leader_epoch is not None else -1
    return sub.cursor.mark_delete, metadata or "", ErrorCode.NONE, epoch


async def _at_owner(
    svc: Service,
    op: str,
    group: str,
    topic: str,
    index: int,
    offset: int,
    metadata: str | None,
) -> tuple[ErrorCode, int, str | None]:
    """Commit or fetch a group's offset at the broker serving the partition (its cursor
    lives there): the coordinator's request to ``POST /magnetar/v1/kafka/offsets``."""
    ownership = svc.broker.ownership
    assert ownership is not None
    owner = await ownership.owner(await svc.topics.partition_name(topic, index))
    if owner is None or owner.id == ownership.me.id:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_OFFSET, None
    body = {"op": op, "group": group, "topic": topic, "partition": index, "offset": offset,
            "metadata": metadata}  # fmt: skip
    try:
        peers = svc.broker.peers
        url = f"{peers.base_url(owner)}/magnetar/v1/kafka/offsets"
        async with peers.session() as http, http.post(url, json=body) as r:
            answer = await r.json(content_type=None)
            if r.status != 200:
                log.warning("the broker %s refused a forwarded offset %s: %s", owner.id, op, answer)
                return ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_OFFSET, None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_OFFSET, None
    return ErrorCode(answer["errorCode"]), answer["offset"], answer["metadata"]


async def offsets_here(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    """Serve :func:`_at_owner` on the broker that owns the partition."""
    group, topic, index = str(body["group"]), str(body["topic"]), int(body["partition"])
    if body["op"] == "commit":
        p = SimpleNamespace(
            partition_index=index,
            committed_offset=int(body["offset"]),
            committed_metadata=body.get("metadata"),
        )
        code = await commit_offset(svc, group, topic, p, ErrorCode.NONE)
        return {"errorCode": int(code), "offset": NO_OFFSET, "metadata": None}
    offset, metadata, code, _ = await _committed(svc, group, topic, index)
    return {"errorCode": int(code), "offset": offset, "metadata": metadata}


async def committed_partitions(svc: Service, group: str) -> list[tuple[str, list[int]]]:
    """Every (topic, partitions) of the Kafka namespace where ``group`` has a cursor."""
    out = []
    for topic in await svc.topics.list():
        name = svc.topics.name(topic)
        n = await svc.broker.partitions(name)
        parts = [name.partition_name(i) for i in range(n)] if n else [name]
        found = [
            i for i, part in enumerate(parts) if await svc.broker.subscription_exists(part, group)
        ]
        if found:
            out.append((topic, found))
    return out


# -- listing -------------------------------------------------------------------------------


async def list_groups(svc: Service, session: Session, req: Request) -> Response:
    """Every group this broker coordinates, with its state (v4+), only those in the
    request's ``states_filter`` when it names any (KIP-518; case does not matter)."""
    groups = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type or "consumer",
            "group_state": g.state.value,
        }
        for g in svc.groups.groups.values()
    ]
    groups += [
        {"group_id": g.group_id, "protocol_type": "consumer", "group_state": g.state}
        for g in svc.consumer_groups.groups.values()
        if g.group_id not in svc.groups.groups
    ]
    wanted = {f.lower() for f in getattr(req.body, "states_filter", None) or []}
    if wanted:
        groups = [g for g in groups if g["group_state"].lower() in wanted]
    if req.api_version < 4:
        for g in groups:
            del g["group_state"]
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
            "group_instance_id": m.instance_id,
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
