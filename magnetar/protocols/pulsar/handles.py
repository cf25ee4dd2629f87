"""What a connection remembers about each of its producers and consumers."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker import Consumer, Producer, Subscription, Topic
from magnetar.broker.non_persistent import NonPersistentSubscription, NonPersistentTopic


@dataclass(eq=False)
class ProducerHandle:
    producer: Producer
    topic: Topic | NonPersistentTopic
    partition: int


@dataclass(eq=False)
class ConsumerHandle:
    consumer: Consumer
    subscription: Subscription
    topic: Topic
    partition: int


@dataclass(eq=False)
class TransientConsumerHandle:
    """A consumer of a non-persistent topic: no cursor, no ledger behind it."""

    consumer: Consumer
    subscription: NonPersistentSubscription
    topic: NonPersistentTopic
    partition: int


AnyConsumerHandle = ConsumerHandle | TransientConsumerHandle
