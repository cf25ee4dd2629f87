"""``/admin/v2/tenants`` and ``/admin/v2/namespaces``: multi-tenancy and namespace policies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.delays import DEFAULT_TICK_MS
from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.policies import STRATEGIES, Policies
from magnetar.http.bodies import JAVA_INT, JAVA_LONG, boolean, choice, integer, json_body, obj
from magnetar.http.bodies import strings as string_list
from magnetar.http.routes import Route, no_content, ok

NS = "/admin/v2/namespaces/{tenant}/{namespace}"


def routes(broker: Broker) -> list[Route]:
    ns = broker.namespaces

    async def list_tenants(request: web.Request) -> web.Response:
        return ok(await ns.tenants())

    async def get_tenant(request: web.Request) -> web.Response:
        return ok(await ns.tenant(request.match_info["tenant"]))

    async def put_tenant(request: web.Request) -> web.Response:
        info = await json_body(request, default={})
        await ns.create_tenant(request.match_info["tenant"], _tenant_info(info))
        return no_content()

    async def post_tenant(request: web.Request) -> web.Response:
        info = await json_body(request)
        await ns.update_tenant(request.match_info["tenant"], _tenant_info(info))
        return no_content()

    async def delete_tenant(request: web.Request) -> web.Response:
        await ns.delete_tenant(request.match_info["tenant"])
        return no_content()

    async def list_namespaces(request: web.Request) -> web.Response:
        return ok(await ns.namespaces(request.match_info["tenant"]))

    async def put_namespace(request: web.Request) -> web.Response:
        policies = _policies_from(await json_body(request, default={}))
        await ns.create_namespace(
            request.match_info["tenant"], request.match_info["namespace"], policies
        )
        return no_content()

    async def get_namespace(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        return ok(dataclasses.asdict(await ns.policies(t, n)))

    async def delete_namespace(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        await ns.delete_namespace(
            t, n, await broker.list_topics(t, n) + await _partitioned(broker, t, n)
        )
        return no_content()

    async def namespace_topics(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        return ok(await broker.list_topics(t, n))

    table = [
        Route("GET", "/admin/v2/tenants", list_tenants, "List tenants"),
        Route("GET", "/admin/v2/tenants/{tenant}", get_tenant, "Tenant info"),
        Route("PUT", "/admin/v2/tenants/{tenant}", put_tenant, "Create a tenant", "TenantInfo"),
        Route("POST", "/admin/v2/tenants/{tenant}", post_tenant, "Update a tenant", "TenantInfo"),
        Route("DELETE", "/admin/v2/tenants/{tenant}", delete_tenant, "Delete an empty tenant"),
        Route("GET", "/admin/v2/namespaces/{tenant}", list_namespaces, "List namespaces"),
        Route("PUT", NS, put_namespace, "Create a namespace", "Policies (optional)"),
        Route("GET", NS, get_namespace, "Namespace policies"),
        Route("DELETE", NS, delete_namespace, "Delete an empty namespace"),
        Route("GET", NS + "/topics", namespace_topics, "Topics of a namespace"),
    ]
    return table + policy_routes(broker)


async def _partitioned(broker: Broker, tenant: str, namespace: str) -> list[str]:
    return await broker.partitioned_topics(tenant, namespace)


def _tenant_info(body: Any) -> dict[str, Any]:
    """Pulsar's TenantInfo; missing fields are empty lists (Magnetar has one cluster and
    does not check ``allowedClusters``)."""
    info = obj(body, "tenant info")
    return {
        "adminRoles": string_list(info.get("adminRoles", []), "adminRoles"),
        "allowedClusters": string_list(info.get("allowedClusters", []), "allowedClusters"),
    }


def _policies_from(body: Any) -> Policies:
    """Policies from a namespace-creation body (Pulsar's field names), each value checked
    as its own policy call checks it; fields Magnetar does not know are ignored, as Pulsar
    ignores unknown JSON properties."""
    policies = obj(body, "namespace policies")
    parsers = {field: parse for _, field, parse, _, _ in _POLICIES}
    parsers["backlog_quota_map"] = _backlog_quota_map
    values = {k: parsers[k](v) for k, v in policies.items() if k in parsers and v is not None}
    return Policies(**values)


# -- policies: one GET/POST(/PUT)/DELETE trio per policy ---------------------------------------

# Every number has Pulsar's bounds: -1 (where it means "no limit") or 0 up to its Java type's
# maximum. E/Qw/Qa are bounded far lower: a ledger's work grows with E x Qw.
MAX_ENSEMBLE = 64


def _int(value: Any, name: str, *, minimum: int, maximum: int = JAVA_INT) -> int:
    return integer(value, name, minimum=minimum, maximum=maximum)


def _long(value: Any, name: str, *, minimum: int) -> int:
    return integer(value, name, minimum=minimum, maximum=JAVA_LONG)


def retention_policy(value: Any) -> dict[str, int]:
    """A RetentionPolicies body (namespace or topic), checked."""
    if not isinstance(value, dict):
        raise InvalidRequestError(
            'retention must be {"retentionTimeInMinutes": N, "retentionSizeInMB": N}'
        )
    minutes = _int(value.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes", minimum=-1)
    size = _long(value.get("retentionSizeInMB", 0), "retentionSizeInMB", minimum=-1)
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}


def _strategy(value: Any) -> str:
    return choice(value, "schema compatibility strategy", STRATEGIES)


def _dedup(value: Any) -> bool:
    return boolean(value, "deduplication")


_QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


def _backlog_quota(value: Any) -> dict[str, Any]:
    quota = obj(value, "backlog quota")
    limit = _long(quota.get("limitSize", quota.get("limit", -1)), "limitSize", minimum=-1)
    seconds = _int(quota.get("limitTime", -1), "limitTime", minimum=-1)
    policy = choice(
        quota.get("policy", "producer_request_hold"), "backlog quota policy", _QUOTA_POLICIES
    )
    return {"limitSize": limit, "limitTime": seconds, "policy": policy}


def _backlog_quota_map(value: Any) -> dict[str, Any]:
    """Pulsar's ``{"destination_storage": quota}`` map, as stored: the quota, or {}."""
    if value == {}:
        return {}
    if not isinstance(value, dict) or set(value) != {"destination_storage"}:
        raise InvalidRequestError('backlog_quota_map must be {"destination_storage": {...}}')
    return _backlog_quota(value["destination_storage"])


def _persistence(value: Any) -> dict[str, int]:
    """Pulsar's PersistencePolicies; the mark-delete rate is accepted and not used."""
    if not isinstance(value, dict):
        raise InvalidRequestError(
            'persistence must be {"bookkeeperEnsemble": E, "bookkeeperWriteQuorum": Qw, '
            '"bookkeeperAckQuorum": Qa}'
        )
    e, qw, qa = (
        _int(value.get(key, 2), key, minimum=1, maximum=MAX_ENSEMBLE)
        for key in ("bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum")
    )
    if not e >= qw >= qa:
        raise InvalidRequestError(
            f"persistence needs bookkeeperEnsemble >= bookkeeperWriteQuorum >= "
            f"bookkeeperAckQuorum, got {e}/{qw}/{qa}"
        )
    return {"bookkeeperEnsemble": e, "bookkeeperWriteQuorum": qw, "bookkeeperAckQuorum": qa}


def _delayed_delivery(value: Any) -> dict[str, Any]:
    """Pulsar's DelayedDeliveryPolicies: {"active": bool, "tickTime": ms}."""
    policy = obj(value, "delayedDelivery")
    active = boolean(policy.get("active", True), "active")
    tick = _long(policy.get("tickTime", DEFAULT_TICK_MS), "tickTime", minimum=1)
    return {"active": active, "tickTime": tick}


# (path suffix, Policies field, parser, value when deleted, write method)
_POLICIES: list[tuple[str, str, Callable[[Any], Any], Any, str]] = [
    ("retention", "retention_policies", retention_policy, None, "POST"),
    (
        "messageTTL",
        "message_ttl_in_seconds",
        lambda v: _int(v, "messageTTL", minimum=0),
        None,
        "POST",
    ),
    ("deduplication", "deduplicationEnabled", _dedup, None, "POST"),
    ("schemaCompatibilityStrategy", "schema_compatibility_strategy", _strategy, "UNDEFINED", "PUT"),
    (
        "offloadThreshold",
        "offload_threshold",
        lambda v: _long(v, "offloadThreshold", minimum=-1),
        -1,
        "PUT",
    ),
    (
        "offloadThresholdInSeconds",
        "offload_threshold_in_seconds",
        lambda v: _long(v, "offloadThresholdInSeconds", minimum=-1),
        -1,
        "PUT",
    ),
    (
        "offloadDeletionLagMs",
        "offload_deletion_lag_ms",
        lambda v: _long(v, "offloadDeletionLagMs", minimum=0),
        None,
        "PUT",
    ),
    ("backlogQuota", "backlog_quota_map", _backlog_quota, {}, "POST"),
    ("persistence", "persistence", _persistence, None, "POST"),
    ("delayedDelivery", "delayed_delivery_policies", _delayed_delivery, None, "POST"),
    (
        "icebergMaintenance",
        "iceberg_maintenance",
        lambda v: boolean(v, "icebergMaintenance"),
        None,
        "POST",
    ),
    (
        "compactionThreshold",
        "compaction_threshold",
        lambda v: _long(v, "compactionThreshold", minimum=0),
        None,
        "PUT",
    ),
]


def policy_routes(broker: Broker) -> list[Route]:
    table = []
    for suffix, field, parse, cleared, method in _POLICIES:
        get, put, delete = _policy_handlers(broker, field, parse, cleared)
        path = f"{NS}/{suffix}"
        table += [
            Route(
                "GET",
                path if suffix != "backlogQuota" else f"{NS}/backlogQuotaMap",
                get,
                f"Get {suffix}",
            ),
            Route(method, path, put, f"Set {suffix}", "the policy value as JSON"),
            Route("DELETE", path, delete, f"Remove {suffix}"),
        ]
        if method == "PUT":
            table.append(Route("POST", path, put, f"Set {suffix}", "the policy value as JSON"))
    return table


def _policy_handlers(
    broker: Broker, field: str, parse: Callable[[Any], Any], cleared: Any
) -> tuple[Any, Any, Any]:
    ns = broker.namespaces

    async def get(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        value = getattr(await ns.policies(t, n), field)
        if field == "backlog_quota_map":
            value = {"destination_storage": value} if value else {}
        if field == "iceberg_maintenance" and value is None:
            value = True  # the broker's default: tables are maintained
        if field == "delayed_delivery_policies" and value is None:
            value = {"active": True, "tickTime": DEFAULT_TICK_MS}  # the broker's default
        return ok(value)

    async def put(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        value = parse(await json_body(request))
        await _update(t, n, value)
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        t, n = request.match_info["tenant"], request.match_info["namespace"]
        await _update(t, n, cleared)
        return no_content()

    async def _update(t: str, n: str, value: Any) -> None:
        policies = await ns.policies(t, n)
        await ns.set_policies(t, n, dataclasses.replace(policies, **{field: value}))

    return get, put, delete
