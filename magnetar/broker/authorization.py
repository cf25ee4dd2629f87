"""Who may do what: super-users, tenant admins and Pulsar's permissions.

Pulsar's model, kept in the metadata store beside the namespace policies:

- a **super-user** role (``superuser_roles``) may do everything;
- a **tenant admin** (a role in the tenant's ``adminRoles``) manages the tenant's namespaces
  and topics and may produce and consume on them;
- other roles get **actions** (``produce``, ``consume``, ``functions``, ``sources``,
  ``sinks``, ``packages``) granted on a namespace (every topic in it) or on one topic;
- a **subscription** may be restricted to roles (Pulsar's ``subscriptionAuthRoles``): a role
  not listed may not use that subscription name, whatever it may consume.

With ``allow_everyone_if_no_acl_found`` (Kafka's ``allow.everyone.if.no.acl.found``) a
resource nobody holds a permission on is open to every role, Kafka's way: a topic with no
namespace-wide and no topic grant may be produced to and consumed by anyone; a subscription
reserved to no role is open; a tenant with no ``adminRoles`` may be administered by anyone,
and what only a super-user may do is open too (Magnetar has no cluster-level grants). Once
anything is granted on a resource, it is checked as without the setting. Authorization may
then run without authentication: a client that proved nothing has the role ``ANONYMOUS``
(Kafka's ``User:ANONYMOUS``).

``/admin/permissions/<tenant>/<namespace>`` holds, as JSON,
``{"namespace": {role: [action...]}, "topics": {local name: {role: [action...]}},
"subscriptions": {name: [role...]}}``; :class:`Permissions` is the one owner of that path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.policies import Namespaces
from magnetar.core.errors import MagnetarError
from magnetar.core.names import TopicName
from magnetar.meta import BadVersionError, MetadataStore, NodeExistsError

ANONYMOUS = "ANONYMOUS"  # the role of a client that proved nothing (Kafka's User:ANONYMOUS)
ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")


class AuthorizationError(MagnetarError):
    """The authenticated role may not do this; nothing was done. Ask a tenant admin or a
    super-user for the permission the message names."""

    code = "auth.denied"
    http_status = 403
    pulsar_error = "AuthorizationError"
    kafka_error = "TOPIC_AUTHORIZATION_FAILED"


@dataclass
class NamespacePermissions:
    namespace: dict[str, list[str]] = field(default_factory=dict)  # role → actions
    topics: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # topic → role → ...
    subscriptions: dict[str, list[str]] = field(default_factory=dict)  # subscription → roles

    def to_bytes(self) -> bytes:
        body = {"namespace": self.namespace, "topics": self.topics,
                "subscriptions": self.subscriptions}  # fmt: skip
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> NamespacePermissions:
        raw: dict[str, Any] = json.loads(data)
        return cls(raw.get("namespace", {}), raw.get("topics", {}), raw.get("subscriptions", {}))


def permissions_path(tenant: str, namespace: str) -> str:
    return f"/admin/permissions/{tenant}/{namespace}"


def check_actions(actions: object) -> list[str]:
    """A grant's body: a list of Pulsar action names, or InvalidRequestError naming what is
    wrong."""
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise InvalidRequestError(f"expected a list of actions, one of {', '.join(ACTIONS)}")
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise InvalidRequestError(
            f"unknown action(s) {', '.join(unknown)}: use {', '.join(ACTIONS)}"
        )
    return sorted(set(actions))


def check_role(role: str) -> str:
    if not role or len(role) > 1024 or any(c in role for c in "\0\n\r"):
        raise InvalidRequestError(f"{role[:64]!r} is not a role name")
    return role


class Permissions:
    """Grants and revocations, each durable when it returns (one versioned write)."""

    def __init__(self, meta: MetadataStore, namespaces: Namespaces) -> None:
        self.meta = meta
        self.namespaces = namespaces

    async def get(self, tenant: str, namespace: str) -> NamespacePermissions:
        node = await self.meta.get(permissions_path(tenant, namespace))
        return NamespacePermissions.from_bytes(node.value) if node else NamespacePermissions()

    async def _update(self, tenant: str, namespace: str, change: Any) -> None:
        await self.namespaces.policies(tenant, namespace)  # NamespaceNotFoundError
        path = permissions_path(tenant, namespace)
        while True:
            node = await self.meta.get(path)
            current = NamespacePermissions.from_bytes(node.value) if node else (
                NamespacePermissions())  # fmt: skip
            change(current)
            try:
                await self.meta.put(
                    path, current.to_bytes(), expected_version=node.stat.version if node else -1
                )
                return
            except (BadVersionError, NodeExistsError):  # a concurrent grant: read again
                continue

    async def grant_namespace(self, tenant: str, ns: str, role: str, actions: list[str]) -> None:
        await self._update(tenant, ns, lambda p: p.namespace.__setitem__(role, actions))

    async def revoke_namespace(self, tenant: str, ns: str, role: str) -> None:
        await self._update(tenant, ns, lambda p: p.namespace.pop(role, None))

    async def grant_topic(self, topic: TopicName, role: str, actions: list[str]) -> None:
        t = topic.base

        def change(p: NamespacePermissions) -> None:
            p.topics.setdefault(t.local, {})[role] = actions

        await self._update(t.tenant, t.namespace, change)

    async def revoke_topic(self, topic: TopicName, role: str) -> None:
        t = topic.base

        def change(p: NamespacePermissions) -> None:
            roles = p.topics.get(t.local, {})
            roles.pop(role, None)
            if not roles:
                p.topics.pop(t.local, None)

        await self._update(t.tenant, t.namespace, change)

    async def grant_subscription(self, tenant: str, ns: str, sub: str, roles: list[str]) -> None:
        def change(p: NamespacePermissions) -> None:
            p.subscriptions[sub] = sorted(set(p.subscriptions.get(sub, [])) | set(roles))

        await self._update(tenant, ns, change)

    async def revoke_subscription(self, tenant: str, ns: str, sub: str, role: str) -> None:
        def change(p: NamespacePermissions) -> None:
            left = [r for r in p.subscriptions.get(sub, []) if r != role]
            if left:
                p.subscriptions[sub] = left
            else:
                p.subscriptions.pop(sub, None)

        await self._update(tenant, ns, change)


class Authorizer:
    """Answers "may ``role`` do this?" from the permissions and the tenants' admin roles."""

    def __init__(
        self, permissions: Permissions, superusers: frozenset[str], *,
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:  # fmt: skip
        self.permissions = permissions
        self.superusers = superusers
        self.open_if_ungranted = allow_everyone_if_no_acl_found

    def is_superuser(self, role: str) -> bool:
        return role in self.superusers

    async def is_tenant_admin(self, role: str, tenant: str) -> bool:
        if self.is_superuser(role):
            return True
        try:
            info = await self.permissions.namespaces.tenant(tenant)
        except MagnetarError:  # no such tenant: nobody administers it
            return False
        return role in info.get("adminRoles", [])

    async def may_administer(self, role: str, tenant: str) -> bool:
        """A tenant admin, or anyone for a tenant with no admin roles when ungranted
        resources are open."""
        if await self.is_tenant_admin(role, tenant):
            return True
        if not self.open_if_ungranted:
            return False
        try:
            info = await self.permissions.namespaces.tenant(tenant)
        except MagnetarError:
            return False
        return not info.get("adminRoles")

    async def is_ungranted(self, topic: TopicName) -> bool:
        """True when ungranted resources are open and no role holds anything on ``topic``."""
        if not self.open_if_ungranted:
            return False
        t = topic.base
        granted = await self.permissions.get(t.tenant, t.namespace)
        return not any(granted.namespace.values()) and not any(
            granted.topics.get(t.local, {}).values()
        )

    async def actions(self, role: str, topic: TopicName) -> set[str]:
        """What ``role`` may do on ``topic`` by grants (namespace and topic)."""
        t = topic.base
        granted = await self.permissions.get(t.tenant, t.namespace)
        found = set(granted.namespace.get(role, []))
        found |= set(granted.topics.get(t.local, {}).get(role, []))
        return found

    async def allowed(self, role: str, topic: TopicName, action: str) -> bool:
        if await self.is_tenant_admin(role, topic.tenant):
            return True
        if await self.is_ungranted(topic):
            return True
        held = await self.actions(role, topic)
        if action == "lookup":  # Pulsar: a lookup needs produce or consume
            return bool(held & {"produce", "consume"})
        return action in held

    async def require(self, role: str, topic: TopicName, action: str) -> None:
        if not await self.allowed(role, topic, action):
            raise AuthorizationError(
                f"role {role!r} is not allowed to {action} on {topic.base}: a tenant admin "
                f"of {topic.tenant!r} can grant it (grant-permission --actions {action})"
                if action != "lookup"
                else f"role {role!r} may neither produce nor consume on {topic.base}"
            )

    async def require_subscription(self, role: str, topic: TopicName, subscription: str) -> None:
        """Consume, and the subscription name is not reserved to other roles."""
        await self.require(role, topic, "consume")
        if await self.is_tenant_admin(role, topic.tenant):
            return
        granted = await self.permissions.get(topic.tenant, topic.namespace)
        roles = granted.subscriptions.get(subscription)
        if roles and role not in roles:
            raise AuthorizationError(
                f"role {role!r} may not use subscription {subscription!r} of "
                f"{topic.namespace_name}: it is reserved to other roles"
            )

    async def require_tenant_admin(self, role: str, tenant: str) -> None:
        if not await self.may_administer(role, tenant):
            raise AuthorizationError(
                f"role {role!r} is not an admin of tenant {tenant!r} (its adminRoles) nor a "
                "super-user"
            )

    def require_superuser(self, role: str) -> None:
        if not self.is_superuser(role) and not self.open_if_ungranted:
            raise AuthorizationError(f"role {role!r} is not a super-user (superuser_roles)")
