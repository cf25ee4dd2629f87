"""The values a subscription and its dispatcher share: subscription types, consumers as the
broker sees them, deliveries, and the caps on unacknowledged messages."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.core.entries import Entry
from magnetar.core.ids import MessageId


class SubType(enum.IntEnum):
    """Pulsar's wire values."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


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
