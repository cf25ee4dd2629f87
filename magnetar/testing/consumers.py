"""Fake consumers for in-process subscription and dispatcher tests: a sink that records
what the broker handed each consumer, in place of a protocol connection."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker import Consumer, Delivery


@dataclass(eq=False)
class RecordingSink:
    """Every delivery and broker-side close, per consumer, in order."""

    deliveries: dict[int, list[Delivery]] = field(default_factory=dict)  # consumer id → ...
    closed: list[int] = field(default_factory=list)

    def deliver(self, consumer: Consumer, deliveries: list[Delivery]) -> None:
        self.deliveries.setdefault(consumer.consumer_id, []).extend(deliveries)

    def closed_by_broker(self, consumer: Consumer) -> None:
        self.closed.append(consumer.consumer_id)

    def offsets(self, consumer: Consumer) -> list[int]:
        """Base offsets of the entries ``consumer`` was handed, in order (again if redelivered)."""
        return [d.entry.base_offset for d in self.deliveries.get(consumer.consumer_id, [])]

    def values(self, consumer: Consumer) -> list[bytes]:
        """What follows the metadata of each Pulsar entry ``consumer`` was handed."""
        out = []
        for d in self.deliveries.get(consumer.consumer_id, []):
            size = int.from_bytes(d.entry.payload[:4], "big")
            out.append(d.entry.payload[4 + size :])
        return out


def consumer(
    sink: RecordingSink, consumer_id: int, name: str = "", *, permits: int = 0, priority: int = 0
) -> Consumer:
    """A consumer whose deliveries ``sink`` records (named ``c<id>`` unless ``name``)."""
    return Consumer(
        consumer_id, name or f"c{consumer_id}", sink, priority=priority, permits=permits
    )
