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
from magnetar.protocols.kafka import compression, legacy, records, txn_apis
from magnetar.protocols.kafka.errors import (
    CorruptRecordError,
    ErrorCode,
    KafkaProtocolError,
    MessageTooLargeError,
    RefusedError,
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
    jobs, where = [], []
    for t in b.topic_data:
        for p in t.partition_data:
            where.append(f"{t.name}-{p.index}")
            jobs.append(
                _produce_partition(svc, session, t.name, p.index, p.records, b.transactional_id)
            )
    # gather starts the partitions in request order, so appends queue in arrival order.
    results: list[Stored] = await asyncio.gather(*jobs)
    if b.acks == 0:
        failed = [f"{w}: {r.error.name}" for w, r in zip(where, results, strict=True) if r.error]
        if failed:  # the client is told only by the close: say here what was refused
            log.warning(
                "closing Kafka connection from %s: a produce with acks=0 failed (%s)",
                session.peer,
                ", ".join(failed),
            )
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
    svc: Service,
    session: Session,
    topic_name: str,
    index: int,
    data: bytes | None,
    transactional_id: str | None = None,
) -> Stored:
    """Admit and store the batches of one partition of a Produce request.

    Admission (finding the topic, the sequence check, starting the append) happens under the
    connection's turn for the partition, taken in request order: the first request after a
    topic moved here waits for the topic to load and its producer states to be rebuilt, and
    a later request of the same connection must not overtake it there, or an idempotent
    producer's next batch would be judged out of order (a fatal error for the client).
    Durability is awaited outside the turn, so requests still pipeline.
    """
    try:
        batches = _batches(data, svc.settings.max_message_size + records.BATCH_PADDING)
        for _, header in batches:
            await _check_transaction(svc, header, transactional_id, topic_name, index)
        async with session.turn(topic_name, index):
            topic = svc.topics.cached(topic_name, index)
            if topic is None:
                topic = await svc.topics.partition(topic_name, index, create=True)
            states = await svc.producer_states(topic)
            for _, header in batches:  # recorded open before anything of it is stored
                if header.transactional and topic.txns is not None:
                    await topic.txns.opening(header.producer_id, topic.end_offset)
            started: list[asyncio.Future[int]] = []
            try:
                for batch, header in batches:
                    started.append(await _admit(session, topic, states, batch, header))
            except BaseException:
                for stored in started:  # admitted before the failure: they go on, unread
                    stored.add_done_callback(_retrieve)
                raise
        offsets = [await stored for stored in started]
        return Stored(ErrorCode.NONE, offsets[0], topic.start_offset)
    except MagnetarError as e:
        return Stored(error_code_of(e))
    except Exception:
        log.exception("produce to %s-%d failed", topic_name, index)
        return Stored(ErrorCode.UNKNOWN_SERVER_ERROR)


async def _check_transaction(
    svc: Service, header: records.BatchHeader, tid: str | None, topic: str, index: int
) -> None:
    """A transactional batch is taken only inside its producer's open transaction, after
    AddPartitionsToTxn named this partition (INVALID_TXN_STATE otherwise)."""
    if not header.transactional:
        return
    if not await txn_apis.coordinator(svc).accepts(
        tid, header.producer_id, header.producer_epoch, topic, index
    ):
        raise RefusedError(
            ErrorCode.INVALID_TXN_STATE,
            f"producer {header.producer_id} epoch {header.producer_epoch} has no open "
            f"transaction with {topic}-{index}: AddPartitionsToTxn first",
        )


def _retrieve(done: asyncio.Future[int]) -> None:
    if not done.cancelled():
        done.exception()


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


async def _admit(
    session: Session,
    topic: Topic,
    states: ProducerStates,
    batch: bytes,
    header: records.BatchHeader,
) -> asyncio.Future[int]:
    """Judge one batch and start its append (or find the earlier copy of a retried one);
    the future of its base offset. The append is queued before this returns, so batches
    admitted one after another are stored in that order."""
    producer = session.producers.get(id(topic))
    if producer is None or producer.closed:
        producer = await session.producer(topic)
    check = states.check(header)  # check and pushing: no await between them
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
        return asyncio.ensure_future(asyncio.shield(check.duplicate_of.offset))
    pushed = states.pushing(header)
    timestamp = header.max_timestamp if header.max_timestamp >= 0 else None

    async def store() -> int:
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

    # a task is scheduled now, ahead of whoever is admitted next: appends queue in order
    return asyncio.ensure_future(store())
