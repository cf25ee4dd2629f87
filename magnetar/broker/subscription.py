"""Subscriptions, their consumers and the dispatcher that feeds them.

A subscription reads its topic from ``read_position`` forward and hands whole entries to
consumers that have permits (flow control, counted in messages). Entries handed out stay
*pending* on their consumer until acknowledged; a consumer that leaves, or asks for
redelivery (negative ack, ack timeout), puts its pending entries back in the replay set,
which is dispatched before new entries. Who gets an entry depends on the type:

- EXCLUSIVE: the one consumer; FAILOVER: the active one (lowest priority level, then name);
- SHARED: round robin over consumers with permits;
- KEY_SHARED: a consistent-hash ring over consumers by the entry's key, so one key always
  goes to one consumer while membership holds (head-of-line waits preserve key order).

Shared and Key_Shared subscriptions hold entries that ask for a later delivery time
(:mod:`delays`) and put them in the replay set when they are due. An Exclusive or Failover
subscription that reads compacted reads the topic's compacted view (:mod:`compaction`) below
its horizon and the topic after it.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import logging
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.broker import formats, key_shared
from magnetar.broker.compaction import CompactedView, TopicCompaction
from magnetar.broker.counters import TopicCounters
from magnetar.broker.cursor import Cursor, CursorStore
from magnetar.broker.damage import DamageGuard
from magnetar.broker.delays import DelayedDeliveryPolicy, DelayIndex
from magnetar.broker.errors import ConsumerBusyError
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.entries import Entry
from magnetar.core.ids import MessageId
from magnetar.ledger import ManagedLedger, OffsetOutOfRangeError

log = logging.getLogger(__name__)
READ_BATCH = 500
READ_MAX_BYTES = 4 << 20  # what one read of new entries brings at most (the ledger's default)
RING_POINTS = 64
LOOK_AHEAD = READ_BATCH  # Key_Shared: entries parked while their consumer has no permits


class SubType(enum.IntEnum):
    """Pulsar's wire values."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


_CAPPED = (SubType.SHARED, SubType.KEY_SHARED)  # the types Pulsar caps unacked messages of


@dataclass(slots=True)
class Delivery:
    entry: Entry
    message_id: MessageId
    redelivery_count: int
    acked_indexes: list[int] | None  # batch indexes already acknowledged, if any


class ConsumerSink(Protocol):
    """What a protocol handler gives the broker to reach one consumer."""

    def deliver(self, consumer: Consumer, deliveries: list[Delivery]) -> None: ...

    def closed_by_broker(self, consumer: Consumer) -> None: ...


@dataclass(frozen=True, slots=True)
class UnackedLimits:
    """Pulsar's caps on messages delivered and not yet acknowledged, for Shared and Key_Shared
    subscriptions (``maxUnackedMessagesPerConsumer`` / ``...PerSubscription``; 0: no cap). A
    consumer or subscription at its cap gets nothing more until acks bring it to half."""

    per_consumer: int = 50_000
    per_subscription: int = 200_000


@dataclass(eq=False)
class Consumer:
    consumer_id: int
    name: str
    sink: ConsumerSink
    priority: int = 0
    permits: int = 0
    pending: set[int] = field(default_factory=set)  # base offsets of unacked entries
    delivered: int = 0
    acked: int = 0
    unacked: int = 0  # messages of the entries in ``pending``
    max_unacked: int = 0  # 0: no cap (Exclusive, Failover)
    blocked_on_unacked: bool = False  # Pulsar's blockedConsumerOnUnackedMsgs
    paused: bool = False  # its connection is not draining: the sink sets and clears this

    @property
    def ready(self) -> bool:
        """Dispatch may hand this consumer an entry now."""
        return self.permits > 0 and not self.paused and not self.blocked_on_unacked


class Subscription:
    """One named subscription of one topic partition."""

    def __init__(
        self,
        name: str,
        sub_type: SubType,
        ledger: ManagedLedger,
        store: CursorStore | None,
        *,
        durable: bool = True,
        start: int = 0,
        limits: UnackedLimits = UnackedLimits(),
        counters: TopicCounters | None = None,
        delayed: DelayedDeliveryPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
        compaction: TopicCompaction | None = None,
    ) -> None:
        self.name = name
        self.type = sub_type
        self.ledger = ledger
        self.durable = durable
        self.store = store
        self.cursor = store.cursor if store else Cursor(start)
        self.read_position = self.cursor.first_unacked(self.cursor.mark_delete)
        self.consumers: list[Consumer] = []
        self._pending: dict[int, tuple[Consumer, int]] = {}  # base → (consumer, count)
        self._replay: set[int] = set()
        self._redeliveries: dict[int, int] = defaultdict(int)
        self._counts: dict[int, int] = {}  # base → messages, of every unsettled delivered entry
        self._rr = 0
        self._ring: list[tuple[int, Consumer]] = []
        self._key_hashes: dict[int, int] = {}  # Key_Shared: base → key hash, of pending entries
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._epoch = 0  # bumped by seek: reads started before it are stale
        self._seeking: asyncio.Future[None] | None = None
        self._remove_listener = ledger.on_append(self.kick)
        self.skipped_by_retention = 0  # messages deleted before this subscription read them
        self.damage = DamageGuard()  # skips or waits at damaged entries (see damage.py)
        self.limits = limits
        self.unacked = 0  # messages delivered to any consumer and not settled
        self.blocked_on_unacked = False  # Pulsar's blockedDispatcherOnUnackedMsgs
        self.counters = counters if counters is not None else TopicCounters()  # the topic's
        self.msgs_out = self.bytes_out = 0  # delivered by this subscription, since loaded
        self.delayed = delayed if delayed is not None else DelayedDeliveryPolicy()  # the topic's
        self.clock = clock
        self.delays = DelayIndex()  # entries held until their deliver-at time
        self._delay_timer: asyncio.TimerHandle | None = None
        self.compaction = compaction  # the topic's compacted view, if it may have one
        self.read_compacted = False  # set by a consumer that asks for it (Exclusive, Failover)

    # -- membership ---------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, sub_type: SubType) -> None:
        if sub_type != self.type and self.consumers:
            raise ConsumerBusyError(
                f"subscription {self.name!r} is {self.type.name}; it cannot take a "
                f"{sub_type.name} consumer while it has consumers"
            )
        if sub_type != self.type and self.store is not None:
            self.store.sub_type = sub_type.name  # a restart brings it back as this type
            self.store.changed()
        self.type = sub_type
        if sub_type not in _CAPPED:
            self.release_delayed()  # Exclusive and Failover do not delay
        if sub_type is SubType.EXCLUSIVE and self.consumers:
            raise ConsumerBusyError(
                f"exclusive subscription {self.name!r} already has a consumer; "
                "use Shared, Failover or Key_Shared to attach several"
            )
        if sub_type in _CAPPED:
            consumer.max_unacked = self.limits.per_consumer
        self.consumers.append(consumer)
        self._rebuild_ring()
        self.kick()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        for base in list(consumer.pending):
            self._pending.pop(base, None)
            self._replay.add(base)
        consumer.pending.clear()
        self._count_unacked(consumer, -consumer.unacked)
        self._rebuild_ring()
        self.kick()

    def active_consumer(self) -> Consumer | None:
        if not self.consumers:
            return None
        if self.type is SubType.FAILOVER:
            return min(self.consumers, key=lambda c: (c.priority, c.name))
        return self.consumers[0]

    def _rebuild_ring(self) -> None:
        ring = []
        for c in self.consumers:
            for i in range(RING_POINTS):
                ring.append((zlib.crc32(f"{c.name}#{c.consumer_id}#{i}".encode()), c))
        self._ring = sorted(ring, key=lambda p: p[0])

    # -- flow and acknowledgement -------------------------------------------------------

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.kick()

    def ack(self, acks: dict[int, list[int]]) -> None:
        """Individual acks: entry base offset → the acknowledged offsets inside it (batch
        index acks are acks of single offsets: each message has its own)."""
        self.cursor.ack(o for offsets in acks.values() for o in offsets)
        self._settle(set(acks))

    def entry_count(self, base: int) -> int | None:
        """Messages in the entry at ``base``, if it was delivered and is not settled yet.

        None otherwise (e.g. an ack that arrives after a broker restart): the caller reads the
        entry and tells :meth:`remember_count` before acknowledging inside it.
        """
        return self._counts.get(base)

    def remember_count(self, base: int, count: int) -> None:
        self._counts[base] = count

    def ack_cumulative(self, upto: int) -> None:
        """Acknowledge every offset <= ``upto``."""
        self.cursor.ack_cumulative(upto)
        self._settle(
            {b for b in self._pending if b <= upto} | {b for b in self._replay if b <= upto}
        )

    def _settle(self, bases: set[int]) -> None:
        for base in bases:
            owner = self._pending.get(base)
            count = self._counts.get(base, 1)
            if self.cursor.acked_count(base, base + count) >= count:
                if owner:
                    owner[0].pending.discard(base)
                    owner[0].acked += 1
                    del self._pending[base]
                    self._count_unacked(owner[0], -owner[1])
                self._replay.discard(base)
                self._redeliveries.pop(base, None)
                self._counts.pop(base, None)
        if self.store is not None:
            self.store.changed()
        if self.type is SubType.KEY_SHARED:
            self.kick()

    def redeliver(self, consumer: Consumer, bases: list[int] | None) -> None:
        """Put ``consumer``'s pending entries (all, or those listed) back for redelivery."""
        chosen = (
            list(consumer.pending) if bases is None else [b for b in bases if b in consumer.pending]
        )
        for base in chosen:
            consumer.pending.discard(base)
            owner = self._pending.pop(base, None)
            if owner is not None:
                self._count_unacked(consumer, -owner[1])
            self._replay.add(base)
            self._redeliveries[base] += 1
        if chosen:
            self.kick()

    async def seek(self, offset: int) -> None:
        """Move the cursor to ``offset``: everything before acknowledged, nothing after.

        The new position applies at once (a dispatch already under way is discarded) and is
        durable when this returns; :meth:`settled` waits for that.
        """
        self.cursor.reset(offset)
        self._pending.clear()
        self._replay.clear()
        self._redeliveries.clear()
        self._counts.clear()
        self.delays.clear()
        self.read_position = offset
        self._epoch += 1
        for c in self.consumers:
            c.pending.clear()
            c.unacked, c.blocked_on_unacked = 0, False
        self.unacked, self.blocked_on_unacked = 0, False
        if self.store is None:
            return
        done = asyncio.get_running_loop().create_future()
        self._seeking = done
        try:
            await self.store.flush()
        finally:
            done.set_result(None)
            if self._seeking is done:
                self._seeking = None

    def disconnect_all(self) -> None:
        """Close every consumer (their clients subscribe again and start at the cursor)."""
        for consumer in list(self.consumers):
            self.remove_consumer(consumer)
            consumer.sink.closed_by_broker(consumer)

    async def reset(self, offset: int) -> None:
        """Seek as Pulsar does: close the consumers first, then move the cursor, so no
        consumer is handed messages from the old position after the reset; durable on return."""
        self.disconnect_all()
        await self.seek(offset)

    async def settled(self) -> None:
        """Return once no seek is being persisted."""
        while self._seeking is not None:
            await asyncio.shield(self._seeking)

    @property
    def backlog(self) -> int:
        end = self.ledger.end_offset
        md = self.cursor.mark_delete
        return max(0, end - md - self.cursor.acked_count(md, end))

    # -- delayed delivery ---------------------------------------------------------------

    def _hold(self, entry: Entry) -> bool:
        """Whether ``entry`` must wait for its deliver-at time (then it is in the index)."""
        if entry.base_offset in self.delays:
            return True
        if self.type not in _CAPPED or not self.delayed.active:
            return False
        at = formats.deliver_at_of(entry.format, entry.payload)
        if at is None or at <= self.clock.now_ms():
            return False
        self.delays.hold(entry.base_offset, at)
        self._arm_delay_timer()
        return True

    def _arm_delay_timer(self) -> None:
        at = self.delays.next_time()
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
        if at is not None:
            delay = max(0.0, (at - self.clock.now_ms()) / 1000)
            loop = asyncio.get_running_loop()
            self._delay_timer = loop.call_later(delay, self._release_due)

    def _release_due(self) -> None:
        self._delay_timer = None
        due = self.delays.pop_due(self.clock.now_ms())
        self._replay.update(due)
        self._arm_delay_timer()
        if due:
            self.kick()

    def release_delayed(self) -> None:
        """Deliver every held entry now (the policy was turned off, or the type changed)."""
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
        if self.delays:
            self._replay.update(self.delays.pop_all())
            if self.consumers:
                self.kick()

    # -- dispatch -----------------------------------------------------------------------

    def kick(self) -> None:
        """Ask the dispatcher to run (coalesced: one run at a time)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        else:
            self._again = True

    async def _run(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            try:
                await self._dispatch()
            except OffsetOutOfRangeError:
                if not self._skip_trimmed():
                    raise
                self._again = True  # moved to the first retained offset: go on from there
            except Exception:
                log.exception(
                    "dispatch failed for subscription %s of %s", self.name, self.ledger.name
                )
                return

    def _skip_trimmed(self) -> bool:
        """Retention deleted messages this subscription had not reached: move past them, as
        Pulsar moves cursors past deleted ledgers, and count them. False if nothing moved."""
        start = self.ledger.start_offset
        if self.read_position >= start and self.cursor.mark_delete >= start:
            return False
        lost = (
            start
            - self.cursor.mark_delete
            - self.cursor.acked_count(self.cursor.mark_delete, start)
        )
        self.skipped_by_retention += max(lost, 0)
        log.warning(
            "subscription %s of %s skips %d messages deleted by retention; it resumes at %d",
            self.name,
            self.ledger.name,
            lost,
            start,
        )
        self.read_position = max(self.read_position, start)
        self._replay = {b for b in self._replay if b >= start}
        self.ack_cumulative(start - 1)
        return True

    def _count_unacked(self, consumer: Consumer, delta: int) -> None:
        """Add ``delta`` messages to the unacked counts and block at the caps; unblock (and
        dispatch again) at half the cap, as Pulsar does, not at every single ack."""
        consumer.unacked += delta
        self.unacked += delta
        if delta > 0:
            cap = consumer.max_unacked
            consumer.blocked_on_unacked |= 0 < cap <= consumer.unacked
            cap = self.limits.per_subscription if self.type in _CAPPED else 0
            self.blocked_on_unacked |= 0 < cap <= self.unacked
            return
        woken = False
        if consumer.blocked_on_unacked and consumer.unacked <= consumer.max_unacked // 2:
            consumer.blocked_on_unacked, woken = False, True
        if self.blocked_on_unacked and self.unacked <= self.limits.per_subscription // 2:
            self.blocked_on_unacked, woken = False, True
        if woken:
            self.kick()

    async def _dispatch(self) -> None:
        if self.type is SubType.KEY_SHARED:
            await self._dispatch_by_key()
            return
        while not self.blocked_on_unacked and any(c.ready for c in self.consumers):
            epoch = self._epoch
            if self._replay:
                entries = await self._read_replay()
                if epoch != self._epoch:
                    continue
                if not entries:
                    continue
                if not self._send(entries, replay=True):
                    return
            elif (view := self._compacted_view()) is not None:
                budget = max(1, min(READ_BATCH, sum(max(c.permits, 0) for c in self.consumers)))
                entries = await self._read_compacted(view, budget)
                if epoch != self._epoch:
                    continue
                if entries and self._send(entries, replay=False) == 0:
                    return
            elif self.read_position < self.ledger.end_offset:
                budget = max(1, min(READ_BATCH, sum(max(c.permits, 0) for c in self.consumers)))
                entries = await self.damage.read(self, budget)
                if epoch != self._epoch:
                    continue
                if not entries:
                    return
                sent = self._send(entries, replay=False)
                if sent == 0:
                    return
            else:
                return

    def _compacted_view(self) -> CompactedView | None:
        """The compacted view to read now: reading compacted and below its horizon."""
        if not self.read_compacted or self.compaction is None:
            return None
        view = self.compaction.view
        return view if view is not None and self.read_position < view.horizon else None

    async def _read_compacted(self, view: CompactedView, budget: int) -> list[Entry]:
        """The next entries of the compacted view; what compaction left out between and
        inside them is acknowledged as passed, as a reader of the view never gets it. At the
        end of the view the read position moves to the horizon."""
        records = await view.read(self.read_position, budget)
        position = self.read_position
        for record in records:
            entry = record.entry
            if entry.base_offset > position:
                self.cursor.ack_range(position, entry.base_offset)
            self.cursor.ack(entry.base_offset + i for i in record.dropped)
            position = max(position, entry.next_offset)
        if not records:
            self.cursor.ack_range(position, view.horizon)
            self.read_position = max(self.read_position, view.horizon)
        if self.store is not None:
            self.store.changed()
        return [r.entry for r in records]

    async def _read_replay(self) -> list[Entry]:
        out, size = [], 0
        for base in sorted(self._replay)[:READ_BATCH]:
            if size >= READ_MAX_BYTES:  # as a read of new entries: one round stays small
                break
            got = await self.ledger.read(base, max_entries=1)
            if got and got[0].base_offset == base:
                out.append(got[0])
                size += len(got[0].payload)
            else:
                self._replay.discard(base)  # trimmed away by retention: nothing to redeliver
                self._counts.pop(base, None)
        return out

    async def _dispatch_by_key(self) -> None:
        """Key_Shared passes: waiting entries first, then new ones; a consumer without
        permits makes only its own keys wait (see :mod:`key_shared`), never the others."""
        while not self.blocked_on_unacked and any(c.ready for c in self.consumers):
            epoch = self._epoch
            replayed = await self._read_replay() if self._replay else []
            fresh: list[Entry] = []
            # New entries only while every waiting one was looked at (their keys hold back).
            if len(self._replay) < LOOK_AHEAD and self.read_position < self.ledger.end_offset:
                budget = max(1, min(READ_BATCH, sum(max(c.permits, 0) for c in self.consumers)))
                fresh = await self.damage.read(self, budget)
            if epoch != self._epoch:
                continue
            if not self._send_by_key(replayed, fresh):
                return

    def _send_by_key(self, replayed: list[Entry], fresh: list[Entry]) -> bool:
        """Deliver what may go now, park what must wait; False when nothing moved."""
        draining: dict[int, set[Consumer]] = defaultdict(set)
        for base, (consumer, _) in self._pending.items():
            if (h := self._key_hashes.get(base)) is not None:
                draining[h].add(consumer)
        chosen = key_shared.select(
            replayed,
            fresh,
            owner_of=self._ring_owner,
            room={c: c.permits if c.ready else 0 for c in self.consumers},  # paused, capped: 0
            draining=draining,
            look_ahead=LOOK_AHEAD - len(self._replay),
            settled=lambda e: self._settled_or_pending(e) or self._hold(e),  # held: passed over
        )
        self._key_hashes.update((e.base_offset, h) for e, h in chosen.deliver)
        sent = self._send([e for e, _ in chosen.deliver], replay=True)
        for entry, _ in chosen.deliver:  # refused after all (a cap): it waits with the rest
            if not self._settled_or_pending(entry):
                self._replay.add(entry.base_offset)
        self._replay.update(chosen.park)
        moved = chosen.read_to is not None and chosen.read_to > self.read_position
        self.read_position = max(self.read_position, chosen.read_to or 0)
        if len(self._key_hashes) > 2 * len(self._pending) + 1024:  # drop settled ones
            known = self._key_hashes
            self._key_hashes = {b: known[b] for b in self._pending if b in known}
        return bool(sent or chosen.park or moved)

    def _ring_owner(self, h: int) -> Consumer:
        i = bisect.bisect_left(self._ring, h, key=lambda p: p[0]) % len(self._ring)
        return self._ring[i][1]

    def _settled_or_pending(self, entry: Entry) -> bool:
        base, count = entry.base_offset, entry.count
        return base in self._pending or self.cursor.acked_count(base, base + count) >= count

    def _send(self, entries: list[Entry], *, replay: bool) -> int:
        batches: dict[int, tuple[Consumer, list[Delivery]]] = {}
        sent = messages = size = 0
        for entry in entries:
            base, count = entry.base_offset, entry.count
            acked = self.cursor.acked_count(base, base + count)
            if acked >= count or (not replay and (base in self._pending or self._hold(entry))):
                self._replay.discard(base)
                sent += 1
                if not replay:
                    self.read_position = entry.next_offset
                continue
            consumer = None if self.blocked_on_unacked else self._pick(entry)
            if consumer is None:
                break
            indexes = None
            if acked:
                indexes = [i for i in range(count) if self.cursor.is_acked(base + i)]
            delivery = Delivery(
                entry, self.ledger.message_id(entry), self._redeliveries.get(base, 0), indexes
            )
            batches.setdefault(id(consumer), (consumer, []))[1].append(delivery)
            consumer.permits -= count
            consumer.pending.add(base)
            self._counts[base] = count
            consumer.delivered += 1
            self._pending[base] = (consumer, count)
            self._count_unacked(consumer, count)
            self._replay.discard(base)
            sent += 1
            messages += count - acked
            size += len(entry.payload)
            if not replay:
                self.read_position = entry.next_offset
        for consumer, deliveries in batches.values():
            consumer.sink.deliver(consumer, deliveries)
        self.msgs_out += messages
        self.bytes_out += size
        self.counters.delivered(messages, size)
        return sent

    def _pick(self, entry: Entry) -> Consumer | None:
        if self.type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            active = self.active_consumer()
            return active if active is not None and active.ready else None
        if self.type is SubType.SHARED:
            n = len(self.consumers)
            for i in range(n):
                c = self.consumers[(self._rr + i) % n]
                if c.ready:
                    self._rr = (self._rr + i + 1) % n
                    return c
            return None
        key = formats.key_of(entry.format, entry.payload) or b""
        h = zlib.crc32(key)
        i = bisect.bisect_left(self._ring, h, key=lambda p: p[0]) % len(self._ring)
        owner = self._ring[i][1]
        return owner if owner.ready else None

    async def aclose(self) -> None:
        self._remove_listener()
        if self._delay_timer is not None:
            self._delay_timer.cancel()
        if self._task is not None:
            self._task.cancel()
        if self.store is not None:
            await self.store.flush()
