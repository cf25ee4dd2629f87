"""What a topic has taken in and handed out since it was loaded: the counters behind Pulsar's
``msgInCounter``/``msgOutCounter`` stats and the ``pulsar_in_messages_total`` family of
metrics. Plain integers bumped on the publish and dispatch paths (no locks: the event loop
is their only writer); rates are derived from them by whoever reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.core.metrics import Histogram


@dataclass(slots=True, eq=False)
class TopicCounters:
    """Reset when the topic is loaded again (after a restart), as Pulsar's are."""

    msgs_in: int = 0  # messages stored (duplicates dropped by deduplication do not count)
    bytes_in: int = 0  # payload bytes stored
    msgs_out: int = 0  # messages delivered to consumers, over either protocol
    bytes_out: int = 0
    # seconds from a publish reaching the topic to its entry being durable (dedup included)
    publish_latency: Histogram = field(default_factory=Histogram)

    def published(self, messages: int, size: int, seconds: float) -> None:
        self.msgs_in += messages
        self.bytes_in += size
        self.publish_latency.observe(seconds)

    def delivered(self, messages: int, size: int) -> None:
        self.msgs_out += messages
        self.bytes_out += size
