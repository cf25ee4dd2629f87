"""``GET /admin/v2/persistent/{t}/{ns}/{topic}/iceberg``: the topic's Iceberg table.

The table identifier and catalog, its current snapshot, the offsets its data files cover
per partition (from the segment records whose commit is done) and how far they are behind
the partition's tail (messages written and not in the table yet: the open segment and
segments waiting for offload).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker import Broker, SegmentState
from magnetar.broker.admin import TopicAdmin
from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.topic import Topic
from magnetar.http.routes import Route, ok
from magnetar.http.topics import T, topic_of


def iceberg_routes(broker: Broker, admin: TopicAdmin) -> list[Route]:
    async def table(request: web.Request) -> web.Response:
        name = topic_of(request)
        if not broker.has_tables:
            raise InvalidRequestError(
                "this node registers no Iceberg tables: start it with --iceberg-catalog "
                "sqlite (the default) or rest, and an object store (--tier-url)"
            )
        count = await broker.partitions(name)
        names = [name] if count <= 0 else [name.partition_name(i) for i in range(count)]
        parts = [_coverage(await admin.require(n)) for n in names]
        policies = await broker.policies(name)
        described = await broker.table_of(name) or {
            "table": ".".join([name.tenant, name.namespace, name.base_local]),
            "currentSnapshot": None,
        }
        return ok(
            {
                **described,
                "exists": "location" in described,
                "maintenance": policies.iceberg_maintenance is not False,
                "partitions": parts,
                "lagMessages": sum(p["lagMessages"] for p in parts),
            }
        )

    return [Route("GET", T + "/iceberg", table, "The topic's Iceberg table and its lag")]


def _coverage(topic: Topic) -> dict[str, Any]:
    """Offset ranges of the segments committed to the table, and the lag behind the tail."""
    ranges: list[list[int]] = []
    for seg in topic.segments():
        record = (seg.offload or {}).get("iceberg") or {}
        if seg.state is not SegmentState.OFFLOADED or not record.get("committed"):
            continue
        if ranges and ranges[-1][1] + 1 == seg.first_offset:
            ranges[-1][1] = seg.last_offset
        else:
            ranges.append([seg.first_offset, seg.last_offset])
    end = topic.end_offset
    covered = sum(last - first + 1 for first, last in ranges)
    start = topic.start_offset
    return {
        "partition": max(topic.name.partition, 0),
        "offsetsCovered": ranges,
        "endOffset": end,
        "lagMessages": max(end - start - covered, 0),
    }
