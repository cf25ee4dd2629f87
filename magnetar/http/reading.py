"""``/magnetar/v1/...``: what direct readers (the Spark source) need to plan a read.

A plan lists each partition's offset range and its segments — offsets, publish-time range,
where the segment lives (local: read through Arrow Flight; offloaded: the object key in the
object store) — so a reader resolves time ranges by binary search over segments and opens
only what it needs (seed 001). ``commit`` moves a durable subscription to the offsets a
pipeline has processed, so backlog and retention see its progress.
"""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
from aiohttp import web

from magnetar.broker import Broker, SubType
from magnetar.broker.errors import InvalidRequestError, TopicNotFoundError
from magnetar.broker.ownership import BrokerInfo
from magnetar.broker.peers import Peers
from magnetar.core.grants import ReadGrants
from magnetar.core.names import TopicName
from magnetar.http.bodies import json_body, obj
from magnetar.http.routes import Route, no_content, ok
from magnetar.http.topics import topic_of

V1 = "/magnetar/v1/topics/{tenant}/{namespace}/{topic}"


def routes(broker: Broker, flight_url: str | None, grants: ReadGrants | None = None) -> list[Route]:
    async def plan(request: web.Request) -> web.Response:
        identity = request.get("identity")
        role = identity.role if identity is not None else None
        return ok(await _plan(broker, topic_of(request), flight_url, grants, role))

    async def list_topics(request: web.Request) -> web.Response:
        namespaces = await _namespaces(broker)
        wanted = request.query.get("namespace")
        if wanted:
            namespaces = [ns for ns in namespaces if ns == wanted]
        pattern = request.query.get("pattern")
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error as e:
            raise InvalidRequestError(f"bad topicsPattern {pattern!r}: {e}") from None
        names = []
        for ns in namespaces:
            names += await _base_topics(broker, ns)
        return ok([n for n in names if regex is None or regex.fullmatch(n) or regex.search(n)])

    async def namespaces(request: web.Request) -> web.Response:
        return ok(await _namespaces(broker))

    async def commit(request: web.Request) -> web.Response:
        name = topic_of(request)
        body = obj(await json_body(request), 'a commit {"offsets": {"<partition>": offset}}')
        offsets = obj(body.get("offsets"), '"offsets" ({"<partition>": offset})')
        await _commit(broker, name, request.match_info["subscription"], offsets)
        return no_content()

    return [
        Route("GET", V1 + "/plan", plan, "Partitions and segments of a topic, for direct reads"),
        Route("GET", "/magnetar/v1/topics", list_topics, "Topics (?namespace=&pattern=)"),
        Route("GET", "/magnetar/v1/namespaces", namespaces, "Every tenant/namespace"),
        Route(
            "POST",
            V1 + "/subscription/{subscription}/commit",
            commit,
            "Move a durable subscription to processed offsets",
            '{"offsets": {"0": 1234}}',
        ),
    ]


async def _namespaces(broker: Broker) -> list[str]:
    out = []
    for tenant in await broker.namespaces.tenants():
        out += await broker.namespaces.namespaces(tenant)
    return out


async def _base_topics(broker: Broker, namespace: str) -> list[str]:
    tenant, ns = namespace.split("/", 1)
    partitioned = await broker.partitioned_topics(tenant, ns)
    plain = [
        t.rsplit("/", 1)[1]
        for t in await broker.list_topics(tenant, ns)
        if TopicName.parse(t).partition < 0
    ]
    return sorted(f"persistent://{tenant}/{ns}/{t}" for t in {*partitioned, *plain})


async def _partitions(broker: Broker, name: TopicName) -> list[tuple[int, TopicName]]:
    count = await broker.partitions(name)
    if count:
        return [(i, name.partition_name(i)) for i in range(count)]
    if not await broker.topic_exists(name):
        raise TopicNotFoundError(f"topic {name} does not exist")
    return [(0, name)]


async def _plan(
    broker: Broker,
    name: TopicName,
    flight_url: str | None,
    grants: ReadGrants | None,
    role: str | None,
) -> dict[str, Any]:
    parts = []
    for index, part in await _partitions(broker, name):
        found = await _partition_plan(broker, index, part, flight_url, role)
        if grants is not None and role is not None and "grant" not in found:
            found["grant"] = grants.issue(found["name"], role)  # Flight reads need it back
        parts.append(found)
    return {
        "topic": str(name),
        "partitions": parts,
        "store": broker.object_store_url,
        "flight": flight_url,
        "schema": await _schema(broker, name),
    }


async def _partition_plan(
    broker: Broker, index: int, part: TopicName, flight_url: str | None, role: str | None
) -> dict[str, Any]:
    """One partition's offsets and segments, with where to read them (its ``flight`` and
    ``store``): from this broker, or — several brokers — from the broker that owns it, asked
    on behalf of ``role`` so that it signs the partition's read grant itself."""
    ownership = broker.ownership
    if ownership is not None:
        owner = await ownership.owner(part)
        if owner is not None and owner.id != ownership.me.id:
            return await _remote_partition_plan(broker.peers, owner, index, part, role)
    topic = await broker.get_topic(part, create=True)
    segments = [
        {
            "id": s.segment_id,
            "first": s.first_offset,
            "end": s.end_offset,
            "minTime": s.first_publish_time if s.entries else None,
            "maxTime": s.max_publish_time if s.entries else None,
            "state": s.state.value,
            "local": s.local,
            "object": (s.offload or {}).get("key"),
            "objects": (s.offload or {}).get("objects"),  # several: the table's data files
            "replicas": await topic.replica_reads(s.segment_id)
            if s.state.value == "CLOSED" and s.local
            else None,
        }
        for s in topic.segments()
    ]
    txns = topic.txns if topic.txns is not None and topic.txns.used else None
    end = txns.last_stable() if txns is not None else topic.end_offset
    return {
        "index": index,
        "name": part.path,
        "start": topic.start_offset,
        # readers stop at the last stable offset and drop markers and aborted transactions
        "end": end,
        "transactions": txns is not None,
        "aborted": [[a.producer_id, a.first, a.last] for a in txns.aborted_in(0, end)]
        if txns is not None
        else [],
        "segments": segments,
        "flight": flight_url,
        "store": broker.object_store_url,
    }


async def _remote_partition_plan(
    peers: Peers, owner: BrokerInfo, index: int, part: TopicName, role: str | None
) -> dict[str, Any]:
    url = f"{peers.base_url(owner).rstrip('/')}/magnetar/v1/topics/{part.path}/plan"
    try:
        async with (
            peers.session() as client,
            client.get(url, headers=peers.headers(on_behalf_of=role)) as r,
        ):
            body = await r.json(content_type=None)
            if r.status != 200:
                reason = body.get("reason", body) if isinstance(body, dict) else body
                if r.status == 403:  # the role asking may not read that partition
                    raise web.HTTPForbidden(reason=f"the broker owning {part}: {reason}")
                raise web.HTTPServiceUnavailable(
                    reason=f"the broker owning {part} answered {r.status}: {reason}"
                )
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        raise web.HTTPServiceUnavailable(
            reason=f"cannot reach the broker owning {part} ({e or type(e).__name__}); retry"
        ) from None
    found: dict[str, Any] = body["partitions"][0]
    found.update(index=index, flight=body["flight"], store=body["store"])
    return found


async def _schema(broker: Broker, name: TopicName) -> dict[str, Any] | None:
    found = await broker.schemas.get(name.path)
    if found is None:
        return None
    version, info = found
    try:
        definition = json.loads(info.data) if info.data else None
    except ValueError:
        definition = None
    return {"version": version, "type": info.type, "definition": definition}


async def _commit(broker: Broker, name: TopicName, sub: str, offsets: dict[str, Any]) -> None:
    """Move ``sub`` forward to ``offsets`` (never back). Every partition is checked first,
    so a refused commit changes nothing."""
    parts = dict(await _partitions(broker, name))
    moves = []
    for key, value in offsets.items():
        index = int(key) if isinstance(key, str) and key.isdigit() else -1
        if index not in parts or type(value) is not int or value < 0:
            raise InvalidRequestError(f"bad commit for partition {key!r}: {value!r}")
        topic = await broker.get_topic(parts[index])
        if value > topic.end_offset:
            # A cursor past the end would count messages not yet written as acknowledged.
            raise InvalidRequestError(
                f"bad commit for partition {key!r}: {value} is past the end ({topic.end_offset})"
            )
        moves.append((topic, value))
    for topic, value in moves:
        subscription = await topic.subscription(sub, SubType.SHARED, durable=True, start=0)
        if value > subscription.cursor.mark_delete:
            subscription.ack_cumulative(value - 1)
        if subscription.store is not None:
            await subscription.store.flush()
