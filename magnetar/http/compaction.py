"""``PUT/GET /admin/v2/persistent/{t}/{ns}/{topic}/compaction``: compact on request, and the
last run's status (Pulsar's LongRunningProcessStatus: NOT_RUN, RUNNING, SUCCESS, ERROR).

On a partitioned topic both act on every partition; the status is the least finished one
(ERROR first, then RUNNING, NOT_RUN, SUCCESS), with the first error seen.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.admin import TopicAdmin
from magnetar.broker.compaction import TopicCompaction
from magnetar.broker.errors import InvalidRequestError
from magnetar.core.names import TopicName
from magnetar.http.routes import Route, no_content, ok
from magnetar.http.topics import T, topic_of

_ORDER = ("ERROR", "RUNNING", "NOT_RUN", "SUCCESS")


async def _compactions(broker: Broker, admin: TopicAdmin, name: TopicName) -> list[TopicCompaction]:
    partitions = await broker.partitions(name)
    names = [name.partition_name(i) for i in range(partitions)] if partitions else [name]
    out = []
    for each in names:
        topic = await admin.require(each)
        if topic.compaction is None:
            raise InvalidRequestError(f"topic {each} cannot be compacted")
        out.append(topic.compaction)
    return out


def compaction_routes(broker: Broker, admin: TopicAdmin) -> list[Route]:
    async def trigger(request: web.Request) -> web.Response:
        for compaction in await _compactions(broker, admin, topic_of(request)):
            compaction.trigger()  # 409 while a run is in progress
        return no_content()

    async def status(request: web.Request) -> web.Response:
        states = [c.status() for c in await _compactions(broker, admin, topic_of(request))]
        worst = min(states, key=lambda s: _ORDER.index(s["status"]))
        error = next((s["lastError"] for s in states if s["lastError"]), "")
        return ok({"status": worst["status"], "lastError": error})

    return [
        Route("PUT", T + "/compaction", trigger, "Compact the topic (in the background)"),
        Route("GET", T + "/compaction", status, "Status of the last compaction"),
    ]
