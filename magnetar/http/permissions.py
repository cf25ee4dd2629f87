"""Permissions over Pulsar's REST paths, and the authorization every request passes.

Routes (Pulsar's): ``GET/POST/DELETE /admin/v2/namespaces/{t}/{ns}/permissions[/{role}]``
(namespace grants), ``POST/DELETE .../permissions/subscription/{sub}`` (roles a subscription
is reserved to), ``GET/POST/DELETE /admin/v2/persistent/{t}/{ns}/{topic}/permissions[/{role}]``
(topic grants). A grant's body is the list of actions, ``["produce", "consume"]``.

With authorization on, :func:`authorize` decides before any handler runs, from the path:
tenants are created, changed and deleted by super-users and read by their admins; a
namespace's and a topic's admin calls need an admin of its tenant; an HTTP lookup (and a
client's GET of a topic's partitions) needs produce or consume on the topic; the Spark
source's plan and the message browser need consume; the views API and everything else
(brokers, storage nodes, internal calls) need a super-user. A refusal is a 403 with the reason.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.authorization import (
    ANONYMOUS,
    AuthorizationError,
    Authorizer,
    Permissions,
    check_actions,
    check_role,
)
from magnetar.broker.errors import InvalidRequestError, NotFoundError
from magnetar.broker.peers import ORIGINAL_PRINCIPAL
from magnetar.broker.scram import Credential, ScramCredentialError, ScramCredentials, check
from magnetar.core.authentication import Identity
from magnetar.core.names import TopicName
from magnetar.http.bodies import integer, json_body, obj, strings, text
from magnetar.http.routes import Handler, Route, no_content, ok

NS = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions"
_OPEN = ("/metrics", "/docs", "/openapi.json")


def routes(permissions: Permissions) -> list[Route]:
    def names(request: web.Request) -> tuple[str, str]:
        return request.match_info["tenant"], request.match_info["namespace"]

    def topic(request: web.Request) -> TopicName:
        m = request.match_info
        return TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")

    async def namespace_get(request: web.Request) -> web.Response:
        t, n = names(request)
        await permissions.namespaces.policies(t, n)
        return ok((await permissions.get(t, n)).namespace)

    async def namespace_grant(request: web.Request) -> web.Response:
        t, n = names(request)
        role = check_role(request.match_info["role"])
        await permissions.grant_namespace(t, n, role, check_actions(await json_body(request)))
        return no_content()

    async def namespace_revoke(request: web.Request) -> web.Response:
        t, n = names(request)
        await permissions.revoke_namespace(t, n, check_role(request.match_info["role"]))
        return no_content()

    async def subscription_grant(request: web.Request) -> web.Response:
        t, n = names(request)
        roles = [check_role(r) for r in strings(await json_body(request), "roles")]
        await permissions.grant_subscription(t, n, request.match_info["subscription"], roles)
        return no_content()

    async def subscription_revoke(request: web.Request) -> web.Response:
        t, n = names(request)
        sub, role = request.match_info["subscription"], check_role(request.match_info["role"])
        await permissions.revoke_subscription(t, n, sub, role)
        return no_content()

    async def topic_get(request: web.Request) -> web.Response:
        name = topic(request)
        granted = await permissions.get(name.tenant, name.namespace)
        merged: dict[str, set[str]] = {r: set(a) for r, a in granted.namespace.items()}
        for role, actions in granted.topics.get(name.base.local, {}).items():
            merged.setdefault(role, set()).update(actions)
        return ok({role: sorted(actions) for role, actions in merged.items()})

    async def topic_grant(request: web.Request) -> web.Response:
        role = check_role(request.match_info["role"])
        actions = check_actions(await json_body(request))
        await permissions.grant_topic(topic(request), role, actions)
        return no_content()

    async def topic_revoke(request: web.Request) -> web.Response:
        await permissions.revoke_topic(topic(request), check_role(request.match_info["role"]))
        return no_content()

    body = '["produce", "consume"]'
    return [
        Route("POST", NS + "/subscription/{subscription}", subscription_grant,
              "Reserve a subscription to roles", '["role"]'),
        Route("DELETE", NS + "/{subscription}/{role}", subscription_revoke,
              "Take a role off a subscription's roles"),
        Route("GET", NS, namespace_get, "Roles and their actions on a namespace"),
        Route("POST", NS + "/{role}", namespace_grant, "Grant actions on a namespace", body),
        Route("DELETE", NS + "/{role}", namespace_revoke, "Revoke a role's namespace grant"),
        Route("GET", TOPIC, topic_get, "Roles and their actions on a topic"),
        Route("POST", TOPIC + "/{role}", topic_grant, "Grant actions on a topic", body),
        Route("DELETE", TOPIC + "/{role}", topic_revoke, "Revoke a role's topic grant"),
    ]  # fmt: skip


def scram_routes(store: ScramCredentials) -> list[Route]:
    """``/magnetar/v1/scram``: Kafka SCRAM users (``magnetar admin scram``); a super-user's
    calls when authorization is on."""

    async def listing(_request: web.Request) -> web.Response:
        users = {}
        for user in await store.users():
            held = await store.get(user)
            users[user] = {m: {"iterations": c.iterations} for m, c in held.items()}
        return ok(users)

    async def put(request: web.Request) -> web.Response:
        body = obj(await json_body(request), "a SCRAM credential")
        mechanism = text(body.get("mechanism", "SCRAM-SHA-256"), "mechanism")
        password = text(body.get("password"), "password", max_chars=1024)
        iterations = integer(body.get("iterations", 8192), "iterations", minimum=1,
                             maximum=1 << 20)  # fmt: skip
        try:
            check(mechanism, iterations)
        except ScramCredentialError as e:
            raise InvalidRequestError(str(e)) from None
        credential = Credential.from_password(mechanism, password, iterations)
        await store.put(request.match_info["user"], mechanism, credential)
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        user, mechanism = request.match_info["user"], request.match_info["mechanism"]
        if not await store.delete(user, mechanism):
            raise NotFoundError(f"{user!r} has no {mechanism} credential")
        return no_content()

    return [
        Route("GET", "/magnetar/v1/scram", listing, "Kafka SCRAM users and their mechanisms"),
        Route("PUT", "/magnetar/v1/scram/{user}", put, "Set a user's SCRAM credential",
              '{"mechanism": "SCRAM-SHA-256", "password": "...", "iterations": 8192}'),
        Route("DELETE", "/magnetar/v1/scram/{user}/{mechanism}", delete,
              "Remove a user's SCRAM credential"),
    ]  # fmt: skip


def authorize(authorizer: Authorizer, unproven: bool = False) -> Any:
    """The middleware deciding, before the handler, whether the request's role may ask it
    (``unproven``: no authentication runs, every request is ANONYMOUS)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        identity: Identity | None = request.get("identity")
        if unproven:
            identity = request["identity"] = Identity(ANONYMOUS, "anonymous")
        path = request.path
        if identity is None or path in _OPEN or path.startswith("/console"):
            return await handler(request)
        original = request.headers.get(ORIGINAL_PRINCIPAL)
        if original is not None:  # another broker asking on behalf of its client
            if not authorizer.is_superuser(identity.role):
                reason = (
                    f"only a super-user may name an {ORIGINAL_PRINCIPAL}: "
                    f"{identity.role!r} is not one"
                )
                return web.json_response({"reason": reason}, status=403)
            identity = request["identity"] = Identity(original, "proxy", identity.expires_at)
        try:
            await _check(authorizer, identity.role, request.method, path.split("/"))
        except AuthorizationError as e:
            return web.json_response({"reason": str(e)}, status=403)
        return await handler(request)

    return middleware


async def _check(auth: Authorizer, role: str, method: str, parts: list[str]) -> None:
    if auth.is_superuser(role):
        return
    head = parts[1:4]
    if head == ["admin", "v2", "tenants"] and len(parts) > 4:
        if method == "GET":
            await auth.require_tenant_admin(role, parts[4])
            return
    elif head == ["admin", "v2", "persistent"] and len(parts) == 8 and parts[7] == "partitions":
        if method == "GET":  # a client's partitioned-metadata lookup (HTTP service URL)
            await auth.require(role, _topic(parts[4:7]), "lookup")
            return
        await auth.require_tenant_admin(role, parts[4])
        return
    elif head in (["admin", "v2", "namespaces"], ["admin", "v2", "persistent"]) and len(parts) > 4:
        await auth.require_tenant_admin(role, parts[4])
        return
    elif head == ["admin", "v2", "schemas"] and len(parts) > 6:
        await auth.require(role, _topic(parts[4:7]), "produce" if method == "POST" else "consume")
        return
    elif parts[1:4] == ["lookup", "v2", "topic"] and len(parts) > 7:  # either domain
        await auth.require(role, _topic(parts[5:8]), "lookup")
        return
    elif parts[1:4] == ["magnetar", "v1", "topics"] and len(parts) > 7:
        await auth.require(role, _topic(parts[4:7]), "consume")
        return
    auth.require_superuser(role)


def _topic(parts: list[str]) -> TopicName:
    tenant, namespace, local = parts
    return TopicName.parse(f"persistent://{tenant}/{namespace}/{local}")
