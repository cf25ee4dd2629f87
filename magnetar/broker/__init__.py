"""Tier 5: topics, producers and deduplication, subscriptions, dispatchers, cursors, schemas."""

from magnetar.broker.broker import Broker, BrokerSettings
from magnetar.broker.subscription import Consumer, ConsumerSink, Delivery, Subscription, SubType
from magnetar.broker.topic import AccessMode, Producer, PublishResult, Topic

# Typed values of the ledger beneath, re-exported for the areas above the broker (they never
# import magnetar.ledger: tests/test_tiers.py): what Topic.segments() returns.
from magnetar.ledger import SegmentState, SegmentView

__all__ = [
    "AccessMode",
    "Broker",
    "BrokerSettings",
    "Consumer",
    "ConsumerSink",
    "Delivery",
    "Producer",
    "PublishResult",
    "SegmentState",
    "SegmentView",
    "SubType",
    "Subscription",
    "Topic",
]
