"""A persistent topic partition: its ledger, producers, subscriptions and deduplication."""

from __future__ import annotations

import asyncio
import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.compaction import TopicCompaction
from magnetar.broker.counters import TopicCounters
from magnetar.broker.cursor import CursorStore
from magnetar.broker.dedup import Deduplication
from magnetar.broker.delays import DelayedDeliveryPolicy
from magnetar.broker.errors import (
    MessageTooLargeError,
    ProducerBusyError,
    ProducerFencedError,
    SubscriptionNotFoundError,
    TopicFencedError,
)
from magnetar.broker.subscription import Subscription, SubType, UnackedLimits
from magnetar.broker.transactions import TransactionIndex
from magnetar.core.entries import Entry
from magnetar.core.ids import MessageId
from magnetar.core.names import TopicName
from magnetar.ledger import (
    InvalidEntryError,
    ManagedLedger,
    SegmentState,
    SegmentView,
    StorageError,
)
from magnetar.meta import MetadataStore

_WRITE_FAILED = (
    "topic {} is retrying after a failed write to storage: nothing of this was stored; "
    "retry (Pulsar and Kafka clients do so on their own)"
)


class AccessMode(enum.IntEnum):
    """Pulsar's wire values for ProducerAccessMode."""

    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3


@dataclass(eq=False)
class Producer:
    topic: Topic
    name: str
    access_mode: AccessMode
    user_named: bool
    published: int = 0
    closed: bool = False
    on_fenced: Callable[[], None] | None = None  # set by the protocol handler that owns it
    # Deduplication, for this attachment only (see renumbered()).
    reconnected: bool = False  # the client's producer had attached before (Pulsar's epoch > 0)
    told_last_sequence: int = -1  # the last sequence id it was told when it attached
    highest_sent_sequence: int = -1  # the highest it has sent since
    renumbered_up_to: int = -1  # ids up to here were numbered anew: see renumbered()

    def renumbered(self, first: int, highest: int) -> bool:
        """Whether the entry of ids ``first..highest`` reuses ids for new messages.

        pulsar-client's C++ core adopts the told last id on every reconnect until it has had
        one receipt: after resending what it holds, it numbers new messages from the told id
        + 1 again, ids its resends already used. That restart is recognised in a reconnected
        attachment as a message at exactly the told id + 1 after a higher one; ids from there
        up to the highest sent before it are new messages. Any other repeated id keeps
        Pulsar's meaning (a duplicate), explicit ids of an application included.
        """
        told = self.told_last_sequence
        if self.reconnected and first == told + 1 and self.highest_sent_sequence > told:
            self.renumbered_up_to = self.highest_sent_sequence
        self.highest_sent_sequence = max(self.highest_sent_sequence, highest)
        return told < first <= self.renumbered_up_to


@dataclass(frozen=True, slots=True)
class PublishResult:
    entry: Entry | None  # None: a duplicate, nothing stored
    duplicate: bool = False


@dataclass(eq=False)
class Topic:
    name: TopicName
    ledger: ManagedLedger
    meta: MetadataStore
    producers: list[Producer] = field(default_factory=list)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    dedup: Deduplication | None = None
    max_message_size: int | None = None  # the topic's own limit (topic policy), bytes
    # Names for producers that bring none: unique for the life of the cluster (the broker's
    # ProducerNames), so a new producer never inherits another's sequence ids.
    new_producer_name: Callable[[], str] = field(default=lambda: "")
    unacked_limits: UnackedLimits = field(default_factory=UnackedLimits)
    counters: TopicCounters = field(default_factory=TopicCounters)  # since loaded
    delayed: DelayedDeliveryPolicy = field(default_factory=DelayedDeliveryPolicy)
    compaction: TopicCompaction | None = None  # its compacted view and runs
    txns: TransactionIndex | None = None  # Kafka transactions: what readers may not see
    _exclusive_waiters: deque[tuple[Producer, asyncio.Future[None]]] = field(default_factory=deque)
    # Set when the topic is unloaded: publishes are refused from then on, and the unload
    # waits for those already under way before it closes the ledger (Pulsar's fencing).
    fenced: bool = False
    # Set when an append failed in storage (Pulsar's PersistentTopic.addFailed): every
    # producer was told to go and reconnect, and until the publishes under way have all
    # ended nothing is stored and no producer attaches. A SEND its client wrote before it
    # heard of the failure is then never stored behind the failed one's back: the client
    # resends everything unacknowledged, in order, through a new attachment.
    write_failed: bool = False
    _publishing: int = 0
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._idle.set()

    # -- the log, as protocol servers, http and views read it ----------------------------
    # They never reach the ledger itself (tests/test_tiers.py): these calls are the seam, so
    # the ledger beneath can change (replicated storage) without changing any of them.

    @property
    def start_offset(self) -> int:
        """The first offset a reader can get (after retention and records deletion)."""
        return self.ledger.start_offset

    @property
    def end_offset(self) -> int:
        """The offset the next message will get (Kafka's log end offset); the last stored
        one is this minus 1."""
        return self.ledger.end_offset

    async def read(
        self, offset: int, *, max_entries: int = 100, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        """Entries from the one holding ``offset``, wherever they live; raises
        OffsetOutOfRangeError below :attr:`start_offset`."""
        return await self.ledger.read(offset, max_entries=max_entries, max_bytes=max_bytes)

    async def find_offset(self, timestamp: int) -> int:
        """The first offset whose publish time is at or after ``timestamp`` (ms)."""
        return await self.ledger.find_offset(timestamp)

    def message_id(self, entry: Entry, batch_index: int = -1) -> MessageId:
        """The Pulsar id of ``entry`` (or of message ``batch_index`` inside it)."""
        return self.ledger.message_id(entry, batch_index)

    def offset_of(self, mid: MessageId) -> int:
        """The offset ``mid`` names; ids of deleted segments map to the nearest position."""
        return self.ledger.offset_of(mid)

    def stored_offset(self, mid: MessageId) -> int | None:
        """The base offset of the stored entry ``mid`` names, or None when there is none."""
        return self.ledger.stored_offset(mid)

    def segment_first_offsets(self) -> dict[int, int]:
        """Each segment's id → its first offset."""
        return self.ledger.segment_first_offsets()

    def segments(self) -> list[SegmentView]:
        """The partition's segments, oldest first."""
        return self.ledger.segments()

    @property
    def local_start_offset(self) -> int:
        """The first offset still held by the log's own storage (local disk or storage
        nodes), past the segments whose only copy is now in the object store: Kafka's local
        log start offset. :attr:`start_offset` when no local copy was dropped."""
        start = self.start_offset
        for s in self.ledger.segments():
            if s.state is SegmentState.DELETED or s.end_offset <= start or s.is_empty:
                continue
            if s.local:
                return max(start, s.first_offset)
        return self.end_offset  # every retained record lives only in the object store

    @property
    def last_offloaded_offset(self) -> int:
        """The last offset with a verified copy in the object store (Kafka's highest offset
        in remote storage), or -1 when nothing is offloaded."""
        offloaded = [
            s.last_offset
            for s in self.ledger.segments()
            if s.state is SegmentState.OFFLOADED and not s.is_empty
        ]
        return max(offloaded, default=-1)

    async def replica_reads(self, segment_id: int) -> list[dict[str, Any]] | None:
        """Storage nodes serving the closed segment over Arrow Flight, or None."""
        return await self.ledger.replica_reads(segment_id)

    def on_append(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every append; returns the function that removes it."""
        return self.ledger.on_append(listener)

    @property
    def cursor_root(self) -> str:
        return f"/cursors/{self.name.path}"

    async def load_subscriptions(self) -> None:
        for sub in await self.meta.list_children(self.cursor_root):
            store = await CursorStore.load(self.meta, f"{self.cursor_root}/{sub}", 0)
            # Cursors written before the type was stored come back as Exclusive.
            sub_type = SubType[store.sub_type or SubType.EXCLUSIVE.name]
            self.subscriptions[sub] = Subscription(
                sub,
                sub_type,
                self.ledger,
                store,
                limits=self.unacked_limits,
                counters=self.counters,
                delayed=self.delayed,
                compaction=self.compaction,
                txns=self.txns,
            )

    # -- producers ----------------------------------------------------------------------

    async def add_producer(
        self, name: str | None, mode: AccessMode, *, on_queued: Callable[[], None] | None = None
    ) -> Producer:
        """Attach a producer under Pulsar's access-mode rules (nothing durable changes).

        Shared is refused (ProducerBusyError) while an exclusive producer holds or waits for
        the topic; Exclusive is refused (ProducerFencedError) while any producer holds it;
        ExclusiveWithFencing evicts every other producer; WaitForExclusive queues, first come
        first served, until the topic has no producer: ``on_queued`` is called when it has
        to wait. Cancelling a queued call leaves the queue (and the topic) as it was.
        """
        if self.write_failed:
            raise TopicFencedError(_WRITE_FAILED.format(self.name))
        if name and any(p.name == name for p in self.producers):
            raise ProducerBusyError(f"producer {name!r} is already connected to {self.name}")
        producer = Producer(self, name or self.new_producer_name(), mode, bool(name))
        if mode is AccessMode.WAIT_FOR_EXCLUSIVE and (self.producers or self._exclusive_waiters):
            return await self._queue_exclusive(producer, on_queued)
        self._check_access(mode)
        if mode is AccessMode.EXCLUSIVE_WITH_FENCING:
            for p in list(self.producers):
                self._fence(p)
        self.producers.append(producer)
        return producer

    def _check_access(self, mode: AccessMode) -> None:
        exclusive = next(
            (p for p in self.producers if p.access_mode is not AccessMode.SHARED), None
        )
        holder = f": {exclusive.name}" if exclusive else ""
        if mode is AccessMode.SHARED and (exclusive or self._exclusive_waiters):
            raise ProducerBusyError(
                f"topic {self.name} has an existing exclusive producer{holder}; "
                "wait for it to close or use an exclusive access mode"
            )
        if mode is AccessMode.EXCLUSIVE and (exclusive or self._exclusive_waiters):
            raise ProducerFencedError(
                f"topic {self.name} has an existing exclusive producer{holder}; "
                "use WaitForExclusive to wait for it"
            )
        if mode is AccessMode.EXCLUSIVE and self.producers:
            raise ProducerFencedError(
                f"topic {self.name} has existing shared producers; exclusive access was refused"
            )

    async def _queue_exclusive(
        self, producer: Producer, on_queued: Callable[[], None] | None
    ) -> Producer:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._exclusive_waiters.append((producer, turn))
        if on_queued is not None:
            on_queued()
        try:
            await turn
        except asyncio.CancelledError:
            if (producer, turn) in self._exclusive_waiters:
                self._exclusive_waiters.remove((producer, turn))
            else:  # it got the topic just as it was cancelled: hand it on
                self.remove_producer(producer)
            raise
        return producer

    def _fence(self, producer: Producer) -> None:
        """Evict ``producer``: it may publish nothing more, and its owner is told."""
        self.remove_producer(producer)
        if producer.on_fenced is not None:
            producer.on_fenced()

    def remove_producer(self, producer: Producer) -> None:
        """Detach ``producer``; the next WaitForExclusive producer gets a topic left empty."""
        if producer in self.producers:
            self.producers.remove(producer)
            producer.closed = True
        self._admit_waiter()

    def _admit_waiter(self) -> None:
        """Attach the next WaitForExclusive producer if the topic has none, unless a failed
        write fences the topic: then it waits until the publishes under way have ended (a
        producer attached then would have its SENDs refused, and stored once the fence
        lifts, ahead of the refused ones' resends)."""
        while not self.producers and self._exclusive_waiters and not self.write_failed:
            waiting, turn = self._exclusive_waiters.popleft()
            if not turn.done():  # done: cancelled, its task is about to leave the queue
                self.producers.append(waiting)
                turn.set_result(None)

    async def publish(
        self,
        producer: Producer,
        payload: bytes,
        *,
        count: int,
        sequence: tuple[int, int] | None,
        publish_time: int | None,
        event_time: int,
        fmt: int,
    ) -> PublishResult:
        """Store one entry (a producer batch); durable when this returns.

        ``sequence`` is the (first, highest) Pulsar sequence id the entry carries, or None
        for an entry with none (a Kafka batch): only a sequenced entry is ever judged a
        duplicate. With deduplication on, an entry whose sequence id is already stored is
        answered as a duplicate and not stored again; a failure leaves nothing stored and
        the same call may be retried. A fenced topic (being unloaded) refuses with
        TopicFencedError and stores nothing.
        """
        if self.fenced:
            raise TopicFencedError(
                f"topic {self.name} is moving to another broker; look it up again"
            )
        if self.write_failed:
            raise TopicFencedError(_WRITE_FAILED.format(self.name))
        if self.max_message_size is not None and len(payload) > self.max_message_size:
            raise MessageTooLargeError(
                f"an entry of {len(payload)} bytes exceeds topic {self.name}'s maxMessageSize "
                f"({self.max_message_size}): send smaller batches or raise the topic policy"
            )
        self._publishing += 1
        self._idle.clear()
        try:
            result = await self._publish(
                producer, payload, count, sequence, publish_time, event_time, fmt
            )
            if self.compaction is not None and result.entry is not None:
                self.compaction.published(len(payload))
            return result
        except StorageError as e:
            if not isinstance(e, InvalidEntryError):  # bad input: the store is fine
                self._writes_failed()
            raise
        finally:
            self._publishing -= 1
            if not self._publishing:
                if self.write_failed:
                    self.write_failed = False
                    self._admit_waiter()
                self._idle.set()

    def _writes_failed(self) -> None:
        """Fence publishing after a failed append until the publishes under way end, and
        tell every producer to go (see :attr:`write_failed`)."""
        if not self.write_failed:
            self.write_failed = True
            for producer in list(self.producers):
                self._fence(producer)

    async def _publish(
        self,
        producer: Producer,
        payload: bytes,
        count: int,
        sequence: tuple[int, int] | None,
        publish_time: int | None,
        event_time: int,
        fmt: int,
    ) -> PublishResult:
        started = time.perf_counter()
        dedup = self.dedup if sequence is not None else None
        if dedup is None or sequence is None:
            entry = await self.ledger.append(
                payload, count=count, publish_time=publish_time, event_time=event_time, fmt=fmt
            )
            producer.published += count
            self.counters.published(count, len(payload), time.perf_counter() - started)
            return PublishResult(entry)
        first, highest = sequence
        if not producer.renumbered(first, highest) and not await dedup.admit(producer.name, first):
            return PublishResult(None, duplicate=True)
        done = dedup.pushing(producer.name, first, highest)
        try:
            entry = await self.ledger.append(
                payload, count=count, publish_time=publish_time, event_time=event_time, fmt=fmt
            )
        except BaseException:
            dedup.failed(producer.name, first)
            raise
        finally:
            done.set_result(None)
        producer.published += count
        self.counters.published(count, len(payload), time.perf_counter() - started)
        if dedup.persisted_up_to(producer.name, highest, entry.next_offset):
            await dedup.snapshot()
        return PublishResult(entry)

    async def last_dispatchable(self) -> Entry | None:
        """The last entry a reader can get, or None: the last one, or while Kafka
        transactions are in the log, the last below the LSO that is not hidden (Pulsar's
        getLastDispatchablePosition)."""
        ledger = self.ledger
        if self.txns is not None and self.txns.used:
            return await self.txns.last_visible()
        if ledger.end_offset <= ledger.start_offset:
            return None
        found = await ledger.read(ledger.end_offset - 1, max_entries=1)
        return found[0] if found else None

    # -- subscriptions ------------------------------------------------------------------

    async def subscription(
        self, name: str, sub_type: SubType, *, durable: bool, start: int
    ) -> Subscription:
        """The subscription ``name``, created at offset ``start`` if it does not exist."""
        sub = self.subscriptions.get(name)
        if sub is not None:
            return sub
        store = None
        if durable:
            path = f"{self.cursor_root}/{name}"
            store = await CursorStore.load(self.meta, path, start, sub_type.name)
        sub = Subscription(
            name,
            sub_type,
            self.ledger,
            store,
            durable=durable,
            start=start,
            limits=self.unacked_limits,
            counters=self.counters,
            delayed=self.delayed,
            compaction=self.compaction,
            txns=self.txns,
        )
        self.subscriptions[name] = sub
        return sub

    async def unsubscribe(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is None:
            raise SubscriptionNotFoundError(f"subscription {name!r} of {self.name} does not exist")
        await sub.aclose()
        if sub.store is not None:
            await sub.store.delete()

    def set_delayed_delivery(self, active: bool, tick_ms: int) -> None:
        """Follow the namespace's delayedDelivery policy; turned off, held messages go now."""
        self.delayed.active, self.delayed.tick_ms = active, tick_ms
        if not active:
            for sub in self.subscriptions.values():
                sub.release_delayed()

    async def drop_if_unused(self, sub: Subscription) -> None:
        """Readers' (non-durable) subscriptions vanish with their last consumer."""
        if not sub.durable and not sub.consumers and self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            await sub.aclose()

    async def fence(self) -> None:
        """Stop taking writes: publishes are refused from now on; once the publishes
        already under way have ended (stored and answered, or failed) every client is told
        to go. In that order, a producer has every receipt of what was stored before it is
        closed, so it never sends a stored message again to the next owner (without
        deduplication that would store it twice). After it the ledger and the deduplication
        state change no more through this topic: the next owner may take them over."""
        self.fenced = True
        await self._idle.wait()
        self.disconnect_all()

    def disconnect_all(self) -> None:
        """Tell every producer and consumer to go (their clients look the topic up again):
        the topic is being unloaded from this broker."""
        for producer in list(self.producers):
            self._fence(producer)
        for sub in list(self.subscriptions.values()):
            sub.disconnect_all()

    async def aclose(self) -> None:
        for sub in list(self.subscriptions.values()):
            await sub.aclose()
        if self.dedup is not None:
            await self.dedup.snapshot()
        if self.txns is not None:
            await self.txns.flush()
