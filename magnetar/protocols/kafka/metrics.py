"""The Kafka listener's series of ``/metrics``: request latency by API, connections.

The standalone hands :func:`kafka_metrics` to the HTTP server's metrics endpoint (which sits
on the same tier and so cannot import this package itself).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from magnetar.protocols.kafka import wire
from magnetar.protocols.kafka.server import KafkaServer

API_NAMES: dict[int, str] = {
    wire.PRODUCE: "Produce",
    wire.FETCH: "Fetch",
    wire.LIST_OFFSETS: "ListOffsets",
    wire.METADATA: "Metadata",
    wire.OFFSET_COMMIT: "OffsetCommit",
    wire.OFFSET_FETCH: "OffsetFetch",
    wire.FIND_COORDINATOR: "FindCoordinator",
    wire.JOIN_GROUP: "JoinGroup",
    wire.HEARTBEAT: "Heartbeat",
    wire.LEAVE_GROUP: "LeaveGroup",
    wire.SYNC_GROUP: "SyncGroup",
    wire.DESCRIBE_GROUPS: "DescribeGroups",
    wire.LIST_GROUPS: "ListGroups",
    wire.API_VERSIONS: "ApiVersions",
    wire.CREATE_TOPICS: "CreateTopics",
    wire.DELETE_TOPICS: "DeleteTopics",
    wire.INIT_PRODUCER_ID: "InitProducerId",
    wire.DESCRIBE_CONFIGS: "DescribeConfigs",
}


def kafka_metrics(server: KafkaServer) -> Callable[[], Awaitable[list[Metric]]]:
    """A metrics source (see ``magnetar.http.metrics``) for ``server``."""
    cluster = server.service.broker.settings.cluster_name

    async def collect() -> list[Metric]:
        latency = HistogramMetricFamily(
            "magnetar_kafka_request_latency_seconds",
            "Seconds from a Kafka request decoded to its answer encoded, by API",
            labels=["cluster", "api_key", "api"],
        )
        for key, h in sorted(server.service.request_latency.items()):
            buckets, total = h.cumulative()
            latency.add_metric([cluster, str(key), API_NAMES.get(key, str(key))], buckets, total)
        connections = GaugeMetricFamily(
            "magnetar_kafka_connections", "Open Kafka client connections", labels=["cluster"]
        )
        connections.add_metric([cluster], float(len(server.connections)))
        return [latency, connections]

    return collect
