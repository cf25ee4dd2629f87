"""Message deduplication on (producer name, sequence id), as Pulsar does it.

Only Pulsar producers carry sequence ids; a Kafka batch is deduplicated by the Kafka handler
on (producer id, epoch, sequence) and never here. The sequence ids travel inside each stored
PULSAR entry, so the state is rebuilt after a restart by scanning entries written since the
last snapshot (kept in the metadata store every ``SNAPSHOT_EVERY`` entries and on close). A
producer that resends after a reconnect gets a receipt for its original message, not a
duplicate.

The one rule that keeps it from losing data: a message is judged a duplicate only when a
message with a sequence id at least as high *is stored* and this one is not a resend of an
append that failed. A resend of a message still being written waits for that write and is
then judged again; if the write failed, the resend is stored.

And one exception the ids alone cannot tell: a client that numbers anew after a reconnect
(pulsar-client's C++ core adopts the told last id on every reconnect until its first receipt)
reuses the ids of the messages it just resent for different messages. That restart is
recognised and its reused ids are stored as new messages (``Producer.renumbered``). Should a
second crash catch such a message unstored, its resend is judged by id again: that narrow case
stays ambiguous, as in Pulsar.
"""

from __future__ import annotations

import asyncio
import enum
import json

from magnetar.broker import formats
from magnetar.broker.errors import BrokerError
from magnetar.ledger import ManagedLedger
from magnetar.meta import MetadataStore

SNAPSHOT_EVERY = 1000


class Verdict(enum.Enum):
    NEW = "new"  # never stored: store it
    DUPLICATE = "duplicate"  # already stored: answer with a receipt, store nothing
    IN_FLIGHT = "in_flight"  # being stored right now: wait for it, then judge again


class DuplicateUnknownError(BrokerError):
    """A resend arrived while the original was being written, and the verdict is still open.

    Pulsar answers the same (``MessageDupUnknownException``): the client resends later.
    """

    code = "broker.duplicate_unknown"
    http_status = 503
    pulsar_error = "PersistenceError"  # the client resends later
    kafka_error = "REQUEST_TIMED_OUT"
    retriable = True


class Deduplication:
    """Highest sequence id per producer: pushed (in flight or stored) and persisted."""

    def __init__(self, meta: MetadataStore, path: str) -> None:
        self.meta = meta
        self.path = path
        self.persisted: dict[str, int] = {}
        self.pushed: dict[str, int] = {}
        self.in_flight: dict[str, asyncio.Future[None]] = {}
        # Sequence ids whose append failed after a higher one was pushed: their resends
        # are new messages even though the producer's highest stored id is above them.
        self.failed_ids: dict[str, set[int]] = {}
        self._since_snapshot = 0
        self._snapshot_offset = 0
        # The end of what ``persisted`` reflects: the end of the ledger when loaded, then
        # the end of every recorded entry. An append still under way lies beyond it, so a
        # snapshot never claims an entry whose sequence id it does not hold.
        self.stored_end = 0

    async def load(self, ledger: ManagedLedger) -> None:
        """Rebuild from the snapshot plus every entry stored after it."""
        node = await self.meta.get(self.path)
        if node is not None:
            raw = json.loads(node.value)
            self.persisted = {k: int(v) for k, v in raw["producers"].items()}
            self._snapshot_offset = raw["offset"]
        offset = max(self._snapshot_offset, ledger.start_offset)
        while offset < ledger.end_offset:
            entries = await ledger.read(offset, max_entries=1000)
            if not entries:
                break
            for entry in entries:
                if entry.format == formats.PULSAR:
                    self._record(formats.sequence_of(entry.format, entry.payload))
            offset = entries[-1].next_offset
        self.stored_end = max(offset, self._snapshot_offset)
        self.pushed = dict(self.persisted)

    def _record(self, seq: formats.Sequence | None) -> None:
        if seq is not None and seq.producer_name:
            highest = max(seq.sequence_id, seq.highest_sequence_id)
            if highest > self.persisted.get(seq.producer_name, -1):
                self.persisted[seq.producer_name] = highest

    def check(self, producer: str, sequence_id: int) -> Verdict:
        failed = self.failed_ids.get(producer)
        if failed and sequence_id in failed:
            return Verdict.NEW
        if sequence_id <= self.persisted.get(producer, -1):
            return Verdict.DUPLICATE
        if sequence_id <= self.pushed.get(producer, -1):
            return Verdict.IN_FLIGHT
        return Verdict.NEW

    async def admit(self, producer: str, sequence_id: int) -> bool:
        """True: store the message; False: it is stored already (answer with a receipt).

        Raises DuplicateUnknownError when a resend's original is still being written after
        the wait (another write of the same producer got in between).
        """
        verdict = self.check(producer, sequence_id)
        if verdict is Verdict.IN_FLIGHT:
            pending = self.in_flight.get(producer)
            if pending is not None:
                await asyncio.shield(pending)
            verdict = self.check(producer, sequence_id)
            if verdict is Verdict.IN_FLIGHT:
                raise DuplicateUnknownError(
                    f"message {sequence_id} of producer {producer!r} is still being written; "
                    "resend it"
                )
        return verdict is Verdict.NEW

    def pushing(self, producer: str, sequence_id: int, highest: int) -> asyncio.Future[None]:
        """An append of ``sequence_id..highest`` starts; resolve the future when it ends."""
        failed = self.failed_ids.get(producer)
        if failed:
            failed.discard(sequence_id)
        self.pushed[producer] = max(highest, self.pushed.get(producer, -1))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.in_flight[producer] = done
        return done

    def persisted_up_to(self, producer: str, highest: int, end_offset: int) -> bool:
        """Record a stored entry; True when a snapshot is due."""
        self.persisted[producer] = max(highest, self.persisted.get(producer, -1))
        self.stored_end = max(self.stored_end, end_offset)
        self._since_snapshot += 1
        if self._since_snapshot >= SNAPSHOT_EVERY:
            self._since_snapshot = 0
            return True
        return False

    def failed(self, producer: str, sequence_id: int) -> None:
        """The append of ``sequence_id`` failed: its resend must be stored, whatever else
        of this producer is stored meanwhile."""
        self.failed_ids.setdefault(producer, set()).add(sequence_id)

    async def snapshot(self) -> None:
        """Persist the state; every entry before the snapshot offset is reflected in it."""
        self._snapshot_offset = max(self._snapshot_offset, self.stored_end)
        body = {"offset": self._snapshot_offset, "producers": self.persisted}
        await self.meta.put(self.path, json.dumps(body).encode())
