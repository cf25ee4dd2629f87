"""Idempotent-producer state of one partition: Kafka's dedup on (producer id, epoch, sequence).

A batch from an idempotent producer carries its producer id, epoch and first sequence; the
next batch of a session must start at the last sequence + 1. A retried batch (same first and
last sequence as one of the producer's last :data:`KEPT_BATCHES`) is answered with the offset
it was stored at and not stored again — also while the original is still being written.

Durability: the ids and sequences are stored *with the entry* (the batch header), so after a
restart :meth:`ProducerStates.load` rebuilds the state from the partition's last
:data:`SCAN_OFFSETS` offsets; a retry that reaches a restarted server is still recognised.

The partition's transactions (KIP-98: open, aborted, the last stable offset) are the
broker's :class:`~magnetar.broker.transactions.TransactionIndex`, which every reader follows;
here a marker only moves its producer to the marker's epoch, so a producer fenced by its
coordinator is refused.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from dataclasses import dataclass, field

from magnetar.broker import Topic, formats
from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.errors import ErrorCode, NotStoredError

KEPT_BATCHES = 5  # Kafka keeps the last 5 (max.in.flight.requests.per.connection ≤ 5)
SCAN_OFFSETS = 100_000


class Verdict(enum.Enum):
    APPEND = "append"  # next in sequence (or not idempotent): store it
    DUPLICATE = "duplicate"  # already stored or being stored: answer with its offset
    REFUSED = "refused"  # epoch or sequence error: answer with ``error``


@dataclass(eq=False)
class _Batch:
    first: int
    last: int
    offset: asyncio.Future[int]


@dataclass(eq=False)
class _Producer:
    epoch: int
    last: int  # last sequence accepted for append (stored or being stored)
    batches: deque[_Batch] = field(default_factory=lambda: deque(maxlen=KEPT_BATCHES))


@dataclass(frozen=True, slots=True)
class Check:
    verdict: Verdict
    error: ErrorCode = ErrorCode.NONE
    duplicate_of: _Batch | None = None


class ProducerStates:
    """The idempotent producers of one partition."""

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    async def load(self, topic: Topic) -> None:
        """Rebuild from the KAFKA entries among the last SCAN_OFFSETS offsets."""
        offset = max(topic.start_offset, topic.end_offset - SCAN_OFFSETS)
        end = topic.end_offset
        while offset < end:
            try:
                entries = await topic.read(offset, max_entries=1000)
            except MagnetarError:
                return  # trimmed meanwhile: what was read so far is what we know
            if not entries:
                return
            for entry in entries:
                if entry.format == formats.KAFKA:
                    self._replay(entry.payload, entry.base_offset)
            offset = entries[-1].next_offset

    def _replay(self, payload: bytes, base_offset: int) -> None:
        header = records.read_header(payload)
        if header.control:
            self.marker(header.producer_id, header.producer_epoch)
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        state = self._producers.get(header.producer_id)
        if state is None or header.producer_epoch != state.epoch:
            state = self._producers[header.producer_id] = _Producer(header.producer_epoch, -1)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(base_offset)
        state.batches.append(_Batch(header.base_sequence, header.last_sequence, done))
        state.last = header.last_sequence

    def check(self, header: records.BatchHeader) -> Check:
        """What to do with a batch; call :meth:`pushing` before storing one that may go."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return Check(Verdict.APPEND)
        state = self._producers.get(header.producer_id)
        if state is None:
            return Check(Verdict.APPEND)
        if header.producer_epoch < state.epoch:
            return Check(Verdict.REFUSED, ErrorCode.INVALID_PRODUCER_EPOCH)
        if header.producer_epoch > state.epoch:
            if header.base_sequence == 0:
                return Check(Verdict.APPEND)
            return Check(Verdict.REFUSED, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for batch in state.batches:
            if batch.first == header.base_sequence and batch.last == header.last_sequence:
                return Check(Verdict.DUPLICATE, duplicate_of=batch)
        if header.base_sequence == state.last + 1:
            return Check(Verdict.APPEND)
        if header.base_sequence <= state.last:
            return Check(Verdict.REFUSED, ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
        return Check(Verdict.REFUSED, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)

    def pushing(self, header: records.BatchHeader) -> _Batch | None:
        """Record that the batch is being stored; None when it is not idempotent."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return None
        state = self._producers.get(header.producer_id)
        if state is None or header.producer_epoch != state.epoch:
            state = self._producers[header.producer_id] = _Producer(header.producer_epoch, -1)
        batch = _Batch(
            header.base_sequence,
            header.last_sequence,
            asyncio.get_running_loop().create_future(),
        )
        state.batches.append(batch)
        state.last = header.last_sequence
        return batch

    # -- transactions ----------------------------------------------------------------------

    def marker(self, producer_id: int, epoch: int) -> None:
        """A COMMIT / ABORT marker of ``producer_id`` with ``epoch`` was stored: a producer
        fenced by its coordinator (a newer epoch) starts afresh."""
        state = self._producers.get(producer_id)
        if state is not None and epoch > state.epoch:
            self._producers[producer_id] = _Producer(epoch, -1)

    def stored(self, batch: _Batch | None, base_offset: int) -> None:
        if batch is not None and not batch.offset.done():
            batch.offset.set_result(base_offset)

    def describe(self, producer_id: int) -> str:
        """What is known of a producer, for a log line."""
        state = self._producers.get(producer_id)
        if state is None:
            return "unknown producer"
        kept = ", ".join(f"{b.first}..{b.last}" for b in state.batches)
        return f"epoch {state.epoch}, last sequence {state.last}, last batches {kept}"

    def failed(self, producer_id: int, batch: _Batch | None) -> None:
        """The store failed: forget the batch so the producer's retry is stored."""
        state = self._producers.get(producer_id)
        if batch is None or state is None:
            return
        if batch in state.batches:
            state.batches.remove(batch)
        state.last = min(state.last, batch.first - 1)
        if not batch.offset.done():
            batch.offset.set_exception(NotStoredError("the original write of this batch failed"))
            batch.offset.exception()  # retrieved: a waiting duplicate gets it re-raised
