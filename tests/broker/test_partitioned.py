"""A partitioned topic with the official client: created through the admin REST API, a
producer routing by key, a consumer of the whole topic."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import defaultdict

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RECEIVE_MS, assert_nothing_more

PARTITIONS = 3


def _create_partitioned(standalone: StandaloneProcess, local: str, partitions: int) -> None:
    """``PUT /admin/v2/persistent/public/default/<topic>/partitions`` with body ``N``."""
    url = f"{standalone.http_url}/admin/v2/persistent/public/default/{local}/partitions"
    request = urllib.request.Request(
        url,
        data=str(partitions).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 204)


def test_partitioned_topic_routes_each_key_to_one_partition(
    client: pulsar.Client, topic: str, standalone: StandaloneProcess
) -> None:
    local = topic.rsplit("/", 1)[1]
    _create_partitioned(standalone, local, PARTITIONS)
    assert sorted(client.get_topic_partitions(topic)) == [
        f"{topic}-partition-{i}" for i in range(PARTITIONS)
    ]
    consumer = client.subscribe(topic, "all", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i % 10}" for i in range(90)]
    for i, key in enumerate(keys):
        producer.send_async(f"{key}:{i}".encode(), None, partition_key=key)
    producer.flush()

    partitions_of: dict[str, set[str]] = defaultdict(set)
    received = []
    for _ in keys:
        msg = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(msg)
        partitions_of[msg.partition_key()].add(msg.topic_name())
        received.append(msg.data())
    assert_nothing_more(consumer)
    assert sorted(received) == sorted(f"{k}:{i}".encode() for i, k in enumerate(keys))
    assert all(len(p) == 1 for p in partitions_of.values()), dict(partitions_of)
    used = set().union(*partitions_of.values())
    assert len(used) > 1, "every key landed in one partition"
    assert used <= {f"{topic}-partition-{i}" for i in range(PARTITIONS)}


def test_creating_a_partitioned_topic_twice_is_a_conflict(
    topic: str, standalone: StandaloneProcess
) -> None:
    local = topic.rsplit("/", 1)[1]
    _create_partitioned(standalone, local, 2)
    with pytest.raises(urllib.error.HTTPError) as refused:
        _create_partitioned(standalone, local, 2)
    refused.value.close()  # the error holds the response open
    assert refused.value.code == 409
