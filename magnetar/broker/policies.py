"""Tenants, namespaces and their policies, kept in the metadata store.

/admin/tenants/<tenant>              {"adminRoles": [...], "allowedClusters": [...]}
/admin/policies/<tenant>/<ns>        Policies (JSON, Pulsar's field names)
/admin/partitioned/<t>/<ns>/<topic>  {"partitions": N}
/admin/topics/<t>/<ns>/<topic>       {} — a persistent (non-partitioned or partition) topic
/admin/topic-policies/<t>/<ns>/<topic>  TopicPolicies (JSON): a topic's own overrides of its
                                     namespace's policies (Pulsar's topic policies)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from magnetar.broker.errors import (
    AlreadyExistsError,
    InvalidRequestError,
    NamespaceNotFoundError,
    NotEmptyError,
    TenantNotFoundError,
)
from magnetar.core.names import check_part
from magnetar.meta import MetadataStore, NodeExistsError

STRATEGIES = (
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)


@dataclass(slots=True)
class Policies:
    """Per-namespace policies; None means "not set here, use the broker's default"."""

    deduplicationEnabled: bool | None = None
    schema_compatibility_strategy: str = "UNDEFINED"
    message_ttl_in_seconds: int | None = None
    retention_policies: dict[str, int] | None = None
    offload_threshold: int = -1
    offload_threshold_in_seconds: int = -1
    offload_deletion_lag_ms: int | None = None
    backlog_quota_map: dict[str, Any] = field(default_factory=dict)
    # {bookkeeperEnsemble, bookkeeperWriteQuorum, bookkeeperAckQuorum}: new ledgers of the
    # namespace's topics on storage nodes (None: the broker's ensemble/quorum settings)
    persistence: dict[str, int] | None = None
    # Pulsar's DelayedDeliveryPolicies {active, tickTime}: None = delayed delivery on, 1 s tick
    delayed_delivery_policies: dict[str, Any] | None = None
    # bytes published to a topic since its last compaction that start the next (0: never)
    compaction_threshold: int | None = None
    # maintenance of the namespace's Iceberg tables (snapshot expiry; None: on, the default)
    iceberg_maintenance: bool | None = None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Policies:
        raw = json.loads(data)
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def tenant_path(tenant: str) -> str:
    return f"/admin/tenants/{tenant}"


def namespace_path(tenant: str, namespace: str) -> str:
    return f"/admin/policies/{tenant}/{namespace}"


def partitioned_path(tenant: str, namespace: str, topic: str) -> str:
    return f"/admin/partitioned/{tenant}/{namespace}/{topic}"


def topic_path(tenant: str, namespace: str, topic: str) -> str:
    return f"/admin/topics/{tenant}/{namespace}/{topic}"


TOPIC_POLICIES = "/admin/topic-policies"


def topic_policies_path(tenant: str, namespace: str, topic: str) -> str:
    return f"{TOPIC_POLICIES}/{tenant}/{namespace}/{topic}"


@dataclass(slots=True)
class TopicPolicies:
    """A topic's overrides of its namespace's policies; None: not set on the topic. Set on a
    partitioned topic's name, they govern every partition (as in Pulsar)."""

    deduplicationEnabled: bool | None = None
    # {"retentionTimeInMinutes": m, "retentionSizeInMB": s}: replaces the namespace's
    # retention for this topic (Pulsar's topic-level retention; Kafka's retention.ms/.bytes)
    retentionPolicies: dict[str, int] | None = None
    maxMessageSize: int | None = None  # bytes of one entry (batch), below the broker's limit
    # bytes published that start a compaction run (0: never; Pulsar's topic-level
    # compactionThreshold; Kafka's cleanup.policy=compact sets it)
    compactionThreshold: int | None = None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> TopicPolicies:
        raw = json.loads(data)
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})


class Namespaces:
    """Tenants and namespaces: create, list, delete (refused while non-empty), policies."""

    def __init__(self, meta: MetadataStore) -> None:
        self.meta = meta

    async def create_tenant(self, tenant: str, info: dict[str, Any] | None = None) -> None:
        check_part("tenant", tenant)
        body = json.dumps(info or {"adminRoles": [], "allowedClusters": []}).encode()
        try:
            await self.meta.put(tenant_path(tenant), body, expected_version=-1)
        except NodeExistsError:
            raise AlreadyExistsError(f"tenant {tenant!r} already exists") from None

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self.require_tenant(tenant)
        await self.meta.put(tenant_path(tenant), json.dumps(info).encode())

    async def tenant(self, tenant: str) -> dict[str, Any]:
        node = await self.meta.get(tenant_path(tenant))
        if node is None:
            raise TenantNotFoundError(f"tenant {tenant!r} does not exist")
        result: dict[str, Any] = json.loads(node.value)
        return result

    async def require_tenant(self, tenant: str) -> None:
        await self.tenant(tenant)

    async def tenants(self) -> list[str]:
        return await self.meta.list_children("/admin/tenants")

    async def delete_tenant(self, tenant: str) -> None:
        await self.require_tenant(tenant)
        if await self.namespaces(tenant):
            raise NotEmptyError(f"tenant {tenant!r} still has namespaces; delete them first")
        await self.meta.delete(tenant_path(tenant))

    async def create_namespace(
        self, tenant: str, namespace: str, policies: Policies | None = None
    ) -> None:
        check_part("namespace", namespace)
        await self.require_tenant(tenant)
        body = (policies or Policies()).to_bytes()
        try:
            await self.meta.put(namespace_path(tenant, namespace), body, expected_version=-1)
        except NodeExistsError:
            raise AlreadyExistsError(f"namespace {tenant}/{namespace} already exists") from None

    async def namespaces(self, tenant: str) -> list[str]:
        await self.require_tenant(tenant)
        return [
            f"{tenant}/{ns}" for ns in await self.meta.list_children(f"/admin/policies/{tenant}")
        ]

    async def policies(self, tenant: str, namespace: str) -> Policies:
        node = await self.meta.get(namespace_path(tenant, namespace))
        if node is None:
            await self.require_tenant(tenant)
            raise NamespaceNotFoundError(f"namespace {tenant}/{namespace} does not exist")
        return Policies.from_bytes(node.value)

    async def set_policies(self, tenant: str, namespace: str, policies: Policies) -> None:
        if policies.schema_compatibility_strategy not in STRATEGIES:
            raise InvalidRequestError(
                f"unknown schema compatibility strategy {policies.schema_compatibility_strategy!r}"
            )
        await self.policies(tenant, namespace)
        await self.meta.put(namespace_path(tenant, namespace), policies.to_bytes())

    async def delete_namespace(self, tenant: str, namespace: str, topics: list[str]) -> None:
        await self.policies(tenant, namespace)
        if topics:
            raise NotEmptyError(
                f"namespace {tenant}/{namespace} still has {len(topics)} topic(s); "
                "delete them first"
            )
        await self.meta.delete(namespace_path(tenant, namespace))

    async def ensure_defaults(self) -> None:
        """Tenant ``public`` and namespace ``public/default`` exist from the start."""
        if not await self.meta.exists(tenant_path("public")):
            await self.create_tenant("public")
        if not await self.meta.exists(namespace_path("public", "default")):
            await self.create_namespace("public", "default")


class TopicPolicyStore:
    """Topic policies in the metadata store, by topic name (the namespace must exist)."""

    def __init__(self, meta: MetadataStore, namespaces: Namespaces) -> None:
        self.meta = meta
        self.namespaces = namespaces

    async def get(self, tenant: str, namespace: str, topic: str) -> TopicPolicies:
        node = await self.meta.get(topic_policies_path(tenant, namespace, topic))
        return TopicPolicies.from_bytes(node.value) if node else TopicPolicies()

    async def set(self, tenant: str, namespace: str, topic: str, policies: TopicPolicies) -> None:
        """Durable when it returns; an all-None policy removes the node."""
        await self.namespaces.policies(tenant, namespace)  # NamespaceNotFoundError
        path = topic_policies_path(tenant, namespace, topic)
        if policies == TopicPolicies():
            if await self.meta.exists(path):
                await self.meta.delete(path)
        else:
            await self.meta.put(path, policies.to_bytes())
