"""Subscriptions: a cursor, the entries out on consumers, and a dispatcher that feeds them.

A subscription reads its topic from ``read_position`` forward and hands whole entries to
consumers that have permits (flow control, counted in messages). Entries handed out stay
*pending* on their consumer until acknowledged; a consumer that leaves, or asks for
redelivery (negative ack, ack timeout), puts its pending entries back in the replay set,
which is dispatched before new entries. Who gets an entry is the dispatcher's choice, one
class per type (:mod:`magnetar.broker.dispatchers`):

- EXCLUSIVE: the one consumer; FAILOVER: the active one (lowest priority level, then name);
  reading compacted, the topic's compacted view (:mod:`compaction`) below its horizon;
- SHARED: round robin over consumers with permits;
- KEY_SHARED: a consistent-hash ring over consumers by the entry's key, so one key always
  goes to one consumer while membership holds (head-of-line waits preserve key order).

Shared and Key_Shared subscriptions hold entries that ask for a later delivery time
(:mod:`delays`) and put them in the replay set when they are due.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from magnetar.broker import formats
from magnetar.broker.compaction import TopicCompaction
from magnetar.broker.consumer import Consumer, ConsumerSink, Delivery, SubType, UnackedLimits
from magnetar.broker.counters import TopicCounters
from magnetar.broker.cursor import Cursor, CursorStore
from magnetar.broker.damage import DamageGuard
from magnetar.broker.delays import DelayedDeliveryPolicy, DelayIndex
from magnetar.broker.dispatchers import READ_BATCH, Dispatcher, dispatcher_for
from magnetar.broker.errors import ConsumerBusyError
from magnetar.broker.transactions import TransactionIndex
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.entries import Entry
from magnetar.ledger import ManagedLedger, OffsetOutOfRangeError

# The values a subscription shares with its dispatcher live in :mod:`consumer`; importers
# of this module keep finding them here.
__all__ = ["Consumer", "ConsumerSink", "Delivery", "SubType", "Subscription", "UnackedLimits"]

log = logging.getLogger(__name__)
READ_MAX_BYTES = 4 << 20  # what one read of new entries brings at most (the ledger's default)
DEFAULT_LIMITS = UnackedLimits()


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
        limits: UnackedLimits = DEFAULT_LIMITS,
        counters: TopicCounters | None = None,
        delayed: DelayedDeliveryPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
        compaction: TopicCompaction | None = None,
        txns: TransactionIndex | None = None,
    ) -> None:
        self.name = name
        self.dispatcher: Dispatcher = dispatcher_for(self, sub_type)
        self.ledger = ledger
        self.durable = durable
        self.store = store
        self.cursor = store.cursor if store else Cursor(start)
        self.read_position = self.cursor.first_unacked(self.cursor.mark_delete)
        self.pending: dict[int, tuple[Consumer, int]] = {}  # base → (consumer, count), out
        self.replay: set[int] = set()  # base offsets waiting to go (again), before new ones
        self._redeliveries: dict[int, int] = defaultdict(int)
        self._counts: dict[int, int] = {}  # base → messages, of every unsettled delivered entry
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
        self.txns = txns  # the topic's Kafka transactions: dispatch stops at the LSO
        self._remove_txn_listener = txns.on_change(self.kick) if txns is not None else None

    # -- membership ---------------------------------------------------------------------

    @property
    def type(self) -> SubType:
        return self.dispatcher.sub_type

    @property
    def consumers(self) -> list[Consumer]:
        """The consumers attached, in the order they joined (the dispatcher's list)."""
        return self.dispatcher.consumers

    def add_consumer(self, consumer: Consumer, sub_type: SubType) -> None:
        if sub_type != self.type and self.consumers:
            raise ConsumerBusyError(
                f"subscription {self.name!r} is {self.type.name}; it cannot take a "
                f"{sub_type.name} consumer while it has consumers"
            )
        if sub_type != self.type:
            if self.store is not None:
                self.store.sub_type = sub_type.name  # a restart brings it back as this type
                self.store.changed()
            self.dispatcher = dispatcher_for(self, sub_type)  # none attached: nothing lost
        if not self.dispatcher.delays_delivery:
            self.release_delayed()  # Exclusive and Failover do not delay
        self.dispatcher.add_consumer(consumer)
        self.kick()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        for base in list(consumer.pending):
            self.pending.pop(base, None)
            self.replay.add(base)
        consumer.pending.clear()
        self._count_unacked(consumer, -consumer.unacked)
        self.dispatcher.remove_consumer(consumer)
        self.kick()

    def active_consumer(self) -> Consumer | None:
        return self.dispatcher.active_consumer()

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
        self._settle({b for b in self.pending if b <= upto} | {b for b in self.replay if b <= upto})

    def _settle(self, bases: set[int]) -> None:
        for base in bases:
            owner = self.pending.get(base)
            count = self._counts.get(base, 1)
            if self.cursor.acked_count(base, base + count) >= count:
                if owner:
                    owner[0].pending.discard(base)
                    owner[0].acked += 1
                    del self.pending[base]
                    self._count_unacked(owner[0], -owner[1])
                self.replay.discard(base)
                self._redeliveries.pop(base, None)
                self._counts.pop(base, None)
        if self.store is not None:
            self.store.changed()
        self.dispatcher.settled()

    def redeliver(self, consumer: Consumer, bases: list[int] | None) -> None:
        """Put ``consumer``'s pending entries (all, or those listed) back for redelivery."""
        chosen = (
            list(consumer.pending) if bases is None else [b for b in bases if b in consumer.pending]
        )
        for base in chosen:
            consumer.pending.discard(base)
            owner = self.pending.pop(base, None)
            if owner is not None:
                self._count_unacked(consumer, -owner[1])
            self.replay.add(base)
            self._redeliveries[base] += 1
        if chosen:
            self.kick()

    async def seek(self, offset: int) -> None:
        """Move the cursor to ``offset``: everything before acknowledged, nothing after.

        The new position applies at once (a dispatch already under way is discarded) and is
        durable when this returns; :meth:`settled` waits for that.
        """
        self.cursor.reset(offset)
        self.pending.clear()
        self.replay.clear()
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

    def hold(self, entry: Entry) -> bool:
        """Whether ``entry`` must wait for its deliver-at time (then it is in the index)."""
        if entry.base_offset in self.delays:
            return True
        if not self.dispatcher.delays_delivery or not self.delayed.active:
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
            self._delay_timer = loop.call_later(delay, self.release_due)

    def release_due(self) -> None:
        """Put the held entries that are due by the clock in the replay set (the timer calls
        this at the earliest deliver-at time)."""
        self._delay_timer = None
        due = self.delays.pop_due(self.clock.now_ms())
        self.replay.update(due)
        self._arm_delay_timer()
        if due:
            self.kick()

    def release_delayed(self) -> None:
        """Deliver every held entry now (the policy was turned off, or the type changed)."""
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
        if self.delays:
            self.replay.update(self.delays.pop_all())
            if self.consumers:
                self.kick()

    # -- dispatch -----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """Bumped by each seek: a read started before a change of it is stale."""
        return self._epoch

    def kick(self) -> None:
        """Ask the dispatcher to run (coalesced: one run at a time)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        else:
            self._again = True

    async def dispatched(self) -> None:
        """Return once no dispatch run is under way (the effect of every kick so far is
        done: what could be delivered was)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            try:
                await self.dispatcher.dispatch()
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
        self.replay = {b for b in self.replay if b >= start}
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
            cap = self.limits.per_subscription if self.dispatcher.caps_unacked else 0
            self.blocked_on_unacked |= 0 < cap <= self.unacked
            return
        woken = False
        if consumer.blocked_on_unacked and consumer.unacked <= consumer.max_unacked // 2:
            consumer.blocked_on_unacked, woken = False, True
        if self.blocked_on_unacked and self.unacked <= self.limits.per_subscription // 2:
            self.blocked_on_unacked, woken = False, True
        if woken:
            self.kick()

    @property
    def readable_end(self) -> int:
        """Where dispatch of new entries stops: the end, or the last stable offset while a
        Kafka transaction is open (:mod:`transactions`)."""
        end = self.ledger.end_offset
        return self.txns.last_stable(end) if self.txns is not None else end

    async def read_new(self, budget: int) -> list[Entry]:
        """New entries from the read position, below the last stable offset. Markers and
        aborted transactions' entries among them are acknowledged here, so dispatch passes
        them over (as settled) and consumers never get them."""
        entries = await self.damage.read(self, budget)
        if self.txns is None or not self.txns.used:
            return entries
        stop = self.readable_end
        entries = [e for e in entries if e.base_offset < stop]
        hidden = [e for e in entries if self.txns.hides(e)]
        for entry in hidden:
            self.cursor.ack_range(entry.base_offset, entry.next_offset)
        if hidden and self.store is not None:
            self.store.changed()
        return entries

    async def read_replay(self) -> list[Entry]:
        """The entries of the replay set, oldest first, one read batch at most; those that
        retention deleted meanwhile leave the set."""
        out, size = [], 0
        for base in sorted(self.replay)[:READ_BATCH]:
            if size >= READ_MAX_BYTES:  # as a read of new entries: one round stays small
                break
            got = await self.ledger.read(base, max_entries=1)
            if got and got[0].base_offset == base:
                out.append(got[0])
                size += len(got[0].payload)
            else:
                self.replay.discard(base)  # trimmed away by retention: nothing to redeliver
                self._counts.pop(base, None)
        return out

    def send(self, entries: list[Entry], *, replay: bool) -> int:
        """Hand ``entries`` to the consumers the dispatcher picks, in order, until one has no
        taker; returns how many were handled (sent, or passed over: settled, out already,
        held for later). New entries (not ``replay``) move the read position."""
        batches: dict[int, tuple[Consumer, list[Delivery]]] = {}
        sent = messages = size = 0
        for entry in entries:
            base, count = entry.base_offset, entry.count
            acked = self.cursor.acked_count(base, base + count)
            if acked >= count or (not replay and (base in self.pending or self.hold(entry))):
                self.replay.discard(base)
                sent += 1
                if not replay:
                    self.read_position = entry.next_offset
                continue
            consumer = None if self.blocked_on_unacked else self.dispatcher.pick(entry)
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
            self.pending[base] = (consumer, count)
            self._count_unacked(consumer, count)
            self.replay.discard(base)
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

    async def aclose(self) -> None:
        self._remove_listener()
        if self._remove_txn_listener is not None:
            self._remove_txn_listener()
        if self._delay_timer is not None:
            self._delay_timer.cancel()
        if self._task is not None:
            self._task.cancel()
        if self.store is not None:
            await self.store.flush()
