"""What a connection remembers about each of its producers and consumers."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker import Consumer, Producer, Subscription, Topic


@dataclass(eq=False)
class ProducerHandle:
    producer: Producer
    topic: Topic
    partition: int


@dataclass(eq=False)
class ConsumerHandle:
    consumer: Consumer
    subscription: Subscription
    topic: Topic
    partition: int
