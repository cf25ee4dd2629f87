"""DeleteGroups and OffsetDelete: removing what a consumer group left behind.

A group's committed offsets are the durable subscriptions named after it (see ``groups``):
deleting them removes the subscriptions, so backlog and retention stop counting the group.
Both refuse to touch a group that still has members (NON_EMPTY_GROUP), and OffsetDelete a
topic its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC), as Kafka does. Durable when
answered.
"""

from __future__ import annotations

from typing import Any

from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import groups, wire
from magnetar.protocols.kafka.errors import ErrorCode, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

Response = dict[str, Any]


async def delete_groups(svc: Service, session: Session, req: Request) -> Response:
    results = []
    for group_id in req.body.groups_names:
        results.append({"group_id": group_id, "error_code": await _delete_group(svc, group_id)})
    return {"throttle_time_ms": 0, "results": results}


async def _delete_group(svc: Service, group_id: str) -> ErrorCode:
    if await groups.not_coordinator(svc, group_id):
        return ErrorCode.NOT_COORDINATOR
    if _has_members(svc, group_id):
        return ErrorCode.NON_EMPTY_GROUP
    committed = await groups.committed_partitions(svc, group_id)
    known = group_id in svc.groups.groups or group_id in svc.consumer_groups.groups
    if not committed and not known:
        return ErrorCode.GROUP_ID_NOT_FOUND
    for topic, indexes in committed:
        for index in indexes:
            code = await _forget_offset(svc, group_id, topic, index)
            if code:
                return code
    if group_id in svc.groups.groups:
        svc.groups.discard(group_id)
    svc.consumer_groups.forget(group_id)
    return ErrorCode.NONE


def _has_members(svc: Service, group_id: str) -> bool:
    classic = svc.groups.group(group_id)
    return bool(classic is not None and classic.members) or svc.consumer_groups.active(group_id)


async def _forget_offset(svc: Service, group_id: str, topic: str, index: int) -> ErrorCode:
    """Remove the group's committed offset on one partition (nothing if it has none)."""
    try:
        part = await svc.topics.partition(topic, index)
        if group_id in part.subscriptions:
            await part.unsubscribe(group_id)
    except MagnetarError as e:
        return error_code_of(e)
    return ErrorCode.NONE


async def offset_delete(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    if await groups.not_coordinator(svc, b.group_id):
        return _offset_delete_error(ErrorCode.NOT_COORDINATOR)
    committed = dict(await groups.committed_partitions(svc, b.group_id))
    known = b.group_id in svc.groups.groups or b.group_id in svc.consumer_groups.groups
    if not committed and not known:
        return _offset_delete_error(ErrorCode.GROUP_ID_NOT_FOUND)
    subscribed = _subscribed_topics(svc, b.group_id)
    topics = []
    for t in b.topics:
        parts = []
        for p in t.partitions:
            if t.name in subscribed:
                code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            elif p.partition_index in committed.get(t.name, []):
                code = await _forget_offset(svc, b.group_id, t.name, p.partition_index)
            else:
                code = await _check_partition(svc, t.name, p.partition_index)
            parts.append({"partition_index": p.partition_index, "error_code": code})
        topics.append({"name": t.name, "partitions": parts})
    return {"error_code": 0, "throttle_time_ms": 0, "topics": topics}


def _offset_delete_error(code: ErrorCode) -> Response:
    return {"error_code": code, "throttle_time_ms": 0, "topics": []}


async def _check_partition(svc: Service, topic: str, index: int) -> ErrorCode:
    """NONE for an existing partition without a commit (nothing to delete), else its error."""
    try:
        await svc.topics.partition(topic, index)
    except MagnetarError as e:
        return error_code_of(e)
    return ErrorCode.NONE


def _subscribed_topics(svc: Service, group_id: str) -> set[str]:
    """Topics the group's current members subscribe to."""
    topics: set[str] = set()
    classic = svc.groups.group(group_id)
    if classic is not None:
        for member in classic.members.values():
            try:
                subscription = wire.decode_subscription(member.metadata(classic.protocol))
            except ValueError:  # an assignor's own format: nothing known
                continue
            topics.update(subscription.topics or [])
    consumer = svc.consumer_groups.groups.get(group_id)
    if consumer is not None:
        for m in consumer.members.values():
            topics |= m.topic_names | set(consumer.partitions) & m.subscribed(consumer.partitions)
    return topics
