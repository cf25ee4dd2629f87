"""Kafka requests checked against the role's permissions, before their handler runs.

With authorization on (:mod:`magnetar.broker.authorization`), Produce needs ``produce`` on
each topic and Fetch / ListOffsets ``consume``; a denied topic is answered
TOPIC_AUTHORIZATION_FAILED for its partitions while the others are served. Metadata names
only topics the role may produce or consume (a denied named topic: TOPIC_AUTHORIZATION_FAILED,
and it is not auto-created). Group requests need the group's name not reserved to other
roles and ``consume`` on the Kafka namespace (or a GROUP ACL naming the role):
GROUP_AUTHORIZATION_FAILED otherwise. Creating and deleting topics and the other admin APIs
need an admin of the namespace's tenant (TOPIC_ / CLUSTER_AUTHORIZATION_FAILED).
With ``allow_everyone_if_no_acl_found`` the role of a client that proved nothing is
ANONYMOUS, and what nobody holds a grant on is open (see the authorization module).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.broker.authorization import Authorizer
from magnetar.core.names import TopicName
from magnetar.protocols.kafka import wire
from magnetar.protocols.kafka.service import Service, Session

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
Response = dict[str, Any] | None
Handler = Callable[[Service, Session, wire.Request], Awaitable[Response]]
_GROUP_APIS = {
    wire.JOIN_GROUP, wire.SYNC_GROUP, wire.HEARTBEAT, wire.LEAVE_GROUP, wire.OFFSET_COMMIT,
    wire.OFFSET_FETCH, wire.CONSUMER_GROUP_HEARTBEAT,
}  # fmt: skip
# what anyone authenticated may ask: handshakes, discovery, its own producer id
_OPEN = {
    wire.API_VERSIONS, wire.SASL_HANDSHAKE, wire.SASL_AUTHENTICATE, wire.FIND_COORDINATOR,
    wire.INIT_PRODUCER_ID, wire.CREATE_ACLS, wire.DESCRIBE_ACLS, wire.DELETE_ACLS,
    wire.LIST_GROUPS, wire.DESCRIBE_GROUPS, wire.CONSUMER_GROUP_DESCRIBE, wire.DESCRIBE_CONFIGS,
    wire.DESCRIBE_USER_SCRAM_CREDENTIALS, wire.ALTER_USER_SCRAM_CREDENTIALS,
}  # fmt: skip


class Denied(Exception):
    """The request is refused as a whole; ``answer`` is its response (None: close)."""

    def __init__(self, answer: Response) -> None:
        super().__init__("denied")
        self.answer = answer


async def run(handler: Handler, svc: Service, session: Session, req: wire.Request) -> Response:
    """``handler``'s answer to the part of ``req`` the role may ask, with the refusals."""
    auth = svc.authorizer
    if auth is None or req.api_key in _OPEN:
        return await handler(svc, session, req)
    role = session.role
    key = req.api_key
    if key == wire.PRODUCE:
        return await _per_topic(handler, svc, session, req, "produce", "topic_data", _produce)
    if key == wire.FETCH:
        return await _per_topic(handler, svc, session, req, "consume", "topics", _fetch)
    if key == wire.LIST_OFFSETS:
        return await _per_topic(handler, svc, session, req, "consume", "topics", _offsets)
    if key == wire.OFFSET_FOR_LEADER_EPOCH:
        return await _per_topic(handler, svc, session, req, "consume", "topics", _epochs)
    if key == wire.METADATA:
        return await _metadata(handler, svc, session, req, auth, role)
    if key in _GROUP_APIS:
        if not await _group_allowed(svc, auth, role, str(req.body.group_id)):
            return _group_denied(req)
        return await handler(svc, session, req)
    tenant = svc.settings.namespace.split("/")[0]
    if await auth.may_administer(role, tenant):
        return await handler(svc, session, req)
    return _admin_denied(req)


def _name(svc: Service, topic: str) -> TopicName:
    return svc.topics.name(topic)


def _topic_of(entry: Any) -> str:
    return str(getattr(entry, "name", None) or getattr(entry, "topic", ""))


async def _per_topic(
    handler: Handler, svc: Service, session: Session, req: wire.Request, action: str,
    field: str, denied: Callable[[Any], dict[str, Any]],
) -> Response:  # fmt: skip
    auth = svc.authorizer
    assert auth is not None
    allowed: list[Any] = []
    refused: list[Any] = []
    for entry in getattr(req.body, field):
        ok = await auth.allowed(session.role, _name(svc, _topic_of(entry)), action)
        (allowed if ok else refused).append(entry)
    if not refused:
        return await handler(svc, session, req)
    answer: Response = None
    if allowed:
        body = copy.copy(req.body)
        setattr(body, field, allowed)
        answer = await handler(svc, session, dataclasses.replace(req, body=body))
    if req.api_key == wire.PRODUCE and req.body.acks == 0:
        return None
    if answer is None:
        answer = _empty(req)
    key = "topics" if req.api_key in (wire.LIST_OFFSETS, wire.OFFSET_FOR_LEADER_EPOCH) else (
        "responses")  # fmt: skip
    answer[key] = list(answer.get(key, [])) + [denied(e) for e in refused]
    return answer


def _empty(req: wire.Request) -> dict[str, Any]:
    if req.api_key == wire.FETCH:
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []}
    if req.api_key in (wire.LIST_OFFSETS, wire.OFFSET_FOR_LEADER_EPOCH):
        return {"throttle_time_ms": 0, "topics": []}
    return {"responses": [], "throttle_time_ms": 0}


def _produce(t: Any) -> dict[str, Any]:
    parts = [{"index": p.index, "error_code": TOPIC_AUTHORIZATION_FAILED, "base_offset": -1,
              "log_start_offset": -1} for p in t.partition_data]  # fmt: skip
    return {"name": t.name, "partition_responses": parts}


def _fetch(t: Any) -> dict[str, Any]:
    parts = [
        {"partition_index": p.partition, "error_code": TOPIC_AUTHORIZATION_FAILED,
         "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
         "aborted_transactions": [], "preferred_read_replica": -1, "records": b""}
        for p in t.partitions
    ]  # fmt: skip
    return {"topic": t.topic, "partitions": parts}


def _offsets(t: Any) -> dict[str, Any]:
    parts = [{"partition_index": p.partition_index, "error_code": TOPIC_AUTHORIZATION_FAILED,
              "timestamp": -1, "offset": -1} for p in t.partitions]  # fmt: skip
    return {"name": t.name, "partitions": parts}


def _epochs(t: Any) -> dict[str, Any]:
    parts = [{"partition": p.partition, "error_code": TOPIC_AUTHORIZATION_FAILED,
              "leader_epoch": -1, "end_offset": -1} for p in t.partitions]  # fmt: skip
    return {"topic": t.topic, "partitions": parts}


async def _metadata(
    handler: Handler, svc: Service, session: Session, req: wire.Request, auth: Authorizer,
    role: str,
) -> Response:  # fmt: skip
    if req.body.topics is None:  # every topic: only those the role may see
        answer = await handler(svc, session, req)
        assert answer is not None
        seen = [
            t
            for t in answer["topics"]
            if t.get("name") and await auth.allowed(role, _name(svc, t["name"]), "lookup")
        ]
        answer["topics"] = seen  # fmt: skip
        return answer
    allowed: list[Any] = []
    refused: list[Any] = []
    for t in req.body.topics:
        name = t.name
        ok = name is None or await auth.allowed(role, _name(svc, str(name)), "lookup")
        (allowed if ok else refused).append(t)
    body = copy.copy(req.body)
    body.topics = allowed
    answer = await handler(svc, session, dataclasses.replace(req, body=body))
    assert answer is not None
    answer["topics"] = list(answer["topics"]) + [
        {"error_code": TOPIC_AUTHORIZATION_FAILED, "name": t.name, "is_internal": False,
         "partitions": []} for t in refused
    ]  # fmt: skip
    return answer


async def _group_allowed(svc: Service, auth: Authorizer, role: str, group: str) -> bool:
    tenant, namespace = svc.settings.namespace.split("/")
    if await auth.is_tenant_admin(role, tenant):
        return True
    granted = await auth.permissions.get(tenant, namespace)
    reserved = granted.subscriptions.get(group)
    if reserved is not None:
        return role in reserved
    # no GROUP ACL: open when ungranted resources are (Kafka's allow.everyone.if.no.acl.found)
    return auth.open_if_ungranted or "consume" in granted.namespace.get(role, [])


def _group_denied(req: wire.Request) -> dict[str, Any]:
    code = GROUP_AUTHORIZATION_FAILED
    if req.api_key == wire.OFFSET_COMMIT:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
             "error_code": code} for p in t.partitions]} for t in req.body.topics]}  # fmt: skip
    if req.api_key == wire.OFFSET_FETCH:
        topics = [
            {"name": t.name, "partitions": [
                {"partition_index": i, "committed_offset": -1, "metadata": "",
                 "error_code": code} for i in t.partition_indexes]}
            for t in (req.body.topics or [])
        ]  # fmt: skip
        return {"throttle_time_ms": 0, "error_code": code, "topics": topics}
    if req.api_key == wire.CONSUMER_GROUP_HEARTBEAT:
        return {"error_code": code, "error_message": "not authorized for this group",
                "member_epoch": -1, "heartbeat_interval_ms": 0}  # fmt: skip
    return {"error_code": code, "throttle_time_ms": 0}


def _admin_denied(req: wire.Request) -> Response:
    if req.api_key == wire.CREATE_TOPICS:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t.name, "error_code": TOPIC_AUTHORIZATION_FAILED,
             "error_message": "only an admin of the namespace's tenant creates topics"}
            for t in req.body.topics]}  # fmt: skip
    if req.api_key == wire.DELETE_TOPICS:
        names = getattr(req.body, "topic_names", None) or [t.name for t in req.body.topics]
        return {"throttle_time_ms": 0, "responses": [
            {"name": n, "error_code": TOPIC_AUTHORIZATION_FAILED} for n in names]}  # fmt: skip
    raise Denied(None)
