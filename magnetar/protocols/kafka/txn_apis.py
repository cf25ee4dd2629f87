"""The transaction APIs (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn, served by this node's
:class:`~magnetar.protocols.kafka.transactions.TransactionCoordinator` (one per listener,
started with the server). Markers are written here: a control batch per partition, stored
as a KAFKA entry like any batch, which also closes the producer's transaction in the
partition's ``ProducerStates``.
"""

from __future__ import annotations

import struct
import time
import weakref
from types import SimpleNamespace
from typing import Any

from magnetar.broker.formats import KAFKA
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import groups, records
from magnetar.protocols.kafka.errors import ErrorCode, RefusedError, error_code_of
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

        found = TransactionCoordinator(svc.broker.meta, svc.next_producer_id, marker, offsets)
        _COORDINATORS[svc] = found
    return found


async def write_marker(
    svc: Service, topic: str, index: int, producer_id: int, epoch: int, commit: bool
) -> None:
    """Store a COMMIT or ABORT control batch of ``producer_id`` in one partition (durable
    when this returns)."""
    part = await svc.topics.partition(topic, index)
    states = await svc.producer_states(part)
    session = _MARKER_SESSIONS.setdefault(svc, Session(client_id="txn-markers"))
    now = int(time.time() * 1000)
    control = records.Record(struct.pack(">hh", 0, int(commit)), struct.pack(">hi", 0, 0), now)
    batch = records.encode(
        [control],
        producer_id=producer_id,
        producer_epoch=epoch,
        attributes=records.TRANSACTIONAL | records.CONTROL,
    )
    producer = await session.producer(part)
    result = await part.publish(
        producer, batch, count=1, sequence=None, publish_time=now, event_time=now, fmt=KAFKA
    )
    offset = result.entry.base_offset if result.entry is not None else part.ledger.end_offset - 1
    states.marker(producer_id, epoch, commit, offset)


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


async def init_producer_id(svc: Service, req: Request) -> Response:
    b = req.body
    try:
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
        for topic, index in wanted:  # each must exist before the transaction names it
            await svc.topics.partition(topic, index)
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
        await coordinator(svc).end(
            b.transactional_id, b.producer_id, b.producer_epoch, bool(b.committed)
        )
    except MagnetarError as e:
        return {"throttle_time_ms": 0, "error_code": error_code_of(e)}
    return {"throttle_time_ms": 0, "error_code": 0}
