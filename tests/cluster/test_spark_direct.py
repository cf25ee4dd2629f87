"""The Spark source reads closed replicated ledgers straight from the storage nodes' Arrow
Flight endpoints (seed 001's storage reader), the open tail through the broker; a dead
replica is skipped for the next one."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from tests.cluster.conftest import Cluster, wait_for

pytestmark = pytest.mark.slow
TOPIC = "persistent://public/default/history"


def _streams(cluster: Cluster) -> int:
    total = 0
    for node in cluster.nodes:
        value = cluster.meta(f"/storage-nodes/{node.node_id}")
        total += value["flightStreams"] if value else 0
    return total


def test_spark_reads_closed_ledgers_from_the_storage_nodes(cluster: Cluster, spark: Any) -> None:
    for _ in range(3):
        cluster.add_node()
    b = cluster.add_broker("--segment-max-bytes", "20000")
    client = pulsar.Client(b.pulsar_url)
    producer = client.create_producer(TOPIC, batching_enabled=False, block_if_queue_full=True)
    sent = [f"h-{i:05d}".encode() for i in range(3000)]
    for value in sent:
        producer.send_async(value, None)
    producer.flush()
    client.close()
    assert sum(lg["info"]["state"] == "CLOSED" for lg in cluster.ledgers(TOPIC)) >= 3

    def read() -> list[bytes]:
        df = spark.read.format("magnetar").option("url", b.http_url).option("topic", TOPIC)
        return [bytes(r.value) for r in df.load().orderBy("offset").select("value").collect()]

    assert read() == sent
    wait_for(lambda: _streams(cluster) > 0, 10, "storage nodes to report Flight streams served")
    ensemble = cluster.ledgers(TOPIC)[0]["ensembles"][0][1]
    next(n for n in cluster.nodes if n.node_id == ensemble[0]).kill()
    assert read() == sent  # the other replica (or the broker) serves the range


def test_storage_nodes_serve_messages_up_to_the_configured_size(cluster: Cluster) -> None:
    """A cluster whose max message size is above the 5 MiB default: a storage node's Flight
    read of an 8 MiB (LZ4-compressed) message inflates it under the configured bound."""
    import json

    import pyarrow.flight as flight

    size = ["--max-message-size", str(12 << 20)]
    for _ in range(2):
        cluster.add_node(*size)
    b = cluster.add_broker(*size, "--segment-max-bytes", "20000")
    client = pulsar.Client(b.pulsar_url)
    producer = client.create_producer(
        TOPIC, batching_enabled=False, compression_type=pulsar.CompressionType.LZ4
    )
    big = b"x" * (8 << 20)
    producer.send(big)
    producer.send(b"after")  # the first ledger is full: this one goes to the next
    client.close()
    first = cluster.ledgers(TOPIC)[0]
    assert first["info"]["state"] == "CLOSED" and first["info"]["end_offset"] == 1
    ticket = flight.Ticket(
        json.dumps({"ledger": first["info"]["segment_id"], "start": 0, "end": 1})
    )
    for node in cluster.nodes:
        reader = flight.connect(f"grpc://127.0.0.1:{node.flight_port}")
        try:
            values = [v.as_py() for c in reader.do_get(ticket) for v in c.data.column("value")]
        finally:
            reader.close()
        assert values == [big]
