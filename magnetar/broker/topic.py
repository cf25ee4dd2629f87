"""A persistent topic partition: its ledger, producers, subscriptions and deduplication."""

from __future__ import annotations

import asyncio
import enum
import itertools
from dataclasses import dataclass, field

from magnetar.broker.cursor import CursorStore
from magnetar.broker.dedup import Deduplication, Verdict
from magnetar.broker.errors import (
    ProducerBusyError,
    ProducerFencedError,
    SubscriptionNotFoundError,
)
from magnetar.broker.subscription import Subscription, SubType
from magnetar.core.names import TopicName
from magnetar.ledger import ManagedLedger
from magnetar.meta import MetadataStore
from magnetar.storage import Entry

_names = itertools.count()


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
    _exclusive_waiters: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def cursor_root(self) -> str:
        return f"/cursors/{self.name.path}"

    async def load_subscriptions(self) -> None:
        for sub in await self.meta.list_children(self.cursor_root):
            store = await CursorStore.load(self.meta, f"{self.cursor_root}/{sub}", 0)
            self.subscriptions[sub] = Subscription(sub, SubType.EXCLUSIVE, self.ledger, store)

    # -- producers ----------------------------------------------------------------------

    async def add_producer(self, name: str | None, mode: AccessMode) -> Producer:
        """Attach a producer; WaitForExclusive waits here until the topic is free."""
        if name and any(p.name == name for p in self.producers):
            raise ProducerBusyError(f"producer {name!r} is already connected to {self.name}")
        while True:
            exclusive = [p for p in self.producers if p.access_mode is not AccessMode.SHARED]
            if mode is AccessMode.SHARED and not exclusive:
                break
            if mode is not AccessMode.SHARED and not self.producers:
                break
            if mode is AccessMode.EXCLUSIVE_WITH_FENCING:
                for p in list(self.producers):
                    self.remove_producer(p)
                break
            if mode is not AccessMode.WAIT_FOR_EXCLUSIVE:
                error = ProducerFencedError if exclusive else ProducerBusyError
                raise error(
                    f"topic {self.name} has an exclusive producer; "
                    "use WaitForExclusive to wait for it"
                    if exclusive
                    else f"topic {self.name} has producers; exclusive access was refused"
                )
            waiter = asyncio.get_running_loop().create_future()
            self._exclusive_waiters.append(waiter)
            await waiter
        producer = Producer(self, name or f"standalone-{next(_names)}", mode, bool(name))
        self.producers.append(producer)
        return producer

    def remove_producer(self, producer: Producer) -> None:
        if producer in self.producers:
            self.producers.remove(producer)
            producer.closed = True
        waiters, self._exclusive_waiters = self._exclusive_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def publish(
        self,
        producer: Producer,
        payload: bytes,
        *,
        count: int,
        sequence_id: int,
        highest_sequence_id: int,
        publish_time: int | None,
        event_time: int,
        fmt: int,
    ) -> PublishResult:
        """Store one entry (a producer batch); durable when this returns.

        With deduplication on, an entry whose sequence id was already stored is answered
        as a duplicate and not stored again.
        """
        dedup = self.dedup
        highest = max(sequence_id, highest_sequence_id)
        if dedup is not None:
            verdict = dedup.check(producer.name, sequence_id)
            if verdict is Verdict.IN_FLIGHT:
                pending = dedup.in_flight.get(producer.name)
                if pending is not None:
                    await asyncio.shield(pending)
                return PublishResult(None, duplicate=True)
            if verdict is Verdict.DUPLICATE:
                return PublishResult(None, duplicate=True)
            dedup.pushing(producer.name, highest)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            dedup.in_flight[producer.name] = done
        try:
            entry = await self.ledger.append(
                payload, count=count, publish_time=publish_time, event_time=event_time, fmt=fmt
            )
        except BaseException:
            if dedup is not None:
                dedup.failed(producer.name)
                done.set_result(None)
            raise
        producer.published += count
        if dedup is not None:
            done.set_result(None)
            if dedup.persisted_up_to(producer.name, highest, entry.next_offset):
                await dedup.snapshot()
        return PublishResult(entry)

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
            store = await CursorStore.load(self.meta, f"{self.cursor_root}/{name}", start)
        sub = Subscription(name, sub_type, self.ledger, store, durable=durable, start=start)
        self.subscriptions[name] = sub
        return sub

    async def unsubscribe(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is None:
            raise SubscriptionNotFoundError(f"subscription {name!r} of {self.name} does not exist")
        await sub.aclose()
        if sub.store is not None:
            await sub.store.delete()

    async def drop_if_unused(self, sub: Subscription) -> None:
        """Readers' (non-durable) subscriptions vanish with their last consumer."""
        if not sub.durable and not sub.consumers and self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            await sub.aclose()

    async def aclose(self) -> None:
        for sub in list(self.subscriptions.values()):
            await sub.aclose()
        if self.dedup is not None:
            await self.dedup.snapshot(self.ledger.end_offset)
