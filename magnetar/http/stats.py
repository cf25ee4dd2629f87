"""Topic stats under Pulsar's admin v2 spellings.

    GET .../{topic}/internalStats               segments and cursors (also ``internal-stats``,
                                                 Magnetar's earlier spelling, kept as an alias)
    GET .../{topic}/partitioned-stats           a partitioned topic's stats summed over its
                                                 partitions; each partition's own under
                                                 "partitions" (``?perPartition=false``: none)
    GET .../{topic}/partitioned-internalStats   each partition's internal stats
    GET .../{topic}/check                       read and verify every stored entry (each
                                                 partition's for a partitioned topic)
    POST .../{topic}/check?repair=true          the same, after writing damaged replicas of
                                                 a cluster's closed ledgers again from good ones

Read-only but for the repair: nothing else here changes or persists anything.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker import Broker
from magnetar.broker.admin import TopicAdmin
from magnetar.broker.errors import TopicNotFoundError
from magnetar.core.names import TopicName
from magnetar.http.routes import Route, ok

T = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
# Counters and rates of a topic's stats that add up over partitions.
_SUMMED = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgInCounter",
    "storageSize",
    "backlogSize",
)


def _topic(request: web.Request) -> TopicName:
    m = request.match_info
    return TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")


async def _partitions(broker: Broker, name: TopicName) -> list[TopicName]:
    """The partitions of ``name``; TopicNotFoundError (404) when it is not partitioned."""
    count = await broker.partitions(name)
    if count <= 0:
        raise TopicNotFoundError(
            f"{name} is not a partitioned topic; use .../stats or .../internalStats for a "
            "non-partitioned topic or a single partition"
        )
    return [name.partition_name(i) for i in range(count)]


def _sum_stats(per_partition: list[dict[str, Any]]) -> dict[str, Any]:
    """Pulsar's aggregate of partition stats: counters summed, publishers listed together,
    subscriptions merged by name with their backlogs summed."""
    total: dict[str, Any] = {key: sum(s.get(key, 0) for s in per_partition) for key in _SUMMED}
    total["publishers"] = [p for s in per_partition for p in s.get("publishers", [])]
    subscriptions: dict[str, dict[str, Any]] = {}
    for stats in per_partition:
        for sub_name, sub in stats.get("subscriptions", {}).items():
            merged = subscriptions.setdefault(sub_name, {**sub, "msgBacklog": 0, "backlogSize": 0})
            merged["msgBacklog"] += sub.get("msgBacklog", 0)  # messages
            merged["backlogSize"] += sub.get("backlogSize", 0)  # bytes
    total["subscriptions"] = subscriptions
    return total


def stats_routes(broker: Broker, admin: TopicAdmin) -> list[Route]:
    async def internal_stats(request: web.Request) -> web.Response:
        return ok(await admin.internal_stats(_topic(request)))

    async def partitioned_stats(request: web.Request) -> web.Response:
        parts = await _partitions(broker, _topic(request))
        each = [await admin.stats(p) for p in parts]
        body = _sum_stats(each) | {"metadata": {"partitions": len(parts)}}
        if request.query.get("perPartition", "true").lower() != "false":
            body["partitions"] = {str(p): s for p, s in zip(parts, each, strict=True)}
        return ok(body)

    async def partitioned_internal_stats(request: web.Request) -> web.Response:
        parts = await _partitions(broker, _topic(request))
        each = {str(p): await admin.internal_stats(p) for p in parts}
        return ok({"metadata": {"partitions": len(parts)}, "partitions": each})

    async def check(request: web.Request) -> web.Response:
        name = _topic(request)
        repair = request.method == "POST" and request.query.get("repair", "") == "true"
        if await broker.partitions(name) <= 0:
            return ok(await admin.check(name, repair=repair))
        each = [await admin.check(p, repair=repair) for p in await _partitions(broker, name)]
        return ok({"topic": str(name), "ok": all(c["ok"] for c in each), "partitions": each})

    return [
        Route("GET", T + "/internalStats", internal_stats, "Segments and cursors"),
        Route("GET", T + "/check", check, "Read and verify every stored entry"),
        Route("POST", T + "/check", check, "?repair=true: repair damaged replicas, then check"),
        Route("GET", T + "/internal-stats", internal_stats, "Alias of internalStats"),
        Route("GET", T + "/partitioned-stats", partitioned_stats, "Stats summed over partitions"),
        Route(
            "GET",
            T + "/partitioned-internalStats",
            partitioned_internal_stats,
            "Internal stats of each partition",
        ),
    ]
