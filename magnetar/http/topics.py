"""``/admin/v2/persistent/...``: topics, partitions, stats and subscriptions; and lookup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.admin import TopicAdmin
from magnetar.broker.errors import InvalidRequestError, TopicNotFoundError
from magnetar.core.ids import EARLIEST, LATEST, MessageId
from magnetar.core.names import TopicName, check_part
from magnetar.http.bodies import JAVA_LONG, boolean, integer, json_body
from magnetar.http.routes import Route, no_content, ok
from magnetar.http.tenants import retention_policy

P = "/admin/v2/persistent/{tenant}/{namespace}"
T = P + "/{topic}"
S = T + "/subscription/{subscription}"


def topic_of(request: web.Request) -> TopicName:
    m = request.match_info
    return TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")


def _parts(name: TopicName) -> tuple[str, str, str]:
    return name.tenant, name.namespace, name.local


def _force(request: web.Request) -> bool:
    return request.query.get("force", "false").lower() == "true"


def _count(value: Any) -> int:
    """A partition count as a JSON integer; its range (1 .. the broker's
    max_num_partitions_per_partitioned_topic) is the broker's to check (406, as Pulsar)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(
            f"the number of partitions must be an integer >= 1, got {value!r:.60}"
        )
    return value


def _message_id(body: Any, query: str | None) -> MessageId:
    """Pulsar's ResetCursorData / MessageIdImpl body (none, null or {}: the query decides),
    or ``?messageId=earliest|latest``."""
    if body in (None, {}) and query in (None, "", "latest"):
        return LATEST
    if body in (None, {}) and query == "earliest":
        return EARLIEST
    if isinstance(body, dict) and "ledgerId" in body and "entryId" in body:
        parts = [body["ledgerId"], body["entryId"], body.get("batchIndex", -1)]
        if all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            return MessageId(
                *(integer(p, "a message id part", minimum=-1, maximum=JAVA_LONG) for p in parts)
            )
    raise InvalidRequestError(
        'position must be {"ledgerId": L, "entryId": E} with integers, '
        f"or ?messageId=earliest|latest; got {body!r:.60}"
    )


def routes(
    broker: Broker,
    admin: TopicAdmin,
    service_url: str,
    service_url_tls: str | None = None,
    https_url: Callable[[], str | None] = lambda: None,
) -> list[Route]:
    async def list_topics(request: web.Request) -> web.Response:
        m = request.match_info
        return ok(await broker.list_topics(m["tenant"], m["namespace"]))

    async def list_partitioned(request: web.Request) -> web.Response:
        m = request.match_info
        await broker.namespaces.policies(m["tenant"], m["namespace"])
        names = await broker.partitioned_topics(m["tenant"], m["namespace"])
        return ok([f"persistent://{m['tenant']}/{m['namespace']}/{n}" for n in names])

    async def create_topic(request: web.Request) -> web.Response:
        await admin.create(topic_of(request))
        return no_content()

    async def delete_topic(request: web.Request) -> web.Response:
        await admin.delete(topic_of(request), force=_force(request))
        return no_content()

    async def create_partitions(request: web.Request) -> web.Response:
        await broker.create_partitioned_topic(topic_of(request), _count(await json_body(request)))
        return no_content()

    async def get_partitions(request: web.Request) -> web.Response:
        name = topic_of(request)
        await broker.policies(name)
        return ok({"partitions": await broker.partitions(name)})

    async def grow_partitions(request: web.Request) -> web.Response:
        await admin.grow_partitions(topic_of(request), _count(await json_body(request)))
        return no_content()

    async def delete_partitions(request: web.Request) -> web.Response:
        await admin.delete_partitioned(topic_of(request), force=_force(request))
        return no_content()

    async def stats(request: web.Request) -> web.Response:
        name = topic_of(request)
        count = await broker.partitions(name) if name.partition < 0 else 0
        if count > 0:  # Pulsar answers 404 here too; say where the stats are
            raise TopicNotFoundError(
                f"{name} is a partitioned topic ({count} partitions): its stats are at "
                f".../{name.local}/partitioned-stats (magnetar admin topics partitioned-stats), "
                f"one partition's at .../{name.partition_name(0).local}/stats"
            )
        return ok(await admin.stats(name))

    async def get_dedup(request: web.Request) -> web.Response:
        """The topic's own setting (null: none), or with ``?applied=true`` the one in force
        (topic, else namespace, else broker), as Pulsar's topic policies answer."""
        name = topic_of(request)
        if request.query.get("applied", "false").lower() == "true":
            return ok(await broker.deduplication(name))
        return ok((await broker.topic_policies.get(*_parts(name))).deduplicationEnabled)

    async def set_dedup(request: web.Request) -> web.Response:
        enabled = boolean(await json_body(request), "deduplication")
        await _set_dedup(topic_of(request), enabled)
        return no_content()

    async def remove_dedup(request: web.Request) -> web.Response:
        await _set_dedup(topic_of(request), None)
        return no_content()

    async def _set_dedup(name: TopicName, enabled: bool | None) -> None:
        policies = await broker.topic_policies.get(*_parts(name))
        policies.deduplicationEnabled = enabled
        await broker.topic_policies.set(*_parts(name), policies)
        await broker.apply_topic_policies(name)

    def topic_policy(field: str, check: Any, applied: Any) -> tuple[Any, Any, Any]:
        """GET/POST/DELETE handlers of one topic policy, as Pulsar's topic-policy paths:
        GET answers the topic's own value (null: none) or with ``?applied=true`` the one in
        force; POST sets it, DELETE removes it; both take effect before they answer."""

        async def get(request: web.Request) -> web.Response:
            name = topic_of(request)
            if request.query.get("applied", "false").lower() == "true":
                return ok(await applied(name))
            return ok(getattr(await broker.topic_policies.get(*_parts(name)), field))

        async def put(request: web.Request) -> web.Response:
            await _set(topic_of(request), check(await json_body(request)))
            return no_content()

        async def remove(request: web.Request) -> web.Response:
            await _set(topic_of(request), None)
            return no_content()

        async def _set(name: TopicName, value: Any) -> None:
            policies = await broker.topic_policies.get(*_parts(name))
            setattr(policies, field, value)
            await broker.topic_policies.set(*_parts(name), policies)
            await broker.apply_topic_policies(name)

        return get, put, remove

    async def applied_size(name: TopicName) -> int:
        own = await broker.topic_policy(name, "maxMessageSize")
        return own if isinstance(own, int) else broker.settings.max_message_size

    def message_size(value: Any) -> int:
        limit = broker.settings.max_message_size
        hint = " (the broker's max_message_size)"
        return integer(value, "maxMessageSize", minimum=1, maximum=limit, hint=hint)

    get_retention, set_retention, remove_retention = topic_policy(
        "retentionPolicies", retention_policy, broker.retention
    )
    get_size, set_size, remove_size = topic_policy("maxMessageSize", message_size, applied_size)

    def threshold(value: Any) -> int:
        return integer(value, "compactionThreshold", minimum=0, maximum=2**63 - 1)

    get_threshold, set_threshold, remove_threshold = topic_policy(
        "compactionThreshold", threshold, broker.compaction_threshold
    )

    async def last_message_id(request: web.Request) -> web.Response:
        return ok(await admin.last_message_id(topic_of(request)))

    async def subscriptions(request: web.Request) -> web.Response:
        topic = await admin.require(topic_of(request))
        return ok(sorted(topic.subscriptions))

    async def create_subscription(request: web.Request) -> web.Response:
        sub = check_part("subscription", request.match_info["subscription"])
        body = await json_body(request, default=None)
        at = _message_id(body, request.query.get("messageId"))
        await admin.create_subscription(topic_of(request), sub, at)
        return no_content()

    async def delete_subscription(request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        await admin.delete_subscription(topic_of(request), sub, force=_force(request))
        return no_content()

    async def skip(request: web.Request) -> web.Response:
        try:
            n = int(request.match_info["count"])
        except ValueError:
            raise InvalidRequestError("skip count must be an integer") from None
        await admin.skip(topic_of(request), request.match_info["subscription"], n)
        return no_content()

    async def skip_all(request: web.Request) -> web.Response:
        await admin.skip_all(topic_of(request), request.match_info["subscription"])
        return no_content()

    async def reset_cursor(request: web.Request) -> web.Response:
        try:
            ts = int(request.match_info["timestamp"])
        except ValueError:
            raise InvalidRequestError("timestamp must be epoch milliseconds") from None
        await admin.reset_cursor(topic_of(request), request.match_info["subscription"], ts)
        return no_content()

    async def lookup(request: web.Request) -> web.Response:
        m = request.match_info
        name = TopicName.parse(f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}")
        await broker.policies(name)
        if broker.ownership is not None:
            owner, _ = await broker.ownership.lookup(name, authoritative=True)
            if owner.id != broker.ownership.me.id:
                return ok(
                    {
                        "brokerUrl": owner.pulsar,
                        "brokerUrlTls": owner.pulsar_tls,
                        "httpUrl": owner.http,
                        "httpUrlTls": owner.https,
                        "nativeUrl": owner.pulsar,
                    }
                )
        return ok(
            {
                "brokerUrl": service_url,
                "brokerUrlTls": service_url_tls or "",
                "httpUrl": f"http://{request.host}" if not request.secure else "",
                "httpUrlTls": https_url() or "",
                "nativeUrl": service_url,
            }
        )

    return [
        Route("GET", P, list_topics, "List topics (partitions included)"),
        Route("GET", P + "/partitioned", list_partitioned, "List partitioned topics"),
        Route("PUT", T, create_topic, "Create a non-partitioned topic"),
        Route("DELETE", T, delete_topic, "Delete a topic (?force=true)"),
        Route("PUT", T + "/partitions", create_partitions, "Create a partitioned topic", "N"),
        Route("GET", T + "/partitions", get_partitions, "Partitioned topic metadata"),
        Route("POST", T + "/partitions", grow_partitions, "Increase partitions", "N"),
        Route("DELETE", T + "/partitions", delete_partitions, "Delete a partitioned topic"),
        Route("GET", T + "/stats", stats, "Topic stats"),
        Route("GET", T + "/lastMessageId", last_message_id, "Last message id"),
        Route("GET", T + "/deduplicationEnabled", get_dedup, "Topic dedup (?applied=true)"),
        Route("POST", T + "/deduplicationEnabled", set_dedup, "Set topic dedup", "true|false"),
        Route("DELETE", T + "/deduplicationEnabled", remove_dedup, "Remove topic dedup"),
        Route("GET", T + "/retention", get_retention, "Topic retention (?applied=true)"),
        Route("POST", T + "/retention", set_retention, "Set topic retention", "RetentionPolicies"),
        Route("DELETE", T + "/retention", remove_retention, "Remove topic retention"),
        Route("GET", T + "/maxMessageSize", get_size, "Topic max message size (?applied=true)"),
        Route("POST", T + "/maxMessageSize", set_size, "Set topic max message size", "bytes"),
        Route("DELETE", T + "/maxMessageSize", remove_size, "Remove topic max message size"),
        Route("GET", T + "/compactionThreshold", get_threshold, "Compaction threshold (?applied)"),
        Route("POST", T + "/compactionThreshold", set_threshold, "Set it", "bytes"),
        Route("DELETE", T + "/compactionThreshold", remove_threshold, "Remove it"),
        Route("GET", T + "/subscriptions", subscriptions, "List subscriptions"),
        Route("PUT", S, create_subscription, "Create a subscription", "MessageId (optional)"),
        Route("DELETE", S, delete_subscription, "Delete a subscription (?force=true)"),
        Route("POST", S + "/skip/{count}", skip, "Skip N messages"),
        Route("POST", S + "/skip_all", skip_all, "Skip the whole backlog"),
        Route("POST", S + "/resetcursor/{timestamp}", reset_cursor, "Reset to a publish time"),
        Route(
            "GET",
            "/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}",
            lookup,
            "Lookup (persistent or non-persistent)",
        ),
    ]
