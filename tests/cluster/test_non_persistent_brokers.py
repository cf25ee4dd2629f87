"""Non-persistent topics on several brokers: a producer on one broker and a consumer on
another meet on the broker owning the topic's bundle, as for persistent topics (the
messages live in that broker's memory only)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest
import requests

from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.slow


def test_a_producer_and_a_consumer_on_different_brokers_meet(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path, zookeeper.url(f"/np-{uuid.uuid4().hex[:8]}"))
    clients: list[pulsar.Client] = []
    try:
        for _ in range(2):
            cluster.add_node()
        first, second = cluster.add_broker(), cluster.add_broker()
        owners = set()
        for n in range(6):  # topics in several bundles: some owned by each broker
            topic = f"non-persistent://public/default/np{n}-{uuid.uuid4().hex[:6]}"
            at_second = pulsar.Client(second.pulsar_url, operation_timeout_seconds=10)
            at_first = pulsar.Client(first.pulsar_url, operation_timeout_seconds=10)
            clients += [at_first, at_second]
            consumer = at_second.subscribe(topic, "s")
            producer = at_first.create_producer(topic)
            for i in range(10):
                producer.send(f"m{i}".encode())
            got = [consumer.receive(5000).data() for _ in range(10)]
            assert got == [f"m{i}".encode() for i in range(10)], topic
            path = topic.removeprefix("non-persistent://")
            lookup = requests.get(f"{first.http_url}/lookup/v2/topic/non-persistent/{path}")
            owners.add(lookup.json()["brokerUrl"])
        assert len(owners) == 2, owners  # both brokers served some of them
    finally:
        for c in clients:
            c.close()
        cluster.stop()
