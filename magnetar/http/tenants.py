"""``/admin/v2/tenants`` and ``/admin/v2/namespaces``: multi-tenancy and namespace policies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.policies import STRATEGIES, Policies
from magnetar.http.routes import Route, json_body, no_content, ok

NS = "/admin/v2/namespaces/{tenant}/{namespace}"


def routes(broker: Broker) -> list[Route]:
    ns = broker.namespaces

    async def list_tenants(request: web.Request) -> web.Response:
        return ok(await ns.tenants())

    async def get_tenant(request: web.Request) -> web.Response:
        return ok(await ns.tenant(request.match_info["tenant"]))

    async def put_tenant(request: web.Request) -> web.Response:
        info = await json_body(request, required=False) or {}
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
        body = await json_body(request, required=False)
        policies = None if body is None else _policies_from(body)
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
    return await broker.meta.list_children(f"/admin/partitioned/{tenant}/{namespace}")


def _tenant_info(info: Any) -> dict[str, Any]:
    if not isinstance(info, dict):
        raise InvalidRequestError("tenant info must be a JSON object")
    roles, clusters = info.get("adminRoles", []), info.get("allowedClusters", [])
    for value in (roles, clusters):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise InvalidRequestError(
                f"adminRoles and allowedClusters must be lists of strings, got {value!r}"
            )
    return {"adminRoles": roles, "allowedClusters": clusters}


def _policies_from(body: Any) -> Policies:
    """Policies from a namespace-creation body (Pulsar's field names), each value checked
    as its own policy call checks it; fields Magnetar does not know are ignored, as Pulsar
    ignores unknown JSON properties."""
    if not isinstance(body, dict):
        raise InvalidRequestError("namespace policies must be a JSON object")
    parsers = {field: parse for _, field, parse, _, _ in _POLICIES}
    parsers["backlog_quota_map"] = _backlog_quota_map
    values = {k: parsers[k](v) for k, v in body.items() if k in parsers and v is not None}
    return Policies(**values)


# -- policies: one GET/POST(/PUT)/DELETE trio per policy ---------------------------------------


def _int(value: Any, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequestError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _retention(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise InvalidRequestError(
            'retention must be {"retentionTimeInMinutes": N, "retentionSizeInMB": N}'
        )
    minutes = _int(value.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes", minimum=-1)
    size = _int(value.get("retentionSizeInMB", 0), "retentionSizeInMB", minimum=-1)
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}


def _strategy(value: Any) -> str:
    if value not in STRATEGIES:
        raise InvalidRequestError(
            f"unknown schema compatibility strategy {value!r}: use one of {', '.join(STRATEGIES)}"
        )
    return str(value)


def _dedup(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequestError(f"deduplication must be true or false, got {value!r}")
    return value


def _backlog_quota(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequestError("backlog quota must be a JSON object")
    limit = _int(value.get("limitSize", value.get("limit", -1)), "limitSize", minimum=-1)
    seconds = _int(value.get("limitTime", -1), "limitTime", minimum=-1)
    policy = value.get("policy", "producer_request_hold")
    if policy not in ("producer_request_hold", "producer_exception", "consumer_backlog_eviction"):
        raise InvalidRequestError(f"unknown backlog quota policy {policy!r}")
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
    e = _int(value.get("bookkeeperEnsemble", 2), "bookkeeperEnsemble", minimum=1)
    qw = _int(value.get("bookkeeperWriteQuorum", 2), "bookkeeperWriteQuorum", minimum=1)
    qa = _int(value.get("bookkeeperAckQuorum", 2), "bookkeeperAckQuorum", minimum=1)
    if not e >= qw >= qa:
        raise InvalidRequestError(
            f"persistence needs bookkeeperEnsemble >= bookkeeperWriteQuorum >= "
            f"bookkeeperAckQuorum, got {e}/{qw}/{qa}"
        )
    return {"bookkeeperEnsemble": e, "bookkeeperWriteQuorum": qw, "bookkeeperAckQuorum": qa}


# (path suffix, Policies field, parser, value when deleted, write method)
_POLICIES: list[tuple[str, str, Callable[[Any], Any], Any, str]] = [
    ("retention", "retention_policies", _retention, None, "POST"),
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
        lambda v: _int(v, "offloadThreshold", minimum=-1),
        -1,
        "PUT",
    ),
    (
        "offloadThresholdInSeconds",
        "offload_threshold_in_seconds",
        lambda v: _int(v, "offloadThresholdInSeconds", minimum=-1),
        -1,
        "PUT",
    ),
    (
        "offloadDeletionLagMs",
        "offload_deletion_lag_ms",
        lambda v: _int(v, "offloadDeletionLagMs", minimum=0),
        None,
        "PUT",
    ),
    ("backlogQuota", "backlog_quota_map", _backlog_quota, {}, "POST"),
    ("persistence", "persistence", _persistence, None, "POST"),
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
