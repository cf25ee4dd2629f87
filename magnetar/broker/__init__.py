"""Tier 5: topics, producers and deduplication, subscriptions, dispatchers, cursors, schemas."""

from magnetar.broker.broker import Broker, BrokerSettings
from magnetar.broker.subscription import Consumer, ConsumerSink, Delivery, Subscription, SubType
from magnetar.broker.topic import AccessMode, Producer, PublishResult, Topic

__all__ = [
    "AccessMode",
    "Broker",
    "BrokerSettings",
    "Consumer",
    "ConsumerSink",
    "Delivery",
    "Producer",
    "PublishResult",
    "SubType",
    "Subscription",
    "Topic",
]
