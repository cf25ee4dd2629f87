"""Non-persistent topics (``non-persistent://``), as Pulsar has them: messages live in memory
only, never touch the journal or a ledger, and go only to consumers connected when they are
published. A consumer without permits, or whose connection is not draining (back-pressure),
misses the message: it is dropped for that subscription and counted, never queued.

A non-persistent topic is separate from the persistent topic of the same name. It exists
while it has producers or consumers (nothing of it survives a restart); its subscriptions
are never durable and vanish with their last consumer. Acknowledgements are accepted and
ignored; seek and redelivery have nothing to act on. Message ids are (0, n), n counting the
topic's entries since it was created.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.broker import formats
from magnetar.broker.errors import (
    ConsumerBusyError,
    ProducerBusyError,
    SubscriptionNotFoundError,
)
from magnetar.broker.subscription import Consumer, Delivery, SubType
from magnetar.broker.topic import AccessMode, Producer, PublishResult
from magnetar.core.entries import Entry
from magnetar.core.ids import MessageId
from magnetar.core.names import TopicName

LEDGER_ID = 0  # the ledger id of every non-persistent message id


@dataclass(eq=False)
class NonPersistentSubscription:
    """Consumers of one subscription; a message goes to one of them, now or never."""

    name: str
    type: SubType
    consumers: list[Consumer] = field(default_factory=list)
    store: None = None  # never durable
    durable: bool = False
    delivered: int = 0
    dropped: int = 0  # messages no consumer of it could take when they were published
    _rr: int = 0

    def add_consumer(self, consumer: Consumer, sub_type: SubType) -> None:
        if self.consumers and sub_type != self.type:
            raise ConsumerBusyError(
                f"subscription {self.name!r} is {self.type.name}; it cannot take a "
                f"{sub_type.name} consumer while it has consumers"
            )
        if sub_type is SubType.EXCLUSIVE and self.consumers:
            raise ConsumerBusyError(
                f"exclusive subscription {self.name!r} already has a consumer; "
                "use Shared, Failover or Key_Shared to attach several"
            )
        self.type = sub_type
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits

    def kick(self) -> None:
        """Nothing waits to be dispatched: what was missed is gone."""

    async def settled(self) -> None:
        return None

    def dispatch(self, delivery: Delivery) -> bool:
        """Hand ``delivery`` to one consumer that can take it now; False: dropped."""
        consumer = self._pick(delivery.entry)
        if consumer is None:
            self.dropped += delivery.entry.count
            return False
        consumer.permits -= delivery.entry.count
        consumer.delivered += 1
        self.delivered += delivery.entry.count
        consumer.sink.deliver(consumer, [delivery])
        return True

    def _pick(self, entry: Entry) -> Consumer | None:
        if not self.consumers:
            return None
        if self.type is SubType.EXCLUSIVE:
            chosen: Consumer | None = self.consumers[0]
        elif self.type is SubType.FAILOVER:
            chosen = min(self.consumers, key=lambda c: (c.priority, c.name))
        elif self.type is SubType.KEY_SHARED:
            key = formats.key_of(entry.format, entry.payload) or b""
            chosen = self.consumers[zlib.crc32(key) % len(self.consumers)]
        else:
            n = len(self.consumers)
            for i in range(n):
                c = self.consumers[(self._rr + i) % n]
                if c.ready:
                    self._rr = (self._rr + i + 1) % n
                    return c
            return None
        return chosen if chosen is not None and chosen.ready else None


@dataclass(eq=False)
class NonPersistentTopic:
    """One non-persistent topic (or partition) of this broker."""

    name: TopicName
    new_producer_name: Callable[[], str] = field(default=lambda: "")  # the broker's names
    on_idle: Callable[[NonPersistentTopic], None] = field(default=lambda topic: None)
    producers: list[Producer] = field(default_factory=list)
    subscriptions: dict[str, NonPersistentSubscription] = field(default_factory=dict)
    dedup: None = None
    msgs_in: int = 0
    bytes_in: int = 0
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def idle(self) -> bool:
        return not self.producers and not any(s.consumers for s in self.subscriptions.values())

    async def add_producer(self, name: str | None, mode: AccessMode, **_: object) -> Producer:
        """Any number of producers (only Shared access: there is no log to fence)."""
        if name and any(p.name == name for p in self.producers):
            raise ProducerBusyError(f"producer {name!r} is already connected to {self.name}")
        producer = Producer(self, name or self.new_producer_name(), mode, bool(name))  # type: ignore[arg-type]
        self.producers.append(producer)
        return producer

    def remove_producer(self, producer: Producer) -> None:
        if producer in self.producers:
            self.producers.remove(producer)
            producer.closed = True
        if self.idle:
            self.on_idle(self)

    async def publish(
        self,
        producer: Producer,
        payload: bytes,
        *,
        count: int,
        publish_time: int | None,
        event_time: int,
        fmt: int,
        **_: object,
    ) -> PublishResult:
        """Hand the entry to each subscription's consumers now; nothing is stored."""
        n = next(self._ids)
        entry = Entry(n, count, publish_time or 0, event_time, fmt, payload, LEDGER_ID)
        delivery = Delivery(entry, self.message_id(entry), 0, None)
        for sub in list(self.subscriptions.values()):
            sub.dispatch(delivery)
        producer.published += count
        self.msgs_in += count
        self.bytes_in += len(payload)
        return PublishResult(entry)

    @staticmethod
    def message_id(entry: Entry) -> MessageId:
        return MessageId(LEDGER_ID, entry.base_offset)

    async def subscription(
        self, name: str, sub_type: SubType, **_: object
    ) -> NonPersistentSubscription:
        sub = self.subscriptions.get(name)
        if sub is None:
            sub = self.subscriptions[name] = NonPersistentSubscription(name, sub_type)
        return sub

    async def drop_if_unused(self, sub: NonPersistentSubscription) -> None:
        if not sub.consumers and self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        if self.idle:
            self.on_idle(self)

    async def unsubscribe(self, name: str) -> None:
        if self.subscriptions.pop(name, None) is None:
            raise SubscriptionNotFoundError(f"subscription {name!r} of {self.name} does not exist")

    def stats(self) -> dict[str, object]:
        """Pulsar's NonPersistentTopicStats, the fields that apply."""
        return {
            "msgInCounter": self.msgs_in,
            "bytesInCounter": self.bytes_in,
            "publishers": [{"producerName": p.name} for p in self.producers],
            "subscriptions": {
                n: {
                    "type": s.type.name.title().replace("_s", "_S"),
                    "msgOutCounter": s.delivered,
                    "msgDropRate": 0.0,
                    "msgDropCounter": s.dropped,  # Magnetar's own: dropped since created
                    "consumers": [{"consumerName": c.name} for c in s.consumers],
                }
                for n, s in self.subscriptions.items()
            },
        }
