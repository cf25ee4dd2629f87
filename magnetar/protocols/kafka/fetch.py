"""Fetch (long poll) and ListOffsets.

Fetch reads each requested partition from its fetch offset, up to the partition's and the
request's byte limits, the latter capped by the server's ``fetch_max_bytes`` as Kafka's
``fetch.max.bytes`` (always at least one batch, so a batch bigger than the limit still
moves the consumer on). If fewer than ``min_bytes`` are ready it waits, up to ``max_wait_ms``,
for an append to any of the partitions. KAFKA entries go out as stored, renumbered from their
offset; PULSAR entries are converted into record batches. The last stable offset is the first
offset of the oldest open transaction (the high watermark when none is open); a
read_committed fetch stops there and lists the aborted transactions of the range it returns,
whose batches the client drops (control batches go out as stored; clients skip them).

ListOffsets: −2 is the first retained offset, −1 the end offset, −3 the record with the
largest timestamp (``timestamps``, v7+), −4 the first offset still held by the log's own
storage rather than only by the object store (Kafka's local log start, KIP-405, v8+), −5 the
last offloaded offset or −1 when nothing is (KIP-1005, v9+); v10 only adds a timeout for
remote reads, which Magnetar does not need. A timestamp finds the first record whose
timestamp is at or after it (through the time index, then the batch). As Kafka does, a
special timestamp below its version, or a negative one that is no special value at all, is
UNSUPPORTED_VERSION for its partition.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker import Topic
from magnetar.broker.compaction import CompactedView
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import compacted, records
from magnetar.protocols.kafka.conversion import to_kafka_batch
from magnetar.protocols.kafka.errors import ErrorCode, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.timestamps import MAX_TIMESTAMP, max_timestamp_offset
from magnetar.protocols.kafka.wire import Request

log = logging.getLogger(__name__)
LATEST, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -4, -5
# special timestamp → the lowest ListOffsets version that knows it
_SINCE_VERSION = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
MAX_ENTRIES = 10_000
COMPACTED_RECORDS = 500  # entries of the compacted view one fetch of a partition reads


@dataclass(eq=False)
class _Part:
    topic_name: str
    index: int
    offset: int
    max_bytes: int
    committed_only: bool = False  # isolation.level=read_committed
    topic: Topic | None = None
    error: ErrorCode = ErrorCode.NONE
    batches: list[bytes] = field(default_factory=list)
    size: int = 0


async def fetch(svc: Service, session: Session, req: Request) -> dict[str, Any]:
    b = req.body
    committed_only = b.isolation_level == 1
    parts = [
        _Part(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, committed_only)
        for t in b.topics
        for p in t.partitions
    ]
    for part in parts:
        await _resolve(svc, part)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(b.max_wait_ms, 0) / 1000
    max_bytes = min(b.max_bytes, svc.settings.fetch_max_bytes)
    while True:
        total = await _read_all(parts, max_bytes)
        if total >= max(b.min_bytes, 1) or any(p.error for p in parts):
            break
        remaining = deadline - loop.time()
        if remaining <= 0 or not await _wait_for_append(parts, remaining):
            break
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": _respond(parts)}


async def _resolve(svc: Service, part: _Part) -> None:
    try:
        part.topic = await svc.topics.partition(part.topic_name, part.index)
    except MagnetarError as e:
        part.error = error_code_of(e)


async def _read_all(parts: list[_Part], max_bytes: int) -> int:
    total = 0
    for part in parts:
        if part.topic is None or part.error:
            continue
        budget = max_bytes - total
        if part.size == 0 and (budget > 0 or total == 0):
            await _read(part, min(part.max_bytes, max(budget, 1)))
        total += part.size
    return total


async def _read(part: _Part, limit: int) -> None:
    assert part.topic is not None
    topic = part.topic
    if part.offset < compacted.log_start(part.topic) or part.offset > topic.end_offset:
        part.error = ErrorCode.OFFSET_OUT_OF_RANGE
        return
    position = part.offset
    view = compacted.view_of(part.topic)
    if view is not None and position < view.horizon:
        await _read_compacted(part, view, limit)
        if part.batches or part.error:
            return
        position = view.horizon  # nothing of the view is left after the fetch offset
    stop = _last_stable(part) if part.committed_only else topic.end_offset
    try:
        entries = await topic.read(position, max_entries=MAX_ENTRIES, max_bytes=limit)
        for entry in entries:
            if entry.base_offset >= stop:
                break
            batch = to_kafka_batch(entry)
            if part.batches and part.size + len(batch) > limit:
                break
            part.batches.append(batch)
            part.size += len(batch)
            # the client drops the records of the first batch below the offset it asked for
            skipped = max(0, part.offset - entry.base_offset)
            part.topic.counters.delivered(entry.count - skipped, len(batch))
    except MagnetarError as e:
        part.error = error_code_of(e)


async def _read_compacted(part: _Part, view: CompactedView, limit: int) -> None:
    """Batches of the compacted view from the fetch offset (see :mod:`compacted`)."""
    assert part.topic is not None
    try:
        for record in await view.read(part.offset, COMPACTED_RECORDS):
            batch = compacted.batch_of(record)
            if batch is None:
                continue
            if part.batches and part.size + len(batch) > limit:
                break
            part.batches.append(batch)
            part.size += len(batch)
            part.topic.counters.delivered(record.entry.count - len(record.dropped), len(batch))
    except MagnetarError as e:
        part.error = error_code_of(e)


async def _wait_for_append(parts: list[_Part], timeout: float) -> bool:
    """Wait until one of the partitions grows; False when ``timeout`` passes first."""
    event = asyncio.Event()
    topics = {id(p.topic): p.topic for p in parts if p.topic is not None}
    removers = [topic.on_append(event.set) for topic in topics.values()]
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
        return True
    except TimeoutError:
        return False
    finally:
        for remove in removers:
            remove()


def _last_stable(part: _Part) -> int:
    assert part.topic is not None
    end = part.topic.end_offset
    return part.topic.txns.last_stable(end) if part.topic.txns is not None else end


def _aborted(part: _Part) -> list[dict[str, int]]:
    """The aborted transactions a read_committed client must drop from what it gets."""
    txns = part.topic.txns if part.topic is not None else None
    if not part.committed_only or txns is None or not part.batches:
        return []
    last = records.read_header(part.batches[-1])
    end = last.base_offset + last.last_offset_delta + 1
    return [
        {"producer_id": a.producer_id, "first_offset": a.first}
        for a in txns.aborted_in(part.offset, end)
    ]


def _respond(parts: list[_Part]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for part in parts:
        hw = lso = start = -1
        if part.topic is not None:
            topic = part.topic
            hw, lso = topic.end_offset, _last_stable(part)
            start = compacted.log_start(part.topic)
        by_topic.setdefault(part.topic_name, []).append(
            {
                "partition_index": part.index,
                "error_code": part.error,
                "high_watermark": hw,
                "last_stable_offset": lso,
                "log_start_offset": start,
                "aborted_transactions": _aborted(part),
                "preferred_read_replica": -1,
                "records": b"".join(part.batches) if not part.error else b"",
            }
        )
    return [{"topic": name, "partitions": ps} for name, ps in by_topic.items()]


# -- ListOffsets ---------------------------------------------------------------------------


async def list_offsets(svc: Service, session: Session, req: Request) -> dict[str, Any]:
    committed_only = req.api_version >= 2 and req.body.isolation_level == 1
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            error, ts, offset = ErrorCode.NONE, -1, -1
            if p.timestamp < 0 and req.api_version < _SINCE_VERSION.get(p.timestamp, 1 << 15):
                parts.append(_unsupported(p.partition_index))
                continue
            try:
                topic = await svc.topics.partition(t.name, p.partition_index)
                ts, offset = await _offset_for(topic, p.timestamp)
                if p.timestamp == EARLIEST or (
                    p.timestamp == EARLIEST_LOCAL and offset <= topic.start_offset
                ):
                    offset = compacted.log_start(topic)
                if p.timestamp == LATEST and committed_only and topic.txns is not None:
                    offset = topic.txns.last_stable(offset)  # the last stable offset
            except MagnetarError as e:
                error = error_code_of(e)
            parts.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": error,
                    "timestamp": ts,
                    "offset": offset,
                }
            )
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _unsupported(partition_index: int) -> dict[str, Any]:
    error = ErrorCode.UNSUPPORTED_VERSION
    return {"partition_index": partition_index, "error_code": error, "timestamp": -1, "offset": -1}


async def _offset_for(topic: Topic, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets query; (-1, -1) when nothing matches."""
    if timestamp == EARLIEST_LOCAL:
        return -1, topic.local_start_offset
    if timestamp == LATEST_TIERED:
        return -1, topic.last_offloaded_offset
    if timestamp == LATEST:
        return -1, topic.end_offset
    if timestamp == EARLIEST:
        return -1, topic.start_offset
    if timestamp == MAX_TIMESTAMP:
        return await max_timestamp_offset(topic)
    offset = await topic.find_offset(timestamp)
    while offset < topic.end_offset:
        entries = await topic.read(offset, max_entries=100)
        if not entries:
            break
        for entry in entries:
            for r in records.decode(to_kafka_batch(entry)):
                if r.timestamp >= timestamp:
                    return r.timestamp, entry.base_offset + r.offset_delta
        offset = entries[-1].next_offset
    return -1, -1
