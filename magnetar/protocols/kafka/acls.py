"""Kafka ACLs (CreateAcls / DescribeAcls / DeleteAcls v0-3) over Pulsar's permissions.

Kafka names what Pulsar grants; one store holds both (:mod:`magnetar.broker.authorization`),
so an ACL made by a Kafka admin client is a Pulsar grant and the other way round:

- ``ALLOW User:ROLE`` ``WRITE`` on ``TOPIC`` *name* (literal) = ``produce`` on that topic of
  the Kafka namespace; ``READ`` = ``consume``; ``ALL`` = both; the literal name ``*`` is the
  whole namespace;
- ``ALLOW User:ROLE`` ``READ`` (or ``ALL``) on ``GROUP`` *name* = the group's subscription
  name reserved to that role (and others so granted).

What has no Pulsar equivalent is refused with INVALID_REQUEST naming it (DENY entries,
prefixed patterns, hosts other than ``*``, other operations and resource types). Only a
super-user or an admin of the Kafka namespace's tenant may change or list ACLs
(CLUSTER_AUTHORIZATION_FAILED) — anyone, for a tenant with no admin roles, with
``allow_everyone_if_no_acl_found``; without authorization the APIs answer SECURITY_DISABLED.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magnetar.broker.authorization import Authorizer, NamespacePermissions
from magnetar.core.errors import MagnetarError
from magnetar.core.names import TopicName
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
SECURITY_DISABLED = 54
ANY, TOPIC, GROUP = 1, 2, 3  # resource types
MATCH, LITERAL = 2, 3  # pattern types (ANY = 1)
ALL, READ, WRITE = 2, 3, 4  # operations (ANY = 1)
ALLOW = 3  # permission type (ANY = 1)
_ACTION = {WRITE: {"produce"}, READ: {"consume"}, ALL: {"produce", "consume"}}
Response = dict[str, Any]


class AclError(MagnetarError):
    code = "kafka.acl"
    http_status = 400
    kafka_error = "INVALID_REQUEST"


@dataclass(frozen=True)
class Binding:
    resource_type: int
    name: str
    role: str
    operation: int

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type, "resource_name": self.name,
            "pattern_type": LITERAL, "principal": f"User:{self.role}", "host": "*",
            "operation": self.operation, "permission_type": ALLOW,
        }  # fmt: skip


def bindings(granted: NamespacePermissions) -> list[Binding]:
    """The grants of the Kafka namespace as ACL bindings."""
    found = []
    for topic, roles in [("*", granted.namespace), *granted.topics.items()]:
        for role, actions in roles.items():
            found += [Binding(TOPIC, topic, role, op) for op, a in ((WRITE, "produce"),
                      (READ, "consume")) if a in actions]  # fmt: skip
    for group, members in granted.subscriptions.items():
        found += [Binding(GROUP, group, role, READ) for role in members]
    return found


def _role(principal: str) -> str:
    kind, sep, role = principal.partition(":")
    if kind != "User" or not sep or not role:
        raise AclError(f"principal {principal!r}: use User:<role>")
    return role


def _creation(c: Any) -> Binding:
    if c.permission_type != ALLOW:
        raise AclError("only ALLOW ACLs exist here: Pulsar permissions grant, never deny")
    if getattr(c, "resource_pattern_type", LITERAL) != LITERAL:
        raise AclError("only LITERAL resource patterns are supported")
    if c.host != "*":
        raise AclError(f"host {c.host!r}: only '*' is supported")
    if c.resource_type == TOPIC and c.operation in _ACTION:
        return Binding(TOPIC, c.resource_name, _role(c.principal), c.operation)
    if c.resource_type == GROUP and c.operation in (READ, ALL):
        return Binding(GROUP, c.resource_name, _role(c.principal), READ)
    raise AclError(
        f"resource type {c.resource_type} with operation {c.operation} has no Pulsar "
        "permission: use TOPIC with READ, WRITE or ALL, or GROUP with READ"
    )


async def _guard(svc: Service, session: Session) -> tuple[Authorizer, str, str] | int:
    """(authorizer, tenant, namespace), or the error code to answer with."""
    auth = svc.authorizer
    if auth is None:
        return SECURITY_DISABLED
    tenant, namespace = svc.settings.namespace.split("/")
    if not await auth.may_administer(session.role, tenant):
        return CLUSTER_AUTHORIZATION_FAILED
    return auth, tenant, namespace


async def create_acls(svc: Service, session: Session, req: Request) -> Response:
    guard = await _guard(svc, session)
    results = []
    for c in req.body.creations:
        if isinstance(guard, int):
            results.append({"error_code": guard, "error_message": _why(guard)})
            continue
        auth, tenant, namespace = guard
        try:
            await _grant(auth, tenant, namespace, _creation(c))
        except MagnetarError as e:
            results.append({"error_code": INVALID_REQUEST, "error_message": str(e)})
            continue
        results.append({"error_code": 0, "error_message": None})
    return {"throttle_time_ms": 0, "results": results}


async def _grant(auth: Authorizer, tenant: str, namespace: str, b: Binding) -> None:
    perms = auth.permissions
    if b.resource_type == GROUP:
        await perms.grant_subscription(tenant, namespace, b.name, [b.role])
        return
    current = await perms.get(tenant, namespace)
    held = current.namespace if b.name == "*" else current.topics.get(b.name, {})
    actions = sorted(set(held.get(b.role, [])) | _ACTION[b.operation])
    if b.name == "*":
        await perms.grant_namespace(tenant, namespace, b.role, actions)
    else:
        await perms.grant_topic(_topic(tenant, namespace, b.name), b.role, actions)


def _topic(tenant: str, namespace: str, name: str) -> TopicName:
    return TopicName.parse(f"persistent://{tenant}/{namespace}/{name}")


def _matches(b: Binding, f: Any, type_field: str, name_field: str) -> bool:
    rtype, name = getattr(f, type_field), getattr(f, name_field)
    principal, op = f.principal_filter, f.operation
    return (
        rtype in (ANY, b.resource_type)
        and (name is None or name == b.name)
        and getattr(f, "pattern_type_filter", LITERAL) in (ANY, MATCH, LITERAL)
        and (principal is None or principal == f"User:{b.role}")
        and (f.host_filter is None or f.host_filter == "*")
        and op in (ANY, b.operation)
        and f.permission_type in (ANY, ALLOW)
    )


async def describe_acls(svc: Service, session: Session, req: Request) -> Response:
    guard = await _guard(svc, session)
    if isinstance(guard, int):
        return {"throttle_time_ms": 0, "error_code": guard, "error_message": _why(guard),
                "resources": []}  # fmt: skip
    auth, tenant, namespace = guard
    found = [
        b for b in bindings(await auth.permissions.get(tenant, namespace))
        if _matches(b, req.body, "resource_type_filter", "resource_name_filter")
    ]  # fmt: skip
    resources: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for b in found:
        acl = b.to_json()
        resources.setdefault((b.resource_type, b.name), []).append(
            {k: acl[k] for k in ("principal", "host", "operation", "permission_type")}
        )
    return {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": LITERAL, "acls": acls}
            for (t, n), acls in resources.items()
        ],
    }  # fmt: skip


async def delete_acls(svc: Service, session: Session, req: Request) -> Response:
    guard = await _guard(svc, session)
    results = []
    for f in req.body.filters:
        if isinstance(guard, int):
            results.append({"error_code": guard, "error_message": _why(guard),
                            "matching_acls": []})  # fmt: skip
            continue
        auth, tenant, namespace = guard
        matched = [
            b for b in bindings(await auth.permissions.get(tenant, namespace))
            if _matches(b, f, "resource_type_filter", "resource_name_filter")
        ]  # fmt: skip
        for b in matched:
            await _revoke(auth, tenant, namespace, b)
        results.append({
            "error_code": 0, "error_message": None,
            "matching_acls": [{"error_code": 0, "error_message": None, **b.to_json()}
                              for b in matched],
        })  # fmt: skip
    return {"throttle_time_ms": 0, "filter_results": results}


async def _revoke(auth: Authorizer, tenant: str, namespace: str, b: Binding) -> None:
    perms = auth.permissions
    if b.resource_type == GROUP:
        await perms.revoke_subscription(tenant, namespace, b.name, b.role)
        return
    current = await perms.get(tenant, namespace)
    held = current.namespace if b.name == "*" else current.topics.get(b.name, {})
    left = sorted(set(held.get(b.role, [])) - _ACTION[b.operation])
    if b.name == "*":
        if left:
            await perms.grant_namespace(tenant, namespace, b.role, left)
        else:
            await perms.revoke_namespace(tenant, namespace, b.role)
    elif left:
        await perms.grant_topic(_topic(tenant, namespace, b.name), b.role, left)
    else:
        await perms.revoke_topic(_topic(tenant, namespace, b.name), b.role)


def _why(code: int) -> str:
    if code == SECURITY_DISABLED:
        return "authorization is not enabled on this broker (authorization_enabled)"
    return "only a super-user or an admin of the Kafka namespace's tenant manages ACLs"
