"""The broker's series of ``/metrics``, under Pulsar's names and labels.

With ``expose_topic_level_metrics`` (Pulsar's ``exposeTopicLevelMetricsInPrometheus``, on by
default) every loaded topic partition has its own series, labelled ``cluster``,
``namespace`` and ``topic``, and every subscription its own, labelled ``subscription`` too.
Off, the topic series are summed per namespace (labels ``cluster`` and ``namespace``, plus
``pulsar_topics_count``) and subscriptions have none, as in Pulsar: for nodes with many
topics, where one series each would swamp Prometheus.

Counters count since the topic was loaded (they restart at 0 after a restart, as Pulsar's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.core import Metric

from magnetar.broker import Broker
from magnetar.broker.admin import backlog_bytes
from magnetar.broker.offload import OffloadService
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.metrics import LATENCY_BOUNDS, Histogram
from magnetar.http.metrics import MetricSource, Rates, add_histogram, counter, gauge, histogram


@dataclass(slots=True)
class _Sample:
    """One topic partition's values at this scrape (or a namespace's sums)."""

    namespace: str
    topic: str
    topics: int = 1
    producers: int = 0
    subscriptions: int = 0
    consumers: int = 0
    msgs_in: int = 0
    bytes_in: int = 0
    msgs_out: int = 0
    bytes_out: int = 0
    rate_in: float = 0.0
    throughput_in: float = 0.0
    rate_out: float = 0.0
    throughput_out: float = 0.0
    storage_size: int = 0
    offloaded_size: int = 0
    backlog_size: int = 0
    msg_backlog: int = 0
    offload_bytes: int = 0
    offload_segments: int = 0
    offload_lag_bytes: int = 0
    offload_lag_seconds: float = 0.0
    latency: Histogram = field(default_factory=Histogram)


# (name, kind, help, attribute of _Sample)
_TOPIC_SERIES: list[tuple[str, str, str, str]] = [
    ("pulsar_producers_count", "gauge", "Connected producers", "producers"),
    ("pulsar_subscriptions_count", "gauge", "Subscriptions", "subscriptions"),
    ("pulsar_consumers_count", "gauge", "Connected consumers", "consumers"),
    ("pulsar_rate_in", "gauge", "Messages published per second", "rate_in"),
    ("pulsar_rate_out", "gauge", "Messages delivered per second", "rate_out"),
    ("pulsar_throughput_in", "gauge", "Bytes published per second", "throughput_in"),
    ("pulsar_throughput_out", "gauge", "Bytes delivered per second", "throughput_out"),
    ("pulsar_in_messages_total", "counter", "Messages published", "msgs_in"),
    ("pulsar_in_bytes_total", "counter", "Bytes published", "bytes_in"),
    ("pulsar_out_messages_total", "counter", "Messages delivered", "msgs_out"),
    ("pulsar_out_bytes_total", "counter", "Bytes delivered", "bytes_out"),
    ("pulsar_storage_size", "gauge", "Bytes stored, local and offloaded", "storage_size"),
    ("pulsar_storage_offloaded_size", "gauge", "Bytes in the object store", "offloaded_size"),
    (
        "pulsar_storage_backlog_size",
        "gauge",
        "Bytes not yet acknowledged by the slowest subscription",
        "backlog_size",
    ),
    ("pulsar_msg_backlog", "gauge", "Unacknowledged messages, all subscriptions", "msg_backlog"),
    ("magnetar_offload_bytes_total", "counter", "Segment bytes offloaded", "offload_bytes"),
    ("magnetar_offload_segments_total", "counter", "Segments offloaded", "offload_segments"),
    (
        "magnetar_offload_lag_bytes",
        "gauge",
        "Bytes of closed segments due for offload and not offloaded yet",
        "offload_lag_bytes",
    ),
    (
        "magnetar_offload_lag_seconds",
        "gauge",
        "Seconds the oldest segment due for offload has waited since it closed",
        "offload_lag_seconds",
    ),
]

_SUBSCRIPTION_SERIES: list[tuple[str, str, str]] = [
    ("pulsar_subscription_back_log", "gauge", "Messages not yet acknowledged"),
    ("pulsar_subscription_msg_rate_out", "gauge", "Messages delivered per second"),
    ("pulsar_subscription_msg_throughput_out", "gauge", "Bytes delivered per second"),
    ("pulsar_subscription_unacked_messages", "gauge", "Delivered, not yet acknowledged"),
    (
        "pulsar_subscription_blocked_on_unacked_messages",
        "gauge",
        "1 while dispatch waits for acknowledgements (max unacked reached)",
    ),
    ("magnetar_subscription_consumers", "gauge", "Connected consumers"),
    (
        "magnetar_subscription_blocked_on_damaged_data",
        "gauge",
        "1 while dispatch waits at a damaged entry (auto_skip_non_recoverable_data off)",
    ),
    (
        "magnetar_subscription_damaged_skipped",
        "counter",
        "Messages skipped as damaged (auto_skip_non_recoverable_data on)",
    ),
    ("magnetar_subscription_out_messages_total", "counter", "Messages delivered"),
]


class BrokerMetrics:
    """Reads topics, subscriptions and offload status at scrape time."""

    def __init__(
        self,
        broker: Broker,
        *,
        topic_level: bool = True,
        offload: OffloadService | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.broker = broker
        self.topic_level = topic_level
        self.offload = offload
        self.clock = clock
        self.rates = Rates()

    @property
    def cluster(self) -> str:
        return self.broker.settings.cluster_name

    def source(self) -> MetricSource:
        async def collect() -> list[Metric]:
            return self.collect()

        return collect

    def collect(self) -> list[Metric]:
        topics = sorted(self.broker.topics.values(), key=lambda t: str(t.name))
        samples = [self._sample(t) for t in topics]
        out: list[Metric]
        if self.topic_level:
            out = self._families(samples, ["cluster", "namespace", "topic"])
            out += self._subscriptions(topics)
        else:
            out = self._families(_by_namespace(samples), ["cluster", "namespace"])
        self.rates.forget_unseen()
        return out

    def _sample(self, topic: Topic) -> _Sample:
        c, segments = topic.counters, topic.segments()
        subs = list(topic.subscriptions.values())
        sample = _Sample(
            namespace=topic.name.namespace_name,
            topic=str(topic.name),
            producers=len(topic.producers),
            subscriptions=len(subs),
            consumers=sum(len(s.consumers) for s in subs),
            msgs_in=c.msgs_in,
            bytes_in=c.bytes_in,
            msgs_out=c.msgs_out,
            bytes_out=c.bytes_out,
            storage_size=sum(s.size for s in segments),
            offloaded_size=sum(
                int((s.offload or {}).get("size", s.size))
                for s in segments
                if s.state.value == "OFFLOADED"
            ),
            backlog_size=max((backlog_bytes(topic, s.cursor.mark_delete) for s in subs), default=0),
            msg_backlog=sum(s.backlog for s in subs),
            latency=c.publish_latency,
        )
        rates = self.rates.rate(
            ("topic", sample.topic), (c.msgs_in, c.bytes_in, c.msgs_out, c.bytes_out)
        )
        sample.rate_in, sample.throughput_in, sample.rate_out, sample.throughput_out = rates
        if self.offload is not None:
            status = self.offload.status.get(sample.topic)
            if status is not None:
                sample.offload_bytes = status.offloaded_bytes
                sample.offload_segments = status.offloaded
                lag = status.lag(self.clock.now_ms())
                sample.offload_lag_bytes, sample.offload_lag_seconds = lag
        return sample

    def _families(self, samples: list[_Sample], labels: list[str]) -> list[Metric]:
        out: list[Metric] = []
        for name, kind, text, attr in _TOPIC_SERIES:
            family = (counter if kind == "counter" else gauge)(name, text, labels)
            for s in samples:
                family.add_metric(self._labels(s, labels), float(getattr(s, attr)))
            out.append(family)
        latency = histogram(
            "pulsar_publish_latency",
            "Seconds from a publish reaching the topic to its entry being durable",
            labels,
        )
        for s in samples:
            add_histogram(latency, self._labels(s, labels), s.latency)
        out.append(latency)
        if "topic" not in labels:
            topics = gauge("pulsar_topics_count", "Loaded topic partitions", labels)
            for s in samples:
                topics.add_metric(self._labels(s, labels), float(s.topics))
            out.append(topics)
        return out

    def _labels(self, s: _Sample, labels: list[str]) -> list[str]:
        values = [self.cluster, s.namespace, s.topic]
        return values[: len(labels)]

    def _subscriptions(self, topics: Iterable[Topic]) -> list[Metric]:
        labels = ["cluster", "namespace", "topic", "subscription"]
        families = [
            (counter if kind == "counter" else gauge)(name, text, labels)
            for name, kind, text in _SUBSCRIPTION_SERIES
        ]
        for topic in topics:
            for sub in topic.subscriptions.values():
                values = self._subscription_values(str(topic.name), sub)
                key = [self.cluster, topic.name.namespace_name, str(topic.name), sub.name]
                for family, value in zip(families, values, strict=True):
                    family.add_metric(key, value)
        return list(families)

    def _subscription_values(self, topic: str, sub: Subscription) -> list[float]:
        rate, throughput = self.rates.rate(("sub", topic, sub.name), (sub.msgs_out, sub.bytes_out))
        return [
            float(sub.backlog),
            rate,
            throughput,
            float(sub.unacked),
            float(sub.blocked_on_unacked),
            float(len(sub.consumers)),
            float(sub.damage.blocked_at is not None),
            float(sub.damage.skipped),
            float(sub.msgs_out),
        ]


def _by_namespace(samples: list[_Sample]) -> list[_Sample]:
    """Pulsar's namespace-level series: every value summed over the namespace's topics (the
    offload lag in seconds is the largest), latency histograms merged."""
    grouped: dict[str, list[_Sample]] = {}
    for s in samples:
        grouped.setdefault(s.namespace, []).append(s)
    out = []
    for namespace, group in sorted(grouped.items()):
        total = _Sample(namespace=namespace, topic="", topics=len(group))
        for f in dataclasses.fields(_Sample):
            if f.name in ("namespace", "topic", "topics", "latency", "offload_lag_seconds"):
                continue
            setattr(total, f.name, sum(getattr(s, f.name) for s in group))
        total.offload_lag_seconds = max(s.offload_lag_seconds for s in group)
        total.latency = Histogram.merged((s.latency for s in group), LATENCY_BOUNDS)
        out.append(total)
    return out
