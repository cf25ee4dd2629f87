"""``/admin/v2/non-persistent/...``: the non-persistent topics a broker has in memory."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.errors import TopicNotFoundError
from magnetar.core.names import TopicName
from magnetar.http.routes import Route, ok

NP = "/admin/v2/non-persistent/{tenant}/{namespace}"


def _name(request: web.Request) -> TopicName:
    m = request.match_info
    return TopicName.parse(f"non-persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")


def non_persistent_routes(broker: Broker) -> list[Route]:
    async def list_topics(request: web.Request) -> web.Response:
        m = request.match_info
        return ok(await broker.list_non_persistent_topics(m["tenant"], m["namespace"]))

    async def stats(request: web.Request) -> web.Response:
        name = _name(request)
        await broker.policies(name)
        topic = broker.non_persistent.get(str(name))
        if topic is None:
            raise TopicNotFoundError(f"topic {name} is not in use on this broker")
        return ok(topic.stats())

    return [
        Route("GET", NP, list_topics, "List the non-persistent topics in use"),
        Route("GET", NP + "/{topic}/stats", stats, "Stats of a non-persistent topic"),
    ]
