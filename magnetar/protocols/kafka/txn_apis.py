"""The transaction APIs (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn, served by this node's
:class:`~magnetar.protocols.kafka.transactions.TransactionCoordinator` (one per listener,
started with the server). Markers are written here: a control batch per partition, stored
as a KAFKA entry like any batch, which also closes the producer's transaction in the
partition's :class:`~magnetar.broker.transactions.TransactionIndex`. On several brokers a
marker for a partition another broker serves is written there
(``POST /magnetar/v1/kafka/txn-markers``, Kafka's WriteTxnMarkers between brokers), and a
transaction call reaching a broker that does not coordinate its id is answered
NOT_COORDINATOR, so the client finds the coordinator again.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from types import SimpleNamespace
from typing import Any

import aiohttp

from magnetar.broker.formats import KAFKA
from magnetar.broker.records import RecordKind
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import groups
from magnetar.protocols.kafka.entry_format import marker_batch
from magnetar.protocols.kafka.errors import (
    ErrorCode,
    RefusedError,
    UnknownTopicError,
    error_code_of,
)
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.transactions import Offsets, TransactionCoordinator
from magnetar.protocols.kafka.wire import Request

Response = dict[str, Any]
_COORDINATORS: weakref.WeakKeyDictionary[Service, TransactionCoordinator] = (
    weakref.WeakKeyDictionary()
)
_MARKER_SESSIONS: weakref.WeakKeyDictionary[Service, Session] = weakref.WeakKeyDictionary()


def coordinator(svc: Service) -> TransactionCoordinator:
    """The transaction coordinator of ``svc`` (created on first use)."""
    found = _COORDINATORS.get(svc)
    if found is None:

        async def marker(topic: str, index: int, pid: int, epoch: int, commit: bool) -> None:
            await write_marker(svc, topic, index, pid, epoch, commit)

        async def offsets(group: str, staged: Offsets) -> None:
            await commit_offsets(svc, group, staged)

        ownership = svc.broker.ownership

        async def owns(tid: str, take: bool) -> bool:
            assert ownership is not None
            name = groups.coordinator_name(svc, tid)
            if not take:
                return ownership.owns(name)
            owner, _ = await ownership.lookup(name)
            return owner.id == ownership.me.id

        found = TransactionCoordinator(
            svc.broker.records(RecordKind.KAFKA_TRANSACTIONS),
            svc.broker.records(RecordKind.KAFKA_TXN_OFFSETS),
            svc.next_producer_id,
            marker,
            offsets,
            owns if ownership is not None else None,
        )
        _COORDINATORS[svc] = found
    return found


MARKER_DEADLINE_S = 60.0  # a partition's owner may be moving: keep trying this long


async def write_marker(
    svc: Service, topic: str, index: int, producer_id: int, epoch: int, commit: bool
) -> None:
    """Store a COMMIT or ABORT control batch of ``producer_id`` in one partition (durable
    when this returns), on the broker serving it."""
    ownership = svc.broker.ownership
    if ownership is None:
        await marker_here(svc, topic, index, producer_id, epoch, commit)
        return
    body = {"topic": topic, "partition": index, "producerId": producer_id, "epoch": epoch,
            "commit": commit}  # fmt: skip
    deadline, pause = time.monotonic() + MARKER_DEADLINE_S, 0.1
    while True:
        try:
            owner, _ = await ownership.lookup(await svc.topics.partition_name(topic, index))
            if owner.id == ownership.me.id:
                await marker_here(svc, topic, index, producer_id, epoch, commit)
                return
            peers = svc.broker.peers  # the node's credential, over TLS when set
            url = f"{peers.base_url(owner)}/magnetar/v1/kafka/txn-markers"
            async with peers.session(timeout_s=30) as http, http.post(url, json=body) as r:
                answer = await r.json(content_type=None)
            if r.status == 200 and answer.get("errorCode") == 0:
                return
            why = str(answer.get("message") or answer)
        except (TimeoutError, MagnetarError, aiohttp.ClientError, ValueError) as e:
            why = str(e) or type(e).__name__
        if time.monotonic() > deadline:
            raise RefusedError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"the {'COMMIT' if commit else 'ABORT'} marker for {topic}-{index} could not "
                f"be written ({why}); the transaction is finished when EndTxn is retried",
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)


async def markers_here(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    """Serve :func:`write_marker` for a coordinator on another broker."""
    await marker_here(
        svc,
        str(body["topic"]),
        int(body["partition"]),
        int(body["producerId"]),
        int(body["epoch"]),
        bool(body["commit"]),
    )
    return {"errorCode": 0}


async def marker_here(
    svc: Service, topic: str, index: int, producer_id: int, epoch: int, commit: bool
) -> None:
    """Write the marker to a partition this broker serves."""
    ownership = svc.broker.ownership
    if ownership is not None:  # taken here if nobody serves it; else NotOwnerError
        await ownership.check(await svc.topics.partition_name(topic, index))
    part = await svc.topics.partition(topic, index)
    states = await svc.producer_states(part)
    session = _MARKER_SESSIONS.setdefault(svc, Session(client_id="txn-markers"))
    now = int(time.time() * 1000)
    batch = marker_batch(producer_id, epoch, commit, now)
    producer = await session.producer(part)
    result = await part.publish(
        producer, batch, count=1, sequence=None, publish_time=now, event_time=now, fmt=KAFKA
    )
    offset = result.entry.base_offset if result.entry is not None else part.end_offset - 1
    states.marker(producer_id, epoch)
    coordinator(svc).marker_written(producer_id, topic, index)
    if part.txns is not None:
        part.txns.ended(producer_id, commit, offset)


async def commit_offsets(svc: Service, group: str, staged: Offsets) -> None:
    """Commit a committed transaction's staged offsets of ``group``."""
    for topic, index, offset, metadata, epoch in staged:
        p = SimpleNamespace(
            partition_index=index,
            committed_offset=offset,
            committed_metadata=metadata,
            committed_leader_epoch=epoch,
        )
        code = await groups.commit_offset(svc, group, topic, p, ErrorCode.NONE)
        if code:
            raise RefusedError(code, f"committing {group}'s offset of {topic}-{index} failed")


async def _elsewhere(svc: Service, key: str) -> None:
    """Raise NOT_COORDINATOR when another broker coordinates ``key`` (a transactional id
    or a group)."""
    if await groups.not_coordinator(svc, key):
        raise RefusedError(
            ErrorCode.NOT_COORDINATOR, f"another broker coordinates {key!r}: find it again"
        )


async def init_producer_id(svc: Service, req: Request) -> Response:
    b = req.body
    try:
        await _elsewhere(svc, b.transactional_id)
        pid, epoch = await coordinator(svc).init_producer(
            b.transactional_id, b.transaction_timeout_ms
        )
    except MagnetarError as e:
        return {"error_code": error_code_of(e), "producer_id": -1, "producer_epoch": -1}
    return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch}


async def add_partitions_to_txn(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    wanted = [(t.name, p) for t in b.v3_and_below_topics for p in t.partitions]
    error = ErrorCode.NONE
    try:
        await _elsewhere(svc, b.v3_and_below_transactional_id)
        for topic, index in wanted:  # each must exist (on any broker) before it is named
            count = await svc.topics.partition_count(topic)
            if count is None or not 0 <= index < count:
                raise UnknownTopicError(f"topic {topic!r} has no partition {index}")
        await coordinator(svc).add_partitions(
            b.v3_and_below_transactional_id,
            b.v3_and_below_producer_id,
            b.v3_and_below_producer_epoch,
            wanted,
        )
    except MagnetarError as e:
        error = error_code_of(e)
    results = [
        {
            "name": t.name,
            "results_by_partition": [
                {"partition_index": p, "partition_error_code": error} for p in t.partitions
            ],
        }
        for t in b.v3_and_below_topics
    ]
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}


async def add_offsets_to_txn(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    try:
        await _elsewhere(svc, b.transactional_id)
        await coordinator(svc).add_offsets(
            b.transactional_id, b.producer_id, b.producer_epoch, b.group_id
        )
    except MagnetarError as e:
        return {"throttle_time_ms": 0, "error_code": error_code_of(e)}
    return {"throttle_time_ms": 0, "error_code": 0}


async def txn_offset_commit(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    staged = [
        (t.name, p.partition_index, p.committed_offset, p.committed_metadata, _epoch(p))
        for t in b.topics
        for p in t.partitions
    ]
    error = ErrorCode.NONE
    try:
        await _elsewhere(svc, b.group_id)  # staged at the group's coordinator, as in Kafka
        await coordinator(svc).stage_offsets(
            b.transactional_id, b.producer_id, b.producer_epoch, b.group_id, staged
        )
    except MagnetarError as e:
        error = error_code_of(e)
    topics = [
        {
            "name": t.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": error} for p in t.partitions
            ],
        }
        for t in b.topics
    ]
    return {"throttle_time_ms": 0, "topics": topics}


def _epoch(partition: Any) -> int:
    """A committed offset's leader epoch (TxnOffsetCommit v2+; -1 unknown)."""
    epoch = getattr(partition, "committed_leader_epoch", -1)
    return -1 if epoch is None else int(epoch)


async def end_txn(svc: Service, session: Session, req: Request) -> Response:
    b = req.body
    try:
        await _elsewhere(svc, b.transactional_id)
        await coordinator(svc).end(
            b.transactional_id, b.producer_id, b.producer_epoch, bool(b.committed)
        )
    except MagnetarError as e:
        return {"throttle_time_ms": 0, "error_code": error_code_of(e)}
    return {"throttle_time_ms": 0, "error_code": 0}
