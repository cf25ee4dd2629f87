"""Produce: validate record batches and store each as one KAFKA entry.

Each batch is stored exactly as the producer sent it (compressed or not): its header and
CRC-32C are checked, its records are not unpacked (DESIGN.md decision 2). Old v0/v1 message
sets are converted into one magic-2 batch first. Every ``acks`` value (0, 1, all) waits for
the append: an answered partition is durable under the node's fsync policy (``always``: on
disk) — there is one copy, so "all in-sync replicas" is this one. With ``acks=0`` no answer
is sent, and a failure closes the connection, as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from magnetar.broker import Topic
from magnetar.broker.formats import KAFKA
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import compression, legacy, records
from magnetar.protocols.kafka.errors import (
    CorruptRecordError,
    ErrorCode,
    KafkaProtocolError,
    MessageTooLargeError,
    SequenceError,
    error_code_of,
)
from magnetar.protocols.kafka.idempotence import ProducerStates, Verdict
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Stored:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1


class AcksZeroFailure(KafkaProtocolError):
    """A produce with acks=0 failed: the connection is closed so the client notices."""

    code = "kafka.acks_zero_failed"


async def produce(svc: Service, session: Session, req: Request) -> dict[str, Any] | None:
    b = req.body
    jobs = []
    for t in b.topic_data:
        for p in t.partition_data:
            jobs.append(_produce_partition(svc, session, t.name, p.index, p.records))
    # gather starts the partitions in request order, so appends queue in arrival order.
    results: list[Stored] = await asyncio.gather(*jobs)
    if b.acks == 0:
        if any(r.error for r in results):
            raise AcksZeroFailure("a produce with acks=0 failed")
        return None
    it = iter(results)
    responses = []
    for t in b.topic_data:
        parts = []
        for p in t.partition_data:
            r = next(it)
            parts.append(
                {
                    "index": p.index,
                    "error_code": r.error,
                    "base_offset": r.base_offset,
                    "log_start_offset": r.log_start_offset,
                }
            )
        responses.append({"name": t.name, "partition_responses": parts})
    return {"responses": responses, "throttle_time_ms": 0}


async def _produce_partition(
    svc: Service, session: Session, topic_name: str, index: int, data: bytes | None
) -> Stored:
    try:
        batches = _batches(data, svc.settings.max_message_size)
        topic = svc.topics.cached(topic_name, index)
        if topic is None:
            topic = await svc.topics.partition(topic_name, index, create=True)
        states = await svc.producer_states(topic)
        first = -1
        for batch, header in batches:
            offset = await _store(session, topic, states, batch, header)
            first = offset if first < 0 else first
        return Stored(ErrorCode.NONE, first, topic.ledger.start_offset)
    except MagnetarError as e:
        return Stored(error_code_of(e))
    except Exception:
        log.exception("produce to %s-%d failed", topic_name, index)
        return Stored(ErrorCode.UNKNOWN_SERVER_ERROR)


def _batches(data: bytes | None, max_size: int) -> list[tuple[bytes, records.BatchHeader]]:
    if not data:
        raise CorruptRecordError("a produce request carried no records")
    if records.magic_of(data) < 2:
        recs, codec = legacy.decode(data)
        if not recs:
            raise CorruptRecordError("a produce request carried an empty message set")
        converted = records.encode(recs, codec=codec)
        return [(converted, records.read_header(converted))]
    out = []
    for view in records.split(data):
        header = records.validate(view)
        if header.size > max_size:
            raise MessageTooLargeError(f"record batch of {header.size} bytes exceeds {max_size}")
        if header.compression != compression.NONE:  # as Kafka's LogValidator, inflate it once
            body = view[records.HEADER_SIZE :]
            compression.decompress(header.compression, body, max_size=max_size)
        out.append((bytes(view), header))
    return out


async def _store(
    session: Session,
    topic: Topic,
    states: ProducerStates,
    batch: bytes,
    header: records.BatchHeader,
) -> int:
    """Append one batch (or find the earlier copy of a retried one); its base offset."""
    check = states.check(header)
    if check.verdict is Verdict.REFUSED:
        log.warning(
            "%s: refused batch of producer %d epoch %d sequences %d..%d: %s (%s)",
            topic.name,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            check.error.name,
            states.describe(header.producer_id),
        )
        raise SequenceError(check.error, f"idempotent producer batch refused: {check.error.name}")
    if check.verdict is Verdict.DUPLICATE:
        assert check.duplicate_of is not None
        return await asyncio.shield(check.duplicate_of.offset)
    pushed = states.pushing(header)
    producer = session.producers.get(id(topic))
    if producer is None or producer.closed:
        producer = await session.producer(topic)
    timestamp = header.max_timestamp if header.max_timestamp >= 0 else None
    try:
        result = await topic.publish(
            producer,
            batch,
            count=header.record_count,
            sequence=None,  # never Pulsar-deduplicated: idempotence is judged above
            publish_time=timestamp,
            event_time=header.max_timestamp,
            fmt=KAFKA,
        )
    except BaseException:
        states.failed(header.producer_id, pushed)
        raise
    offset = result.entry.base_offset if result.entry is not None else -1
    states.stored(pushed, offset)
    return offset
